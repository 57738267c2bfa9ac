"""The parent side of an isolated compile: a private directory, a clean environment, a child process.

Runs wherever the row runs (a Ray worker on any node): the kernel sources arrive as bytes, are
written to a private directory, and the object comes back as bytes. Nothing is read from or
written to the project's disk, so a node needs no shared filesystem. The pieces: environment.py (the
directory and environment), warm.py (the warm compile server), outcome.py (how a compile ended),
phases.py (where the row's time went: this side notes prepare, warmup, fork and return).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import NotRequired, TypedDict

from farm.contract import CompileJob, CompileRequest, CompileResult, ContractError, LlvmOptions, ProcessRecord
from farm.core.canonical import sha256_bytes
from farm.core.private import private_dir
from farm.toolchain.compare import differences
from farm.toolchain.installed import installed
from farm.toolchain.linker import write_linker_shim
from farm.toolchain.shapes import LinkerPin, ToolchainPin
from farm.worker.binary_step import DEADLINE_ENV
from farm.worker.bytecode import write_bytecode
from farm.worker.environment import child_environment, materialize
from farm.worker.farm_code import farm_files, module_closure
from farm.worker.outcome import Outcome, failure_message, real_source_paths, warnings_in
from farm.worker.phases import PHASES_DIR_ENV, Timeline, merged, row_switches
from farm.worker.scratch import row_directory
from farm.worker.warm import WarmServer


class WorkerFacts(TypedDict):
    """Where a row ran (part of every CompileResult, a failed one too)."""

    node: str
    pid: int
    worker: str
    started_unix: float
    toolchain: NotRequired[ToolchainPin]


class CompileFacts(TypedDict):
    """What one compile in a private directory reports (the rest of a CompileResult)."""

    warmup_seconds: float
    stderr: str
    warnings: tuple[str, ...]
    compile_seconds: float
    error: NotRequired[str]
    ok: NotRequired[bool]
    elf: NotRequired[bytes]
    sources: NotRequired[dict[str, str]]
    lookups: NotRequired[tuple[str, ...]]
    generator: NotRequired[dict[str, str]]
    llvm_options: NotRequired[LlvmOptions]
    max_rss_mib: NotRequired[float]


_FINGERPRINTS: dict[str, ToolchainPin] = {}

def worker_toolchain(linker: LinkerPin | None) -> ToolchainPin:
    """This worker process's toolchain for the pin's kind of linker, computed once per process."""
    key = json.dumps(linker, sort_keys=True)
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = installed(private_dir("toolchain-cache"), linker)
    return _FINGERPRINTS[key]


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
              linker: LinkerPin | None, timeline: Timeline) -> Outcome:
    """A fork of this worker's warm zygote for this one compile (plus the warm-up, when it paid one)."""
    asked = time.time()
    zygote, warmup = server.get(linker)
    if warmup:
        timeline.switch("warmup", at=asked)
    timeline.switch("fork")
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


def generator_files(compile_process: dict[str, str]) -> dict[str, str]:
    """The farm code that made this row's bytes: what the compile process loaded (its record), and the
    code that prepared its directory and environment here (this module and what it uses, transitively)."""
    return dict(sorted((compile_process | farm_files(_preparing_modules())).items()))


@functools.cache
def _preparing_modules() -> list[ModuleType]:
    """This module and the farm modules it uses: fixed once this process imported them (walked once)."""
    return module_closure(sys.modules[__name__])


def compile_isolated(request: CompileRequest, sources: dict[str, bytes], timeout_s: float,
                     warm: WarmServer | None, node: str | None = None) -> CompileResult:
    """Compile one row in a child process: a fork of `warm`'s zygote, or with `warm` None a fresh interpreter.
    Never raises for a compile failure, reports it instead.
    A worker whose toolchain differs from the request's pin refuses before compiling."""
    started, started_unix = time.monotonic(), time.time()
    timeline = Timeline()
    timeline.switch("prepare", at=started_unix)
    node = node or socket.gethostname()
    facts = WorkerFacts(node=node, pid=os.getpid(), worker=f"{node} pid {os.getpid()}", started_unix=started_unix)
    try:
        toolchain = worker_toolchain(request.linker)
    except Exception as exc:  # the driver reports a worker without the pinned toolchain by node
        return CompileResult.failure(request.key, f"toolchain on node {node} unusable: {exc}",
                                     phases=merged(timeline.switches, time.time()), **facts)
    facts["toolchain"] = toolchain
    diff = differences(request.pin, toolchain) if request.pin is not None else []
    if diff:
        return CompileResult.failure(request.key, f"toolchain on node {node} differs from the pin: {'; '.join(diff)}",
                                     seconds=round(time.monotonic() - started, 3),
                                     phases=merged(timeline.switches, time.time()), **facts)
    work = row_directory()
    try:
        compiled = _compile_in(work, request, sources, timeout_s, warm, timeline)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finished = time.time()
    return CompileResult(key=request.key, seconds=round(time.monotonic() - started, 3), finished_unix=finished,
                         phases=merged(timeline.switches, finished), **facts, **compiled)


def _compile_in(work: Path, request: CompileRequest, sources: dict[str, bytes], timeout_s: float,
                warm: WarmServer | None, timeline: Timeline) -> CompileFacts:
    """Compile `request` in the private directory `work`; returns the result's compile facts. `timeline`
    gets this side's phase switches and, once the compile ended, those its processes left in `work`."""
    for sub in ("home", "tmp"):
        (work / sub).mkdir()
    kernels_root = work / "kernels_src"
    materialize(sources, kernels_root)
    write_bytecode(sources, kernels_root)  # compiled once per worker, checked against the source at import
    write_linker_shim(work / "rocm", request.linker)
    CompileJob(request, str(kernels_root)).write(work / "job.json")
    out = work / "object.bin"
    # The codegen step ends at the row's deadline too (binary_step.py).
    env = dict(child_environment(work, request.target), **{DEADLINE_ENV: f"{time.time() + timeout_s:.3f}",
                                                           PHASES_DIR_ENV: str(work)})
    compile_started = time.monotonic()
    if warm is not None:
        outcome = _run_warm(warm, work, env, timeout_s, request.linker, timeline)
    else:
        timeline.switch("fork")  # a fresh interpreter: its start and imports
        outcome = _run_fresh(work, env, timeout_s)
    timeline.switch("return")
    timeline.switches += row_switches(work)
    outcome.log = real_source_paths(outcome.log, kernels_root)
    facts = CompileFacts(warmup_seconds=outcome.warmup, stderr=outcome.log, warnings=tuple(warnings_in(outcome.log)),
                         compile_seconds=round(time.monotonic() - compile_started - outcome.warmup, 3))
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
                    "llvm_options": told.llvm_options, "max_rss_mib": round(told.max_rss_kib / 1024, 1)}
