"""Fuzzed importers and store reader (hypothesis).

Every importer and the store reader get random bytes and structured mutations
of the real fixtures: lines deleted, duplicated, swapped or cut short; values
whose type flips (string, number, null, list, object); NaN, Infinity, huge
and negative numbers; deep nesting; odd unicode; broken encodings.

The only acceptable outcomes are

- a clean import: a Run, which the store can write and read back; or
- a FindingsError (InputError, StoreError) whose message is one line and names
  the file (and the line, where the fault is on one).

Any other exception (KeyError, TypeError, ValueError, RecursionError, ...) is
a bug in findings/. Ingesting a bad file never writes anything to the store.

Size: a few hundred examples per target by default, the same ones every run
(derandomized, so that `make test` is deterministic); ``FINDINGS_SOAK=1`` runs
20 times as many, freshly random each time (the ``findings-fuzz-soak`` profile). The number of
cases that ran is printed by the last test (``pytest -s``) and written to
build/fuzz-count.txt (build/fuzz-count-soak.txt under FINDINGS_SOAK=1).

Regressions: the faults this file found in findings/ (fixed in 06cdec9) keep a
minimal input each, in the ``test_regression_*`` tests at the end.
"""

from __future__ import annotations

import copy
import csv
import inspect
import io
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from findings.importers import ingest
from findings import store  # noqa: E402
from findings.core.errors import FindingsError, InputError, StoreError  # noqa: E402
from findings.importers import common, sglang_bench, table  # noqa: E402
from findings.core.model import Run  # noqa: E402
from findings.store.schema import SIDECAR_SUFFIX, run_from_dict, run_to_dict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SGL = FIXTURES / "sglang_bench"
HISTORY = ROOT / "benchmarks" / "history"

SOAK = os.environ.get("FINDINGS_SOAK") == "1"
SCALE = 20 if SOAK else 1
#: Separate files, so that a default run elsewhere does not overwrite the soak figures.
COUNT_FILE = ROOT / "build" / ("fuzz-count-soak.txt" if SOAK else "fuzz-count.txt")

_BASE = dict(deadline=None, database=None, print_blob=True,
             suppress_health_check=list(HealthCheck))
#: `make test` draws the same cases every run (derandomize): a CI run on a clean
#: clone must not fail by chance on a fault that the last run did not draw.
#: The soak (`make soak`) draws new random cases each time, to find new faults.
settings.register_profile("findings-fuzz", derandomize=True, **_BASE)  # type: ignore[arg-type]
settings.register_profile("findings-fuzz-soak", **_BASE)  # type: ignore[arg-type]
PROFILE = settings.get_profile("findings-fuzz-soak" if SOAK else "findings-fuzz")


def budget(n: int) -> settings:
    """n examples by default, 20n under FINDINGS_SOAK=1."""
    return settings(PROFILE, max_examples=n * SCALE)


# ---------------------------------------------------------------- bookkeeping

CASES: Counter[str] = Counter()  # examples run, per target
OUTCOMES: Counter[str] = Counter()  # "<target> ok|refused"


@pytest.fixture(scope="module", autouse=True)
def _record_counts() -> Iterator[None]:
    STARTED[0] = time.monotonic()
    yield
    COUNT_FILE.parent.mkdir(parents=True, exist_ok=True)
    COUNT_FILE.write_text(report())


STARTED = [time.monotonic()]  # reset when the module's first test starts


def report() -> str:
    lines = [f"fuzz cases: {sum(n for t, n in CASES.items() if t != 'regression')} (soak={int(SOAK)}, scale x{SCALE}), elapsed {time.monotonic() - STARTED[0]:.0f} s"]
    lines += [f"  {t}: {n}" for t, n in sorted(CASES.items())]
    lines += ["outcomes:"] + [f"  {k}: {n}" for k, n in sorted(OUTCOMES.items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the oracle

#: InputErrors about the file as a whole, which have no line to name.
FILE_LEVEL = re.compile(r"empty|no data rows|nothing to add|not UTF-8|no result lines|cannot read|"
                        r"--concurrency \d+ does not apply")  # an option that places no record (D97)


def check_error(target: str, exc: FindingsError, paths: tuple[str, ...], *, line_rule: bool) -> None:
    msg = str(exc)
    problems = []
    if "\n" in msg or "\r" in msg:
        problems.append("the message is not one line")
    if not any(p in msg for p in paths):
        problems.append(f"the message names none of {paths}")
    if isinstance(exc, InputError):
        where = exc.path if exc.line is None else f"{exc.path}:{exc.line}"
        if not msg.startswith(f"{where}: "):
            problems.append("the message does not start with file:line")
        if line_rule and exc.line is None and not FILE_LEVEL.search(msg):
            problems.append("a fault in one record does not name its line")
    if problems:
        pytest.fail(f"{target}: {'; '.join(problems)}: {type(exc).__name__}: {msg!r}")
    OUTCOMES[f"{target} refused"] += 1


def roundtrip(run: Run) -> None:
    """What an importer returns must be writable to the store and readable back."""
    text = json.dumps(run_to_dict(run), indent=1, ensure_ascii=False, allow_nan=False)
    back = run_from_dict(json.loads(text), "roundtrip.json")
    assert back.run_id == run.run_id
    assert len(back.points) == len(run.points)
    assert back.line_hashes == run.line_hashes


def attempt(target: str, fn: Callable[[], Any], *paths: str, line_rule: bool = False) -> Any:
    """Run one case: a Run (checked by a round trip) or a clean FindingsError."""
    CASES[target] += 1
    try:
        result = fn()
    except FindingsError as exc:
        check_error(target, exc, paths, line_rule=line_rule)
        return exc
    # Any other exception (RecursionError, ValueError, ...) propagates: a bug.
    if isinstance(result, Run):
        roundtrip(result)  # the store can write and read back what was imported
    OUTCOMES[f"{target} ok"] += 1
    return result


# ---------------------------------------------------------------- strategies

HUGE_TOKENS = [
    "1" + "0" * 400,  # an int that overflows a float
    "-" + "9" * 400,
    "1" + "0" * 5000,  # past Python's int/str digit limit
    "1e999", "-1e999", "NaN", "Infinity", "-Infinity", "-0", "1E-400", "0.0000000000000000000000001",
    "[" * 50 + "]" * 50,
    "[" * 5000 + "]" * 5000,
    "[" * 100000 + "]" * 100000,
    '{"a": ' * 3000 + "1" + "}" * 3000,
]
_TOKEN = "\x01tok{}\x01"  # a string placeholder, replaced by a raw token after json.dumps

WEIRD_TEXT = [
    "", " ", "nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1", "0", "1.5", "1_000", "0x10",
    "١٢", "٢٠٢٦-١١-٣٠", "2026-02-31", "0000-00-00", "1969-12-31", "2026-11-30\n", "9" * 5000,
    "x", "a,b", 'a"b', "a\nb", "a\r\nb", "\u2028", "\x85", "\x00", "\x0c", "\ufeff", "é" * 50,
    "\ud7ff\ue000", "🦄", "x" * 20000, "<redacted>", "--api-key sk-secret", "null", "true",
]

SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.sampled_from([0, -1, 1, 2, 2**31, 2**63, -(2**63), 10**30, 10**400, -(10**400)]),
    st.integers(),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf, 1.5]),
    st.floats(),
    st.sampled_from(WEIRD_TEXT),
    st.text(max_size=30),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
