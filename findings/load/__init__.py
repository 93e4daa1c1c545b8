"""Open-loop load (issue 25): when each request is sent.

Public surface so far: ``arrivals`` (pure: Poisson, gamma burstiness as
vLLM's ``bench serve`` defines it, constant spacing, and piecewise rate
profiles, as send offsets from a point's start) and ``trace`` (Mooncake-format
JSONL traces, validated at the file boundary). The runner that sleeps to those
offsets and records how late each send was is not built yet.
"""
