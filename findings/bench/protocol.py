"""Request bodies and stream-event parsing, per API. No I/O.

Token timing uses ``completion_tokens`` (native ``meta_info``) or ``usage``
deltas (OpenAI with ``continuous_usage_stats``), never event counts: one
speculative step can add several tokens in one event. When an OpenAI server
gives usage only at the end, the final count is spread over the content
chunks in proportion to their characters (docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from findings.bench.records import RequestRecord
from findings.bench.workload import Prompt

APIS = ("native", "openai-chat", "openai-completions")
PATHS = {"native": "/generate", "openai-chat": "/v1/chat/completions", "openai-completions": "/v1/completions"}


@dataclass(frozen=True)
class Request:
    path: str
    body: dict[str, Any]


def flat_text(prompt: Prompt) -> str | None:
    """The prompt as one text, for the APIs without messages: a chat file's
    history and the first turn, contents separated by blank lines."""
    if not prompt.history or prompt.text is None:
        return prompt.text
    return "\n\n".join([c for _, c in prompt.history] + [prompt.text])


def messages(prompt: Prompt, replies: tuple[str, ...] = (), turn: int = 1) -> list[dict[str, str]]:
    """The chat messages of ``turn`` (1 = the first): the file's history, then
    each earlier user turn followed by the reply that really came back."""
    out = [{"role": r, "content": c} for r, c in prompt.history]
    users = [prompt.text or "", *prompt.later][:turn]
    for i, u in enumerate(users):
        out.append({"role": "user", "content": u})
        if i < turn - 1:
            out.append({"role": "assistant", "content": replies[i]})
    return out


def build(api: str, prompt: Prompt, output_len: int, model: str, rid: str, ignore_eos: bool = True,
          turn: int = 1, replies: tuple[str, ...] = ()) -> Request:
    """The request body. ``ignore_eos``: exactly ``output_len`` tokens (also
    ``min_tokens`` on the OpenAI APIs); otherwise up to ``output_len``.
    ``turn`` and ``replies``: a later turn of a conversation, with the
    replies that came back to the earlier ones (openai-chat)."""
    if api == "native":
        body: dict[str, Any] = {
            "sampling_params": {"max_new_tokens": output_len, "ignore_eos": ignore_eos, "temperature": 0.0},
            "stream": True,
            "rid": rid,
        }
        if prompt.input_ids is not None:
            body["input_ids"] = list(prompt.input_ids)
        else:
            body["text"] = flat_text(prompt)
        return Request(PATHS[api], body)
    common: dict[str, Any] = {
        "model": model,
        "max_tokens": output_len,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": ignore_eos,
        "rid": rid,
        "return_spec_tokens_details": True,
    }
    if ignore_eos:
        common["min_tokens"] = output_len
    if api == "openai-chat":
        return Request(PATHS[api], {**common, "messages": messages(prompt, replies, turn)})
    if api == "openai-completions":
        prompt_value: Any = list(prompt.input_ids) if prompt.input_ids is not None else flat_text(prompt)
        return Request(PATHS[api], {**common, "prompt": prompt_value})
    raise ValueError(f"unknown api {api!r}; choose one of {', '.join(APIS)}")


def _count(v: Any) -> int | None:
    """A token count from a server: a non-negative int (not a bool), else None."""
    return v if type(v) is int and v >= 0 else None


def _ms(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < 1e12):
        return None
    return float(v)


class Parser:
    """Feeds decoded stream events into a RequestRecord."""

    def __init__(self, api: str, rec: RequestRecord, keep_text: bool = False) -> None:
        """``keep_text``: collect the reply's text in ``rec.reply`` (a later turn needs it)."""
        self.api = api
        if keep_text:
            rec.reply = []
        self.rec = rec
        self.done = False
        self._chunks: list[tuple[float, int]] = []  # OpenAI content chunks without usage: (t, chars)
        self._usage_seen = False
        #: Only each event's ``meta_info`` is read (the transport may parse only it).
        self.meta_only = api == "native" and not keep_text

    def error(self, kind: str, message: str) -> None:
        if not self.rec.error:
            self.rec.error_type = kind
            self.rec.error = message[:500]

    def feed(self, obj: Any, now: float) -> None:
        if not isinstance(obj, dict):
            self.error("sse", "stream event is not a JSON object")
            return
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            self.error("server_error", f"error event: {msg}")
            return
        if self.api == "native":
            self._native(obj, now)
        else:
            self._openai(obj, now)

    def _tokens(self, now: float, total: int) -> None:
        rec = self.rec
        last = rec.events[-1][1] if rec.events else 0
        if total > last:
            if rec.first_token is None:
                rec.first_token = now
            rec.events.append((now, total))
            rec.output_tokens = total

    def _native(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):
            self.error("sse", "event without meta_info")
            return
        self.meta(meta, now)
        if self.rec.reply is not None and isinstance(obj.get("text"), str):
            self.rec.reply[:] = [obj["text"]]  # SGLang's native stream sends the text so far

    def meta(self, meta: dict[str, Any], now: float) -> None:
        """One native event's ``meta_info`` (all a ``meta_only`` parser reads
        of it: the transport may hand over only that object)."""
        rec = self.rec
        ct = meta.get("completion_tokens")
        truth = "emulator_event_ts" in meta or "emulator_arrival_ts" in meta
        if isinstance(ct, int):  # _tokens, inline: this runs once per event
            events = rec.events
            if ct > (events[-1][1] if events else 0):
                if rec.first_token is None:
                    rec.first_token = now
                events.append((now, ct))
                rec.output_tokens = ct
                if truth:
                    ts = meta.get("emulator_event_ts")
                    if isinstance(ts, (int, float)):
                        rec.server_event_walls.append(float(ts))
        if rec.prompt_tokens is None and isinstance(meta.get("prompt_tokens"), int):
            rec.prompt_tokens = meta["prompt_tokens"]
        if truth:
            self._ground_truth(meta)
        fin = meta.get("finish_reason")
        if fin is not None:
            self.rec.finish_reason = fin.get("type") if isinstance(fin, dict) else str(fin)
            if fin == "abort" or (isinstance(fin, dict) and fin.get("type") == "abort"):
                self.error("server_error", f"aborted: {fin.get('message', '') if isinstance(fin, dict) else ''}")
            self._spec(meta)
            self.rec.cached_tokens = _count(meta.get("cached_tokens"))  # read once, at the end

    def _spec(self, d: dict[str, Any]) -> None:
        v = d.get("spec_verify_ct")
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            self.rec.spec_verify_ct = v
        a = d.get("spec_accept_length")
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            self.rec.spec_accept_length = float(a)

    def _ground_truth(self, d: dict[str, Any]) -> None:
        if self.rec.server_arrival_wall is None and isinstance(d.get("emulator_arrival_ts"), (int, float)):
            self.rec.server_arrival_wall = float(d["emulator_arrival_ts"])
        if self.rec.server_first_event_wall is None and self.rec.first_token is not None:
            ts = d.get("emulator_event_ts")
            if isinstance(ts, (int, float)):
                self.rec.server_first_event_wall = float(ts)

    def _openai(self, obj: dict[str, Any], now: float) -> None:
        choices = obj.get("choices")
        usage = obj.get("usage")
        ext = obj.get("sglext")
        if isinstance(ext, dict) and isinstance(ext.get("spec_tokens_details"), dict):
            self._spec(ext["spec_tokens_details"])
        content = ""
        if isinstance(choices, list) and choices:
            ch = choices[0] if isinstance(choices[0], dict) else {}
            delta = ch.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else ch.get("text")
            content = piece if isinstance(piece, str) else ""
            if content and self.rec.reply is not None:
                self.rec.reply.append(content)
            if ch.get("finish_reason") is not None:
                self.rec.finish_reason = str(ch["finish_reason"])
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            if self.rec.prompt_tokens is None and isinstance(usage.get("prompt_tokens"), int):
                self.rec.prompt_tokens = usage["prompt_tokens"]
            if self.rec.cached_tokens is None:  # with continuous usage, in every event: read once
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict):
                    self.rec.cached_tokens = _count(details.get("cached_tokens"))
            if content or not self._chunks:
                self._usage_seen = True
                self._tokens(now, usage["completion_tokens"])
            else:
                self._spread(usage["completion_tokens"])
        elif content:
            if self._usage_seen:
                return
            if self.rec.first_token is None:
                self.rec.first_token = now
            self._chunks.append((now, len(content)))
        emu = obj.get("emulator")
        if isinstance(emu, dict):
            self._ground_truth(emu)
        timings = obj.get("timings")
        if isinstance(timings, dict):
            self._draft(timings)
        per_request = obj.get("metrics")
        if isinstance(per_request, dict) and isinstance(per_request.get("speculative_decoding"), dict):
            self._vllm_spec(per_request["speculative_decoding"])

    def _vllm_spec(self, d: dict[str, Any]) -> None:
        """vLLM's per-request ``metrics.speculative_decoding`` (the final usage
        chunk, with ``--per-request-spec-decode-metrics``): verify steps that
        drafted, drafted and accepted tokens."""
        steps, n, a = _count(d.get("num_spec_steps")), _count(d.get("num_draft_tokens")), \
            _count(d.get("num_accepted_draft_tokens"))
        if steps is not None and n is not None and a is not None and a <= n:
            self.rec.spec_steps, self.rec.draft_n, self.rec.draft_accepted = steps, n, a

    def _draft(self, t: dict[str, Any]) -> None:
        """llama.cpp's per-response ``timings`` (tools/server: the final chunk):
        what SGLang's ``meta_info`` carries, under other names.

        - ``predicted_n``: tokens generated (SGLang ``completion_tokens``);
        - ``prompt_n`` + ``cache_n``: prompt tokens evaluated and reused
          (SGLang ``prompt_tokens`` and ``cached_tokens``);
        - ``prompt_ms``, ``predicted_ms``: the server's prefill and decode time;
        - ``draft_n``, ``draft_n_accepted``: speculation (SGLang has the number
          of verify steps, ``spec_verify_ct``, instead).
        """
        rec = self.rec
        n, a = t.get("draft_n"), t.get("draft_n_accepted")
        if type(n) is int and type(a) is int and 0 <= a <= n:
            rec.draft_n, rec.draft_accepted = n, a
        rec.server_output_tokens = _count(t.get("predicted_n"))
        rec.server_prompt_eval = _count(t.get("prompt_n"))
        cache_n = _count(t.get("cache_n"))
        if cache_n is not None and rec.cached_tokens is None:
            rec.cached_tokens = cache_n
        rec.server_prompt_ms = _ms(t.get("prompt_ms"))
        rec.server_decode_ms = _ms(t.get("predicted_ms"))

    def _spread(self, total: int) -> None:
        """Usage came only at the end: attribute it to chunks by characters."""
        chars = sum(c for _, c in self._chunks) or 1
        acc = 0
        self.rec.events = []
        for i, (t, c) in enumerate(self._chunks):
            acc += c
            n = total if i == len(self._chunks) - 1 else round(total * acc / chars)
            if not self.rec.events or n > self.rec.events[-1][1]:
                self.rec.events.append((t, n))
        self.rec.output_tokens = total
        self._usage_seen = True

    def finish(self, now: float) -> None:
        """The stream ended ([DONE] or EOF)."""
        rec = self.rec
        if self._chunks and not self._usage_seen:
            self.error("incomplete", "stream ended without usage; token count unknown")
        if not rec.error and rec.finish_reason is None and self.api == "native":
            self.error("incomplete", "stream ended before a finish_reason")
        rec.end = now
