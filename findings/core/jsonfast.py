"""Fast JSON for hot paths: the only module that imports orjson.

The store reader (store.py), the benchmark client (bench/transport.py) and the
emulator's event writer (emulator/server.py) parse or write JSON per record
or per event, where orjson is several times faster than the json module.
Compact output (no spaces), UTF-8 bytes.
"""

from __future__ import annotations

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError
loads = orjson.loads


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)
