"""``python -m findings.emulator``: run the SGLang-API emulator (argparse, same flags as ``findings emulate``)."""

from __future__ import annotations

import argparse
import sys

from findings.emulator.faults import parse_how
from findings.emulator.model import PROFILES
from findings.emulator.server import EmulatorOptions, Faults, serve
from findings.core.errors import FindingsError


def parse_args(argv: list[str] | None = None) -> EmulatorOptions:
    p = argparse.ArgumentParser(prog="python -m findings.emulator",
                                description="Serve SGLang's HTTP API from a calibrated performance model (SIMULATED).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port (see the ready line)")
    p.add_argument("--profile", default="baseline", choices=sorted(PROFILES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speed", type=float, default=1.0, help="divide all model time by this")
    p.add_argument("--ground-truth", action="store_true", help="add emulator timestamps to every event")
    p.add_argument("--ground-truth-log", default=None, metavar="FILE",
                   help="append one JSON line per finished request: arrival and every write (server clock)")
    p.add_argument("--startup-delay", type=float, default=0.0, metavar="S", help="/health answers 503 this long")
    p.add_argument("--max-running", type=int, default=None, metavar="N", help="max running requests")
    p.add_argument("--error-rate", type=float, default=0.0)
    p.add_argument("--drop-rate", type=float, default=0.0)
    p.add_argument("--stall-rate", type=float, default=0.0)
    p.add_argument("--stall-s", type=float, default=30.0)
    p.add_argument("--die-after", type=int, default=None, metavar="N")
    p.add_argument("--fail-share", type=float, default=0.0, help="exactly this share of requests fails")
    p.add_argument("--fail-how", default="http:500", help="kinds, in turn: http:<status>, drop, error-event")
    p.add_argument("--fail-skip", type=int, default=0, metavar="N", help="the first N requests never fail")
    p.add_argument("--prefix-page-size", type=int, default=16, metavar="N", help="tokens per prefix-cache page")
    a = p.parse_args(argv)
    if a.speed <= 0:
        p.error("--speed must be > 0")
    for name in ("error_rate", "drop_rate", "stall_rate", "fail_share"):
        if not 0.0 <= getattr(a, name) <= 1.0:
            p.error(f"--{name.replace('_', '-')} must be in [0, 1]")
    try:
        how = parse_how(a.fail_how)
    except ValueError as exc:
        p.error(f"--fail-how: {exc}")
    if a.fail_skip < 0:
        p.error("--fail-skip must be >= 0")
    if a.prefix_page_size < 1:
        p.error("--prefix-page-size must be >= 1")
    return EmulatorOptions(
        host=a.host, port=a.port, profile=a.profile, seed=a.seed, speed=a.speed, ground_truth=a.ground_truth,
        ground_truth_log=a.ground_truth_log,
        startup_delay_s=a.startup_delay, max_running_requests=a.max_running, prefix_page_size=a.prefix_page_size,
        faults=Faults(error_rate=a.error_rate, drop_rate=a.drop_rate, stall_rate=a.stall_rate,
                      stall_s=a.stall_s, die_after=a.die_after, fail_share=a.fail_share, fail_how=how,
                      fail_skip=a.fail_skip),
    )


def main(argv: list[str] | None = None) -> int:
    try:
        serve(parse_args(argv))
    except FindingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