KEYS = st.one_of(st.sampled_from(["", "a\nb", "\u2028", "output_throughput", "max_concurrency",
                                  "output_throughput_tok_s", "accept_length", "ttfts", "itls", "errors",
                                  "server_info", "concurrency", "metrics", "points", "campaigns",
                                  "schema_version", "requests", "tp_size", "version", "\x00"]),
                 st.text(max_size=12))


def deep(n: int, leaf: Any = 1) -> Any:
    for _ in range(n):
        leaf = [leaf]
    return leaf


def flip(data: st.DataObject, v: Any) -> Any:
    """The same value with another type (or a hostile one of the same type)."""
    options: list[Any] = [None, [v], {"v": v}, True, -1, 0, 10**400, math.nan, math.inf, -math.inf, ""]
    if isinstance(v, str):
        options += [1, 1.5, v + "\n", v * 50]
        try:
            options.append(float(v))
        except ValueError:
            pass
    elif isinstance(v, float):
        options += [str(v), -v, v * 1e300]
    elif isinstance(v, int) and not isinstance(v, bool) and abs(v) < 10**1000:  # json.dumps needs < 4300 digits
        options += [str(v), -v, v * 10**300, float(v) if abs(v) < 10**300 else math.inf]
    return data.draw(st.sampled_from(options) | VALUES)


