"""Facts about the machine the benchmark ran on (the client side)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

from findings.core.model import Scalar


def facts() -> dict[str, Scalar]:
    out: dict[str, Scalar] = {
        "client_host": platform.node(),
        "client_platform": platform.platform(),
        "client_python": platform.python_version(),
        "client_cpus": os.cpu_count() or 0,
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run(
                [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return out
        gpus = [line.strip() for line in r.stdout.splitlines() if line.strip()]
        if r.returncode == 0 and gpus:
            names = sorted(set(g.split(",")[0].strip() for g in gpus))
            out["gpus"] = f"{len(gpus)}x " + " / ".join(names)
            out["nvidia_smi"] = "; ".join(gpus)
    return out
