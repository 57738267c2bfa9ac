"""LLVM code generation (`gpu-module-to-binary`) in a small process of its own.

FlyDSL's bundled LLVM does not give the same bytes for some modules when its codegen runs inside
the process that traced and lowered the kernel: a few head-dim-128 `sdpa_rdna` objects came out in
a second variant in 2-17% of compiles (docs/reproducibility.md). The MLIR and LLVM IR going in were
identical; the difference comes from LLVM's loop optimisations and depends on the
state the compile process reached before codegen. The same module text, parsed and compiled in a
process that had done nothing else, gave one output every time (measured: 40 fresh interpreters and
60 forks of such a server, 30 of them after scrambling its heap).

So the compile process stops before `gpu-module-to-binary`, prints the module, and this step parses
it and runs that one pass in a process whose whole history is the same for every row: a fork of a
server that only imported FlyDSL's MLIR bindings (`serve`; it never traces a kernel, and it loads
neither FlyDSL's package nor torch: farm/worker/flydsl_mlir.py), or a fresh interpreter (`main`).
The compile process reaches this step from FlyDSL's external-codegen mode (FLYDSL_COMPILE_LLVM_DIR set:
FlyDSL stops before the binary pass), through the farm's binary step (farm/worker/flydsl_compat.py
`use_external_codegen`): it prints the gpu.module as FlyDSL's own external step would, and
`run_in_own_process`, still in the compile process, writes it to the row's directory and asks the binary
server over its socket (no process of its own in between), or, without a server, runs a fresh
interpreter. The returned `gpu.binary` op takes the `gpu.module`'s place and FlyDSL continues as usual.
A kernel's per-compile LLVM options travel with the job and are set around the pass as FlyDSL sets them
in its own process (farm/worker/llvm_options.py).
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from farm.toolchain.linker import LINK_TIMES_ENV

# At the top, though only the codegen process uses it: every compile process loads this module, and a row's
# generator record is the farm code its compile process loaded (farm_code.py), so an edit to the codegen
# step's own code makes the row stale. Importing it loads no FlyDSL (that waits for the first codegen).
from farm.worker import flydsl_mlir, llvm_options
from farm.worker.forking import run_forked
from farm.worker.phases import CODEGEN_FILE, LINK_FILE, PHASES_DIR_ENV, Timeline

BINARY_PASS = "gpu-module-to-binary"
SERVER_ENV = "FARM_BINARY_SERVER"  # the compile child's way to its worker's binary server (a socket path)
CHILD_TIME_LIMIT_S = 1800  # a codegen child past this ends (its compile process has long timed out)
# The row's deadline (Unix time), set by the parent (isolate.py) in the compile's environment: the
# server kills a codegen child still running past it, so a hung codegen never blocks the next row.
DEADLINE_ENV = "FARM_ROW_DEADLINE"
DEADLINE_GRACE_S = 2.0


def _seconds_left(deadline_unix: float | None) -> float | None:
    return None if deadline_unix is None else max(0.0, deadline_unix - time.time()) + DEADLINE_GRACE_S


# The MLIR context a forked codegen child compiles in: made once by the server, before it forks, so
# every child starts from the same fresh context instead of making its own (loading every dialect took
# ~10 ms a row). None in a fresh interpreter, which makes its own.
_SERVER_CONTEXT: list[Any] = []


def codegen(module_text: str, fragment: str, timeline: Timeline, options: llvm_options.LlvmOptions) -> str:
    """Parse `module_text`, run the binary fragment with the compile's LLVM `options` set, return the module
    (now holding gpu.binary) as text."""
    context = _SERVER_CONTEXT[0] if _SERVER_CONTEXT else None
    with llvm_options.applied(options, flydsl_mlir.fly_extension):
        return flydsl_mlir.run_binary_pass(module_text, f"builtin.module({fragment})", timeline, context)


def _job_files(work: Path) -> tuple[Path, Path, Path, Path]:
    return work / "binary-in.mlir", work / "binary-out.mlir", work / "binary-job.json", work / "binary.log"


def run_in_own_process(module_text: str, fragment: str, options: llvm_options.LlvmOptions, work: Path) -> str:
    """Hand the module and the compile's LLVM `options` to the binary server (or a fresh interpreter);
    returns the module holding gpu.binary."""
    src, out, _, _ = _job_files(work)
    src.write_text(module_text)
    _codegen_files(src, out, fragment, options, work)
    return out.read_text()


def _codegen_files(src: Path, out: Path, fragment: str, options: llvm_options.LlvmOptions, work: Path) -> None:
    """Run the binary pass on the module in `src`, writing the result to `out`, in a process of its own."""
    _, _, job_path, log_path = _job_files(work)
    deadline = float(os.environ[DEADLINE_ENV]) if os.environ.get(DEADLINE_ENV) else None
    phases = os.environ.get(PHASES_DIR_ENV)  # the row's directory, where its phases are noted
    job_path.write_text(json.dumps({"input": str(src), "output": str(out), "fragment": fragment,
                                    "llvm_options": options, "log": str(log_path), "deadline_unix": deadline,
                                    "phases_dir": phases}))
    server = os.environ.get(SERVER_ENV)
    if server:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(server)
            except OSError as exc:
                raise RuntimeError(f"LLVM codegen server {server} unreachable ({exc}): its worker's compile "
                                   "server pair is gone; the row is retried by the next build") from None
            conn.sendall((str(job_path) + "\n").encode())
            reply = conn.makefile("r").readline()
        code = json.loads(reply)["returncode"] if reply else None
        log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    else:
        try:
            proc = subprocess.run([sys.executable, "-m", "farm.worker.binary_step", str(job_path)],
                                  env=dict(os.environ), capture_output=True, text=True,
                                  timeout=_seconds_left(deadline))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"LLVM codegen ({BINARY_PASS}) passed the row's time limit") from None
        code, log = proc.returncode, proc.stdout + proc.stderr
    if code != 0 or not out.is_file():
        raise RuntimeError(f"LLVM codegen ({BINARY_PASS}) failed in its own process (exit {code}):\n{log}")


def _run_job(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    timeline = Timeline()
    phases_dir = Path(job["phases_dir"]) if job.get("phases_dir") else None
    if phases_dir is not None:
        os.environ[LINK_TIMES_ENV] = str(phases_dir / LINK_FILE)  # the linker shim notes its run there
    try:
        options = llvm_options.check(job.get("llvm_options"))  # a file: data, checked as the compile's own
        text = codegen(Path(job["input"]).read_text(), job["fragment"], timeline, options)
        Path(job["output"]).write_text(text)
    finally:
        if phases_dir is not None:
            timeline.write(phases_dir / CODEGEN_FILE)
    return 0


def _run_child(job_path: str) -> int:
    """In the forked child: its output goes to the job's log, and it has a time limit of its own."""
    gc.disable()
    signal.alarm(CHILD_TIME_LIMIT_S)
    fd = os.open(json.loads(Path(job_path).read_text())["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return _run_job(job_path)


def serve(socket_path: str) -> None:
    """The binary server: import the MLIR bindings once, then fork one child per job. Each child starts
    from the same state, so codegen sees the same process history for every row. Ends when its
    parent (the worker) closes stdin."""
    # The MLIR bindings (not torch), loaded once for every child.
    _SERVER_CONTEXT.append(flydsl_mlir.new_context())  # only made: nothing is parsed or compiled in it here
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(8)
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)
    while True:
        for key, _ in events.select():
            if key.fileobj is sys.stdin:
                if not sys.stdin.readline():
                    return
                continue
            conn, _ = listener.accept()
            with conn:
                job_path = conn.makefile("r").readline().strip()
                code = run_forked(lambda job_path=job_path: _run_child(job_path), deadline=_deadline_of(job_path))
                conn.sendall((json.dumps({"returncode": code}) + "\n").encode())


def _deadline_of(job_path: str) -> float | None:
    """The job's deadline on this process's monotonic clock (None: no deadline, or no readable job)."""
    try:
        left = _seconds_left(json.loads(Path(job_path).read_text()).get("deadline_unix"))
    except (OSError, ValueError, AttributeError):
        return None
    return None if left is None else time.monotonic() + left


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        serve(argv[1])
        return 0
    return _run_job(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
