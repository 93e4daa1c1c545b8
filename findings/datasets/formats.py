"""Prompt files: detect the format, validate every record, build a PromptSet.

Pure: bytes in, frozen data out (``findings.datasets.load`` reads the file).
A malformed file is refused with one ``InputError`` naming the file, the
line (or the JSON array's element) and the field.

The formats (docs/datasets.md has an example of each):

- ``sharegpt``: a JSON array (or JSONL) of ``{"conversations": [{"from":
  "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``. The first
  human turn is the prompt; the first reply after it gives the output-length
  cap (its words times 4/3, an estimate: no tokenizer runs here). Entries
  without a human turn are skipped and counted, as vLLM's loader skips
  conversations of fewer than two turns.
- ``chat-jsonl``: ``{"messages": [{"role": ..., "content": ...}, ...]}`` a
  line, ending with a user message; the earlier messages are sent as they are.
- ``completion-jsonl``: ``{"prompt": "..."}`` a line.
  Both take optional ``max_tokens``, ``output_len`` or ``output_tokens``
  (vLLM's custom JSONL) and ``category``.
- ``mt-bench``: MT-Bench and Spec-Bench ``question.jsonl``: ``question_id``,
  ``category`` and ``turns`` (a list of user turns, sent one after another).
- ``speed-bench``: SPEED-Bench subset files as vLLM's loader reads them:
  ``messages`` (user turns) and ``category`` (see ``_speed_bench``).
- ``text``: one prompt a line (blank lines skipped): a ``.txt`` file always,
  else any file that does not start with ``[`` or ``{``.

gzip-compressed files are read as they are (the sha256 is of the file's bytes).
"""

from __future__ import annotations

import gzip
import hashlib
from typing import Any, Callable

from findings.core import jsonfast
from findings.datasets.model import Conversation, PromptSet
from findings.core.errors import InputError

#: Who wrote a ShareGPT turn: the user, or a model's reply.
_HUMAN = frozenset({"human", "user"})
_REPLY = frozenset({"gpt", "assistant", "chatgpt", "bard", "model", "bing"})
_ROLES = frozenset({"system", "user", "assistant", "developer", "tool"})
#: Words to tokens, for ShareGPT's reply length (English BPE tokenizers give
#: about 1.3 tokens a word; an estimate, recorded as such).
TOKENS_PER_WORD = 4 / 3


class _Skip(Exception):
    """A ShareGPT entry without a human turn: left out and counted."""


