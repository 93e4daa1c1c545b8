"""Settings: findings.toml, environment variables and command-line overrides.

Precedence, highest first: command-line option, environment variable
(``FINDINGS_STORE``), findings.toml, built-in default. Paths in findings.toml
are relative to the folder that holds it (the project root).
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from findings.derive.analysis import Rules
from findings.core.errors import SettingsError
from findings.derive.validity import Gates
from findings.derive.tuning import KINDS, Objective
from findings.document.views import Slo

FILE = "findings.toml"
DEFAULT_STORE = "benchmarks/results"
DEFAULT_DOCUMENT = "findings.md"
DEFAULT_TEMPLATES = "templates"
DEFAULT_TEMPLATE = "findings/base.md.j2"
#: Default noise floor; see docs/decisions.md for why 4%.
DEFAULT_FLOOR = 0.04
#: How many of the latest campaigns the document details (docs/settings.md).
DEFAULT_DETAIL_CAMPAIGNS = 20


@dataclass(frozen=True)
class Settings:
    root: Path
    store: Path
    document: Path
    templates: Path
    template: str
    title: str
    rules: Rules
    #: The store findings.toml names (or the default), before $FINDINGS_STORE
    #: and --store.
    home_store: Path
    #: True when that store is for simulated (emulator) results only; else it
    #: is a real store, where simulated results never go.
    simulated_store: bool = False
    #: Latency limits for goodput and the SLO line of the conclusion (optional).
    slo: Slo = Slo()
    #: The per-request SLO of open-loop points (slo_ttft_ms, slo_tpot_ms,
    #: slo_attainment): what `findings ingest` and `findings bench --url
    #: --request-rate` use where the command line gives none (D108).
    request_slo: tuple[float | None, float | None, float | None] = (None, None, None)
    #: Also write SVG plots next to the document (needs the [plots] extra).
    plots: bool = False
    #: Sections for the latest this many campaigns only (0: all); see report.build.
    detail_campaigns: int = DEFAULT_DETAIL_CAMPAIGNS
    #: The settings file read (it may not exist: the defaults then).
    file: Path | None = None

    def with_overrides(self, *, store: str | None = None, baseline: str | None = None,
                       noise_floor: float | None = None) -> "Settings":
        s = self
        if store is not None:
            s = replace(s, store=Path(store))
        if baseline is not None:
            s = replace(s, rules=replace(s.rules, baseline=baseline))
        if noise_floor is not None:
            s = replace(s, rules=replace(s.rules, noise_floor=check_floor(noise_floor, "--noise-floor")))
        return s


def check_floor(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingsError(f"{where}: the noise floor must be a number")
    if not 0 <= value < 1:
        raise SettingsError(f"{where}: the noise floor is a fraction in [0, 1), e.g. 0.04 for 4%")
    return float(value)


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` that holds findings.toml."""
    for folder in (start, *start.parents):
        if (folder / FILE).is_file():
            return folder
    return start


