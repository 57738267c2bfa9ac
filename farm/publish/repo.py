"""The project's DVC repository: where outputs/ and its pointer sit in it, opening it with the chosen remote,
and DVC's per-file status of outputs/ against the pointer. Everything here goes through DVC's own API."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dvc.exceptions import DvcException
from dvc.repo import Repo

from farm.core.errors import FarmError
from farm.restore.remote import Remote, scrub
from farm.table.config import FarmConfig

log = logging.getLogger(__name__)

# A DVC config overlay, in DVC's own nesting (section -> option -> value).
DvcConfig = dict[str, Any]


@dataclass(frozen=True)
class Paths:
    """outputs_dir and its pointer, relative to the project root (DVC tracks only what is inside its repo)."""

    tree: str  # e.g. "outputs"
    pointer: str  # e.g. "outputs.dvc"


def paths(cfg: FarmConfig) -> Paths:
    root = cfg.root.resolve()
    out = cfg.outputs_dir.resolve()
    if out == root or not out.is_relative_to(root):
        raise FarmError(f"outputs_dir {cfg.outputs_dir} is not inside the project root {root}: "
                        "only a tree inside the project can be published with DVC",
                        "publish from the project's own outputs/ (drop the outputs_dir= override)")
    rel = out.relative_to(root).as_posix()
    return Paths(rel, rel + ".dvc")


def _git_top(root: Path) -> Path | None:
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                          capture_output=True, text=True, check=False)
    return Path(proc.stdout.strip()).resolve() if proc.returncode == 0 and proc.stdout.strip() else None


@contextlib.contextmanager
def _dvc_output() -> Iterator[None]:
    """DVC's own chatter goes to stderr: stdout is the farm's report (its last line is the summary)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _init(root: Path, in_git: bool, subdir: bool) -> None:
    """A git checkout gets a normal DVC repo (or a subdir one); anything else a git-less one."""
    created = Repo.init(str(root), no_scm=not in_git, subdir=subdir)
    with created.config.edit("repo") as conf:
        conf.setdefault("core", {})["analytics"] = False
    created.close()
    log.info("farm: created a DVC repository in %s (commit .dvc/config, .dvc/.gitignore, .dvcignore)", root)


@contextlib.contextmanager
def open_repo(cfg: FarmConfig, remote: Remote, *, anonymous: bool) -> Iterator[Repo]:
    """The project's DVC repo (created on first use), with `remote` as its default remote. Inside, stdout
    is DVC's (sent to stderr): the farm's report lines go to the stdout the caller saw."""
    # No telemetry: the farm talks to its remote and to nothing else (DVC reads this when it would send).
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    # DVC's info lines would go to the stdout it saw at import; the farm prints its own report there instead.
    for name in ("dvc", "dvc_data", "dvc_objects"):
        logging.getLogger(name).setLevel(logging.WARNING)
    root = cfg.root.resolve()
    top = _git_top(root)
    # A committed .dvc/config made in a git checkout fails in a copy without git: read it as git-less there.
    base: DvcConfig = {"core": {"no_scm": True}} if top is None else {}
    with contextlib.chdir(root), _dvc_output():
        try:
            if not (root / ".dvc").is_dir():
                _init(root, in_git=top is not None, subdir=top is not None and top != root)
            with Repo(str(root), config=base or None) as repo:
                # Machine-specific (which remote, where, which endpoint): --local, never committed.
                with repo.config.edit("local") as conf:
                    conf.setdefault("remote", {})[remote.name] = remote.dvc_config()
                    conf.setdefault("core", {})["remote"] = remote.name
        except DvcException as exc:
            raise FarmError(f"cannot open the DVC repository in {root}: {scrub(str(exc))}",
                            "fix or remove .dvc/ (the farm recreates it on the next push or pull)") from None
        # Anonymous reads only for this process: a stored setting would also make pushes unsigned.
        if anonymous:
            base["remote"] = {remote.name: {"allow_anonymous_login": True}}
        with Repo(str(root), config=base or None) as repo:
            yield repo


def _files(paths: Iterable[str] | None, under: str) -> set[str]:
    """File paths (not directories) from a DVC status list, relative to `under`."""
    prefix = under + "/"
    return {p[len(prefix):] for p in paths or () if p.startswith(prefix) and not p.endswith("/")}


@dataclass
class Granular:
    """outputs/ versus the pointer, per file, as DVC's `data status --granular` reports it."""

    unchanged: set[str]
    added: set[str]
    modified: set[str]
    deleted: set[str]
    not_in_cache: set[str]

    @property
    def in_pointer(self) -> set[str]:
        return self.unchanged | self.modified | self.deleted


def granular(repo: Repo, rel: str) -> Granular:
    """DVC's data status of outputs/ against its pointer, per file."""
    st = repo.data_status(granular=True, untracked_files="all", with_renames=False)
    unc = st.get("uncommitted", {})
    com = st.get("committed", {})  # in a git repo: the pointer against git HEAD
    modified, deleted = _files(unc.get("modified"), rel), _files(unc.get("deleted"), rel)
    # In a git repo `unchanged` also means unchanged since HEAD; files the pointer gained or changed since
    # HEAD and the workspace still matches count as unchanged here.
    in_pointer = _files(st.get("unchanged"), rel) | _files(com.get("added"), rel) | _files(com.get("modified"), rel)
    return Granular(unchanged=in_pointer - modified - deleted, added=_files(unc.get("added"), rel),
                    modified=modified, deleted=deleted, not_in_cache=_files(st.get("not_in_cache"), rel))


def local_listing(out: Path) -> Granular:
    """Before the first push every file here is one the pointer does not have yet: all of them are added."""
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} if out.is_dir() else set()
    return Granular(unchanged=set(), added=files, modified=set(), deleted=set(), not_in_cache=set())
