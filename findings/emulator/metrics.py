"""The emulator's Prometheus histograms, with SGLang's buckets. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.075,
               0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0)  # fmt: skip
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 200.0,
               250.0, 300.0, 350.0, 500.0, 1000.0)  # fmt: skip


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, le in enumerate(self.buckets):
            if value <= le:
                self.counts[i] += 1
                break

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f"# HELP {name} Histogram of {name.split(':', 1)[1]}.", f"# TYPE {name} histogram"]
        cumulative = 0
        for le, c in zip(self.buckets, self.counts):
            cumulative += c
            out.append(f'{name}_bucket{{le="{le}",{labels}}} {float(cumulative)}')
        out.append(f'{name}_bucket{{le="+Inf",{labels}}} {float(self.count)}')
        out.append(f"{name}_count{{{labels}}} {float(self.count)}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out
