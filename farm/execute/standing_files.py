"""The standing cluster's files under .farm/cluster/ and the start of its daemon, without importing Ray.

A build asks here whether a standing cluster is up, or starts one (farm/execute/autostart.py), before
it knows whether it has anything to compile: this module stays cheap to import (no Ray, no compile code).
The daemon's body is in farm/execute/standing.py.

Who may start a daemon is decided by one lock, `daemon.lock`: the starter takes it (exclusive, not
waiting) and hands its open file to the daemon, which holds it for its whole life. While it is held, a
daemon is up or starting, and nobody starts a second one; the kernel drops it when the daemon ends,
however it ends, so a crashed daemon never blocks the next start.

The state file is never trusted by pid alone: it records the daemon's pid, start time and command
line, and the Ray processes it started, and nothing is signalled unless it is still that very process.
A state whose daemon is gone (or whose pid now belongs to another process) is reported and removed.

The state file is data and can be damaged (truncated, overwritten) while its daemon runs. The daemon is then
found without it, by what the farm owns (`daemon_by_lock`): the process of this user's that holds the daemon
lock open, with this project's daemon command line. Such a `Stray` daemon is never taken for "none up": the
file is kept, `farm cluster status` names it, `farm cluster down` stops it, and a build replaces it or uses a
private cluster, saying so.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import psutil

from farm.core.errors import FarmError
from farm.core.locking import take_lock
from farm.execute.processes import (
    Identity,
    end_leftovers,
    end_processes,
    end_recorded_by,
    forget_ray_processes,
    identities,
    recorded_by,
    verified,
)

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
USED_FILE = "last-used"     # touched by every build that uses the cluster (the idle clock)
LOG_FILE = "daemon.log"
TOKEN_FILE = "auth_token"   # the cluster's own Ray auth token (mode 0600): only this user's builds join
LOCK_FILE = "daemon.lock"   # held by the daemon for its life (see the module's docstring)
CONNECT_TIMEOUT_S = 2.0     # a build's probe of the cluster's GCS port: a dead cluster costs this, not minutes
RAY_CORE = ("gcs_server", "raylet")  # the daemon's Ray processes a working cluster cannot do without
POLL_S = 0.1
STARTED_BY_UP = "farm cluster up"
STARTED_BY_BUILD = "a build"


class StandingState(TypedDict):
    """The daemon's state file (JSON read back from disk: `running` checks the daemon part before use)."""

    pid: int
    daemon: Identity
    pgid: int
    processes: list[Identity]   # every Ray process the daemon started, as it was when it came up
    ray_core: list[Identity]    # the ones the cluster cannot do without (RAY_CORE)
    root: str
    address: str                # the cluster's GCS, 127.0.0.1:PORT
    num_cpus: int               # its compilers, one per CPU
    generator: str              # the farm code its compilers run
    started_unix: float
    idle_s: float
    warm: bool                  # its compilers' warm-up is done (builds may join before)
    started_by: str             # STARTED_BY_UP or STARTED_BY_BUILD (said when a build replaces it)
    relay: str | None           # the daemon's build socket (farm/execute/relay.py); absent from older daemons
    relay_code: str             # farm/execute/relay.py relay_code() as the daemon runs it


@dataclass(frozen=True)
class Stray:
    """This project's daemon, running while its state file does not name it: found by the daemon lock it holds
    and its command line (`daemon_by_lock`), never by the file."""

    process: psutil.Process
    state_file: Path
    why: str  # what is wrong with the state file

    @property
    def said(self) -> str:
        """The line's start that names it: what is wrong, and the daemon that still runs."""
        return (f"the standing cluster's state file {self.state_file} {self.why}, but its daemon (pid "
                f"{self.process.pid}, found by the daemon lock it holds) still runs")


@dataclass(frozen=True)
class Started:
    """A daemon this process started: its process (not waited for: it outlives this command)."""

    proc: subprocess.Popen[bytes]
    cpus: int
    idle_minutes: float


def state_dir(root: Path) -> Path:
    return root / ".farm" / "cluster"


def _private_state_dir(root: Path) -> Path:
    """.farm/cluster/, mode 0700: it holds the token, the daemon's log and the lock."""
    where = state_dir(root)
    where.mkdir(parents=True, exist_ok=True)
    os.chmod(where, 0o700)
    return where


def running(root: Path) -> StandingState | None:
    """The standing cluster's state if its daemon is verifiably alive. A stale state file (the daemon
    gone, or its pid taken by another process) is reported and removed, and the Ray processes that
    daemon started and that still run are ended (as its own record in the farm's private directory names
    them); a foreign process is never signalled. A state file that
    does not name a daemon of this project that still runs (`stray`) is left alone: None."""
    return _look(root)[0]


def stray(root: Path) -> Stray | None:
    """This project's daemon if it runs while its state file is unreadable or names another process."""
    return _look(root)[1]