def mutate_json(data: st.DataObject, doc: Any, tokens: bool = True, max_ops: int = 4) -> Any:
    """A few structural mutations at random places of a parsed JSON document."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, max_ops))):
        doc = _mutate_once(data, doc, tokens)
    return doc


def _mutate_once(data: st.DataObject, doc: Any, tokens: bool) -> Any:
    if not isinstance(doc, (dict, list)) or data.draw(st.integers(0, 30)) == 0:
        return _new_value(data, doc, tokens)
    parent: Any = doc
    while True:  # walk down to a container
        keys = list(parent) if isinstance(parent, dict) else list(range(len(parent)))
        kids = [k for k in keys if isinstance(parent[k], (dict, list)) and parent[k]]
        if not kids or data.draw(st.integers(0, 3)) == 0:
            break
        parent = parent[data.draw(st.sampled_from(kids))]
    if isinstance(parent, dict):
        op = data.draw(st.sampled_from(["delete", "replace", "flip", "rename", "add", "clear"]))
        keys = list(parent)
        if not keys or op == "add":
            parent[data.draw(KEYS)] = _new_value(data, None, tokens)
            return doc
        k = data.draw(st.sampled_from(keys))
        if op == "delete":
            del parent[k]
        elif op == "replace":
            parent[k] = _new_value(data, parent[k], tokens)
        elif op == "flip":
            parent[k] = flip(data, parent[k])
        elif op == "rename":
            parent[data.draw(KEYS)] = parent.pop(k)
        else:
            parent.clear()
    else:
        op = data.draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "flip", "append", "truncate"]))
        if not parent or op == "append":
            parent.append(_new_value(data, None, tokens))
            return doc
        i = data.draw(st.integers(0, len(parent) - 1))
        j = data.draw(st.integers(0, len(parent) - 1))
        if op == "delete":
            del parent[i]
        elif op == "duplicate":
            parent.insert(i, copy.deepcopy(parent[i]))
        elif op == "swap":
            parent[i], parent[j] = parent[j], parent[i]
        elif op == "replace":
            parent[i] = _new_value(data, parent[i], tokens)
        elif op == "flip":
            parent[i] = flip(data, parent[i])
        else:
            del parent[i:]
    return doc


def _new_value(data: st.DataObject, old: Any, tokens: bool) -> Any:
    kind = data.draw(st.integers(0, 9))
    if kind == 0 and tokens:
        return _TOKEN.format(data.draw(st.integers(0, len(HUGE_TOKENS) - 1)))
    if kind == 1:
        return deep(data.draw(st.sampled_from([10, 200])))  # deeper: HUGE_TOKENS, as text
    if kind == 2:
        return flip(data, old)
    return data.draw(VALUES)


def dumps(data: st.DataObject, doc: Any, indent: int | None = None) -> str:
    """JSON text, possibly with NaN/Infinity, raw unicode and raw hostile tokens."""
    text = json.dumps(doc, allow_nan=True, ensure_ascii=data.draw(st.booleans()), indent=indent)
    for i, tok in enumerate(HUGE_TOKENS):
        text = text.replace(json.dumps(_TOKEN.format(i)), tok)
        text = text.replace(json.dumps(_TOKEN.format(i), ensure_ascii=False), tok)
    return text


def mutate_lines(data: st.DataObject, text: str) -> str:
    """Line-level mutations: delete, duplicate, swap, insert, cut short; line endings; BOM."""
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(0, 3))):
        op = data.draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "cut", "blank"]))
        i = data.draw(st.integers(0, len(lines) - 1)) if lines else 0
        j = data.draw(st.integers(0, len(lines) - 1)) if lines else 0
        if not lines:
            lines = [""]
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(i, data.draw(st.sampled_from(WEIRD_TEXT + HUGE_TOKENS[:3]) | st.text(max_size=40)))
        elif op == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        else:
            lines.insert(i, data.draw(st.sampled_from(["", " ", "\t", "\r"])))
    sep = data.draw(st.sampled_from(["\n", "\n", "\n", "\r\n", "\r"]))
    text = sep.join(lines)
    if data.draw(st.integers(0, 9)) == 0:
        text = text[: data.draw(st.integers(0, len(text)))]  # the writer was killed mid-file
    if data.draw(st.integers(0, 19)) == 0:
        text = "\ufeff" + text
    return text


def mutate_bytes(data: st.DataObject, raw: bytes) -> bytes:
    """Rarely, damage the encoding itself."""
    if data.draw(st.integers(0, 7)) != 0 or not raw:
        return raw
    op = data.draw(st.sampled_from(["byte", "invalid", "cut", "nul"]))
    i = data.draw(st.integers(0, len(raw) - 1))
    if op == "byte":
        return raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1:]
    if op == "invalid":
        return raw[:i] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf0\x9f"])) + raw[i:]
    if op == "cut":
        return raw[:i]
    return raw[:i] + b"\x00" + raw[i:]


def mutate_csv(data: st.DataObject, text: str) -> str:
    """Cell, row and column mutations of a CSV table, then line and byte damage."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    for _ in range(data.draw(st.integers(1, 5))):
        op = data.draw(st.sampled_from(["cell", "cell", "cell", "row-delete", "row-duplicate", "row-swap",
                                        "col-delete", "col-duplicate", "col-swap", "col-rename",
                                        "header-only", "short-row"]))
        if not rows:
            rows = [[""]]
        r = data.draw(st.integers(0, len(rows) - 1))
        width = max(len(row) for row in rows) or 1
        c = data.draw(st.integers(0, width - 1))
        c2 = data.draw(st.integers(0, width - 1))
        if op == "cell":
            if c < len(rows[r]):
                rows[r][c] = data.draw(st.sampled_from(WEIRD_TEXT + HUGE_TOKENS[:3]) | st.text(max_size=20))
        elif op == "row-delete" and len(rows) > 1:
            del rows[r]
        elif op == "row-duplicate":
            rows.insert(r, list(rows[r]))
        elif op == "row-swap":
            r2 = data.draw(st.integers(0, len(rows) - 1))
            rows[r], rows[r2] = rows[r2], rows[r]
        elif op == "col-delete":
            rows = [row[:c] + row[c + 1:] for row in rows]
        elif op == "col-duplicate":
            rows = [row[:c + 1] + row[c:c + 1] + row[c + 1:] for row in rows]
        elif op == "col-swap":
            for row in rows:
                if c < len(row) and c2 < len(row):
                    row[c], row[c2] = row[c2], row[c]
        elif op == "col-rename":
            if c < len(rows[0]):
                rows[0][c] = data.draw(st.sampled_from(["", "a\nb", "campaign", "config", "order", "date",
                                                        "note", "repeat", " campaign ", "x,y"]) | st.text(max_size=10))
        elif op == "header-only":
            rows = rows[:1]
        elif op == "short-row" and rows[r]:
            rows[r] = rows[r][:-1]
    if data.draw(st.booleans()):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        out = buf.getvalue()
    else:  # naive writing: no quoting, as a hand-edited file might be
        out = "\n".join(",".join(row) for row in rows) + "\n"
    return mutate_lines(data, out) if data.draw(st.booleans()) else out


# ---------------------------------------------------------------- fixtures and helpers

def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


#: Real tools' files (tests/fixtures/real_tools/) seed the fuzzers too: failures, all-failed runs, records.
REAL = FIXTURES / "real_tools"
SGL_FILES = sorted(SGL.glob("*.jsonl")) + sorted(REAL.glob("sglang_*.jsonl"))
SGL_LINES = [json.loads(line) for f in SGL_FILES for line in _text(f).splitlines() if line.strip()]
TABLES = [(HISTORY / "measurements.csv", HISTORY / "configs.csv"),
          (FIXTURES / "failures.csv", HISTORY / "configs.csv"),
          (FIXTURES / "rigor.csv", FIXTURES / "rigor-configs.csv")]
