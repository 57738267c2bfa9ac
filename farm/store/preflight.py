"""Checks made before any compile: can the farm write where it will write?

A read-only or missing output directory used to show up only when the first object was written,
after every compile had run; an unwritable report directory only at the very end. Each directory
the command will write is checked here with access(2) (or, where it does not exist yet, by creating and
removing a private temp file in the parent that will hold it), so the command stops before doing any
work, naming the directory and the fix. Nothing is created inside the output tree: a `farm check`
running beside the build must not see a file the farm did not record.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from farm.core.errors import FarmError
from farm.table.config import FarmConfig


def require_writable(cfg: FarmConfig, *, outputs: bool = True, reports: bool = True) -> None:
    """outputs_dir (with the selected <op>/<target>/ directories it already has) and report_dir."""
    if outputs:
        other = "or choose another with outputs_dir=PATH"
        require_writable_dir(cfg.outputs_dir, "outputs_dir", other)
        for op, target in selected_dirs(cfg):
            directory = cfg.outputs_dir / op / target
            if os.path.lexists(directory):
                require_writable_dir(directory, "output directory", other)
    if reports:
        require_writable_dir(cfg.report_dir, "report_dir", "or choose another with report_dir=PATH")


def selected_dirs(cfg: FarmConfig) -> list[tuple[str, str]]:
    return [(op, t) for op in cfg.selected_ops for t in cfg.ops[op].targets if t in cfg.selected_targets]


def require_writable_dir(path: Path, what: str, other: str = "") -> None:
    """`path` (or, when it does not exist yet, its nearest existing parent, where it will be created)
    is a real directory this process can create files in. `path` itself must not be a symlink: the
    farm would write (and delete stray files) wherever it points."""
    existing = nearest_existing(path)
    if existing == path and os.path.islink(path):
        raise FarmError(f"{what} {path} is a symlink (to {os.readlink(path)}): the farm does not write through "
                        "symlinks", f"replace the link with a directory{', ' + other if other else ''}")
    if not existing.is_dir():
        kind = "a symlink to nothing" if os.path.islink(existing) else _kind(existing)
        where = f"{existing}, on the way to {path}," if existing != path else str(path)
        raise FarmError(f"{what}: {where} is {kind}, not a directory",
                        f"remove or rename {existing}{', ' + other if other else ''}")
    if existing == path:
        _access(path, what, other)  # inside the output tree: leave no trace a concurrent `farm check` could see
    else:
        _probe(existing, path, what, other)


def _access(directory: Path, what: str, other: str) -> None:
    """access(2) answers for this process's credentials and capabilities, ACLs and read-only mounts alike,
    without creating anything in a directory other commands may be listing."""
    if not os.access(directory, os.W_OK | os.X_OK):
        reason = "it is on a read-only file system" if _read_only_mount(directory) else "permission denied"
        raise FarmError(f"cannot write to {what} {directory}: {reason}; nothing was built or changed",
                        f"make {directory} writable for you{', ' + other if other else ''}")


def _read_only_mount(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or ".")


def _kind(path: Path) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:  # e.g. a parent without search permission
        return f"not accessible ({exc.strerror})"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    return "a device or special file" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a directory"


def _probe(directory: Path, path: Path, what: str, other: str) -> None:
    """Where `path` does not exist yet: create and remove a private temp file in the parent that will hold it."""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".farm-preflight-", suffix=".tmp")
    except OSError as exc:
        reason = "it is on a read-only file system" if exc.errno == errno.EROFS else (
            "permission denied" if exc.errno in (errno.EACCES, errno.EPERM) else exc.strerror)
        target = f"{path} (it would be created in {directory})" if directory != path else str(path)
        raise FarmError(f"cannot write to {what} {target}: {reason}; nothing was built or changed",
                        f"make {directory} writable for you{', ' + other if other else ''}") from None
    os.close(fd)
    os.unlink(tmp)
