"""Open-loop load (issue 25, docs/load.md): when each request is sent, and
how open-loop points are judged.

- ``spec``: a workload's open-loop keys (``request_rate``, ``profile``,
  ``trace``, burstiness, cap, SLO, rate search), validated; each point's
  send offsets.
- ``arrivals`` (pure): Poisson, gamma burstiness as vLLM's ``bench serve``
  defines it, constant spacing, and piecewise rate profiles.
- ``trace``: Mooncake-format JSONL traces, validated at the file boundary.
- ``verdicts`` (pure): open-loop points judged by request rate on latency
  and goodput; the rate policy and the running batch measured at its
  threshold; max sustainable rates; profile and trace replays.
- ``present`` (pure): those as the document's sentences and tables.

The sending itself is findings.bench.client's open loop.
"""
