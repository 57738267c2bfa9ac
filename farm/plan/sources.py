"""The kernel sources a build ships to its workers, as bytes (no shared disk needed), and what a compile's
lookups under kernels_src/ find in a tree of them.

A worker's kernels root holds exactly the shipped files (`collect`), so whether a lookup recorded by a
compile (farm/worker/lowering.py: "import D/N", "list D", "open P") finds something is a function of
the shipped file names alone: `lookup_state` answers it for the files a build shipped and, at plan and
check time, for what kernels_src/ would ship today.
"""

from __future__ import annotations

import importlib.machinery
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def shipped(rel: Path) -> bool:
    """Whether a file at `rel` (relative to kernels_src/) is shipped: caches and hidden files are not."""
    return "__pycache__" not in rel.parts and not any(p.startswith(".") for p in rel.parts)


def collect(kernels_dir: Path) -> dict[str, bytes]:
    """Every file under kernels_src/ except caches and hidden files, keyed by relative path."""
    out: dict[str, bytes] = {}
    for path in sorted(kernels_dir.rglob("*")):
        rel = path.relative_to(kernels_dir)
        if path.is_file() and shipped(rel):
            out[rel.as_posix()] = path.read_bytes()
    return out


def shipped_names(kernels_dir: Path) -> frozenset[str]:
    """The relative paths `collect` would ship, without reading them."""
    return frozenset(path.relative_to(kernels_dir).as_posix() for path in kernels_dir.rglob("*")
                     if shipped(path.relative_to(kernels_dir)) and path.is_file())


@dataclass(frozen=True)
class Tree:
    """The shipped files of a kernels root, and the directories that hold them (a worker has no others)."""

    files: frozenset[str]
    dirs: frozenset[str]

    @classmethod
    def of(cls, files: Iterable[str]) -> Tree:
        names = frozenset(files)
        dirs = {"."} | {"/".join(f.split("/")[:i]) for f in names for i in range(1, f.count("/") + 1)}
        return cls(names, frozenset(dirs))


# Every suffix the path-based finder tries (extension modules, sources, bytecode), as FileFinder does.
MODULE_SUFFIXES = tuple(importlib.machinery.all_suffixes())


def _join(directory: str, name: str) -> str:
    return name if directory == "." else f"{directory}/{name}"


def lookup_state(tree: Tree, lookup: str) -> list[str]:
    """What `lookup` finds in `tree`: the candidate paths that exist (directories end in '/'), sorted.
    An unknown kind of lookup finds what its path is ([] when the path is not a plain relative one)."""
    kind, _, path = lookup.partition(" ")
    if not path_ok(path) and path != ".":
        return []
    if kind == "import":  # FileFinder: a package directory, its __init__, or a module file with any suffix
        directory, _, name = path.rpartition("/")
        base = _join(directory or ".", name)
        found = [base + "/"] if base in tree.dirs else []
        candidates = [f"{base}/__init__{s}" for s in MODULE_SUFFIXES] + [base + s for s in MODULE_SUFFIXES]
        return sorted(found + [c for c in candidates if c in tree.files])
    if kind == "list":
        prefix = "" if path == "." else path + "/"
        children = {prefix + c[len(prefix):].split("/")[0] + ("/" if "/" in c[len(prefix):] else "")
                    for c in tree.files if c.startswith(prefix)}
        return sorted(children) if path in tree.dirs else []
    return [path] if path in tree.files else []


def path_ok(rel: object) -> bool:
    """A relative POSIX path of plain components under kernels_src/ (no '..', no absolute path)."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))
