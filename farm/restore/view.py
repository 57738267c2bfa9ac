"""A read-only view of the published tree through DVC's public filesystem (`dvc.api.DVCFileSystem`): the
pointer `<outputs_dir>.dvc` is the index, each file's bytes come from the DVC cache or, when absent there,
from the remote. Every blob read is checked against the MD5 the pointer's listing records for it."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.core.errors import FarmError
from farm.restore.remote import Remote, remote_errors, remote_of, scrub
from farm.table.config import FarmConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pointer:
    """The tree being built, relative to the project root, and the pointer that indexes its published copy."""

    tree: str  # e.g. "outputs"
    path: Path  # e.g. <root>/outputs.dvc


def pointer_of(cfg: FarmConfig) -> Pointer | None:
    """The pointer of `outputs_dir` (as farm push writes it), None when the tree is outside the project
    (nothing there was ever published) or was never published."""
    root, out = cfg.root.resolve(), cfg.outputs_dir.resolve()
    if out == root or not out.is_relative_to(root):
        return None
    rel = out.relative_to(root).as_posix()
    path = root / f"{rel}.dvc"
    return Pointer(rel, path) if path.is_file() else None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """DVC's chatter goes to stderr, at warning level: stdout is the farm's."""
    for name in ("dvc", "dvc_data", "dvc_objects"):
        logging.getLogger(name).setLevel(logging.WARNING)
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _dvc_config(remote: Remote) -> dict[str, Any]:
    """The overlay the view opens the repo with: the chosen remote as default; no git (only the working
    tree's pointer is read, never a revision); anonymous reads where the remote allows them."""
    conf: dict[str, Any] = dict(remote.dvc_config())
    if remote.anonymous:
        conf["allow_anonymous_login"] = True
    return {"core": {"no_scm": True, "remote": remote.name}, "remote": {remote.name: conf}}


class CacheView:
    """The published tree as DVC sees it; `listing` and `read` raise only `Unreachable`."""

    def __init__(self, cfg: FarmConfig, pointer: Pointer) -> None:
        self.pointer = pointer
        self.remote = remote_of(cfg)
        # Imported here: DVC takes about a second to import, and only a build with rows to fetch needs it.
        from dvc.api import DVCFileSystem
        from dvc_data.index import DataIndexDirError

        with _quiet(), _reached(f"opening {pointer.path.name} with DVC"):
            self.fs = DVCFileSystem(str(cfg.root.resolve()), config=_dvc_config(self.remote))
        # The pointer's directory listing first: without it (nothing published to this remote yet, e.g. a
        # fresh clone whose default remote is an empty directory) no row can come back, which one line says.
        with _quiet(), _reached(f"reading the listing of {pointer.tree}/ that {pointer.path.name} points to "
                                f"(from the DVC cache or {self.remote.describe()})"):
            try:
                self.fs.ls(pointer.tree, detail=False)
            except DataIndexDirError:
                raise NothingPublished(f"neither the DVC cache nor {self.remote.describe()} holds the listing of "
                                       f"{pointer.tree}/ that {pointer.path.name} points to (nothing published "
                                       "there yet)", "the rows are compiled instead") from None

    def listing(self, op: str, target: str) -> dict[str, str]:
        """{file name: MD5} of one published <op>/<target>/ directory ({} when the pointer has none).
        The names are data: callers look up names they made themselves, never write one read here."""
        where = f"{self.pointer.tree}/{op}/{target}"
        with _quiet(), _reached(f"listing {where}/"):
            try:
                found = self.fs.find(where, detail=True)
            except FileNotFoundError:
                return {}
        out = {}
        for path, info in found.items():
            md5 = info.get("md5") or (info.get("dvc_info") or {}).get("md5")
            name = str(path).rsplit("/", 1)[-1]
            if str(path) == f"{where}/{name}" and isinstance(md5, str):
                out[name] = md5
        return out

    def read(self, op: str, target: str, name: str, md5: str) -> bytes | str:
        """The blob of <op>/<target>/<name>, or why it is refused (it does not hash to the listing's MD5)."""
        where = f"{self.pointer.tree}/{op}/{target}/{name}"
        with _quiet(), _reached(f"reading {where}"):
            try:
                data = self.fs.read_bytes(where)
            except FileNotFoundError:
                return f"the DVC cache and {self.remote.describe()} have no copy of it"
        got = hashlib.md5(data, usedforsecurity=False).hexdigest()
        return data if got == md5 else f"its blob has MD5 {got}, {self.pointer.path.name} records {md5}"


class Unreachable(FarmError):
    """The DVC cache or remote could not be read; the build compiles instead."""


class NothingPublished(Unreachable):
    """The remote is readable but holds nothing of this pointer (a fresh clone's empty default remote)."""


@contextlib.contextmanager
def _reached(what: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        raise
    except remote_errors() as exc:
        detail = scrub(" ".join(str(exc).split())) or type(exc).__name__
        raise Unreachable(f"{what} failed: {detail}", "the rows are compiled instead") from None