RUN_FILES = sorted((FIXTURES / "store" / "runs").glob("*.json"))
RUN_DOCS = [json.loads(_text(p)) for p in RUN_FILES]
#: The same runs as this findings writes them now (the fixtures may be an older schema).
CURRENT_DOCS = [run_to_dict(run_from_dict(copy.deepcopy(d), "fixture")) for d in RUN_DOCS]
SGL_KW = dict(config="eagle3-topk1-v2", campaign="fuzz", workload="random-1024-512", date="2026-11-30")


def src(path: str, data: bytes) -> common.Source:
    return common.Source(path=path, data=data)


def jsonl(data: st.DataObject, docs: list[Any]) -> str:
    """JSONL text from documents, some mutated, then line-level damage."""
    out = []
    for doc in docs:
        if data.draw(st.integers(0, 2)) == 0:
            doc = mutate_json(data, doc)
        out.append(dumps(data, doc))
    text = "\n".join(out) + "\n"
    return mutate_lines(data, text) if data.draw(st.booleans()) else text


def sglang_input(data: st.DataObject) -> bytes:
    f = data.draw(st.sampled_from(SGL_FILES))
    docs = [json.loads(line) for line in _text(f).splitlines() if line.strip()]
    if data.draw(st.integers(0, 4)) == 0:  # lines of several releases in one file
        docs += data.draw(st.lists(st.sampled_from(SGL_LINES), max_size=3))
    return mutate_bytes(data, jsonl(data, docs).encode("utf-8", "surrogatepass"))


RANDOM_BYTES = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=2000).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.text(alphabet=',"\n\r\t 0123456789.-+eE_abcdfinNIaty{}[]:', max_size=500).map(str.encode),
)


# ---------------------------------------------------------------- the table importer

@budget(300)
@given(raw=RANDOM_BYTES, header=st.booleans())
def test_table_random_input(raw: bytes, header: bool) -> None:
    if header:  # get past the header check more often
        raw = b"campaign,workload,config,concurrency,output_throughput_tok_s,order,date,note\n" + raw
    attempt("table", lambda: table.read(src("rand.csv", raw)), "rand.csv", line_rule=True)


@budget(400)
@given(data=st.data())
def test_table_mutated(data: st.DataObject) -> None:
    main, _ = data.draw(st.sampled_from(TABLES))
    raw = mutate_bytes(data, mutate_csv(data, _text(main)).encode("utf-8", "surrogatepass"))
    attempt("table", lambda: table.read(src("m.csv", raw)), "m.csv", line_rule=True)


@budget(300)
@given(data=st.data())
def test_table_with_configs_mutated(data: st.DataObject) -> None:
    main, configs = data.draw(st.sampled_from(TABLES))
    main_raw, conf_raw = _text(main).encode(), _text(configs).encode()
    which = data.draw(st.sampled_from(["main", "configs", "both"]))
    if which in ("main", "both"):
        main_raw = mutate_bytes(data, mutate_csv(data, main_raw.decode()).encode("utf-8", "surrogatepass"))
    if which in ("configs", "both"):
        conf_raw = mutate_bytes(data, mutate_csv(data, conf_raw.decode()).encode("utf-8", "surrogatepass"))
    attempt("table+configs", lambda: table.read(src("m.csv", main_raw), configs_src=src("c.csv", conf_raw)),
            "m.csv", "c.csv", line_rule=True)


@budget(200)
@given(data=st.data())
def test_table_distinct_rows_are_all_kept(data: st.DataObject) -> None:
    """Valid rows that differ are never refused as repeats, and --skip-existing of a
    prefix keeps exactly the new rows (the per-record hash must cover the record)."""
    n = data.draw(st.integers(1, 6))
    notes = data.draw(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
                               min_size=n, max_size=n))
    rows = [["c", "w", "baseline", str(i + 1), f"{100 + i}.5", note] for i, note in enumerate(notes)]
    buf = io.StringIO()
    w = csv.writer(buf)  # "\r\n": cells holding \r or \n get quoted
    w.writerow(["campaign", "workload", "config", "concurrency", "output_throughput_tok_s", "note"])
    w.writerows(rows)
    raw = buf.getvalue().encode("utf-8", "surrogatepass")
    cut = data.draw(st.integers(1, n))
    head = io.StringIO()
    csv.writer(head).writerows([["campaign", "workload", "config", "concurrency",
                                                      "output_throughput_tok_s", "note"]] + rows[:cut])
    CASES["table-record-hash"] += 1
    whole = table.read(src("d.csv", raw))
    assert len(whole.points) == n
    first = table.read(src("d.csv", head.getvalue().encode("utf-8", "surrogatepass")))
    if cut < n:
        grown = table.read(src("d.csv", raw), skip_lines=first.line_hashes)
        assert sorted(p.concurrency for p in grown.points) == list(range(cut + 1, n + 1))
    OUTCOMES["table-record-hash ok"] += 1


# ---------------------------------------------------------------- the sglang-bench importer

@budget(300)
@given(raw=RANDOM_BYTES, conc=st.sampled_from([None, 1, 8]))
def test_sglang_random_input(raw: bytes, conc: int | None) -> None:
    attempt("sglang", lambda: sglang_bench.read(src("rand.jsonl", raw), concurrency=conc, **SGL_KW),
            "rand.jsonl", line_rule=True)


@budget(500)
@given(data=st.data(), conc=st.sampled_from([None, 1, 30]))
def test_sglang_mutated(data: st.DataObject, conc: int | None) -> None:
    raw = sglang_input(data)
    attempt("sglang", lambda: sglang_bench.read(src("m.jsonl", raw), concurrency=conc, **SGL_KW),
            "m.jsonl", line_rule=True)


# ---------------------------------------------------------------- importers being added (vllm-bench, aiperf)

