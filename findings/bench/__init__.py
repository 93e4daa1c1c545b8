"""The benchmark runner: drive a server, sweep concurrency, store raw records.

Layers (imports go downward only):
    runner.py    orchestrates a matrix or an attach run, writes the store
    launch.py    starts/stops a server process (own process group)
    client.py    closed loop (exactly C in flight) or open loop (sends on a schedule)
    transport.py aiohttp (streaming hot path) and httpx (control plane, optional streaming)
    protocol.py  request bodies and stream-event parsing per API
    workload.py  deterministic prompts; nothing downloaded
    metrics.py   per-point metrics derived from raw per-request records (pure)
    records.py   frozen dataclasses
"""
