"""Fixed-precision number formatting, shared by prose, tables and JSON."""

from __future__ import annotations

import re


def tput(x: float) -> str:
    return f"{x:.1f}"


def pct(delta: float) -> str:
    """A signed relative change: +10.1%, -6.4%, +0.0%."""
    value = round(delta * 100, 1)
    if value == 0:
        value = 0.0
    return f"{value:+.1f}%"


def band(b: float) -> str:
    return f"±{b * 100:.1f}%"


def pct_band(delta: float, b: float) -> tuple[str, str]:
    """``pct(delta)`` and ``band(b)``, both with as many decimals as it takes
    (up to three) for the two never to read as the same figure unless they
    are: +4.015% beside a 4% band is "+4.02%" and "±4.00%", never "+4.0%
    beyond ±4.0%"."""
    for digits in (1, 2, 3):
        d = round(delta * 100, digits) or 0.0
        shown, edge = f"{d:+.{digits}f}%", f"{b * 100:.{digits}f}%"
        if shown.lstrip("+-") != edge or abs(abs(delta) - b) < 1e-12:
            return shown, f"±{edge}"
    return shown, f"±{edge}"


def ratio(r: float) -> str:
    return f"{r:.3f}"


def conc_list(concs: list[int]) -> str:
    """1, 2 and 5 -> "C=1, 2 and 5"."""
    if not concs:
        return ""
    items = [str(c) for c in concs]
    if len(items) == 1:
        return f"C={items[0]}"
    return "C=" + ", ".join(items[:-1]) + " and " + items[-1]


_MD_SPECIAL = str.maketrans({
    "\\": "\\\\", "|": "\\|", "*": "\\*", "`": "\\`", "[": "\\[", "]": "\\]",
    "<": "&lt;", ">": "&gt;", "&": "&amp;", "#": "\\#", "\n": " ", "\r": " ", "\t": " ",
})


_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


_NEEDS_ESCAPE = re.compile(r"[\\|*`\[\]<>&#\n\r\t_]")


def text(value: object) -> str:
    """Data as inert markdown text: no tables broken, no HTML, no links.

    Underscores inside words cannot start emphasis in GFM, so only those at
    a word's edge are escaped; that keeps ``tp_size`` readable in the source.
    """
    s = str(value)
    if not _NEEDS_ESCAPE.search(s):  # most table cells: nothing to escape
        return s
    return _EDGE_UNDERSCORE.sub(r"\\_", s.translate(_MD_SPECIAL))


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9 ._:/+=,@%~()-]+$")


def literal(value: object) -> str:
    """Any one-line text as an inline code span, verbatim (JSON, a flag):
    the fence is one backtick longer than the longest run of backticks in it."""
    s = " ".join(str(value).split())
    runs = [len(r) for r in re.findall(r"`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}" if s else ""


def code(value: object) -> str:
    """A name as an inline code span; names with markup characters become escaped text."""
    s = " ".join(str(value).split())
    if not _PLAIN_NAME.match(s):
        return text(s)
    return f"`{s}`"
