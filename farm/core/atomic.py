"""Write files so that a reader (or a crash) never sees a half-written one: the farm's one atomic writer.

A fresh temporary file in the same directory, fsync'd, then renamed over the path: an existing symlink at
the path is replaced, never followed. (farm/store/outtree.py writes the output tree through a directory fd
instead, so that no directory on the way can be a symlink either.)"""

import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write to a temporary name in the same directory, fsync, then rename over `path` (file mode `mode`:
    0o600 for a file of a private directory, farm/core/private.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # Objects are data, not executables: fixed mode so the umask cannot leak into them.
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode)

