"""Rendering: Jinja templates + tabulate tables -> the findings document.

The only module that imports jinja2 and tabulate. Templates run in a
SandboxedEnvironment with StrictUndefined: templates arrive in pull requests,
and a typo must fail loudly rather than render an empty string. Every data
value that reaches markdown goes through the ``text``/``code``/``table``
filters, which escape it.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from pathlib import Path
from typing import Any, Callable

import jinja2
import jinja2.bccache
import jinja2.sandbox
from jinja2.exceptions import SecurityError

from findings.core import fmt
from findings.core.errors import FindingsError
from findings.document.report import Table

NOTES = "notes"
#: The base templates that ship inside the package (findings/templates/).
PACKAGED = Path(__file__).resolve().parent.parent / "templates"
#: The prefix that always names a packaged template, even where the
#: repository's own folder holds a file of the same name.
PREFIX = "findings"


def markdown_table(table: Table | None) -> str:
    if table is None or not table.rows:
        return "_(none)_"
    headers = [fmt.text(h) for h in table.headers]
    rows = [[c if table.markdown else fmt.text(c) for c in row] for row in table.rows]
    fast = github_table(headers, rows, table.align)
    if fast is not None:
        return fast
    from tabulate import tabulate
    return str(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True,
                        colalign=list(table.align)))


_PAD = {"left": "<", "right": ">", "center": "^"}
_TABULATE_SPECIAL = re.compile(r"[\x00-\x1f\x7f]")


def github_table(headers: list[str], rows: list[list[str]], align: tuple[str, ...]) -> str | None:
    """What ``tabulate(rows, headers, tablefmt="github", disable_numparse=True,
    colalign=align)`` returns (without the wcwidth package), several times
    faster: a column is as wide as its longest cell, stripped of surrounding
    whitespace, or its header plus 2. None where tabulate does more (control
    characters: ANSI colours, multi-line cells; alignments other than left,
    right and center; ragged rows), for the caller to ask tabulate.
    tests/test_render.py holds the two to the same output."""
    n = len(headers)
    if (len(align) != n or any(a not in _PAD for a in align) or any(len(r) != n for r in rows)
            or _TABULATE_SPECIAL.search("".join(headers)) or _TABULATE_SPECIAL.search("".join(map("".join, rows)))):
        return None
    cells = [[c.strip() for c in row] for row in rows]
    widths = [max(len(headers[j]) + 2, max(len(row[j]) for row in cells)) for j in range(n)]
    specs = [f"{_PAD[a]}{w}" for a, w in zip(align, widths)]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(format(v, spec) for v, spec in zip(values, specs)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def _notes(folder: Path) -> Callable[[], list[dict[str, str]]]:
    def notes() -> list[dict[str, str]]:
        d = folder / NOTES
        if not d.is_dir():
            return []
        out = []
        for p in sorted(d.glob("*.md")):
            out.append({"name": p.stem, "text": p.read_text(encoding="utf-8").rstrip("\n")})
        return out
    return notes


#: A line that starts a block of its own in markdown, never a paragraph's continuation.
_BLOCK_START = re.compile(r"(?:[-*+] |\d+[.)] |[|#<>]|```|~~~|$)")


def paragraphs(text: str) -> str:
    """One line per paragraph and per list item: the soft line breaks of
    ``text`` (a template's hard-wrapped prose) joined with a space, which
    markdown renders the same (D105). A list item's indented continuation
    joins its item; a quote's continuation its quote; tables, headings,
    HTML and fences are left as they are."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        s = line.strip()
        prev = out[-1].lstrip() if out else ""
        if s.startswith(("```", "~~~")):
            fenced = not fenced
        elif fenced:
            pass
        elif s and prev and not prev.startswith(("|", "<", "```", "~~~", "#")):
            if prev.startswith(">") and s.startswith(">"):
                out[-1] = out[-1].rstrip() + " " + s[1:].strip()
                continue
            if not prev.startswith(">") and not _BLOCK_START.match(s):
                out[-1] = out[-1].rstrip() + " " + s
                continue
        out.append(line)
    return "\n".join(out)


def loader(templates: Path) -> jinja2.BaseLoader:
    """The search path, first match wins: the repository's own templates
    folder (where it exists), then the packaged base templates; and
    ``findings/NAME`` always the packaged NAME, so that a repository's
    template may extend the base and override its blocks."""
    packaged = jinja2.FileSystemLoader(str(PACKAGED))
    chain: list[jinja2.BaseLoader] = []
    if templates.is_dir():
        chain.append(jinja2.FileSystemLoader(str(templates)))
    chain += [jinja2.PrefixLoader({PREFIX: packaged}), packaged]
    return jinja2.ChoiceLoader(chain)


class _Compiled(jinja2.FileSystemBytecodeCache):
    """jinja2's cache of compiled templates, as a cache must be: an entry
    that cannot be read is compiled again, and one that cannot be written
    (its folder removed by another findings, a full disk) is not kept."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 - a damaged entry: compile
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def environment(templates: Path) -> jinja2.Environment:
    env = jinja2.sandbox.SandboxedEnvironment(
        loader=loader(templates),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["text"] = fmt.text
    env.filters["code"] = fmt.code
    env.filters["literal"] = fmt.literal
    env.filters["table"] = markdown_table
    env.filters["para"] = paragraphs
    env.globals["notes"] = _notes(templates)
    return env


def render(templates: Path, template: str, doc: dict[str, Any],
           functions: dict[str, Callable[..., Any]] | None = None, compiled: Path | None = None) -> str:
    """Render ``template`` with ``doc``; ``functions`` become template globals
    (findings/document/pivot.py's tables of raw measurements, for example).
    ``compiled``: a folder where jinja2 keeps each template's compiled code,
    keyed by its name and the checksum of its source (D140); None: each
    template is compiled afresh. The output is the same either way."""
    try:
        env = environment(templates)
        if compiled is not None:
            env.bytecode_cache = _Compiled(str(compiled))
        env.globals.update(functions or {})
        out = env.get_template(template).render(doc=doc)
    except jinja2.TemplateNotFound as exc:
        where = f"{templates} or the packaged templates" if templates.is_dir() else \
            f"the packaged templates ({templates} does not exist)"
        raise FindingsError(f"template {exc.name!r} not found in {where}") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise FindingsError(f"{exc.filename or template}:{exc.lineno}: template syntax error: {exc.message}") from exc
    except jinja2.UndefinedError as exc:
        raise FindingsError(f"{templates}/{template}: undefined value in template: {exc.message}") from exc
    except SecurityError as exc:
        raise FindingsError(f"{templates}/{template}: refused by the template sandbox: {exc}") from exc
    # One trailing newline, no trailing spaces: stable bytes for --check.
    # and at most one blank line in a row outside fenced code.
    lines: list[str] = []
    fenced = False
    for line in out.splitlines():
        line = line.rstrip()
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and not line and (not lines or not lines[-1]):
            continue
        lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def short_diff(old: str, new: str, path: str, limit: int = 40) -> str:
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(),
                                     f"{path} (on disk)", f"{path} (fresh render)", lineterm="", n=1))
    if len(diff) > limit:
        diff = diff[:limit] + [f"... ({len(diff) - limit} more diff lines)"]
    return "\n".join(diff)
