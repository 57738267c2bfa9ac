"""The parent side of an isolated compile: a private directory, a clean environment, a child process.

Runs wherever the row runs (a Ray worker on any node): the kernel sources arrive as bytes, are
written to a private directory, and the object comes back as bytes. Nothing is read from or
written to the project's disk, so a node needs no shared filesystem.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from farm.contract import FARM_DIR, CompileJob, CompileRequest, CompileResult, ContractError, ProcessRecord, TargetFacts
from farm.core.canonical import sha256_bytes
from farm.core.private import private_dir
from farm.toolchain.pin import differences, installed, write_linker_shim
from farm.worker.binary_step import DEADLINE_ENV, SERVER_ENV
from farm.worker.farm_code import farm_files, module_closure

# The zygote serves every target: its own environment names none.
NO_TARGET = TargetFacts(name="", python_arch="", mlir_chipset="")


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


_FINGERPRINTS: dict[str, dict[str, Any]] = {}


def worker_toolchain(linker: dict[str, Any] | None) -> dict[str, Any]:
    """This worker process's toolchain for the pin's kind of linker, computed once per process."""
    key = json.dumps(linker, sort_keys=True)
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = installed(private_dir("toolchain-cache"), linker)
    return _FINGERPRINTS[key]


def materialize(sources: dict[str, bytes], root: Path) -> None:
    for rel, data in sources.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


# Unix socket paths are limited to ~107 bytes: a private directory deep under a long $TMPDIR would
# not fit the servers' sockets, so such a directory moves under /tmp (still per user, 0700, verified).
SOCKET_DIR_MAX = 60
# How long the parent waits past a row's time limit for the zygote's reply before it kills the child.
DEADLINE_GRACE_S = 5.0
# The zygote answers a job with its child's pid at once; silence this long means it is stuck.
ZYGOTE_ANSWER_S = 30.0


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


class LineReader:
    """Lines from a pipe with a deadline (a buffered readline cannot time out)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def readline(self, timeout_s: float | None) -> bytes | None:
        """One line; b"" at end of file; None when `timeout_s` passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and (left <= 0 or not select.select([self.fd], [], [], left)[0]):
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line + b"\n"


@dataclass
class Outcome:
    """How one compile process ended: its exit code, or why there is none (`cause`)."""

    code: int | None
    log: str
    warmup: float = 0.0
    cause: str | None = None  # "timeout" or "server died: ..." when code is None


class Zygote:
    """This worker's warm compile server (farm.worker.zygote), started on first use."""

    def __init__(self, linker: dict[str, Any] | None) -> None:
        zygotes = short_private_dir("zygotes")
        sweep_dead_zygote_homes(zygotes)
        self.linker = linker
        self.home = Path(tempfile.mkdtemp(prefix="farm-zygote-", dir=zygotes))
        (self.home / "home").mkdir()
        (self.home / "tmp").mkdir()
        env = child_environment(self.home, NO_TARGET)
        self.log_path = self.home / "zygote.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (lives as long as the zygote)
        started = time.monotonic()
        # Its LLVM codegen server (binary_step.py) starts first and imports while the zygote does.
        self.binary_socket = self.home / "binary.sock"
        binary_env = dict(env, ROCM_PATH=str(write_linker_shim(self.home / "rocm", linker)))
        self.binary = subprocess.Popen([sys.executable, "-m", "farm.worker.binary_step", "--serve",
                                        str(self.binary_socket)], cwd=self.home, env=binary_env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, bufsize=0)
        self.proc = subprocess.Popen([sys.executable, "-m", "farm.worker.zygote"], cwd=self.home, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, bufsize=0)
        (self.home / "zygote.pid").write_text(str(self.proc.pid))
        assert self.proc.stdout is not None and self.binary.stdout is not None
        self.replies = LineReader(self.proc.stdout.fileno())
        # Empty: it died importing (startup_log says why).
        self.ready = bool(self.replies.readline(None)) and bool(LineReader(self.binary.stdout.fileno()).readline(None))
        self.warmup_seconds = round(time.monotonic() - started, 3)

    def alive(self) -> bool:
        """Both servers run and their home is whole (a temp cleaner may have removed the socket)."""
        return (self.ready and self.proc.poll() is None and self.binary.poll() is None
                and self.binary_socket.is_socket())

    def stop(self) -> None:
        """End both servers (closing their stdin ends them; a stuck one is killed)."""
        for proc in (self.proc, self.binary):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        self.log.close()

    def run(self, work: Path, env: dict[str, str], timeout_s: float) -> Outcome:
        """Fork one compile and wait for it, at most `timeout_s` (+ a grace): past that, the parent
        kills the child itself; a child that ignores its own alarm cannot hang the row."""
        # The codegen server's linker shim may have been deleted (a temp cleaner): write it again.
        write_linker_shim(self.home / "rocm", self.linker)
        job = {"request": str(work / "job.json"), "result": str(work / "object.bin"),
               "log": str(work / "compile.log"), "env": dict(env, **{SERVER_ENV: str(self.binary_socket)}),
               "cwd": str(work), "timeout_s": timeout_s}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return Outcome(None, "", cause=self._died())
        started = time.monotonic()
        told = self.replies.readline(ZYGOTE_ANSWER_S)
        if not told:
            return self._give_up(None, "timeout" if told is None else self._died())
        child = _process(json.loads(told)["pid"])
        reply = self.replies.readline(max(0.0, timeout_s + DEADLINE_GRACE_S - (time.monotonic() - started)))
        if reply is None:
            return self._give_up(child, "timeout")
        if not reply:
            return self._give_up(child, self._died())
        return Outcome(json.loads(reply)["returncode"], "")

    def _give_up(self, child: Any, cause: str) -> Outcome:
        """Kill the row's child; when the zygote does not then reply, it is stuck: stop it (a new one starts)."""
        if child is not None:
            try:
                child.kill()  # psutil checks the start time: never another process that took the pid
            except Exception:  # noqa: BLE001 (already gone)
                pass
        if cause == "timeout" and self.replies.readline(ZYGOTE_ANSWER_S) is None:
            self.stop()
        return Outcome(None, "", cause=cause)

    def _died(self) -> str:
        try:
            self.proc.wait(timeout=2.0)  # its pipe closes a moment before it can be reaped
        except subprocess.TimeoutExpired:
            pass
        found = [f"{name} {_how(code)}" for name, code in (("zygote", self.proc.poll()),
                                                           ("codegen server", self.binary.poll()))
                 if code is not None]
        return "server died: " + ("; ".join(found) or "its pipe closed")

    def startup_log(self) -> str:
        if not self.log.closed:
            self.log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return "(its log is gone)"