def parse(path: str, data: bytes, name: str) -> tuple[PromptSet, int]:
    """The prompt set in ``data`` (the bytes of the file at ``path``), and how
    many entries were skipped (ShareGPT entries without a human turn)."""
    sha = hashlib.sha256(data).hexdigest()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise InputError(path, None, None, f"not a readable gzip file: {exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(path, line, None, "not UTF-8 text") from None
    head = text.lstrip()[:1]
    if not head:
        raise InputError(path, None, None, "the file is empty: no prompts")
    plain = name.lower().removesuffix(".gz").endswith((".txt", ".text"))
    if plain:
        fmt, convs, skipped = "text", _text(text), 0
    elif head == "[":
        fmt, convs, skipped = _json_array(path, text)
    elif head == "{":
        fmt, convs, skipped = _jsonl(path, text)
    else:
        fmt, convs, skipped = "text", _text(text), 0
    if not convs:
        raise InputError(path, None, None, f"no prompts in this {fmt} file"
                         + (f" ({skipped} entries without a human turn)" if skipped else ""))
    return PromptSet(fmt, name, sha, tuple(convs), path), skipped


def _text(text: str) -> list[Conversation]:
    out: list[Conversation] = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            out.append(Conversation(index=len(out), line=n, turns=(line.strip(),)))
    return out


def _json_array(path: str, text: str) -> tuple[str, list[Conversation], int]:
    try:
        doc = jsonfast.loads(text)
    except ValueError as exc:
        raise InputError(path, None, None, f"not valid JSON: {exc}") from None
    if not isinstance(doc, list) or not doc:
        raise InputError(path, None, None, "expected a non-empty JSON array of records")
    fmt = _kind(path, None, doc[0], "[0]")
    return fmt, *_records(path, fmt, ((None, f"[{i}]", rec) for i, rec in enumerate(doc)))


def _jsonl(path: str, text: str) -> tuple[str, list[Conversation], int]:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    records = []
    for n, line in lines:
        try:
            records.append((n, None, jsonfast.loads(line)))
        except ValueError:
            if n == lines[0][0] and len(lines) > 1:
                # One JSON object over several lines is not JSONL.
                raise InputError(path, n, None, "not one JSON object a line (JSONL); a JSON array of "
                                                "records, JSONL or plain text (one prompt a line) is "
                                                "expected") from None
            raise InputError(path, n, None, "not valid JSON") from None
    fmt = _kind(path, records[0][0], records[0][2], None)
    return fmt, *_records(path, fmt, records)


def _kind(path: str, line: int | None, rec: Any, element: str | None) -> str:
    """The format, from the first record's keys."""
    if not isinstance(rec, dict):
        raise InputError(path, line, element, "expected a JSON object")
    if "conversations" in rec:
        return "sharegpt"
    if "turns" in rec:
        return "mt-bench"
    if "messages" in rec and _speed_bench_like(rec):
        return "speed-bench"
    if "messages" in rec:
        return "chat-jsonl"
    if "prompt" in rec:
        return "completion-jsonl"
    keys = ", ".join(sorted(map(str, rec))[:8]) or "none"
    raise InputError(path, line, element, f"unknown record (keys: {keys}); expected 'conversations' "
                                          f"(ShareGPT), 'messages' (chat), 'prompt' (completion) or "
                                          f"'question_id' and 'turns' (MT-Bench)")


def _records(path: str, fmt: str, records: Any) -> tuple[list[Conversation], int]:
    build: Callable[[Fail, dict[str, Any]], Conversation] = _BUILDERS[fmt]
    out: list[Conversation] = []
    skipped = 0
    for line, element, rec in records:
        fail = Fail(path, line, element)
        if not isinstance(rec, dict):
            raise fail(None, "expected a JSON object")
        try:
            c = build(fail, rec)
        except _Skip:
            skipped += 1
            continue
        out.append(Conversation(index=len(out), line=line, turns=c.turns, history=c.history,
                                category=c.category, output_len=c.output_len,
                                output_len_source=c.output_len_source))
    return out, skipped


class Fail:
    """Builds the InputError of one record: ``fail(field, message)``."""

    def __init__(self, path: str, line: int | None, element: str | None) -> None:
        self.path, self.line, self.element = path, line, element

    def __call__(self, field: str | None, message: str) -> InputError:
        where = (f"{self.element}.{field}" if field else self.element) if self.element else field
        return InputError(self.path, self.line, where, message)


def _str(fail: Fail, rec: dict[str, Any], key: str) -> str:
    v = rec.get(key)
    if not isinstance(v, str) or not v.strip():
        raise fail(key, "missing" if v is None else "expected a non-empty string")
    return v


def _category(fail: Fail, rec: dict[str, Any]) -> str | None:
    v = rec.get("category")
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip() or any(ord(ch) < 32 for ch in v):
        raise fail("category", "expected a non-empty one-line string")
    return v.strip()


def _out_len(fail: Fail, rec: dict[str, Any]) -> int | None:
    for key in ("max_tokens", "output_len", "output_tokens"):
        v = rec.get(key)
        if v is not None:
            if type(v) is not int or v < 1:
                raise fail(key, "expected an integer >= 1")
            return int(v)
    return None


def _content(fail: Fail, field: str, v: Any) -> str:
    """A message's content: a string, or OpenAI's list of parts (text parts joined)."""
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(p, dict) for p in v):
        texts = [p.get("text") for p in v if p.get("type") == "text"]
        if texts and all(isinstance(t, str) for t in texts):
            return "\n".join(t for t in texts if isinstance(t, str))
    raise fail(field, "expected a string (or a list of text parts)")


def _sharegpt(fail: Fail, rec: dict[str, Any]) -> Conversation:
    turns = rec.get("conversations")
    if not isinstance(turns, list):
        raise fail("conversations", "missing" if turns is None else "expected a list of turns")
    prompt: str | None = None
    reply: str | None = None
    for i, t in enumerate(turns):
        where = f"conversations[{i}]"
        if not isinstance(t, dict):
            raise fail(where, "expected an object with 'from' and 'value'")
        who, value = t.get("from"), t.get("value")
        if not isinstance(who, str):
            raise fail(f"{where}.from", "missing" if who is None else "expected a string")
        if not isinstance(value, str):
            raise fail(f"{where}.value", "missing" if value is None else "expected a string")
        if prompt is None and who.lower() in _HUMAN and value.strip():
            prompt = value
        elif prompt is not None and who.lower() in _REPLY:
            reply = value
            break
    if prompt is None:
        raise _Skip
    hint = max(1, round(len(reply.split()) * TOKENS_PER_WORD)) if reply and reply.strip() else None
    return Conversation(0, None, (prompt,), category=_category(fail, rec), output_len=hint,
                        output_len_source="estimate" if hint is not None else None)


