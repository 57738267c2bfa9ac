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
from ..toolchain import differences, installed, write_linker_shim
from .binary_step import SERVER_ENV


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


_FINGERPRINTS: dict[str, dict[str, Any]] = {}


def worker_toolchain(linker: dict[str, Any] | None) -> dict[str, Any]:
    """This worker process's toolchain for the pin's kind of linker, computed once per process."""
    key = json.dumps(linker, sort_keys=True)
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = installed(Path(tempfile.gettempdir()) / "farm-toolchain-cache", linker)
    return _FINGERPRINTS[key]


def materialize(sources: dict[str, bytes], root: Path) -> None:
    for rel, data in sources.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class Zygote:
    """This worker's warm compile server (farm.compile.zygote), started on first use."""

    def __init__(self, linker: dict[str, Any] | None) -> None:
        sweep_dead_zygote_homes(Path(tempfile.gettempdir()))
        self.home = Path(tempfile.mkdtemp(prefix="farm-zygote-"))
        (self.home / "home").mkdir()
        (self.home / "tmp").mkdir()
        env = child_environment(self.home, {"name": "", "python_arch": ""})
        self.log = open(self.home / "zygote.log", "wb")  # noqa: SIM115 (lives as long as the zygote)
        started = time.monotonic()
        # Its LLVM codegen server (binary_step.py) starts first and imports while the zygote does.
        self.binary_socket = self.home / "binary.sock"
        binary_env = dict(env, ROCM_PATH=str(write_linker_shim(self.home / "rocm", linker)))
        self.binary = subprocess.Popen([sys.executable, "-m", "farm.compile.binary_step", "--serve",
                                        str(self.binary_socket)], cwd=self.home, env=binary_env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.proc = subprocess.Popen([sys.executable, "-m", "farm.compile.zygote"], cwd=self.home, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        (self.home / "zygote.pid").write_text(str(self.proc.pid))
        assert self.proc.stdout is not None and self.binary.stdout is not None
        # Empty: it died importing (startup_log says why).
        self.ready = bool(self.proc.stdout.readline()) and bool(self.binary.stdout.readline())
        self.warmup_seconds = round(time.monotonic() - started, 3)

    def alive(self) -> bool:
        return self.ready and self.proc.poll() is None and self.binary.poll() is None

    def run(self, work: Path, env: dict[str, str], timeout_s: float) -> int | None:
        """Fork one compile; returns its exit code (negative: signal), None if the zygote is gone."""
        job = {"request": str(work / "request.json"), "result": str(work / "object.bin"),
               "log": str(work / "compile.log"), "env": dict(env, **{SERVER_ENV: str(self.binary_socket)}),
               "cwd": str(work), "timeout_s": timeout_s}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            return None
        return json.loads(reply)["returncode"] if reply else None

    def startup_log(self) -> str:
        self.log.flush()
        return (self.home / "zygote.log").read_text(errors="replace")


def sweep_dead_zygote_homes(tmp: Path) -> None:
    """Remove the private directories of zygotes that are gone. Ray ends its workers (and with them
    their zygotes) by signal, so nothing runs at their exit to clean up."""
    for home in tmp.glob("farm-zygote-*"):
        try:
            pid = int((home / "zygote.pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(home, ignore_errors=True)
        except (OSError, ValueError):
            continue  # still starting, or not ours to judge


_ZYGOTE: Zygote | None = None


def warm_zygote(linker: dict[str, Any] | None) -> tuple[Zygote, float]:
    """This worker's zygote, started if needed; and the seconds spent starting it now (0 when warm)."""
    global _ZYGOTE
    if _ZYGOTE is None or not _ZYGOTE.alive():
        _ZYGOTE = Zygote(linker)
        return _ZYGOTE, _ZYGOTE.warmup_seconds
    return _ZYGOTE, 0.0


def _run_fresh(work: Path, env: dict[str, str], timeout_s: float) -> tuple[int | None, str, float]:
    """A new interpreter for this one compile (pays the imports every time)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "farm.compile.worker", str(work / "request.json"), str(work / "object.bin")],
            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=timeout_s)
        return proc.returncode, proc.stdout.decode("utf-8", "replace"), 0.0
    except subprocess.TimeoutExpired as exc:
        return None, (exc.stdout or b"").decode("utf-8", "replace") + f"\n[killed after {timeout_s:.0f} s]", 0.0


def _run_warm(work: Path, env: dict[str, str], timeout_s: float,
              linker: dict[str, Any] | None) -> tuple[int | None, str, float]:
    """A fork of this worker's warm zygote for this one compile (plus the warm-up, when it paid one)."""
    zygote, warmup = warm_zygote(linker)
    code = zygote.run(work, env, timeout_s) if zygote.ready else None
    log_path = work / "compile.log"
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    if code is None:
        return None, log + "\n[the warm compile server died]\n" + zygote.startup_log(), warmup
    if code == -14:  # SIGALRM: the child's own time limit
        return None, log + f"\n[killed after {timeout_s:.0f} s]", warmup
    return code, log, warmup


def warnings_in(log: str) -> list[str]:
    """The compiler's warning lines (LLVM, MLIR and Python warnings all say 'warning')."""
    return [line.strip() for line in log.splitlines() if "warning" in line.lower()]


def compile_isolated(request: dict[str, Any], sources: dict[str, bytes], timeout_s: float,
                     warm: bool = True, node: str | None = None) -> dict[str, Any]:
    """Compile one row in a child process; never raises for a compile failure, reports it instead.
    A worker whose toolchain differs from the request's pin refuses before compiling."""
    started = time.monotonic()
    node = node or socket.gethostname()
    result: dict[str, Any] = {"key": request["key"], "node": node, "pid": os.getpid(), "ok": False, "elf": None,
                              "sources": {}, "stderr": "", "error": None, "started_unix": time.time()}
    try:
        result["toolchain"] = worker_toolchain(request.get("linker"))
    except Exception as exc:  # the driver reports a worker without the pinned toolchain by node
        result["toolchain"] = None
        result["error"] = f"toolchain on node {node} unusable: {exc}"
        return result
    diff = differences(request.get("pin") or {}, result["toolchain"]) if "pin" in request else []
    if diff:
        result["error"] = f"toolchain on node {node} differs from the pin: {'; '.join(diff)}"
        result["seconds"] = round(time.monotonic() - started, 3)
        return result
    work = Path(tempfile.mkdtemp(prefix="farm-compile-"))
    try:
        for sub in ("home", "tmp"):
            (work / sub).mkdir()
        kernels_root = work / "kernels_src"
        materialize(sources, kernels_root)
        write_linker_shim(work / "rocm", request.get("linker"))
        (work / "request.json").write_text(json.dumps(dict(request, kernels_root=str(kernels_root))))
        out = work / "object.bin"
        env = child_environment(work, request["target"])
        compile_started = time.monotonic()
        code, log, warmup = (_run_warm(work, env, timeout_s, request.get("linker")) if warm
                             else _run_fresh(work, env, timeout_s))
        result["warmup_seconds"] = warmup
        result["compile_seconds"] = round(time.monotonic() - compile_started - warmup, 3)
        result["stderr"] = log
        result["warnings"] = warnings_in(log)
        if code is None:
            result["error"] = f"compile did not finish (time limit {timeout_s:.0f} s, or its server died)"
        elif code != 0:
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            result["error"] = f"compiler process {how}"
        elif not out.is_file():
            result["error"] = "compiler process wrote no object"
        else:
            told = json.loads(out.with_suffix(".json").read_text())
            result["elf"] = out.read_bytes()
            result["sources"] = {rel: sha256_bytes(sources[rel]) for rel in told["sources"] if rel in sources}
            result["max_rss_mib"] = round(told["max_rss_kib"] / 1024, 1)
            result["ok"] = True
    finally:
        shutil.rmtree(work, ignore_errors=True)
        result["seconds"] = round(time.monotonic() - started, 3)
        result["finished_unix"] = time.time()
    return result
