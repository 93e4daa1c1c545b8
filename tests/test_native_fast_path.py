"""SGLang's native events read in place (findings/bench/transport.py
``_native_meta``, ``_native_line``; D134): the record a stream leaves is the
same, field for field, whichever way its events are read:

- the reference: each event's whole JSON parsed and fed to the parser;
- line by line (``_data``, the aiohttp and httpx transports' path);
- as HTTP chunks through the raw transport's ``_Exchange.feed``, whole
  events handed over where they lie (``on_event``), in every split of the
  bytes into reads.

The events are a real emulator's, read off a real socket (its ground truth
on and off), and hand-made variants of SGLang's layout that the in-place
read must refuse (an escaped quote in the text, a null text, an ``error``
key, a key after ``meta_info``, a CRLF line end, a malformed ``meta_info``):
those go the old way and still give the reference's record."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

import orjson
import pytest
from test_bench_e2e import SPEED, emulator  # noqa: F401 (the fixture)

from findings.bench import transport as T
from findings.bench.protocol import Parser
from findings.bench.records import RequestRecord

META = '{"id":"r","finish_reason":null,"prompt_tokens":4,"completion_tokens":%d,"cached_tokens":0}'
LAST = ('{"id":"r","finish_reason":{"type":"length","length":%d},"prompt_tokens":4,"completion_tokens":%d,'
        '"cached_tokens":3,"spec_verify_ct":2,"spec_accept_length":1.5}')


def _event(text: str, ids: list[int], meta: str) -> bytes:
    return b'data: {"text":' + text.encode() + b',"output_ids":' + orjson.dumps(ids) + b',"meta_info":' \
        + meta.encode() + b"}"


def _stream(n: int, text=lambda k: orjson.dumps(" tok" * k).decode()) -> list[bytes]:
    return [_event(text(k), list(range(k)), META % k) for k in range(1, n)] + \
        [_event(text(n), list(range(n)), LAST % (n, n))]


def _fields(rec: RequestRecord) -> dict:
    d = dataclasses.asdict(rec)
    d["events"] = [c for _, c in rec.events]  # the times are each path's own clock readings
    for k in ("first_token", "end"):
        d[k] = d[k] is not None
    d["error"] = bool(rec.error)  # the reference's message is its own; the kind is compared
    return d


def _reference(lines: list[bytes]) -> dict:
    rec = RequestRecord(index=0, input_len=4)
    parser = Parser("native", rec)
    for line in lines:
        if line == b"data: [DONE]":
            break
        try:
            obj = orjson.loads(line[len(b"data: "):])
        except orjson.JSONDecodeError:
            parser.error("sse", "malformed")
            break
        parser.feed(obj, time.perf_counter())
        if rec.error:
            break
    parser.finish(time.perf_counter())
    return _fields(rec)


def _by_lines(lines: list[bytes]) -> dict:
    rec = RequestRecord(index=0, input_len=4)
    parser = Parser("native", rec)
    for line in lines:
        if T._data(line, parser, time.perf_counter()):
            break
    parser.finish(time.perf_counter())
    return _fields(rec)


def _by_chunks(wire: bytes, read: int) -> tuple[dict, int]:
    """The raw transport's exchange fed ``wire`` (a chunked response) in
    reads of ``read`` bytes; (the record, the events read in place)."""
    rec = RequestRecord(index=0, input_len=4)
    parser = Parser("native", rec)
    on_line, in_place, done = T.stream_handlers(parser)
    assert in_place is not None
    taken = 0

    def on_event(buf: bytes, start: int, stop: int, now: float) -> bool | None:
        nonlocal taken
        took = in_place(buf, start, stop, now)
        taken += took is not None
        return took

    async def go() -> None:
        ex = T._Exchange(on_line, time.perf_counter, on_event)
        for i in range(0, len(wire), read):
            ex.feed(wire[i:i + read])
        assert ex.done.done() and ex.error is None
        if not done():
            parser.finish(time.perf_counter())

    asyncio.run(go())
    return _fields(rec), taken


def _wire(events: list[bytes], sep: bytes = b"\n\n") -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(b"%x\r\n%s\r\n" % (len(e + sep), e + sep) for e in [*events, b"data: [DONE]"])
    return head + body + b"0\r\n\r\n"


def _same_everywhere(events: list[bytes], sep: bytes = b"\n\n") -> tuple[dict, list[int]]:
    ref = _reference(events)
    assert _by_lines(events) == ref
    wire = _wire(events, sep)
    taken = []
    for read in (len(wire), 65536, 1000, 97, 7, 1):
        got, n = _by_chunks(wire, read)
        assert got == ref, read
        taken.append(n)
    return ref, taken


def test_sglang_layout_is_read_in_place_with_the_same_record():
    ref, taken = _same_everywhere(_stream(40))
    assert ref["output_tokens"] == 40 and ref["finish_reason"] == "length" and ref["cached_tokens"] == 3
    assert ref["spec_verify_ct"] == 2 and not ref["error"]
    assert taken[0] == 40  # whole chunks in one read: every event in place


@pytest.mark.parametrize("case", [
    "escaped quote", "text ends with a backslash", "null text", "error key first", "error key after the ids",
    "key after meta_info", "meta_info not an object", "malformed meta_info", "nested meta_info key",
    "abort", "no output_ids"])
def test_other_layouts_take_the_old_way_and_agree(case):
    events = _stream(6)
    k, m = 3, META % 3
    bad = {
        "escaped quote": _event(r'"say \"error\": hi"', [1, 2, 3], m),
        "text ends with a backslash": _event(r'"a\\"', [1, 2, 3], m),
        "null text": _event("null", [1, 2, 3], m),
        "error key first": b'data: {"text":"a","error":{"message":"boom"},"output_ids":[1],"meta_info":'
                           + m.encode() + b"}",
        "error key after the ids": b'data: {"text":"a","output_ids":[1],"error":"boom","meta_info":'
                                   + m.encode() + b"}",
        "key after meta_info": b'data: {"text":"a","output_ids":[1],"meta_info":' + m.encode()
                               + b',"output_extra_info":{}}',
        "meta_info not an object": b'data: {"text":"a","output_ids":[1],"meta_info":[3]}',
        "malformed meta_info": b'data: {"text":"a","output_ids":[1],"meta_info":{"completion_tokens":3,}}',
        "nested meta_info key": b'data: {"text":"a","output_ids":[1],"meta_info":{"completion_tokens":3,'
                                b'"x":{"meta_info":1}}}',
        "abort": _event('"a"', [1, 2, 3], '{"completion_tokens":3,"finish_reason":{"type":"abort",'
                                          '"message":"gone"}}'),
        "no output_ids": b'data: {"text":"a","meta_info":' + m.encode() + b"}",
    }[case]
    events[k - 1] = bad
    ref, taken = _same_everywhere(events)
    in_place = T._native_line(bad, 0, len(bad)) is not None
    assert in_place == (case in ("nested meta_info key", "abort"))
    if case in ("error key first", "error key after the ids", "meta_info not an object", "malformed meta_info",
                "abort"):
        assert ref["error"]  # the stream failed there, as before
    else:
        assert not ref["error"] and ref["output_tokens"] == 6


def test_crlf_line_ends_take_the_old_way():
    events = _stream(5)
    ref, taken = _same_everywhere([e + b"\r" for e in events], sep=b"\n\n")
    assert ref["output_tokens"] == 5 and taken[0] == 0
    ref2, taken2 = _same_everywhere(events, sep=b"\r\n\r\n")
    assert ref2 == ref and taken2[0] == 0


def _capture(url: str, body: dict) -> bytes:
    """One /generate stream's raw bytes off a real socket (HTTP/1.1, chunked)."""
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    payload = orjson.dumps(body)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
        got = []
        while chunk := s.recv(65536):
            got.append(chunk)
    return b"".join(got)


