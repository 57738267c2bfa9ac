"""outputs.dvc, the pointer git carries: read what it records, rewrite it with `dvc add`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from dvc.exceptions import DvcException

from farm.core.errors import FarmError
from farm.publish.repo import open_repo, paths
from farm.restore.remote import remote_of, scrub
from farm.table.config import FarmConfig


@dataclass(frozen=True)
class Pointer:
    """What a pointer records of its one output directory (read, never recomputed); -1 when it does not say."""

    md5: str  # the hash of DVC's listing of the directory ("<hex>.dir")
    nfiles: int
    size: int


def read_pointer(path: Path) -> Pointer:
    """The pointer file at `path`; anything but a pointer for one directory is an error naming the fix."""
    try:
        data = yaml.safe_load(path.read_text())
        out = data["outs"][0]
        return Pointer(md5=str(out["md5"]), nfiles=int(out.get("nfiles", -1)), size=int(out.get("size", -1)))
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise FarmError(f"{path}: not a DVC pointer for one directory ({exc})",
                        f"restore it from git (git checkout -- {path.name}) or delete it and `farm push` again",
                        ) from None


def record_pointer(cfg: FarmConfig) -> Pointer:
    """`dvc add` the output tree: rewrite its pointer (outputs.dvc) without publishing anything (`farm golden`).
    The caller holds the tree's lock and has checked the tree."""
    where = paths(cfg)
    with open_repo(cfg, remote_of(cfg), anonymous=False) as repo:
        try:
            repo.add(where.tree)
        except DvcException as exc:
            raise FarmError(f"dvc add {where.tree} failed: {scrub(str(exc))}",
                            "fix or remove .dvc/ (the farm recreates it), then run the command again") from None
    return read_pointer(cfg.root / where.pointer)