def _how(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"


def _process(pid: int) -> Any:
    """A handle on the zygote's child that remembers its start time, or None if it is already gone."""
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def sweep_dead_zygote_homes(parent: Path) -> None:
    """Remove the private directories of zygotes that are gone. Ray ends its workers (and with them
    their zygotes) by signal, so nothing runs at their exit to clean up. Only this user's own real
    directories are touched (never a symlink or another user's directory)."""
    for home in parent.glob("farm-zygote-*"):
        try:
            st = os.lstat(home)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            pid = int((home / "zygote.pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(home, ignore_errors=True)
        except (OSError, ValueError):
            continue  # still starting, or not ours to judge


class WarmServer:
    """One worker's warm compile server (a zygote and its codegen server), owned by whoever keeps the worker
    alive: a Ray actor in the farm, so the warm state lives and ends with that actor, never in a module
    global of a throwaway task process."""

    def __init__(self) -> None:
        self.zygote: Zygote | None = None

    def get(self, linker: dict[str, Any] | None) -> tuple[Zygote, float]:
        """The zygote, started if needed; and the seconds spent starting it now (0 when warm)."""
        if self.zygote is None or not self.zygote.alive():
            if self.zygote is not None:
                self.zygote.stop()  # a half-dead pair (one server gone, or its socket deleted): replace both
            self.zygote = Zygote(linker)
            return self.zygote, self.zygote.warmup_seconds
        return self.zygote, 0.0

    def stop(self) -> None:
        if self.zygote is not None:
            self.zygote.stop()
            self.zygote = None


def _run_fresh(work: Path, env: dict[str, str], timeout_s: float) -> Outcome:
    """A new interpreter for this one compile (pays the imports every time). It leads its own process
    group, so a timeout ends its codegen process too."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.worker.zygote", "--fresh", str(work / "job.json"), str(work / "object.bin")],
        cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return Outcome(proc.returncode, out.decode("utf-8", "replace"))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group is still this child's
        out, _ = proc.communicate()
        return Outcome(None, out.decode("utf-8", "replace"), cause="timeout")


def _run_warm(server: WarmServer, work: Path, env: dict[str, str], timeout_s: float,
              linker: dict[str, Any] | None) -> Outcome:
    """A fork of this worker's warm zygote for this one compile (plus the warm-up, when it paid one)."""
    zygote, warmup = server.get(linker)
    outcome = (zygote.run(work, env, timeout_s) if zygote.ready
               else Outcome(None, "", cause="server died: it did not start"))
    log_path = work / "compile.log"
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    if outcome.code == -signal.SIGALRM:  # the child's own time limit
        outcome = Outcome(None, "", cause="timeout")
    outcome.log, outcome.warmup = log, warmup
    if outcome.cause == "timeout":
        outcome.log += f"\n[killed after {timeout_s:.0f} s]"
    elif outcome.cause:
        outcome.log += f"\n[the warm compile server died]\n{zygote.startup_log()}"
    return outcome


# Lines of a compiler log that name the cause (the log's tail is mostly the MLIR module FlyDSL prints).
CAUSE_MARKERS = re.compile(r"^\s*(error:|LLVM ERROR)|\blld\b|ld\.lld|^[\w.]*(Error|Exception): ")
CAUSE_LINES = 3
CAUSE_CHARS = 240


def cause_of(log: str) -> str:
    """The few lines of `log` saying why a compile failed: error lines first, else the last exception."""
    lines = [line.strip() for line in log.splitlines()]
    marked = [line for line in lines if CAUSE_MARKERS.search(line) and not line.startswith(("File ", "raise "))]
    errors = [line for line in marked if line.startswith(("error:", "LLVM ERROR")) or "lld" in line]
    chosen = list(dict.fromkeys(errors or marked[-1:]))[:CAUSE_LINES]
    return " | ".join(line[:CAUSE_CHARS] for line in chosen)


def warnings_in(log: str) -> list[str]:
    """The compiler's warning lines (LLVM, MLIR and Python warnings all say 'warning')."""
    return [line.strip() for line in log.splitlines() if "warning" in line.lower()]


def failure_message(outcome: Outcome, timeout_s: float) -> str:
    """One line for the driver's `FAILED key: ...`: what happened, and the compiler's own words."""
    if outcome.cause == "timeout":
        return f"compile did not finish: time limit {timeout_s:.0f} s reached, the compile process was killed"
    if outcome.cause:
        detail = outcome.cause.removeprefix("server died: ")
        return (f"compile did not finish: the warm compile server died ({detail}), not the time limit; "
                "its log follows the compiler output")
    code = outcome.code or 0
    how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
    cause = cause_of(outcome.log)
    return f"compiler process {how}" + (f": {cause}" if cause else "")


def generator_files(compile_process: dict[str, str]) -> dict[str, str]:
    """The farm code that made this row's bytes: what the compile process loaded (its record), and the
    code that prepared its directory and environment here (this module and what it uses, transitively)."""
    return dict(sorted((compile_process | farm_files(module_closure(sys.modules[__name__]))).items()))


def real_source_paths(log: str, kernels_root: Path) -> str:
    """`log` with the private copy of the kernel sources named as the project's kernels_src/ (a traceback
    then points at the file to edit, not at a temporary directory that is gone)."""
    for root in dict.fromkeys((str(kernels_root), os.path.realpath(kernels_root))):
        log = log.replace(root + os.sep, "kernels_src/")
    return log


def compile_isolated(request: CompileRequest, sources: dict[str, bytes], timeout_s: float,
                     warm: WarmServer | None, node: str | None = None) -> CompileResult:
    """Compile one row in a child process: a fork of `warm`'s zygote, or with `warm` None a fresh interpreter.
    Never raises for a compile failure, reports it instead.
    A worker whose toolchain differs from the request's pin refuses before compiling."""
    started, started_unix = time.monotonic(), time.time()
    node = node or socket.gethostname()
    facts: dict[str, Any] = {"node": node, "pid": os.getpid(), "worker": f"{node} pid {os.getpid()}",
                             "started_unix": started_unix}
    try:
        toolchain = worker_toolchain(request.linker)
    except Exception as exc:  # the driver reports a worker without the pinned toolchain by node
        return CompileResult.failure(request.key, f"toolchain on node {node} unusable: {exc}", **facts)
    facts["toolchain"] = toolchain
    diff = differences(request.pin, toolchain) if request.pin is not None else []
    if diff:
        return CompileResult.failure(request.key, f"toolchain on node {node} differs from the pin: {'; '.join(diff)}",
                                     seconds=round(time.monotonic() - started, 3), **facts)
    work = Path(tempfile.mkdtemp(prefix="farm-compile-"))
    try:
        facts |= _compile_in(work, request, sources, timeout_s, warm)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CompileResult(key=request.key, seconds=round(time.monotonic() - started, 3), finished_unix=time.time(),
                         **facts)


def _compile_in(work: Path, request: CompileRequest, sources: dict[str, bytes], timeout_s: float,
                warm: WarmServer | None) -> dict[str, Any]:
    """Compile `request` in the private directory `work`; returns the result's compile facts."""
    for sub in ("home", "tmp"):
        (work / sub).mkdir()
    kernels_root = work / "kernels_src"
    materialize(sources, kernels_root)
    write_linker_shim(work / "rocm", request.linker)
    CompileJob(request, str(kernels_root)).write(work / "job.json")
    out = work / "object.bin"
    # The codegen step ends at the row's deadline too (binary_step.py).
    env = dict(child_environment(work, request.target), **{DEADLINE_ENV: f"{time.time() + timeout_s:.3f}"})
    compile_started = time.monotonic()
    outcome = (_run_warm(warm, work, env, timeout_s, request.linker) if warm is not None
               else _run_fresh(work, env, timeout_s))
    outcome.log = real_source_paths(outcome.log, kernels_root)
    facts: dict[str, Any] = {
        "warmup_seconds": outcome.warmup, "stderr": outcome.log, "warnings": tuple(warnings_in(outcome.log)),
        "compile_seconds": round(time.monotonic() - compile_started - outcome.warmup, 3)}
    if outcome.code != 0:
        return facts | {"error": failure_message(outcome, timeout_s)}
    if not out.is_file():
        return facts | {"error": "compiler process wrote no object"}
    try:
        told = ProcessRecord.read(out.with_suffix(".json"))
    except ContractError as exc:
        return facts | {"error": f"compiler process left no usable record: {exc}"}
    return facts | {"ok": True, "elf": out.read_bytes(),
                    "sources": {rel: sha256_bytes(sources[rel]) for rel in told.sources if rel in sources},
                    "lookups": tuple(sorted(told.lookups)), "generator": generator_files(told.farm),
                    "max_rss_mib": round(told.max_rss_kib / 1024, 1)}