def _chat(fail: Fail, rec: dict[str, Any]) -> Conversation:
    msgs = rec.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise fail("messages", "missing" if msgs is None else "expected a non-empty list of messages")
    history: list[tuple[str, str]] = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise fail(where, "expected an object with 'role' and 'content'")
        role = m.get("role")
        if role not in _ROLES:
            raise fail(f"{where}.role", "missing" if role is None else
                       f"expected one of {', '.join(sorted(_ROLES))}")
        history.append((str(role), _content(fail, f"{where}.content", m.get("content"))))
    if history[-1][0] != "user":
        raise fail(f"messages[{len(msgs) - 1}].role", "the last message must be the user's (the prompt)")
    if not history[-1][1].strip():
        raise fail(f"messages[{len(msgs) - 1}].content", "the prompt is empty")
    out = _out_len(fail, rec)
    return Conversation(0, None, (history[-1][1],), history=tuple(history[:-1]), category=_category(fail, rec),
                        output_len=out, output_len_source="file" if out is not None else None)


def _completion(fail: Fail, rec: dict[str, Any]) -> Conversation:
    out = _out_len(fail, rec)
    return Conversation(0, None, (_str(fail, rec, "prompt"),), category=_category(fail, rec), output_len=out,
                        output_len_source="file" if out is not None else None)


def _turns(fail: Fail, rec: dict[str, Any], key: str = "turns") -> tuple[str, ...]:
    turns = rec.get(key)
    if not isinstance(turns, list) or not turns:
        raise fail(key, "missing" if turns is None else "expected a non-empty list of user turns")
    for i, t in enumerate(turns):
        if not isinstance(t, str) or not t.strip():
            raise fail(f"{key}[{i}]", "expected a non-empty string")
    return tuple(turns)


def _mt_bench(fail: Fail, rec: dict[str, Any]) -> Conversation:
    qid = rec.get("question_id")
    if type(qid) not in (int, str):
        raise fail("question_id", "missing" if qid is None else "expected an integer or a string")
    category = _category(fail, rec)
    if category is None:
        raise fail("category", "missing")
    return Conversation(0, None, _turns(fail, rec), category=category)


#: The columns NeMo-Skills' SPEED-Bench preparation keeps beside ``messages``.
_SPEED_BENCH_KEYS = frozenset({"src_id", "sub_category", "source"})


def _speed_bench_like(rec: dict[str, Any]) -> bool:
    """A SPEED-Bench record: ``messages`` of user turns only, with a
    ``category`` and one of the columns its preparation keeps."""
    msgs = rec.get("messages")
    return (isinstance(rec.get("category"), str) and bool(_SPEED_BENCH_KEYS & set(rec))
            and isinstance(msgs, list) and bool(msgs)
            and all(isinstance(m, dict) and m.get("role") == "user" for m in msgs))


def _speed_bench(fail: Fail, rec: dict[str, Any]) -> Conversation:
    """SPEED-Bench as vLLM 0.32's loader (``SpeedBench``) reads a subset file
    (``qualitative.jsonl``, ``throughput_1k.jsonl``, ...): ``messages`` and
    ``category``. vLLM sends ``messages[0]`` only; here every message is a
    user turn, sent one after another with the live replies, as AIPerf does
    (``max_turns = 1`` sends the first only, as vLLM does)."""
    category = _category(fail, rec)
    if category is None:
        raise fail("category", "missing")
    msgs = rec.get("messages")
    assert isinstance(msgs, list)
    turns = tuple(_content(fail, f"messages[{i}].content", m.get("content")) for i, m in enumerate(msgs))
    for i, t in enumerate(turns):
        if not t.strip():
            raise fail(f"messages[{i}].content", "expected a non-empty string")
    return Conversation(0, None, turns, category=category)


_BUILDERS: dict[str, Callable[[Fail, dict[str, Any]], Conversation]] = {
    "sharegpt": _sharegpt, "chat-jsonl": _chat, "completion-jsonl": _completion,
    "mt-bench": _mt_bench, "speed-bench": _speed_bench,
}
