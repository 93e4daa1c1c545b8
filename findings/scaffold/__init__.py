"""`findings init`: a starting point for a team's own repository.

Writes, in a folder (usually the root of a git repository): findings.toml,
an empty results store, a short template that extends findings' packaged
base (with an empty notes section of the team's own), a CI workflow
(install, `findings render --check`, `findings diff` posted on the pull
request) and .gitignore lines for the files findings derives. It refuses to
overwrite anything: every path is checked before the first is written.
The files' text ships in findings/scaffold/files/.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

from findings import store as store_lib
from findings.core import diskio
from findings.core.errors import FindingsError
from findings.core.version import __version__
from findings.document.settings import FILE
from findings.store import index as storeindex

FILES = Path(__file__).resolve().parent / "files"
WORKFLOW = Path(".github") / "workflows" / "findings.yml"
TEMPLATE = "findings.md.j2"
TEMPLATES = "templates"
_SIMULATED = ("# This store holds SIMULATED results only (findings emulate): the runner refuses\n"
              "# real ones here, and the document says so.\nsimulated = true")
_REAL = ("# A store of real measurements: simulated results (findings emulate) are refused\n"
         "# here. A store for trying findings out on the emulator sets simulated = true.")
#: Written under this line in .gitignore; a second init sees it and adds nothing.
GITIGNORE_MARK = "# findings: derived files (findings init)"


@dataclass(frozen=True)
class Options:
    title: str = "Findings"
    baseline: str = "baseline"
    store: str = "benchmarks/results"
    document: str = "findings.md"
    #: pip's requirement for the CI workflow's install step.
    install: str = f"findings=={__version__}"
    #: A store for the emulator's simulated results only (trying findings out
    #: before real servers are free); a real store refuses them.
    simulated: bool = False


@dataclass(frozen=True)
class Written:
    root: Path
    created: tuple[Path, ...]
    gitignore: Path
    gitignore_added: tuple[str, ...]

    def lines(self) -> list[str]:
        out = [f"created {p.relative_to(self.root)}" for p in self.created]
        if self.gitignore_added:
            out.append(f"added {len(self.gitignore_added)} lines to {self.gitignore.relative_to(self.root)}")
        out.append("next: findings bench --url URL --config baseline (or findings ingest ...), "
                   "then findings render, and commit")
        return out


def _relative(value: str, what: str) -> str:
    """A path inside the repository, written with forward slashes."""
    p = Path(value)
    if not value.strip() or p.is_absolute() or ".." in p.parts:
        raise FindingsError(f"{what} {value!r}: give a path inside the repository (relative, no '..')")
    return p.as_posix()


def _toml(value: str) -> str:
    # A JSON string is a TOML basic string (the same escapes), non-ASCII kept.
    return json.dumps(value, ensure_ascii=False)


def _fill(name: str, **values: str) -> str:
    text = (FILES / name).read_text(encoding="utf-8")
    return string.Template(text).substitute(values)


def gitignore_lines(store: str) -> tuple[str, ...]:
    """What findings derives and never needs committed: the store's write lock
    and its write index (rebuilt from the run files)."""
    return (f"/{store}/.lock", f"/{store}/{storeindex.NAME}*")


def init(folder: Path, options: Options = Options()) -> Written:
    """Write the starting point into ``folder`` (created if missing); refuse,
    naming the path and writing nothing, where any file it would write exists."""
    store = _relative(options.store, "--store")
    document = _relative(options.document, "--document")
    if not options.document.endswith(".md"):
        raise FindingsError(f"--document {options.document!r}: the document is a markdown file (NAME.md)")
    if not options.title.strip():
        raise FindingsError("--title: the document needs a title")
    if not options.baseline.strip():
        raise FindingsError("--baseline: name the baseline config")
    if folder.exists() and not folder.is_dir():
        raise FindingsError(f"{folder}: not a folder")
    template_path = f"{TEMPLATES}/{TEMPLATE}"
    files = {
        Path(FILE): _fill("findings.toml.in", title=_toml(options.title), baseline=_toml(options.baseline),
                          store=_toml(store), document=_toml(document), templates=_toml(TEMPLATES),
                          template=_toml(TEMPLATE), simulated=_SIMULATED if options.simulated else _REAL),
        Path(template_path): _fill("template.md.j2", template_path=template_path),
        WORKFLOW: _fill("workflow.yml", install=options.install),
    }
    for rel in [*files, Path(document)]:
        if (folder / rel).exists() or (folder / rel).is_symlink():
            raise FindingsError(f"{folder / rel}: already exists; findings init overwrites nothing "
                                f"(move it away, or run init in another folder)")
    store_path = folder / store
    if store_path.exists() and (not store_path.is_dir() or any(store_path.iterdir())):
        raise FindingsError(f"{store_path}: already exists and is not empty; findings init overwrites nothing "
                            f"(name another with --store)")
    created: list[Path] = []
    try:
        for rel, text in files.items():
            path = folder / rel
            diskio.make_dirs(path.parent)
            diskio.write_new(path, text.encode("utf-8"))
            created.append(path)
        store_lib.create(store_path)
        created.append(store_path)
    except (OSError, FindingsError):
        for path in created:  # all or nothing: what this call wrote goes again
            if path.is_file():
                diskio.remove(path)
        raise
    gitignore = folder / ".gitignore"
    old = gitignore.read_text(encoding="utf-8") if gitignore.exists() else ""
    have = set(old.splitlines())
    wanted = [line for line in gitignore_lines(store) if line not in have]
    if wanted:
        block = ([GITIGNORE_MARK] if GITIGNORE_MARK not in have else []) + wanted
        sep = "" if not old or old.endswith("\n") else "\n"
        diskio.write_replace(gitignore, old + sep + ("\n" if old else "") + "\n".join(block) + "\n")
    return Written(folder, tuple(created), gitignore, tuple(wanted))