def _look(root: Path) -> tuple[StandingState | None, Stray | None]:
    path = state_dir(root) / STATE_FILE
    try:
        text = path.read_text()
        owner = path.stat().st_uid
    except OSError:
        return None, None
    if owner != os.getuid():  # written by someone else: nothing in it is ever signalled
        path.unlink(missing_ok=True)
        log.warning("removed %s: it belongs to uid %s, not to you; nothing it names was touched", path, owner)
        return None, None
    try:
        state = json.loads(text)
        why = None if isinstance(state, dict) else "is not a standing-cluster state"
    except ValueError as exc:
        state, why = {}, "is empty" if not text.strip() else f"is not JSON ({exc})"
    daemon = state.get("daemon") if isinstance(state, dict) else None
    # Proven ours: that very process (pid, start time, command line as recorded), and that command line is
    # this project's daemon; a file naming any other live process exactly is stale, never obeyed.
    if isinstance(daemon, dict) and verified(daemon) is not None and _daemon_command(daemon.get("cmdline"), root):
        return state, None  # the rest is the daemon's own record
    pid = daemon.get("pid") if isinstance(daemon, dict) else (state.get("pid") if isinstance(state, dict) else None)
    found = daemon_by_lock(root)
    if found is not None:  # the file is wrong, not the daemon: nothing it names is touched, nor the file
        named = "names no daemon" if pid is None else f"names pid {pid!r}, which is not its daemon"
        return None, Stray(found, path, why or named)
    # What that daemon started is ended from its own record in the farm's private directory: the file's list
    # of processes is data, never a list of what to signal.
    ended = end_recorded_by(daemon) if isinstance(daemon, dict) else 0
    path.unlink(missing_ok=True)
    log.warning("removed a stale standing-cluster state (%s): its daemon (pid %s) is gone or that pid is "
                "another process now, which was left alone%s", path, pid,
                f"; ended {ended} Ray processes it had left" if ended else "")
    return None, None


def daemon_by_lock(root: Path) -> psutil.Process | None:
    """This project's daemon, found without its state file: while the daemon lock is held, the process of this
    user's that holds that very file open (it keeps it for life) and runs this project's daemon command line
    (`python -m farm.execute.standing <root> ...`, as `spawn` starts it). None when no daemon holds the lock."""
    lock = state_dir(root) / LOCK_FILE
    try:
        held = os.lstat(lock)
    except OSError:
        return None
    if not stat.S_ISREG(held.st_mode) or not starting(root):
        return None
    for proc in psutil.process_iter(["uids", "cmdline"]):
        try:
            if proc.info["uids"].real == os.getuid() and _daemon_command(proc.info["cmdline"], root) \
                    and _holds_open(proc.pid, held):
                return proc
        except (psutil.Error, AttributeError, TypeError):
            continue  # gone meanwhile, or not ours to look into
    return None


def _daemon_command(cmdline: object, root: Path) -> bool:
    if not isinstance(cmdline, list) or len(cmdline) < 4 or cmdline[1:3] != ["-m", "farm.execute.standing"]:
        return False
    try:
        return os.path.samefile(cmdline[3], root)
    except (OSError, TypeError, ValueError):
        return False