@pytest.mark.parametrize("truth", [False, True])
def test_a_real_emulator_stream_gives_the_same_record_every_way(emulator, truth):
    url = emulator("--profile", "baseline", "--speed", SPEED, *(("--ground-truth",) if truth else ()))
    wire = _capture(url, {"input_ids": list(range(16)), "stream": True,
                          "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}})
    assert wire.startswith(b"HTTP/1.1 200") and b"chunked" in wire.split(b"\r\n\r\n", 1)[0].lower()
    # The events, as a line reader sees them.
    body = b"".join(_dechunk(wire))
    lines = [x for x in body.split(b"\n") if x]
    ref = _reference(lines)
    assert ref["output_tokens"] == 24 and not ref["error"]
    assert bool(ref["server_event_walls"]) == truth
    assert _by_lines(lines) == ref
    for read in (len(wire), 4096, 100, 13):
        got, taken = _by_chunks(wire, read)
        assert got == ref
        if read == len(wire):
            assert taken == 24  # each of the emulator's events read in place


def _dechunk(wire: bytes):
    """The chunked body's pieces (a plain decoder, for the test's line reader)."""
    rest = wire.split(b"\r\n\r\n", 1)[1]
    while rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return
        yield rest[:size]
        rest = rest[size + 2:]


def _by_aiohttp(pieces: list[bytes]) -> tuple[dict, int, int]:
    """The aiohttp transport's own ``send`` reading a response that a real
    socket server writes in ``pieces`` (each its own write, a pause between
    them, so each reaches the client as a read of its own, unless the client
    is late and reads two at once); (the record, the reads its loop took
    in place as one whole event, those it left to the line reader: D158)."""
    taken = missed = 0
    in_place = T._native_meta

    def counted(buf: bytes, start: int, stop: int) -> dict | None:
        nonlocal taken, missed
        meta = in_place(buf, start, stop)
        taken += meta is not None
        missed += meta is None
        return meta

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        await reader.readexactly(length)
        for k, piece in enumerate(pieces):
            if k:
                await asyncio.sleep(0.02)
            writer.write(piece)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def go() -> dict:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        t = T.AiohttpTransport(f"http://127.0.0.1:{port}", read_timeout_s=10.0)
        await t.start()
        try:
            rec = RequestRecord(index=0, input_len=4)
            await t.send(T.Request("/generate", {"text": "x", "stream": True}), rec, Parser("native", rec))
        finally:
            await t.close()
            server.close()
            await server.wait_closed()
        assert rec.body_written and rec.sent > 0
        # What only a request on a socket sets: its send times.
        return {**_fields(rec), "sent": 0.0, "sent_wall": 0.0, "body_written": False}

    T._native_meta = counted
    try:
        return asyncio.run(go()), taken, missed
    finally:
        T._native_meta = in_place


@pytest.mark.parametrize("split", [False, True])
def test_the_aiohttp_transport_reads_whole_events_in_place_with_the_same_record(split):
    """Each event in one read: read where it lies (no split into lines);
    each cut in two reads: the line reader's way. The record is the
    reference's either way."""
    events = _stream(12)
    ref = _reference(events)
    wire = _wire(events)
    head, body = wire.split(b"\r\n\r\n", 1)
    chunks = [c + b"\r\n" for c in body.split(b"\r\n")[:-1]]  # size line, data, size line, data, ...
    pieces = [head + b"\r\n\r\n"] + [chunks[k] + chunks[k + 1] for k in range(0, len(chunks) - 1, 2)]
    if split:
        pieces = [half for p in pieces for half in (p[:len(p) // 2], p[len(p) // 2:])]
    got, taken, missed = _by_aiohttp(pieces)
    assert got == ref
    # Both ways ran (a late client may read two pieces at once: a cut
    # event whole again, or two events the line reader then splits).
    assert (missed if split else taken) >= 1, (taken, missed)