def load(settings_file: str | None = None, cwd: Path | None = None) -> Settings:
    cwd = cwd or Path.cwd()
    if settings_file is not None:
        path = Path(settings_file)
        if not path.is_file():
            raise SettingsError(f"{settings_file}: no such settings file")
        root = path.resolve().parent
    else:
        root = find_root(cwd.resolve())
        path = root / FILE
    doc: dict[str, Any] = {}
    if path.is_file():
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{path}: not valid TOML: {exc}") from exc
    table = doc.get("findings", {})
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: [findings] must be a table")
    numbers = {"noise_floor", "confidence", "resamples", "max_failed_fraction", "max_client_lag_ms",
               "max_client_cpu", "max_send_lateness_ms", "min_achieved_share", "slo_ttft_p99_ms", "slo_tpot_p99_ms",
               "slo_ttft_ms", "slo_tpot_ms", "slo_attainment", "drift_window",
               "drift_cap"}
    known = {"store", "document", "templates", "template", "title", "baseline", "simulated", "plots",
             "interval", "detail_campaigns"} | numbers
    for key in table:
        if key not in known:
            raise SettingsError(f"{path}: unknown setting {key!r} (known: {', '.join(sorted(known))})")
    if table.get("interval", "auto") not in ("auto", "repeats", "band"):
        raise SettingsError(f"{path}: setting 'interval' must be \"auto\", \"repeats\" or \"band\"")
    detail = table.get("detail_campaigns", DEFAULT_DETAIL_CAMPAIGNS)
    if isinstance(detail, bool) or not isinstance(detail, int) or detail < 0:
        raise SettingsError(f"{path}: setting 'detail_campaigns' must be an integer >= 0 (0: every campaign)")
    for flag in ("simulated", "plots"):
        if not isinstance(table.get(flag, False), bool):
            raise SettingsError(f"{path}: setting {flag!r} must be true or false")
    for key in numbers:
        v = table.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v < 0):
            raise SettingsError(f"{path}: setting {key!r} must be a number >= 0")
    for key in ("slo_ttft_ms", "slo_tpot_ms", "slo_attainment"):
        if table.get(key) == 0:
            raise SettingsError(f"{path}: setting {key!r} must be a number > 0")
    if "slo_attainment" in table and "slo_ttft_ms" not in table and "slo_tpot_ms" not in table:
        raise SettingsError(f"{path}: setting 'slo_attainment' needs an SLO: slo_ttft_ms and/or slo_tpot_ms")
    if float(table.get("slo_attainment", 0.5)) > 1:
        raise SettingsError(f"{path}: setting 'slo_attainment' is a share in (0, 1], e.g. 0.9")
    if not 0.5 <= float(table.get("confidence", 0.95)) < 1:
        raise SettingsError(f"{path}: setting 'confidence' is a level in [0.5, 1), e.g. 0.95")
    if int(table.get("resamples", 2000)) < 100:
        raise SettingsError(f"{path}: setting 'resamples' must be at least 100")
    for key in known - numbers - {"simulated", "plots", "detail_campaigns"}:
        if key in table and not isinstance(table[key], str):
            raise SettingsError(f"{path}: setting {key!r} must be a string")

    def rel(value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else Path(os.path.normpath(root / p))

    store = os.environ.get("FINDINGS_STORE") or None
    home = rel(table.get("store", DEFAULT_STORE))
    return Settings(
        file=path.resolve(),
        home_store=home,
        simulated_store=table.get("simulated", False),
        plots=table.get("plots", False),
        detail_campaigns=detail,
        root=root,
        store=Path(store) if store else home,
        document=rel(table.get("document", DEFAULT_DOCUMENT)),
        templates=rel(table.get("templates", DEFAULT_TEMPLATES)),
        template=table.get("template", DEFAULT_TEMPLATE),
        title=table.get("title", "Findings"),
        rules=Rules(
            baseline=table.get("baseline", "baseline"),
            noise_floor=check_floor(table.get("noise_floor", DEFAULT_FLOOR), f"{path}: noise_floor"),
            confidence=float(table.get("confidence", 0.95)),
            resamples=int(table.get("resamples", 2000)),
            drift_window=_whole(table.get("drift_window", Rules.drift_window), f"{path}: drift_window"),
            drift_cap=float(table.get("drift_cap", Rules.drift_cap)),
            objective=objective(path, doc.get("tune", {})),
            interval=str(table.get("interval", "auto")),
            gates=Gates(max_failed_fraction=float(table.get("max_failed_fraction", Gates.max_failed_fraction)),
                        max_client_lag_ms=float(table.get("max_client_lag_ms", Gates.max_client_lag_ms)),
                        max_client_cpu=float(table.get("max_client_cpu", Gates.max_client_cpu)),
                        max_send_lateness_ms=float(table.get("max_send_lateness_ms",
                                                             Gates.max_send_lateness_ms)),
                        min_achieved_share=float(table.get("min_achieved_share", Gates.min_achieved_share))),
        ),
        slo=Slo(ttft_p99_ms=_opt_float(table.get("slo_ttft_p99_ms")),
                tpot_p99_ms=_opt_float(table.get("slo_tpot_p99_ms"))),
        request_slo=(_opt_float(table.get("slo_ttft_ms")), _opt_float(table.get("slo_tpot_ms")),
                     _opt_float(table.get("slo_attainment"))),
    )


def objective(path: Path, t: Any) -> Objective:
    """findings.toml's [tune]: what `findings tune` scores trials by (docs/tune.md)."""
    if not isinstance(t, dict):
        raise SettingsError(f"{path}: [tune] must be a table")
    known = {"objective", "weights", "concurrency", "floor_tok_s", "floor_concurrency", "rate"}
    for key in t:
        if key not in known:
            raise SettingsError(f"{path}: unknown [tune] setting {key!r} (known: {', '.join(sorted(known))})")
    kind = t.get("objective", "throughput")
    if kind not in KINDS:
        raise SettingsError(f"{path}: [tune] objective must be one of {', '.join(KINDS)}")

    def whole(key: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SettingsError(f"{path}: [tune] {key} must be an integer >= 1")
        return v

    def positive(key: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SettingsError(f"{path}: [tune] {key} must be a number > 0")
        return float(v)

    weights: list[tuple[int, float]] = []
    raw = t.get("weights", {"1": 1.0})
    if not isinstance(raw, dict) or not raw:
        raise SettingsError(f'{path}: [tune] weights is a table of C = weight, e.g. {{ "1" = 0.5, "64" = 0.5 }}')
    for c, w in raw.items():
        if not str(c).isdigit() or int(c) < 1:
            raise SettingsError(f"{path}: [tune] weights: {c!r} is not a concurrency (an integer >= 1)")
        weights.append((int(c), positive(f"weights.{c}", w)))
    if kind == "latency" and ("floor_tok_s" in t) != ("floor_concurrency" in t):
        raise SettingsError(f"{path}: [tune] floor_tok_s and floor_concurrency go together")
    if kind == "goodput" and "rate" not in t:
        raise SettingsError(f"{path}: [tune] objective \"goodput\" needs rate (req/s) and the SLO "
                            f"(slo_ttft_ms and/or slo_tpot_ms in [findings])")
    return Objective(kind=kind, weights=tuple(sorted(weights)),
                     concurrency=whole("concurrency", t.get("concurrency", 1)),
                     floor_tok_s=positive("floor_tok_s", t["floor_tok_s"]) if "floor_tok_s" in t else None,
                     floor_concurrency=whole("floor_concurrency", t["floor_concurrency"])
                     if "floor_concurrency" in t else None,
                     rate=positive("rate", t["rate"]) if "rate" in t else None)


def _whole(v: Any, where: str) -> int:
    if isinstance(v, float) and not v.is_integer():
        raise SettingsError(f"{where}: a whole number of campaigns (0: all)")
    return int(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