def _holds_open(pid: int, file: os.stat_result) -> bool:
    """Has process `pid` the file `file` (by device and inode) open? Linux's /proc/PID/fd: psutil's open_files
    gives paths only, and the lock is on the file, whatever path leads to it now."""
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(f"{fds}/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (file.st_dev, file.st_ino):
            return True
    return False


def health(state: StandingState) -> str | None:
    """Why the running daemon's cluster cannot serve a build (None: it can). Bounded: a dead cluster
    costs a build at most CONNECT_TIMEOUT_S, never Ray's minutes of connection retries."""
    core = state.get("ray_core") or []
    gone = [Path(p["cmdline"][0]).name for p in core if verified(p) is None]
    if gone or not core:
        return f"its Ray processes are gone ({', '.join(gone) or 'none recorded'})"
    host, _, port = str(state.get("address", "")).rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except (OSError, ValueError) as exc:
        return f"its Ray GCS at {state.get('address')} does not answer ({exc})"


def mark_used(root: Path) -> None:
    (state_dir(root) / USED_FILE).touch()


def _new_token(where: Path) -> None:
    path = where / TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def read_token(root: Path) -> bytes:
    """The cluster's token, which also keys its build socket; only a regular file of this user's, never
    through a symlink (OSError otherwise)."""
    fd = os.open(state_dir(root) / TOKEN_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise PermissionError(f"{state_dir(root) / TOKEN_FILE} is not this user's private file")
        return f.read().strip()


def _take_lock(where: Path) -> int | None:
    """The daemon lock's open file, locked by this process; None when a daemon holds it (up or starting)."""
    return take_lock(where / LOCK_FILE)


def starting(root: Path) -> bool:
    """Is a daemon up or on its way (someone holds the daemon lock)?"""
    where = state_dir(root)
    if not (where / LOCK_FILE).exists():
        return False
    fd = _take_lock(where)
    if fd is None:
        return True
    os.close(fd)
    return False


def spawn(root: Path, cpus: int, idle_minutes: float, by: str = STARTED_BY_BUILD) -> Started | None:
    """Start the daemon, detached, unless one is up or starting (then None). Returns at once: the daemon
    warms up on its own while the caller goes on (`wait_up` waits for it)."""
    end_leftovers()
    where = _private_state_dir(root)
    lock = _take_lock(where)
    if lock is None:
        return None
    try:
        if running(root):  # up, but started before the daemon held the lock: it is the one
            return None
        _new_token(where)
        log_fd = os.open(where / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # Its own session and process group: it outlives this command, `down` can end its whole tree,
        # and no terminal signal reaches it. It inherits the lock (pass_fds) and holds it while it lives.
        proc = subprocess.Popen([sys.executable, "-m", "farm.execute.standing", str(root), str(cpus),
                                 str(idle_minutes * 60), str(lock), by], stdin=subprocess.DEVNULL, stdout=log_fd,
                                stderr=log_fd, start_new_session=True, cwd=root, pass_fds=(lock,))
        os.close(log_fd)
    finally:
        os.close(lock)  # the daemon's copy keeps it locked
    return Started(proc, cpus, idle_minutes)


def hold_lock(fd: int) -> None:
    """In the daemon: keep the inherited lock for life, and out of the processes it starts (Ray's)."""
    os.set_inheritable(fd, False)


def wait_up(root: Path, started: Started | None, timeout_s: float, warm: bool = False) -> StandingState:
    """The standing cluster once its daemon is up (with `warm`, once its compilers are warm too): ours
    (`started`) or the one another command is starting. Raises FarmError naming why when it ends, or
    is not up within `timeout_s`."""
    where = state_dir(root)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = running(root)
        if state and (started is None or state["pid"] == started.proc.pid) and (state.get("warm", True) or not warm):
            return state
        if started is not None and started.proc.poll() is not None:
            tail = (where / LOG_FILE).read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise FarmError(f"the standing cluster's daemon exited ({started.proc.returncode}): {tail[0]}",
                            f"see {where / LOG_FILE}")
        if started is None and not starting(root) and not running(root):
            raise FarmError("the standing cluster that another farm command was starting did not come up",
                            f"see {where / LOG_FILE}")
        lost = stray(root) if started is None and state is None else None
        if lost is not None:  # it holds the lock, so it would be waited for in vain
            raise FarmError(lost.said, "farm cluster down stops it")
        time.sleep(POLL_S)
    raise FarmError(f"the standing cluster was not up after {timeout_s:.0f} s", f"see {where / LOG_FILE}")


def down(root: Path, timeout_s: float = 60.0) -> bool:
    """Stop the daemon (it stops its Ray cluster); False if none was up. A daemon whose state file is damaged
    or not written yet (still starting) is found by its lock (`daemon_by_lock`). A daemon that does not
    stop in `timeout_s` is killed with its whole process group, and every Ray process it started (each
    verified by pid, start time and command line) is ended too."""
    state, lost = _look(root)
    if state is not None:
        daemon = verified(state["daemon"])  # checked by _look, again now: it may have ended since
        if daemon is None:  # it ended just now
            (state_dir(root) / STATE_FILE).unlink(missing_ok=True)
            return True
    else:
        daemon = lost.process if lost is not None else daemon_by_lock(root)
        if daemon is None:
            return False
    _stop(daemon, recorded_by(daemon), timeout_s)  # with what it recorded in the farm's private directory
    (state_dir(root) / STATE_FILE).unlink(missing_ok=True)
    return True


def _stop(daemon: psutil.Process, recorded: list[Identity], timeout_s: float) -> None:
    # Everything it started, as it is now (Ray workers and their zygotes come and go).
    tree = identities(daemon.children(recursive=True)) + recorded
    try:
        daemon.terminate()
        daemon.resume()  # a stopped daemon (SIGSTOP) acts on SIGTERM only once it runs again
        daemon.wait(timeout_s)
    except psutil.TimeoutExpired:
        _kill_group(daemon)
    except psutil.NoSuchProcess:
        pass  # it ended meanwhile
    end_processes(tree)
    forget_ray_processes(daemon.pid)


def _kill_group(daemon: psutil.Process) -> None:
    """SIGKILL the daemon's process group, once it is proven to be the daemon's own (it leads it)."""
    try:
        if daemon.is_running() and os.getpgid(daemon.pid) == daemon.pid:
            os.killpg(daemon.pid, signal.SIGKILL)
        elif daemon.is_running():
            daemon.kill()
        daemon.wait(10)
    except (psutil.Error, ProcessLookupError):
        pass