KNOWN_ARGS: dict[str, Any] = dict(config="baseline", campaign="fuzz", workload="w", date="2026-11-30",
                                  concurrency=1, order=1)


def _caller(module: Any) -> Callable[[common.Source], Any]:
    sig = inspect.signature(module.read)
    params = list(sig.parameters.values())
    kwargs = {}
    for p in params[1:]:
        if p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in KNOWN_ARGS:
            pytest.skip(f"{module.__name__}.read needs {p.name!r}; teach KNOWN_ARGS a value for it")
        kwargs[p.name] = KNOWN_ARGS[p.name]
    return lambda s: module.read(s, **kwargs)


#: Stand-in seeds until the importers' own fixtures land in tests/fixtures/<dir>/.
VLLM_SEED = {
    "date": "20261130-101500", "endpoint_type": "openai", "backend": "vllm", "label": None,
    "model_id": "meta-llama/Llama-3.3-70B-Instruct", "tokenizer_id": "meta-llama/Llama-3.3-70B-Instruct",
    "num_prompts": 4, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4, "duration": 2.5,
    "completed": 3, "failed": 1, "total_input_tokens": 1024, "total_output_tokens": 384,
    "request_throughput": 1.2, "output_throughput": 153.6, "total_token_throughput": 563.2,
    "max_output_tokens_per_s": 200.0, "max_concurrent_requests": 4, "mean_ttft_ms": 40.1,
    "median_ttft_ms": 39.0, "p99_ttft_ms": 55.0, "mean_tpot_ms": 10.2, "mean_itl_ms": 10.0, "mean_e2el_ms": 1300.0,
    "spec_decode_acceptance_length": 2.4,
    "input_lens": [256, 256, 256, 256], "output_lens": [128, 128, 128, 0],
    "ttfts": [0.04, 0.039, 0.041, 0.0], "itls": [[0.01, 0.01], [0.01], [0.011], []],
    "errors": ["", "", "", "timeout"], "latencies": [1.3, 1.31, 1.29, 0.0], "start_times": [10.0, 10.1, 10.2, 10.3],
}
AIPERF_SEED = {
    "aiperf_version": "0.2.0",
    "output_token_throughput": {"unit": "tokens/sec", "avg": 153.6},
    "request_throughput": {"unit": "requests/sec", "avg": 1.2},
    "request_count": {"unit": "requests", "avg": 4},
    "error_request_count": {"unit": "requests", "avg": 0},
    "time_to_first_token": {"unit": "ms", "avg": 40.1, "p50": 39.0, "p99": 55.0, "std": 3.0, "min": 35.0,
                            "max": 56.0},
    "inter_token_latency": {"unit": "ms", "avg": 10.2, "p50": 10.1, "p99": 12.0},
    "inter_chunk_latency": {"unit": "ms", "avg": 10.0, "p50": 10.0, "p99": 11.0},
    "request_latency": {"unit": "sec", "avg": 1.3, "p50": 1.3, "p99": 1.4},
    "benchmark_duration": {"unit": "sec", "avg": 2.5},
    "output_sequence_length": {"unit": "tokens", "avg": 128, "p50": 128},
    "spec_decode_acceptance_length": {"unit": "tokens", "avg": 2.4},
    "min_request_timestamp": {"unit": "ns", "avg": 1.7e18},
    "input_config": {"loadgen": {"concurrency": 4, "request_count": 4},
                     "endpoint": {"model_names": ["meta-llama/Llama-3.3-70B-Instruct"]}},
    "was_cancelled": False, "is_complete": True,
}
INLINE_SEEDS = {
    "vllm_bench": [("seed.json", json.dumps(VLLM_SEED, indent=2)),
                   ("seed.jsonl", "\n".join(json.dumps({**VLLM_SEED, "max_concurrency": c, "duration": c / 2})
                                            for c in (1, 2, 4)) + "\n")],
    "aiperf": [("seed.json", json.dumps(AIPERF_SEED, indent=2)),
               ("seed-0.1.json", json.dumps({"records": {k: v for k, v in AIPERF_SEED.items()
                                                         if isinstance(v, dict) and "unit" in v},
                                             "input_config": {"concurrency": 2}}, indent=2))],
}


def _seeds(name: str, dirs: tuple[str, ...]) -> list[tuple[str, str]]:
    found = [(p.name, _text(p)) for d in dirs for p in sorted((FIXTURES / d).glob("*"))
             if p.is_file() and p.suffix in (".json", ".jsonl", ".csv")]
    prefix = {"vllm_bench": "vllm_", "aiperf": "aiperf_"}.get(name)
    real = [(p.name, _text(p)) for p in sorted(REAL.glob(f"{prefix}*")) if prefix and p.suffix in (".json", ".jsonl")]
    return found + real + INLINE_SEEDS.get(name, [])


def _mutated_seed(data: st.DataObject, seeds: list[tuple[str, str]]) -> tuple[bytes, str]:
    name, text = data.draw(st.sampled_from(seeds))
    suffix = Path(name).suffix
    if suffix == ".csv":
        out = mutate_csv(data, text)
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:  # JSONL
            lines = [json.loads(line) for line in text.splitlines() if line.strip()]
            out = jsonl(data, lines)
        else:
            out = dumps(data, mutate_json(data, doc), indent=data.draw(st.sampled_from([None, 2])))
            if data.draw(st.booleans()):
                out = mutate_lines(data, out)
    return mutate_bytes(data, out.encode("utf-8", "surrogatepass")), "m" + suffix


