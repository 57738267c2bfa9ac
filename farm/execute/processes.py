"""Processes the farm started, proven by pid, start time and command line, never found by name.

A farm command records the Ray processes it started (its descendants) in a private directory; a later
command ends those of a farm process that is gone (a SIGKILLed driver or daemon leaves Ray agents for
minutes, one listening on loopback). Nothing is signalled unless it is still that very process.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TypedDict

import psutil

from farm.core.private import private_dir, read_private_text, write_private_text

log = logging.getLogger(__name__)

# How long leftover Ray processes get to end on SIGTERM before SIGKILL.
LEFTOVER_GRACE_S = 3.0


class Identity(TypedDict):
    """What proves later that a pid is still the same process (JSON, as recorded on disk)."""

    pid: int
    started: float  # seconds after boot (`started_at`)
    cmdline: list[str]


def started_at(proc: psutil.Process) -> float:
    """When `proc` started, in seconds after boot: /proc/<pid>/stat's starttime, which never changes for a
    process. psutil's create_time() adds /proc/stat's btime, which moves by a second when the wall clock is
    stepped or slewed (NTP), so a daemon recorded before such a move would no longer be recognised."""
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_bytes()
    except FileNotFoundError:
        raise psutil.NoSuchProcess(proc.pid) from None
    except OSError as exc:
        raise psutil.AccessDenied(proc.pid) from exc
    # Fields after the command name (which may hold spaces and parentheses): state is the first, starttime
    # (field 22 of proc(5)) the 20th.
    return int(stat[stat.rindex(b")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def identity(proc: psutil.Process) -> Identity:
    """The identity of a running process: its pid, start time and command line."""
    return {"pid": proc.pid, "started": started_at(proc), "cmdline": proc.cmdline()}


def identities(procs: Iterable[psutil.Process]) -> list[Identity]:
    """The identities of those of `procs` that still run."""
    found = []
    for proc in procs:
        try:
            found.append(identity(proc))
        except psutil.Error:
            continue
    return found


def verified(ident: object) -> psutil.Process | None:
    """The process `ident` recorded, if that very process still runs; else None. `ident` is read back
    from disk: anything malformed is not a process of ours."""
    if not isinstance(ident, dict):
        return None
    try:
        proc = psutil.Process(int(ident["pid"]))
        if abs(started_at(proc) - float(ident["started"])) > 0.01:
            return None  # the pid now belongs to another process
        now, then = proc.cmdline(), list(ident["cmdline"])
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None
    # A Ray worker retitles itself per task (ray::IDLE, ray::Compiler...); pid and start time prove it.
    same_worker = bool(now and then) and str(now[0]).startswith("ray::") and str(then[0]).startswith("ray::")
    return proc if now == then or same_worker else None


def end_processes(idents: Iterable[object], grace_s: float = LEFTOVER_GRACE_S) -> int:
    """SIGTERM, then SIGKILL, every recorded process that verifiably still runs; returns how many."""
    procs = [p for p in (verified(i) for i in idents) if p is not None]
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)


def _records() -> Path:
    return private_dir("ray-owners")


def record_path(pid: int) -> Path:
    """Where farm process `pid` records the Ray processes it started."""
    return _records() / f"{pid}.json"


def record_ray_processes(owner: psutil.Process | None = None) -> list[Identity]:
    """Write down the Ray processes this process started (its descendants now), so that a later farm
    command can end them if this one is killed before it stops them; returns what was recorded."""
    owner = owner or psutil.Process()
    found = identities(owner.children(recursive=True))
    write_private_text(record_path(owner.pid), json.dumps({"owner": identity(owner), "processes": found}))
    return found


def recorded_by(owner: psutil.Process) -> list[Identity]:
    """The Ray processes farm process `owner` recorded, if its record is that very process's (pid and start
    time); else none. What a daemon is stopped with, whatever its state file says."""
    try:
        return _record_of(owner.pid, started_at(owner))
    except psutil.Error:
        return []


def end_recorded_by(owner: object) -> int:
    """End the recorded Ray processes of the farm process `owner` (an identity read back from disk) once it is
    gone, from its own record in the farm's private directory, never from what names it; returns how many."""
    if not isinstance(owner, dict) or verified(owner) is not None:
        return 0  # malformed, or still running: its Ray is its own business
    try:
        pid, started = int(owner["pid"]), float(owner["started"])
    except (KeyError, TypeError, ValueError):
        return 0
    processes = _record_of(pid, started)
    ended = end_processes(processes)
    if processes:
        record_path(pid).unlink(missing_ok=True)
    return ended


def _record_of(pid: int, started: float) -> list[Identity]:
    """The processes in farm process `pid`'s record, if the record is of the process started at `started`."""
    try:
        record = json.loads(read_private_text(record_path(pid)) or "")
        recorded = record["owner"]
        processes = record["processes"]
        same = int(recorded["pid"]) == pid and abs(float(recorded["started"]) - started) <= 0.01
    except (ValueError, KeyError, TypeError):
        return []
    return processes if same and isinstance(processes, list) else []


def forget_ray_processes(pid: int | None = None) -> None:
    record_path(os.getpid() if pid is None else pid).unlink(missing_ok=True)


def end_leftovers() -> int:
    """End the recorded Ray processes of farm processes that are gone. Returns how many were ended."""
    ended = 0
    for path in _records().glob("*.json"):
        try:
            record = json.loads(read_private_text(path) or "")
            owner = record["owner"]
            pid = owner["pid"]
        except (ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if verified(owner) is not None:
            continue  # still running: its Ray is its own business
        processes = record.get("processes")
        count = end_processes(processes if isinstance(processes, list) else [])
        path.unlink(missing_ok=True)
        if count:
            log.info("ended %d leftover Ray processes of farm process %s (gone)", count, pid)
        ended += count
    return ended
