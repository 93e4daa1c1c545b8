"""Run ``sglang.launch_server`` with SGLang's ``intel_amx`` attention backend kept on a CPU without AMX.

    SGLANG_USE_CPU_ENGINE=1 python tools/sglang_launch.py [sglang.launch_server arguments]

SGLang 0.5.23 rewrites ``--attention-backend intel_amx`` to ``torch_native``
when the CPU has no AMX (``_attention_backend_platform_fallbacks``), and
``torch_native`` cannot verify speculative drafts. The ``intel_amx`` attention
kernels (oneDNN brgemm) run on AVX-512 alone, so this tells SGLang's platform
record that AMX is there before the server arguments are resolved; linear,
norm and rope layers still take their non-AMX paths (they ask the CPU
directly). Used by tools/sglang_serve.py; see docs/sglang-cpu.md.
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    from sglang.srt.runtime_context import get_platform

    get_platform()._install(has_amx=True)
    sys.argv = ["sglang.launch_server", *sys.argv[1:]]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