@pytest.mark.parametrize("name,dirs", [("vllm_bench", ("vllm_bench", "vllm")), ("aiperf", ("aiperf",))])
def test_new_importers_fuzzed(name: str, dirs: tuple[str, ...]) -> None:
    module = pytest.importorskip(f"findings.importers.{name}")
    call = _caller(module)
    seeds = _seeds(name, dirs)

    @budget(200)
    @given(raw=RANDOM_BYTES)
    def random_input(raw: bytes) -> None:
        attempt(name, lambda: call(src("rand.in", raw)), "rand.in")

    @budget(400)
    @given(data=st.data())
    def mutated(data: st.DataObject) -> None:
        raw, fname = _mutated_seed(data, seeds)
        attempt(name, lambda: call(src(fname, raw)), fname)

    random_input()
    mutated()


# ---------------------------------------------------------------- the store reader

@budget(500)
@given(data=st.data())
def test_run_from_dict_mutated(data: st.DataObject) -> None:
    doc = mutate_json(data, data.draw(st.sampled_from(RUN_DOCS + CURRENT_DOCS)), tokens=False, max_ops=6)
    err = attempt("run_from_dict", lambda: run_from_dict(doc, "runs/x.json"), "runs/x.json")
    if isinstance(err, FindingsError):
        assert "field '" in str(err) or "schema_version" in str(err), str(err)


@budget(300)
@given(data=st.data())
def test_store_load_with_a_mutated_run_file(data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(RUN_FILES) - 1))
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "store" / "runs"
        shutil.copytree(RUN_FILES[i].parent, runs)
        target = runs / RUN_FILES[i].name
        kind = data.draw(st.sampled_from(["json", "json", "text", "bytes", "random"]))
        if kind == "json":
            base = data.draw(st.sampled_from([RUN_DOCS[i], CURRENT_DOCS[i]]))
            text = dumps(data, mutate_json(data, base), indent=data.draw(st.sampled_from([None, 1])))
            raw = text.encode("utf-8", "surrogatepass")
        elif kind == "text":
            raw = mutate_lines(data, _text(target)).encode("utf-8", "surrogatepass")
        elif kind == "bytes":
            raw = target.read_bytes()
            raw = raw[: data.draw(st.integers(0, len(raw)))] if data.draw(st.booleans()) else raw
            raw = mutate_bytes(data, raw)
        else:
            raw = data.draw(RANDOM_BYTES)
        target.write_bytes(raw)
        attempt("store.load", lambda: store.load(Path(tmp) / "store"), str(target))


# ---------------------------------------------------------------- the environment file

