"""The output tree, `outputs/<op>/<target>/`: the only place the farm writes objects, and how it does so safely.

Names read back from disk (a manifest's `file` entries) are data: each is validated before it reaches
any file-system call. A directory is opened once, refusing a symlink at every level below the tree's
root, and every read, write and delete then goes through that directory's descriptor (`dir_fd`) with
`O_NOFOLLOW`, so swapping a directory or a file for a symlink cannot redirect the farm elsewhere.
The farm deletes only regular files it can show it owns: an object its own manifest recorded, or a
temporary file of a writer that is provably dead.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from farm.core.errors import FarmError
from farm.table.config import SAFE_NAME

OBJECT_SUFFIX = ".hsaco"
MANIFEST = "manifest.json"
PROVENANCE = "SOURCE.md"
MAX_NAME = 200
# `.<file>.<pid>.<random>.tmp`: the writer's pid says whose it is.
TEMPORARY = re.compile(r"^\.(?P<file>.+)\.(?P<pid>[0-9]+)\.[0-9a-f]{16}\.tmp$")


def object_name_problem(file: object) -> str | None:
    """Why `file` is not a name the farm would give an object, or None when it is one."""
    if not isinstance(file, str):
        return f"file name {file!r} is not a string"
    if not file.endswith(OBJECT_SUFFIX) or len(file) > MAX_NAME:
        return f"file name {file!r} is not <name>{OBJECT_SUFFIX}"
    if not SAFE_NAME.match(file[: -len(OBJECT_SUFFIX)]):
        return f"file name {file!r} leaves the safe alphabet [a-z0-9_.-] (a path, '..' or an empty name)"
    return None


def _symlink_error(path: Path) -> FarmError:
    return FarmError(f"{path} is a symlink or not a directory: the farm writes only into real directories",
                     f"replace {path} with a real directory (move what it points to, or remove the link)")


def _open_dir(name: str | Path, parent_fd: int | None, create: bool, shown: Path) -> int | None:
    """Open one directory level without following a symlink; None when it is absent and not created."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in (0, 1):
        try:
            return os.open(name, flags, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create or attempt:
                return None
            try:
                os.mkdir(name, 0o755, dir_fd=parent_fd)
            except FileExistsError:
                pass
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _symlink_error(shown) from None
            raise FarmError(f"cannot open {shown} ({exc.strerror})", f"check the permissions of {shown}") from None
    return None


class OutputDir:
    """One `outputs/<op>/<target>/` directory, opened safely; use as a context manager."""

    def __init__(self, outputs_dir: Path, op: str, target: str, *, create: bool = False) -> None:
        for part in (op, target):
            if not SAFE_NAME.match(part):
                raise FarmError(f"{part!r} is not a safe op or target name", "names use [a-z0-9_.-]")
        self.path = outputs_dir / op / target
        self.fd: int | None = None
        if create:
            outputs_dir.mkdir(parents=True, exist_ok=True)
        root = _open_dir(outputs_dir, None, False, outputs_dir)
        if root is None:
            return
        try:
            op_fd = _open_dir(op, root, create, outputs_dir / op)
        finally:
            os.close(root)
        if op_fd is None:
            return
        try:
            self.fd = _open_dir(target, op_fd, create, self.path)
        finally:
            os.close(op_fd)

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @property
    def exists(self) -> bool:
        return self.fd is not None

    def _require(self) -> int:
        if self.fd is None:
            raise FarmError(f"{self.path} does not exist", "run `farm build` for it")
        return self.fd

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd)) if self.fd is not None else []

    def kind(self, name: str) -> str | None:
        """'file', 'symlink', 'other', or None when absent."""
        if self.fd is None:
            return None
        try:
            mode = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        return "file" if stat.S_ISREG(mode) else "symlink" if stat.S_ISLNK(mode) else "other"

    def read_bytes(self, name: str) -> bytes | None:
        """The bytes of a regular file directly in this directory; None when absent or not a regular file."""
        if self.fd is None or self.kind(name) != "file":
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write a temporary file owned by this process, fsync, then rename it over `name` (a symlink
        at `name` is replaced, never followed)."""
        # Not farm/core/atomic.py: that writer takes a path, and any directory on a path may be swapped for a
        # symlink between check and write; this one writes under the directory fd opened without following
        # symlinks, and splits staging from publishing so that a batch is fsync'd once (`stage`, `publish`).
        tmp = self.stage(name, data, durable=True)
        self.publish(tmp, name)

    def stage(self, name: str, data: bytes, *, durable: bool = False) -> str:
        """Write `data` to a new temporary file of this process for `name`; returns its name. Not durable
        unless `durable` (fsync): a writer of many objects makes them durable at once (`sync_filesystem`)
        before it `publish`es them. A temporary left by a killed writer is removed by the next one."""
        fd_dir = self._require()
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
                os.fchmod(f.fileno(), 0o644)  # objects are data: the umask must not leak into them
        except BaseException:
            self.discard(tmp)
            raise
        return tmp

    def publish(self, tmp: str, name: str) -> None:
        """Rename a staged temporary over `name` (a symlink there is replaced, never followed)."""
        fd_dir = self._require()
        try:
            os.replace(tmp, name, src_dir_fd=fd_dir, dst_dir_fd=fd_dir)
        except BaseException:
            self.discard(tmp)
            raise

    def discard(self, tmp: str) -> None:
        try:
            os.unlink(tmp, dir_fd=self._require())
        except OSError:
            pass

    @property
    def device(self) -> int:
        return os.fstat(self._require()).st_dev

    def sync_filesystem(self, staged: list[str]) -> bool:
        """Make everything written on this directory's file system durable: one syncfs(2) for a whole
        batch of objects (an fsync per object cost the driver more CPU and ~4 ms of wall time each). Where
        syncfs is missing or fails, each staged file is fsynced instead. True when the whole file system was
        synced (other directories on it need nothing more)."""
        fd_dir = self._require()
        if _SYNCFS is not None and _SYNCFS(fd_dir) == 0:
            return True
        for tmp in staged:
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd_dir)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return False

    def sync_entries(self) -> None:
        """Make this directory's renames durable (fsync of the directory itself)."""
        os.fsync(self._require())

    def remove_object(self, name: str) -> bool:
        """Delete an object the manifest recorded: a valid object name, a regular file, nothing else."""
        if object_name_problem(name) is not None or self.kind(name) != "file":
            return False
        os.unlink(name, dir_fd=self._require())
        return True

    def remove_dead_temporaries(self) -> list[str]:
        """Delete temporary files whose writer is gone (killed mid-write). A live writer's are kept."""
        removed = []
        for name in self.names():
            match = TEMPORARY.match(name)
            if match and not _alive(int(match["pid"])) and self.kind(name) == "file":
                os.unlink(name, dir_fd=self._require())
                removed.append(name)
        return removed


def _syncfs() -> Callable[[int], int] | None:
    """libc's syncfs(fd) (Linux), or None."""
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_SYNCFS = _syncfs()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True
