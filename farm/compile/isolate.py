"""The parent side of an isolated compile: a private directory, a clean environment, a child process.

Runs wherever the row runs (a Ray worker on any node): the kernel sources arrive as bytes, are
written to a private directory, and the object comes back as bytes. Nothing is read from or
written to the project's disk, so a node needs no shared filesystem.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import farm

from ..canonical import sha256_bytes
from ..toolchain import installed, write_linker_shim


# The child's whole environment. Nothing from the caller's environment leaks in, so HOME, locale,
# time zone, hash seed or stray FLYDSL_* variables on a worker cannot change the bytes.
def child_environment(work: Path, target: dict[str, Any]) -> dict[str, str]:
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
        "PYTHONPATH": str(Path(farm.__file__).resolve().parent.parent),
        "OMP_NUM_THREADS": "1",
        # FlyDSL: compile, never launch; never read or write its own JIT cache (its key is not our pin).
        "COMPILE_ONLY": "1",
        "FLYDSL_COMPILE_ONLY": "1",
        "FLYDSL_RUNTIME_ENABLE_CACHE": "0",
        "FLYDSL_RUNTIME_CACHE_DIR": str(work / "flydsl-cache"),
        "FLYDSL_COMPILE_OPT_LEVEL": "2",
        "FLYDSL_DEBUG_ENABLE_DEBUG_INFO": "0",
        # The object is stamped with the target's name; FlyDSL's Python-side arch checks see a member.
        "ARCH": target["name"],
        "FLYDSL_GPU_ARCH": target["python_arch"],
        "ROCM_PATH": str(work / "rocm"),
    }


_FINGERPRINT: dict[str, Any] | None = None


def worker_toolchain() -> dict[str, Any]:
    """This worker process's toolchain, computed once per process."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = installed(Path(tempfile.gettempdir()) / "farm-toolchain-cache")
    return _FINGERPRINT


def materialize(sources: dict[str, bytes], root: Path) -> None:
    for rel, data in sources.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def compile_isolated(request: dict[str, Any], sources: dict[str, bytes], timeout_s: float) -> dict[str, Any]:
    """Compile one row in a child process; never raises for a compile failure, reports it instead."""
    started = time.monotonic()
    result: dict[str, Any] = {"key": request["key"], "node": socket.gethostname(), "pid": os.getpid(),
                              "ok": False, "elf": None, "sources": {}, "stderr": "", "error": None}
    try:
        result["toolchain"] = worker_toolchain()
    except Exception as exc:  # the driver reports a worker without the pinned toolchain by node
        result["toolchain"] = None
        result["error"] = f"toolchain on node {socket.gethostname()} unusable: {exc}"
        return result
    work = Path(tempfile.mkdtemp(prefix="farm-compile-"))
    try:
        for sub in ("home", "tmp"):
            (work / sub).mkdir()
        kernels_root = work / "kernels_src"
        materialize(sources, kernels_root)
        write_linker_shim(work / "rocm")
        child_request = dict(request, kernels_root=str(kernels_root))
        (work / "request.json").write_text(json.dumps(child_request))
        out = work / "object.bin"
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "farm.compile.worker", str(work / "request.json"), str(out)],
                cwd=work, env=child_environment(work, request["target"]), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s)
            log = proc.stdout.decode("utf-8", "replace")
            code = proc.returncode
        except subprocess.TimeoutExpired as exc:
            log = (exc.stdout or b"").decode("utf-8", "replace")
            code = None
        result["stderr"] = log
        if code is None:
            result["error"] = f"compile exceeded {timeout_s:.0f} s and was killed"
        elif code != 0:
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            result["error"] = f"compiler process {how}"
        elif not out.is_file():
            result["error"] = "compiler process wrote no object"
        else:
            read = json.loads(out.with_suffix(".json").read_text())["sources"]
            result["elf"] = out.read_bytes()
            result["sources"] = {rel: sha256_bytes(sources[rel]) for rel in read if rel in sources}
            result["ok"] = True
    finally:
        shutil.rmtree(work, ignore_errors=True)
        result["seconds"] = round(time.monotonic() - started, 3)
    return result
