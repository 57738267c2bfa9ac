"""Golden digests: `outputs.sha256` in git says which bytes the instance table produces.

One line per file under `outputs/` (objects, manifests, SOURCE.md), in `sha256sum` format, sorted, with
paths relative to `outputs/`: `cd outputs && sha256sum -c ../outputs.sha256` verifies a tree with nothing
but coreutils, and a change to any object's bytes shows in a git diff by name. `farm check` compares the
selected objects against it, and a directory's manifest.json and SOURCE.md when the directory holds every row
of its table; `farm golden` rewrites it (and `outputs.dvc`) from a complete, clean tree.
The file lives beside the tree it describes: `<outputs_dir>.sha256`, like DVC's `<outputs_dir>.dvc`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from farm.core.canonical import sha256_file
from farm.core.errors import FarmError
from farm.store.outtree import MANIFEST, PROVENANCE, object_name_problem
from farm.table.config import SAFE_NAME, FarmConfig
from farm.table.rows import Row

SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # a SHA256 as sha256sum prints it
LINE = re.compile(rf"^(?P<sha>{SHA256_HEX.pattern})  (?P<path>[^\n]+)$")
FIX = ("run `farm golden` after a clean, complete `farm build` (then commit outputs.sha256, outputs.code.sha256 "
       "and outputs.dvc)")


def golden_path(cfg: FarmConfig) -> Path:
    out = cfg.outputs_dir.absolute()
    return out.parent / f"{out.name}.sha256"


def _path_ok(rel: str) -> bool:
    """<op>/<target>/<file>: safe names only, an object name or one of the two per-directory files."""
    parts = rel.split("/")
    if len(parts) != 3 or not all(SAFE_NAME.match(p) for p in parts[:2]):
        return False
    return parts[2] in (MANIFEST, PROVENANCE) or object_name_problem(parts[2]) is None


@dataclass(frozen=True)
class Golden:
    """The committed digests, by path relative to the tree."""

    path: Path
    sha256: dict[str, str]


def load(cfg: FarmConfig) -> Golden | None:
    """The committed digests, None when the project has none yet; a malformed line is an error."""
    path = golden_path(cfg)
    if not path.is_file():
        return None
    digests: dict[str, str] = {}
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise FarmError(f"{path}: not UTF-8 text", FIX) from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        match = LINE.match(line)
        if not match or not _path_ok(match["path"]) or match["path"] in digests:
            raise FarmError(f"{path}:{lineno}: not a `sha256sum` line for <op>/<target>/<file>: {line[:120]!r}", FIX)
        digests[match["path"]] = match["sha"]
    return Golden(path, digests)


def render(digests: dict[str, str]) -> str:
    return "".join(f"{sha}  {rel}\n" for rel, sha in sorted(digests.items()))


def op_of(rel: str) -> str:
    """The op a golden line's path belongs to (its first part)."""
    return rel.split("/", 1)[0]


def tree_digests(out: Path, ops: Collection[str] | None = None) -> dict[str, str]:
    """SHA256 of every file of the tree (only under <op>/ of `ops`, when given), by path relative to the
    tree; anything but <op>/<target>/<file> is refused."""
    roots = [out] if ops is None else [out / op for op in sorted(ops)]
    digests: dict[str, str] = {}
    for root in roots:
        if root != out and (root.is_symlink() or (root.exists() and not root.is_dir())):
            raise FarmError(f"{root}: not a file the farm writes", f"remove it, then {FIX}")
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(out).as_posix()
            if path.is_symlink() or (path.is_file() and not _path_ok(rel)):
                raise FarmError(f"{path}: not a file the farm writes", f"remove it, then {FIX}")
            if path.is_file():
                digests[rel] = sha256_file(path)
    return digests


def complete(cfg: FarmConfig, op: str, target: str, all_rows: list[Row]) -> bool:
    """Whether <op>/<target>/ holds an object for every row of the table that builds into it: only then are
    its manifest.json and SOURCE.md the ones the golden digests record (a partial directory's list fewer rows)."""
    return all((cfg.outputs_dir / r.relpath()).is_file() for r in all_rows if (r.op, r.target) == (op, target))


def drift(cfg: FarmConfig, rows: list[Row], all_rows: list[Row]) -> list[tuple[Path, str]]:
    """(file, what differs) for each selected object that exists and whose bytes differ from the committed
    digest or that has none, and likewise for the manifest.json and SOURCE.md of each complete directory
    (`complete`); nothing when the project has no golden file. `all_rows`: every row of the selected ops'
    tables."""
    golden = load(cfg)
    if golden is None:
        return []
    found: list[tuple[Path, str]] = []
    dirs = sorted({(r.op, r.target) for r in rows})
    wanted = [r.relpath() for r in rows] + [f"{op}/{t}/{name}" for op, t in dirs if complete(cfg, op, t, all_rows)
                                            for name in (MANIFEST, PROVENANCE)]
    for rel in sorted(wanted):
        path = cfg.outputs_dir / rel
        if not path.is_file():
            continue  # the drift guard already names what is missing, and a row never built is not drift
        if rel not in golden.sha256:
            found.append((path, f"no golden digest in {golden.path.name} (a new row or directory? {FIX})"))
        elif sha256_file(path) != golden.sha256[rel]:
            found.append((path, f"bytes differ from the committed golden digest in {golden.path.name}"))
    return found
