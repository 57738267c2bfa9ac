"""Where a row's private directory lives, and the sweep of directories whose worker is gone.

A row's private directory (its kernel sources and their bytecode, the job, the object, the logs: ~60 files)
is written and removed at every row. On a disk filesystem that is slow: on this farm's ext4 (mounted with
discard) writing took ~6-12 ms and removing 13-31 ms a row, on tmpfs ~2 and ~1 ms. So when the caller chose
no TMPDIR, a row's directory goes on the memory filesystem if there is a usable one.

Ray ends its workers by signal, so a worker killed mid-row never removes its row's directory; on a memory
filesystem that would hold memory until the machine restarts. Each directory's name carries its worker's
pid, and each worker sweeps, once, the directories of this user's workers that are gone.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

MEMORY_FS = Path("/dev/shm")
MEMORY_FS_MIN_FREE = 256 << 20  # bytes free there, else the default temp directory
PREFIX = "farm-compile-"

_swept: set[str] = set()  # parents this process has swept


def scratch_parent() -> str | None:
    """Where rows' private directories go: None (TMPDIR, or the default temp directory) when TMPDIR is set
    or there is no writable memory filesystem with room; else that filesystem."""
    if os.environ.get("TMPDIR") or not MEMORY_FS.is_dir() or not os.access(MEMORY_FS, os.W_OK | os.X_OK):
        return None
    try:
        free = os.statvfs(MEMORY_FS)
    except OSError:
        return None
    return str(MEMORY_FS) if free.f_bavail * free.f_frsize >= MEMORY_FS_MIN_FREE else None


def row_directory() -> Path:
    """A new private directory for one row (the caller removes it), named after this worker's pid."""
    parent = scratch_parent() or tempfile.gettempdir()
    if parent not in _swept:
        _swept.add(parent)
        sweep_dead_rows(Path(parent))
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))


def sweep_dead_rows(parent: Path) -> list[Path]:
    """Remove the row directories in `parent` whose worker process is gone; returns them. Only this user's
    own real directories named `farm-compile-<pid>-...` are touched (never a symlink, never another user's,
    never one whose pid runs: a pid taken by another process keeps its directory, which is harmless)."""
    removed = []
    for path in parent.glob(f"{PREFIX}*-*"):
        pid_text = path.name[len(PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit():
            continue  # an older name without a pid: its worker cannot be told
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:  # gone meanwhile, or a pid of another user's process: alive, keep
            continue
    return removed
