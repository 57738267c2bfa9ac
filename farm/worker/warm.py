"""The warm compile server, seen from the worker: a zygote and its codegen server, started once per worker.

`WarmServer` is owned by whoever keeps the worker alive (a Ray actor in the farm); `Zygote` starts the
pair (farm/worker/zygote.py, farm/worker/binary_step.py), sends it one job per row, and kills a child
that outlives the row's deadline.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from farm.toolchain.linker import write_linker_shim
from farm.toolchain.shapes import LinkerPin
from farm.worker.binary_step import SERVER_ENV
from farm.worker.environment import NO_TARGET, child_environment, short_private_dir
from farm.worker.outcome import Outcome, how_it_ended

# How long the parent waits past a row's time limit for the zygote's reply before it kills the child.
DEADLINE_GRACE_S = 5.0
# The zygote answers a job with its child's pid at once; silence this long means it is stuck.
ZYGOTE_ANSWER_S = 30.0


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


class Zygote:
    """This worker's warm compile server (farm.worker.zygote), started on first use."""

    def __init__(self, linker: LinkerPin | None) -> None:
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
        # One line in the shape farm/worker/zygote.py reads (its `Job`).
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

    def _give_up(self, child: psutil.Process | None, cause: str) -> Outcome:
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
        found = [f"{name} {how_it_ended(code)}" for name, code in (("zygote", self.proc.poll()),
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


def _process(pid: int) -> psutil.Process | None:
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

    def get(self, linker: LinkerPin | None) -> tuple[Zygote, float]:
        """The zygote for `linker`, started if needed; and the seconds spent starting it now (0 when warm). Its
        codegen server links with the linker it started with: a row pinning another one gets a new zygote (a
        standing cluster serves builds of different pins)."""
        if self.zygote is None or not self.zygote.alive() or self.zygote.linker != linker:
            if self.zygote is not None:
                self.zygote.stop()  # a half-dead pair (one server gone, or its socket deleted), or another linker
            self.zygote = Zygote(linker)
            return self.zygote, self.zygote.warmup_seconds
        return self.zygote, 0.0

    def stop(self) -> None:
        if self.zygote is not None:
            self.zygote.stop()
            self.zygote = None
