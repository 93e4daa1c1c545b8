"""Import-only stand-in for torchvision, for the peer client's venv.

PyPI's torchvision does not import beside the CPU torch ("operator
torchvision::nms does not exist"), and ``python -m sglang.bench_serving``
imports the whole ``sglang`` package, some of whose multimodal modules import
torchvision at module level. The benchmark client never calls it: any name
resolves to a placeholder that raises when it is actually used.
"""

from __future__ import annotations

import enum
from typing import Any

__version__ = "0.0.0+findings-standin"


class StandinError(RuntimeError):
    pass


class Missing:
    """A placeholder for any torchvision object: attribute access chains, calls raise."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> "Missing":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Missing(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise StandinError(f"{self._name}: torchvision is an import-only stand-in in this venv "
                           "(benchmarks/peer/stubs); the benchmark client never needs it")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)

    def __repr__(self) -> str:
        return f"<torchvision stand-in {self._name}>"


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def module_getattr(modname: str):
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Missing(f"{modname}.{name}")
    return __getattr__