@budget(150)
@given(data=st.data())
def test_environment_file_mutated(data: st.DataObject) -> None:
    text = _text(HISTORY / "environment.toml")
    text = mutate_lines(data, text)
    extra = data.draw(st.sampled_from([
        "", "environment = 1\n", "environment = []\n", "[environment]\nx = nan\n", "[environment]\nx = inf\n",
        "[environment]\nx = 1979-05-27T07:32:00Z\n", "[environment]\nx = [1, 2]\n", "[environment.y]\nz = 1\n",
        "x = " + "[" * 3000 + "]" * 3000 + "\n", "[environment]\n\"a\\nb\" = [1]\n", 'x = """\n', "= 1\n",
    ]))
    raw = mutate_bytes(data, (text + extra).encode("utf-8", "surrogatepass"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "env.toml"
        path.write_bytes(raw)
        attempt("environment", lambda: common.read_environment(str(path)), str(path))


# ---------------------------------------------------------------- ingest: a bad file writes nothing

def _snapshot(store_dir: Path) -> dict[str, bytes]:
    runs = store_dir / "runs"
    return {p.name: p.read_bytes() for p in sorted(runs.iterdir())} if runs.is_dir() else {}


INGEST_KINDS = ["table", "sglang"] + [k for k in ("vllm_bench", "aiperf") if hasattr(ingest, f"ingest_{k}")]
INGEST_FUNCS = {"table": "ingest_table", "sglang": "ingest_sglang_bench", "vllm_bench": "ingest_vllm_bench",
                "aiperf": "ingest_aiperf"}


def _bad_input(data: st.DataObject, kind: str) -> tuple[bytes, str]:
    if kind == "table":
        main, _ = data.draw(st.sampled_from(TABLES))
        return mutate_bytes(data, mutate_csv(data, _text(main)).encode("utf-8", "surrogatepass")), "in.csv"
    if kind == "sglang":
        return sglang_input(data), "in.jsonl"
    dirs = {"vllm_bench": ("vllm_bench",), "aiperf": ("aiperf",)}[kind]
    raw, name = _mutated_seed(data, _seeds(kind, dirs))
    return raw, "in" + Path(name).suffix


@budget(200)
@given(data=st.data(), kind=st.sampled_from(INGEST_KINDS), auto=st.booleans(), seeded=st.booleans())
def test_ingest_of_a_bad_file_writes_nothing(data: st.DataObject, kind: str, auto: bool, seeded: bool) -> None:
    """Through findings.importers.ingest (per format, or ``ingest auto`` where it exists): all or nothing."""
    auto = auto and hasattr(ingest, "ingest_auto")
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp) / "store"
        if seeded:  # a store that already holds runs (duplicates and campaign clashes become possible)
            shutil.copytree(FIXTURES / "store" / "runs", store_dir / "runs")
        else:  # an empty store (writers refuse a path that is none, D94)
            store.create(store_dir)
        raw, name = _bad_input(data, kind)
        path = Path(tmp) / name
        path.write_bytes(raw)
        conc = data.draw(st.sampled_from([None, 4]))
        point_kw: dict[str, Any] = dict(concurrency=conc, **SGL_KW)
        fn: Callable[[], Any]
        if auto:
            target = "ingest-auto"
            if kind == "table":  # a table takes no point options
                fn = lambda: ingest.ingest_auto(store_dir, str(path))  # type: ignore[attr-defined]
            else:
                fn = lambda: ingest.ingest_auto(store_dir, str(path), **point_kw)  # type: ignore[attr-defined]
        else:
            target = f"ingest-{kind}"
            func = getattr(ingest, INGEST_FUNCS[kind])
            fn = (lambda: func(store_dir, str(path))) if kind == "table" else (
                lambda: func(store_dir, str(path), **point_kw))
        before = _snapshot(store_dir)
        result = attempt(target, fn, str(path), str(store_dir))
        after = _snapshot(store_dir)
        if isinstance(result, tuple):  # ingest_auto: (format, Ingested)
            result = result[1]
        if isinstance(result, ingest.Ingested):
            new = set(after) - set(before)
            side = result.path.name.replace(".json", SIDECAR_SUFFIX)
            assert new - {side} == {result.path.name}, new  # the run file, and its records' sidecar if any
            assert {k: after[k] for k in before} == before  # nothing rewritten
            assert len(store.load(store_dir).runs) == len([n for n in before if n.endswith(".json")]) + 1
        else:
            assert after == before, "a refused ingest changed the store"


@budget(200)
@given(data=st.data(), kind=st.sampled_from(["table", "sglang", "vllm_bench", "aiperf", "random"]))
def test_format_detection_fuzzed(data: st.DataObject, kind: str) -> None:
    detect = pytest.importorskip("findings.importers.detect")
    raw, name = (data.draw(RANDOM_BYTES), "rand.in") if kind == "random" else _bad_input(data, kind)
    attempt("detect", lambda: detect.detect(src(name, raw)), name)


# ---------------------------------------------------------------- regressions: minimal inputs

KW = dict(config="c", campaign="k", workload="w", date="2026-01-01")


def _clean(fn: Callable[[], Any], path: str) -> None:
    """A Run the store can hold, or a one-line FindingsError naming the file: nothing else."""
    attempt("regression", fn, path)


def test_regression_sglang_huge_int() -> None:
    _clean(lambda: sglang_bench.read(src("f.jsonl", b'{"output_throughput": 1' + b"0" * 400
                                         + b', "max_concurrency": 1}\n'), **KW), "f.jsonl")


def test_regression_sglang_huge_int_in_details() -> None:
    _clean(lambda: sglang_bench.read(src("f.jsonl", b'{"output_throughput": 1, "max_concurrency": 1, "ttfts": [1'
                                         + b"0" * 400 + b"]}\n"), **KW), "f.jsonl")


def test_regression_sglang_int_over_4300_digits() -> None:
    _clean(lambda: sglang_bench.read(src("f.jsonl", b'{"output_throughput": 1' + b"0" * 5000
                                         + b', "max_concurrency": 1}\n'), **KW), "f.jsonl")


def test_regression_sglang_line_break_in_key() -> None:
    _clean(lambda: sglang_bench.read(src("f.jsonl", b'{"output_throughput": 1, "max_concurrency": 1, '
                                         b'"a\\nb": Infinity}\n'), **KW), "f.jsonl")


def test_regression_table_line_break_in_header() -> None:
    _clean(lambda: table.read(src("f.csv", b'campaign,workload,config,concurrency,output_throughput_tok_s,"a\nb"\n'
                                           b"c,w,x,1,2,zz\n")), "f.csv")


def test_regression_schema_huge_int_metric() -> None:
    doc = copy.deepcopy(RUN_DOCS[0])
    doc["points"][0]["metrics"]["x"] = 10**400
    _clean(lambda: run_from_dict(doc, "r.json"), "r.json")


def test_regression_schema_line_break_in_metric_name() -> None:
    doc = copy.deepcopy(RUN_DOCS[0])
    doc["points"][0]["metrics"]["a\nb"] = "s"
    _clean(lambda: run_from_dict(doc, "r.json"), "r.json")


def test_regression_store_deeply_nested_file(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x.json").write_text("[" * 100000)
    _clean(lambda: store.load(tmp_path), str(tmp_path / "runs" / "x.json"))


@pytest.mark.parametrize("text", ["environment = 1\n", "a = " + "[" * 5000 + "]" * 5000 + "\n"])
def test_regression_environment_file(tmp_path: Path, text: str) -> None:
    (tmp_path / "env.toml").write_text(text)
    _clean(lambda: common.read_environment(str(tmp_path / "env.toml")), str(tmp_path / "env.toml"))


H = b"campaign,workload,config,concurrency,output_throughput_tok_s,note\n"


def test_regression_multiline_cell_refused_as_a_repeat() -> None:
    # Two different rows whose quoted notes end with the same physical line: the
    # record hash once covered only the row's last physical line.
    run = table.read(src("f.csv", H + b'c,w,x,1,100,"first\nsame"\n' + b'c,w,x,2,200,"second\nsame"\n'))
    assert len(run.points) == 2


def test_regression_multiline_cell_lost_by_skip_existing() -> None:
    v1 = H + b'c,w,x,1,100,"first\nsame"\n'
    first = table.read(src("f.csv", v1))
    grown = table.read(src("f.csv", v1 + b'c,w,x,2,200,"second\nsame"\n'), skip_lines=first.line_hashes)
    assert [p.concurrency for p in grown.points] == [2]


def _new_importer(name: str) -> Callable[[bytes], Any]:
    module = pytest.importorskip(f"findings.importers.{name}")
    return lambda raw: module.read(src("f.json", raw), **KW)


@pytest.mark.parametrize("name,change", [
    ("aiperf", {"request_latency": {"unit": "sec", "avg": 1e308}}),
    ("vllm_bench", {"start_times": [1e308, -1e308, 0, 0]}),
    ("vllm_bench", {"completed": 1e308, "failed": 1e308}),
])
def test_regression_new_importers_make_infinity(name: str, change: dict[str, Any]) -> None:
    doc = {**(VLLM_SEED if name == "vllm_bench" else AIPERF_SEED), **change}
    try:
        run = _new_importer(name)(json.dumps(doc).encode())
    except FindingsError:
        return
    roundtrip(run)  # the store must be able to write what was imported


BIG = "1" + "0" * 400  # an integer beyond float range, as JSON, CSV or TOML text


def _ingested_store_loads(tmp_path: Path, name: str, text: str, fn_name: str, **kw: Any) -> None:
    """Ingest refuses the file, or the store still loads afterwards."""
    path = tmp_path / name
    path.write_text(text)
    store_dir = store.create(tmp_path / "store")
    result = attempt("regression", lambda: getattr(ingest, fn_name)(store_dir, str(path), **kw), str(path))
    if isinstance(result, ingest.Ingested):
        store.load(store_dir)  # a successful ingest never leaves an unreadable store


@pytest.mark.parametrize("fn_name,name,text", [
    ("ingest_sglang_bench", "big.jsonl", '{"output_throughput": 1, "max_concurrency": 1, "random_input_len": BIG}\n'),
    ("ingest_sglang_bench", "big.jsonl", '{"output_throughput": 1, "max_concurrency": 1, '
                                         '"server_info": {"tp_size": BIG}}\n'),
    ("ingest_vllm_bench", "big.json", '{"output_throughput": 1, "max_concurrency": 1, "num_prompts": BIG}'),
    ("ingest_aiperf", "big.json", '{"output_token_throughput": {"unit": "tokens/sec", "avg": 1}, '
                                  '"input_config": {"loadgen": {"concurrency": 1, "request_count": BIG}}}'),
], ids=["sglang-workload", "sglang-server-info", "vllm", "aiperf"])
def test_regression_workload_int_beyond_float_range(tmp_path: Path, fn_name: str, name: str, text: str) -> None:
    if not hasattr(ingest, fn_name):
        pytest.skip(f"no findings.importers.ingest.{fn_name}")
    _ingested_store_loads(tmp_path, name, text.replace("BIG", BIG), fn_name, **KW)


@pytest.mark.parametrize("fn_name,name,text,key", [
    ("ingest_sglang_bench", "big.jsonl", '{"output_throughput": 1, "max_concurrency": 1, "request_rate": BIG}\n',
     "request_rate"),
    ("ingest_vllm_bench", "big.json", '{"output_throughput": 1, "max_concurrency": 1, "request_rate": BIG}',
     "request_rate"),
    ("ingest_vllm_bench", "big.json", '{"output_throughput": 1, "max_concurrency": 1, "request_rate": 2, '
                                      '"burstiness": BIG}', "burstiness"),
], ids=["sglang-rate", "vllm-rate", "vllm-burstiness"])
def test_regression_rate_int_beyond_float_range(tmp_path: Path, fn_name: str, name: str, text: str,
                                                key: str) -> None:
    """Found by test_sglang_mutated in CI: a request_rate of 10**400 raised
    OverflowError in float(). It is refused in one line naming the key."""
    path = tmp_path / name
    path.write_text(text.replace("BIG", BIG))
    store_dir = store.create(tmp_path / "store")
    with pytest.raises(InputError, match=rf"{key}.*expected a (rate|number) > 0.*too large to print|{key}.*1000"):
        getattr(ingest, fn_name)(store_dir, str(path), **KW)


def test_regression_config_fact_int_beyond_float_range(tmp_path: Path) -> None:
    (tmp_path / "configs.csv").write_text(f"config,tp\nx,{BIG}\n")
    _ingested_store_loads(tmp_path, "t.csv", "campaign,workload,config,concurrency,output_throughput_tok_s\n"
                          "c,w,x,1,2\n", "ingest_table", configs=str(tmp_path / "configs.csv"))


def test_regression_environment_int_beyond_float_range(tmp_path: Path) -> None:
    (tmp_path / "env.toml").write_text(f"[environment]\nx = {BIG}\n")
    _ingested_store_loads(tmp_path, "t.csv", "campaign,workload,config,concurrency,output_throughput_tok_s\n"
                          "c,w,x,1,2\n", "ingest_table", environment=str(tmp_path / "env.toml"))


# ---------------------------------------------------------------- the figure

def test_zz_fuzz_count() -> None:
    """Last in the file: print how many cases ran (pytest -s); the file is written at teardown."""
    text = report()
    print("\n" + text)
    assert sum(n for t, n in CASES.items() if t != "regression") > 0


def test_a_nan_metric_after_a_finite_one_is_refused():
    """Found by test_run_from_dict_mutated: the reader's fast path bounded the
    metrics by min() and max(), and min([1.0, nan]) is 1.0, so a NaN second
    in a point's metrics was read as data."""
    from findings.core.errors import StoreError
    from findings.store.schema import run_from_dict

    doc = json.loads(sorted((Path(__file__).parent / "fixtures" / "store" / "runs").glob("*.json"))[0].read_text())
    metrics = doc["points"][0]["metrics"]
    doc["points"][0]["metrics"] = {**{k: float(v) for k, v in metrics.items()}, "zz_last": float("nan")}
    with pytest.raises(StoreError, match="zz_last': expected a finite number"):
        run_from_dict(doc, "runs/x.json")
