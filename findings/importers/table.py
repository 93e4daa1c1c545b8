"""The long CSV table: one row per (campaign, config, concurrency).

This is the format of the hand-recorded seed results
(benchmarks/history/measurements.csv). Columns:

- required: ``campaign``, ``workload``, ``config``, ``concurrency``,
  ``output_throughput_tok_s`` (``n/a`` for a row that measures something
  other than a server's output: it never enters the analysis);
- optional: ``order`` (the campaign's place in time when no date was kept),
  ``date`` (YYYY-MM-DD), ``note``, ``repeat`` (ignored: repeats are rows with
  the same key);
- optional request counts: ``completed`` (successful requests), ``failed``
  and ``planned`` (requests sent), each a whole number or empty (not
  recorded). Without ``failed`` the row's failures are unknown, never 0.
  A row with ``completed`` 0 is a run where every request failed; its
  throughput is ``n/a`` (or 0, which is then not kept);
- optional prompt conditions (workload parameters): ``dataset`` (the
  prompt set, e.g. ``random``, ``random-ids``, ``sharegpt``) and
  ``ignore_eos`` (``true``/``false``), or empty;
- optional load (D103): ``request_rate`` (requests/s; empty or ``inf``:
  a closed loop at ``concurrency``), ``burstiness`` (1 Poisson, ``inf``
  constant spacing) and ``max_concurrency`` (the cap). A row with a finite
  rate is an open-loop point, stored as ``findings bench --request-rate``
  stores one; its ``concurrency`` cell stays empty (a rate is not a C).
  The open-loop verdicts read the latency columns ``median_tpot_ms``,
  ``p99_ttft_ms`` (and show ``median_ttft_ms``, ``p99_tpot_ms``); an SLO is
  given as ``slo_ttft_ms``/``slo_tpot_ms``/``slo_attainment`` columns with
  the measured ``slo_attainment_measured`` and ``goodput_req_s``;
- any other column is a metric: a number, or empty.

An optional configs CSV (``--configs``) has a ``config`` column and one
column per fact; empty cells are facts not known. An optional ``campaign``
column makes a row's facts those of that campaign only (an engine upgraded
between campaigns: ``baseline,c1,0.5.20`` and ``baseline,c2,0.5.23``); a
row without one holds in every campaign. A campaign's row adds to, and
overrides, the config's general row.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace
from typing import Any, Mapping

from findings.core.errors import InputError
from findings.importers.common import Load, Source, line_hash, load_axis, make_run, record_hash, run_id
from findings.core.model import THROUGHPUT, Campaign, Input, Point, Run, Scalar
from findings.store.schema import point_id, valid_date, valid_name
from findings.derive.validity import only_counts

NAME = "table"
VERSION = "1"
REQUIRED = ("campaign", "workload", "config", "concurrency", THROUGHPUT)
#: Request counts: whole numbers >= 0 (validity gates, docs/decisions.md D27).
COUNTS = ("completed", "failed", "planned")
#: Workload parameters (the prompt conditions; findings/derive/caveats.py).
PARAMS = ("dataset", "ignore_eos")
#: The load of a row (D103): a finite request_rate makes it an open-loop point.
LOAD = ("request_rate", "burstiness", "max_concurrency")
#: The SLO an open-loop row was judged under (workload parameters, as the runner records them).
SLO = ("slo_ttft_ms", "slo_tpot_ms", "slo_attainment")
#: The measured share of requests that met the SLO (stored as the metric ``slo_attainment``,
#: the runner's name, which as a column would read as the SLO's own threshold).
MEASURED_ATTAINMENT = "slo_attainment_measured"
KNOWN = REQUIRED + ("order", "date", "note", "repeat") + PARAMS + LOAD + SLO + (MEASURED_ATTAINMENT,)
#: The throughput cell of a row that measures something other than a
#: server's output (findings' own render times in the perf store). Such a
#: point never enters the analysis. An empty cell is still an error.
NOT_APPLICABLE = "n/a"


def _rows(src: Source, required: tuple[str, ...]) -> tuple[list[str], list[tuple[int, dict[str, str], str]]]:
    text = src.text()
    if not text.strip():
        raise InputError(src.path, None, None, "the file is empty")
    # The physical lines exactly as the csv reader sees them, so that a row
    # quoted across several lines is hashed and located by all of its lines.
    physical = list(io.StringIO(text, newline=""))
    reader = csv.reader(iter(physical), strict=True)
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as exc:
        raise InputError(src.path, 1, None, f"bad CSV: {exc}") from exc
    for name in required:
        if name not in header:
            raise InputError(src.path, 1, name, "required column is missing")
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})[0]
        raise InputError(src.path, 1, dup, "column appears twice")
    rows = []
    while True:
        before = reader.line_num
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise InputError(src.path, before + 1, None, f"bad CSV: {exc}") from exc
        line = before + 1  # where the row starts
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise InputError(src.path, line, None, f"expected {len(header)} cells, found {len(cells)}")
        raw = "".join(physical[before:reader.line_num]).rstrip("\r\n")
        rows.append((line, {h: c.strip() for h, c in zip(header, cells)}, raw))
    if not rows:
        raise InputError(src.path, None, None, "no data rows")
    return header, rows


def _number(src: Source, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(src.path, line, field, f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise InputError(src.path, line, field, f"expected a finite number, got {text!r}")
    return value


def _int(src: Source, line: int, field: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(src.path, line, field, f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise InputError(src.path, line, field, f"must be >= {minimum}, got {value}")
    return value


def _load(src: Source, line: int, row: Mapping[str, str]) -> Load:
    """A row's load (D103): ``request_rate`` empty or ``inf`` is a closed loop
    at ``concurrency``; a finite rate an open-loop point, whose concurrency
    cell must stay empty (its cap is ``max_concurrency``)."""
    raw_rate = (row.get("request_rate") or "").strip()
    rate: float | str | None = None
    if raw_rate:
        rate = "inf" if raw_rate.lower() in ("inf", "infinity") else _number(src, line, "request_rate", raw_rate)
    raw_burst = (row.get("burstiness") or "").strip()
    burst: float | str | None = None
    if raw_burst:
        burst = "inf" if raw_burst.lower() in ("inf", "infinity") else _number(src, line, "burstiness", raw_burst)
    cap = _int(src, line, "max_concurrency", row["max_concurrency"], 1) if row.get("max_concurrency") else None
    conc = row["concurrency"].strip()
    if rate is not None and rate != "inf":
        if conc:
            raise InputError(src.path, line, "concurrency",
                             f"{conc!r} in a row with request_rate {raw_rate}: a rate row's load is its rate; leave "
                             "concurrency empty (a cap on requests in flight goes in max_concurrency)")
        return load_axis(src.path, line, rate=rate, burstiness=burst, cap=cap, given=None,
                         burstiness_default=1.0)
    if burst is not None:
        raise InputError(src.path, line, "burstiness", "only with a finite request_rate")
    if not conc:
        raise InputError(src.path, line, "concurrency", "empty: give the concurrency, or a request_rate")
    c = _int(src, line, "concurrency", conc, 1)
    if cap is not None and cap != c:
        raise InputError(src.path, line, "max_concurrency", f"{cap} differs from concurrency {c}")
    return Load(c, {})


def _name(src: Source, line: int, field: str, text: str) -> str:
    if not valid_name(text):
        raise InputError(src.path, line, field, f"expected a non-empty name, got {text!r}")
    return text


def _record(row: dict[str, str]) -> dict[str, Any]:
    """A row's content for duplicate detection (D99): its non-empty cells by
    column, numbers as numbers, so that a copy with the columns in another
    order, other spacing or numbers written otherwise (``1`` and ``1.0``) is
    the same record."""
    out: dict[str, Any] = {}
    for col, text in row.items():
        if col is None or text is None or not text.strip():
            continue
        value = text.strip()
        try:
            number = float(value)
        except ValueError:
            out[col] = value
            continue
        out[col] = number if math.isfinite(number) else value
    return out


def _fact(text: str) -> Scalar:
    for cast in (int, float):
        try:
            value = cast(text)
        except ValueError:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            return text
        return value
    return text


ConfigFacts = dict[str, Mapping[str, Scalar]]


def read_configs(src: Source) -> tuple[ConfigFacts, dict[str, ConfigFacts], dict[str, int]]:
    """The general facts per config, those of single campaigns (campaign -> config -> facts),
    and the line on which each such campaign is first named."""
    _, rows = _rows(src, ("config",))
    configs: ConfigFacts = {}
    per_campaign: dict[str, ConfigFacts] = {}
    campaign_line: dict[str, int] = {}
    for line, row, _raw in rows:
        name = _name(src, line, "config", row["config"])
        facts = {k: _fact(v) for k, v in row.items() if k not in ("config", "campaign") and v != ""}
        if row.get("campaign"):
            campaign = _name(src, line, "campaign", row["campaign"])
            if name in per_campaign.get(campaign, {}):
                raise InputError(src.path, line, "config", f"config {name!r} listed twice for campaign {campaign!r}")
            per_campaign.setdefault(campaign, {})[name] = facts
            campaign_line.setdefault(campaign, line)
            continue
        if name in configs:
            raise InputError(src.path, line, "config", f"config {name!r} listed twice")
        configs[name] = facts
    return configs, per_campaign, campaign_line


def read(
    src: Source,
    configs_src: Source | None = None,
    environment: Mapping[str, Scalar] | None = None,
    skip_lines: frozenset[str] = frozenset(),
    source: str = "import",
) -> Run:
    """Parse and validate a whole table; raise InputError on the first fault."""
    header, rows = _rows(src, REQUIRED)
    configs, per_campaign, campaign_line = read_configs(configs_src) if configs_src else ({}, {}, {})
    known = set(configs) | {n for cfgs in per_campaign.values() for n in cfgs}
    rid = run_id(NAME, src.sha256)
    campaigns: dict[str, Campaign] = {}
    first_line: dict[str, int] = {}
    points: list[Point] = []
    hashes: set[str] = set()
    named: set[str] = set()
    for line, row, raw in rows:
        named.add(row["campaign"])
        h, rh = line_hash(raw), record_hash(_record(row))
        if h in skip_lines or rh in skip_lines:
            continue
        if h in hashes or rh in hashes:
            raise InputError(src.path, line, None, "this row repeats an earlier row (the same values)")
        campaign = _name(src, line, "campaign", row["campaign"])
        config = _name(src, line, "config", row["config"])
        if configs_src is not None and config not in known:
            raise InputError(src.path, line, "config", f"config {config!r} is not in {configs_src.path}")
        order = _int(src, line, "order", row["order"], 0) if row.get("order") else None
        date = row.get("date") or None
        if date is not None and not valid_date(date):
            raise InputError(src.path, line, "date", f"expected YYYY-MM-DD, got {date!r}")
        c = Campaign(name=campaign, date=date, order=order)
        if campaign in campaigns and campaigns[campaign] != c:
            raise InputError(
                src.path, line, "order" if date == campaigns[campaign].date else "date",
                f"campaign {campaign!r} was given another date/order on line {first_line[campaign]}",
            )
        campaigns.setdefault(campaign, c)
        first_line.setdefault(campaign, line)
        metrics: dict[str, float] = {}
        if row[THROUGHPUT].strip().lower() != NOT_APPLICABLE:
            metrics[THROUGHPUT] = _number(src, line, THROUGHPUT, row[THROUGHPUT])
            if metrics[THROUGHPUT] < 0:
                raise InputError(src.path, line, THROUGHPUT, "must be >= 0")
        for col in header:
            if col in COUNTS and row[col] != "":
                n = _int(src, line, col, row[col], 0)
                if n > 2 ** 53:
                    raise InputError(src.path, line, col, f"too large a count: {row[col]}")
                metrics[col] = float(n)
            elif col not in KNOWN and row[col] != "":
                metrics[col] = _number(src, line, col, row[col])
        if "planned" not in metrics and "completed" in metrics and "failed" in metrics:
            metrics["planned"] = metrics["completed"] + metrics["failed"]
        elif metrics.get("completed", 0) + metrics.get("failed", 0) > metrics.get("planned", math.inf):
            raise InputError(src.path, line, "planned", "fewer than completed + failed")
        if metrics.get("completed") == 0:
            if metrics.get(THROUGHPUT, 0.0) != 0:
                raise InputError(src.path, line, THROUGHPUT, "must be n/a or 0 when completed is 0")
            metrics = only_counts(metrics)
        params: dict[str, Scalar] = {}
        if row.get("dataset"):
            params["dataset"] = row["dataset"]
        if row.get("ignore_eos"):
            flag = row["ignore_eos"].lower()
            if flag not in ("true", "false", "1", "0", "yes", "no"):
                raise InputError(src.path, line, "ignore_eos", f"expected true or false, got {row['ignore_eos']!r}")
            params["ignore_eos"] = flag in ("true", "1", "yes")
        load = _load(src, line, row)
        params.update(load.params)
        if load.rate is not None:
            for key in SLO:
                if row.get(key):
                    params[key] = _number(src, line, key, row[key])
            if row.get(MEASURED_ATTAINMENT):
                metrics["slo_attainment"] = _number(src, line, MEASURED_ATTAINMENT, row[MEASURED_ATTAINMENT])
        else:
            for key in (*SLO, MEASURED_ATTAINMENT):
                if row.get(key):
                    raise InputError(src.path, line, key, "an SLO judges open-loop rows: only with a request_rate")
        hashes.update((h, rh))
        points.append(
            Point(
                id=point_id(rid, len(points)),
                run_id=rid,
                campaign=campaign,
                config=config,
                workload=_name(src, line, "workload", row["workload"]),
                concurrency=load.concurrency,
                metrics=metrics,
                source=source,
                source_file=src.path,
                source_line=line,
                note=row.get("note") or None,
                workload_params=params,
            )
        )
    if not points:
        raise InputError(src.path, None, None, "every row was already ingested; nothing to add")
    used = {p.config for p in points}
    measured = {(p.campaign, p.config) for p in points}
    for campaign in per_campaign:
        if campaign not in named and configs_src is not None:
            raise InputError(
                configs_src.path, campaign_line[campaign], "campaign", f"campaign {campaign!r} is not in {src.path}"
            )
    run = make_run(
        src, NAME, VERSION, source, environment=environment or {},
        campaigns=tuple(campaigns[n] for n in sorted(campaigns, key=lambda n: first_line[n])),
        configs={k: v for k, v in configs.items() if k in used}, points=points, hashes=hashes,
        extra_inputs=(Input(configs_src.path, configs_src.sha256, "configs"),) if configs_src else (),
    )
    kept = {c: {k: v for k, v in cfgs.items() if (c, k) in measured} for c, cfgs in per_campaign.items()}
    return replace(run, campaign_configs={c: cfgs for c, cfgs in kept.items() if cfgs})
