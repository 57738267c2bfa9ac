"""Per-user private directories: where the farm keeps caches and scratch files outside the project.

A fixed name under a shared temp directory (`/tmp/farm-toolchain-cache`) lets another local user plant
a symlink or a poisoned file there before the farm first writes it. Everything the farm keeps outside
the project therefore lives below one directory per user, `$TMPDIR/farm-<uid>/`, that the farm
creates with mode 0700 and checks on every use: a real directory (not a symlink), owned by this user,
with no access for anyone else. Anything else is refused, never repaired or written through.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError


def _ensure_private(path: Path) -> None:
    """Create `path` (0700) or accept an existing one only when it is this user's private directory."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise FarmError(f"{path} is {kind}: the farm keeps its private files there and will not write through it",
                        f"remove {path} (someone else may have planted it), then run the command again")
    if st.st_uid != os.getuid():
        raise FarmError(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})",
                        f"remove {path} or set TMPDIR to a directory of your own")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)  # ours, but opened up (an umask, a copy): close it before anything goes in


def private_dir(*parts: str) -> Path:
    """`$TMPDIR/farm-<uid>/<parts...>`, each level created 0700 and verified to be this user's own."""
    for part in parts:
        if not part or part in (".", "..") or "/" in part:
            raise ValueError(f"not a plain directory name: {part!r}")
    path = Path(tempfile.gettempdir()) / f"farm-{os.getuid()}"
    _ensure_private(path)
    for part in parts:
        path = path / part
        _ensure_private(path)
    return path


def write_private_text(path: Path, text: str) -> None:
    """Write a small file inside a private directory (mode 0600), atomically: a symlink at `path` is replaced,
    never followed."""
    write_text_atomic(path, text, mode=0o600)


def read_private_text(path: Path) -> str | None:
    """The text of a regular file inside a private directory, None when absent; never through a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, OSError):
        return None
    with os.fdopen(fd) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read()
