"""A compile's private directory and its whole environment, built from nothing the caller has set."""

from __future__ import annotations

import tempfile
from pathlib import Path

from farm.contract import FARM_DIR, TargetFacts
from farm.core.private import private_dir

# The zygote serves every target: its own environment names none.
NO_TARGET = TargetFacts(name="", python_arch="", mlir_chipset="")

# Unix socket paths are limited to ~107 bytes: a private directory deep under a long $TMPDIR would
# not fit the servers' sockets, so such a directory moves under /tmp (still per user, 0700, verified).
SOCKET_DIR_MAX = 60


# The child's whole environment. Nothing from the caller's environment leaks in, so HOME, locale,
# time zone, hash seed or stray FLYDSL_* variables on a worker cannot change the bytes. (The compile
# process itself then selects the farm's FlyDSL backend and codegen hook: farm/worker/flydsl_compat.py.)
def child_environment(work: Path, target: TargetFacts) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work / "home"),
        "TMPDIR": str(work / "tmp"),
        "LC_ALL": "C.UTF-8",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONPATH": str(FARM_DIR.parent),
        "OMP_NUM_THREADS": "1",
        # FlyDSL: compile, never launch; never read or write its own JIT cache (its key is not our pin).
        "COMPILE_ONLY": "1",
        "FLYDSL_COMPILE_ONLY": "1",
        "FLYDSL_RUNTIME_ENABLE_CACHE": "0",
        "FLYDSL_RUNTIME_CACHE_DIR": str(work / "flydsl-cache"),
        "FLYDSL_COMPILE_OPT_LEVEL": "2",
        "FLYDSL_DEBUG_ENABLE_DEBUG_INFO": "0",
        # The object is stamped with the target's name; FlyDSL's Python-side arch checks see a member.
        "ARCH": target.name,
        "FLYDSL_GPU_ARCH": target.python_arch,
        "ROCM_PATH": str(work / "rocm"),
    }


def materialize(sources: dict[str, bytes], root: Path) -> None:
    """Write the kernel sources (relative name -> bytes) under `root`."""
    for rel, data in sources.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def short_private_dir(name: str, limit: int = SOCKET_DIR_MAX) -> Path:
    """private_dir(name), or the same under /tmp when $TMPDIR makes the path longer than `limit`."""
    path = private_dir(name)
    if len(str(path)) <= limit:
        return path
    saved = tempfile.tempdir
    tempfile.tempdir = "/tmp"
    try:
        return private_dir(name)
    finally:
        tempfile.tempdir = saved
