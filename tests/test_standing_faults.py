"""The standing cluster and Ray processes under faults: stale state, dead clusters, lost linker shims,
killed daemons and drivers. Nothing is ever signalled unless it is proven to be the farm's own process
(pid, start time, command line); a dead cluster means a private one, never a hang."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import run_farm, small_copy, small_expanded_copy, still_running

from farm.contract import CompileResult
from farm.execute import executor, local, ray_auth, standing
from farm.execute import processes as procs
from farm.worker.environment import short_private_dir

TARGET = "gfx942"
ROW = "names=[rmsnorm_f32_infer_generic]"


def _sleeper() -> subprocess.Popen:
    """An unrelated process of this user (what a reused pid or a planted state points at)."""
    return subprocess.Popen(["sleep", "300"])


def _fake_daemon(project: Path, where: Path) -> subprocess.Popen:
    """A live process with this project's daemon command line (`python -m farm.execute.standing <root>`) that
    only sleeps: a stand-in module of that name, first on its own path."""
    package = where / "farm" / "execute"
    package.mkdir(parents=True)
    for init in (where / "farm" / "__init__.py", package / "__init__.py"):
        init.write_text("")
    (package / "standing.py").write_text("import time\ntime.sleep(600)\n")
    command = [sys.executable, "-m", "farm.execute.standing", str(project)]
    proc = subprocess.Popen(command, cwd=where)
    # Its identity (pid, start, command line) is recorded as the daemon's: only once it has exec'd, or the
    # farm rightly finds "that pid is another process now" (a loaded machine showed the forked pytest's).
    deadline = time.monotonic() + 60
    while psutil.Process(proc.pid).cmdline() != command:
        assert time.monotonic() < deadline and proc.poll() is None, "the stand-in daemon did not start"
        time.sleep(0.01)
    return proc


def _state_path(project: Path) -> Path:
    return project / ".farm" / "cluster" / "state.json"


def _write_state(project: Path, state: dict) -> None:
    _state_path(project).parent.mkdir(parents=True, exist_ok=True)
    _state_path(project).write_text(json.dumps(state))


def _bounded(project: Path, *args: str, limit_s: float = 300) -> subprocess.CompletedProcess:
    """`farm ...` that fails the test instead of hanging it (a dead cluster used to hang builds)."""
    env = dict(os.environ)
    env.pop("FARM_PROJECT", None)
    return subprocess.run([sys.executable, "-m", "farm.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=limit_s)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_expanded_copy(tmp_path_factory.mktemp("faults"))


@contextlib.contextmanager
def _standing_cluster(project: Path) -> Iterator[dict]:
    """A standing cluster with one warm compiler; stopped at the end by its recorded, verified pids."""
    run_farm(project, "cluster", "up", "executor.num_cpus=1", check=True)
    state = json.loads(_state_path(project).read_text())
    try:
        yield state
    finally:
        standing.down(project, timeout_s=10)
        procs.end_processes([state["daemon"], *state["processes"]])


@pytest.fixture()
def cluster(project: Path) -> Iterator[dict]:
    """A standing cluster of its own, for a test that kills or stops it for good."""
    with _standing_cluster(project) as state:
        yield state


@pytest.fixture(scope="module")
def kept_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_expanded_copy(tmp_path_factory.mktemp("kept"))


@pytest.fixture(scope="module")
def kept_cluster(kept_project: Path) -> Iterator[dict]:
    """One standing cluster for the tests that leave it working (a deleted shim, two builds at once, a daemon
    stopped and let go on): each start costs a daemon, a Ray cluster and a warm compiler."""
    with _standing_cluster(kept_project) as state:
        yield state


@pytest.mark.slow
@pytest.mark.cluster
def test_stale_state_foreign_pid_is_never_signalled(tmp_path: Path) -> None:
    """Case 5: a state file whose pid is another process: `down` killed that process."""
    project = small_copy(tmp_path / "p")
    foreign = _sleeper()
    try:
        me = psutil.Process(foreign.pid)
        # The old format (a bare pid), and the new one whose start time and command line do not match.
        for state in ({"pid": foreign.pid, "address": "127.0.0.1:1", "num_cpus": 1},
                      {"pid": foreign.pid, "daemon": {"pid": foreign.pid, "started": procs.started_at(me) - 100,
                                                      "cmdline": [sys.executable, "-m", "farm.execute.standing"]},
                       "processes": [procs.identity(me) | {"started": procs.started_at(me) - 100}],
                       "address": "127.0.0.1:1", "num_cpus": 1}):
            _write_state(project, state)
            down = run_farm(project, "cluster", "down", check=True)
            assert down.stdout.strip() == "no standing cluster was up"
            assert f"removed a stale standing-cluster state ({_state_path(project)}): its daemon (pid " \
                   f"{foreign.pid}) is gone or that pid is another process now, which was left alone" in down.stderr
            assert not _state_path(project).exists()
            assert foreign.poll() is None  # never signalled
        # Its very identity (pid, start time, command line): still not this project's daemon, never signalled.
        _write_state(project, {"pid": foreign.pid, "daemon": procs.identity(me), "processes": [procs.identity(me)]})
        down = run_farm(project, "cluster", "down", check=True)
        assert down.stdout.strip() == "no standing cluster was up" and "removed a stale" in down.stderr
        assert foreign.poll() is None and not _state_path(project).exists()
        if os.getuid() == 0:  # a state someone else wrote, naming a live process exactly: still never signalled
            _write_state(project, {"pid": foreign.pid, "daemon": procs.identity(me), "processes": []})
            os.chown(_state_path(project), 65534, 65534)
            down = run_farm(project, "cluster", "down", check=True)
            assert "belongs to uid 65534, not to you; nothing it names was touched" in down.stderr
            assert foreign.poll() is None and not _state_path(project).exists()
        _write_state(project, {"pid": foreign.pid})
        status = run_farm(project, "cluster", "status", check=True)
        assert status.stdout.strip() == "no standing cluster is up" and "stale" in status.stderr
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


@pytest.mark.slow
@pytest.mark.cluster
def test_dead_cluster_falls_back_to_a_private_one_without_hanging(project: Path, tmp_path: Path) -> None:
    """Case 5: builds hung for minutes on a cluster whose Ray was gone while its state said it was up."""
    from farm.plan.digest import generator_digest

    fake = _fake_daemon(project, tmp_path / "fake")  # a live 'daemon'
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        me = procs.identity(psutil.Process(fake.pid))
        state = {"pid": fake.pid, "daemon": me, "processes": [], "ray_core": [me], "root": str(project),
                 "address": f"127.0.0.1:{port}", "num_cpus": 1, "generator": generator_digest(), "idle_s": 600}
        # Its Ray processes gone: named without any connection attempt.
        dead = dict(me, started=me["started"] - 100, cmdline=["/x/gcs_server"])
        assert standing.health(dict(state, ray_core=[dead])) == "its Ray processes are gone (gcs_server)"
        _write_state(project, state)
        build = _bounded(project, "build", f"targets=[{TARGET}]", ROW, "executor.num_cpus=1",
                         f"outputs_dir={tmp_path / 'out'}")
        assert build.returncode == 0, build.stderr
        assert (f"the standing cluster is not usable: its Ray GCS at 127.0.0.1:{port} does not answer"
                in build.stderr), build.stderr
        assert "this build starts a private cluster" in build.stderr and "built 1, failed 0" in build.stderr
        assert fake.poll() is None  # a build never signals the daemon
    finally:
        fake.kill()
        fake.wait()
        _state_path(project).unlink(missing_ok=True)


def _zygote_homes(state: dict) -> list[Path]:
    """The compile servers' homes, from the codegen servers' command lines (`--serve <home>/binary.sock`)."""
    homes = []
    for proc in state["processes"]:
        cmd = proc["cmdline"]
        if "farm.worker.binary_step" in cmd and "--serve" in cmd:
            homes.append(Path(cmd[cmd.index("--serve") + 1]).parent)
    return homes


@pytest.mark.slow
@pytest.mark.cluster
def test_lost_linker_shim_in_the_standing_cluster_is_recreated(kept_project: Path, kept_cluster: dict,
                                                               tmp_path: Path) -> None:
    """Case 8: a temp cleaner deleting the warm server's `ld.lld` shim failed every build until down/up.
    Also case 14: the cluster's Ray and zygote homes live in the per-user private temp directory."""
    homes = _zygote_homes(kept_cluster)
    assert len(homes) == 1 and homes[0].parent == short_private_dir("zygotes")
    private_root = Path(local.ray_temp_dir()).parent
    assert stat.S_IMODE(private_root.stat().st_mode) == 0o700 and private_root.stat().st_uid == os.getuid()
    gcs = [p for p in kept_cluster["ray_core"] if Path(p["cmdline"][0]).name == "gcs_server"]
    assert gcs and any(arg.startswith(f"--log_dir={local.ray_temp_dir()}/session_") for arg in gcs[0]["cmdline"])

    out = tmp_path / "out"
    first = _bounded(kept_project, "build", f"targets=[{TARGET}]", ROW, f"outputs_dir={out}")
    assert first.returncode == 0 and "using the standing cluster" in first.stderr, first.stderr
    shim = homes[0] / "rocm" / "llvm" / "bin" / "ld.lld"
    assert shim.is_file()
    shim.unlink()
    [obj] = list((out / "rmsnorm" / TARGET).glob("*.hsaco"))
    before = obj.read_bytes()
    obj.unlink()
    second = _bounded(kept_project, "build", f"targets=[{TARGET}]", ROW, f"outputs_dir={out}")
    assert second.returncode == 0, second.stderr
    assert "using the standing cluster" in second.stderr and "built 1, failed 0" in second.stderr
    assert obj.read_bytes() == before and shim.is_file()


def _popen(project: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("FARM_PROJECT", None)
    return subprocess.Popen([sys.executable, "-m", "farm.cli", *args], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _objects(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (out / "rmsnorm" / TARGET).glob("*.hsaco")}


@pytest.mark.slow
@pytest.mark.cluster
def test_two_relayed_builds_at_once_share_the_daemon(kept_project: Path, kept_cluster: dict, tmp_path: Path) -> None:
    """Two builds at once, each relaying its rows through the daemon's socket to its one compiler: both
    finish, neither waits for the other's output tree, and their objects are the same bytes."""
    outs = [tmp_path / "one", tmp_path / "two"]
    builds = [_popen(kept_project, "build", f"targets=[{TARGET}]", f"outputs_dir={out}") for out in outs]
    said = [b.communicate(timeout=600) for b in builds]
    for build, (_, err) in zip(builds, said, strict=True):
        assert build.returncode == 0, err
        assert "rows go through the daemon's build socket" in err and "failed 0" in err
    first, second = (_objects(out) for out in outs)
    assert len(first) == 6 and first == second


@pytest.mark.slow
@pytest.mark.cluster
def test_a_daemon_that_stopped_answering_leaves_the_build_to_join_ray(kept_project: Path, kept_cluster: dict,
                                                                      tmp_path: Path) -> None:
    """A daemon stopped by SIGSTOP accepts no build: the build gives up on its socket within seconds and
    joins the cluster's Ray itself (whose actors still run), instead of hanging."""
    daemon = psutil.Process(kept_cluster["pid"])
    daemon.suspend()
    try:
        build = _bounded(kept_project, "build", f"targets=[{TARGET}]", ROW, f"outputs_dir={tmp_path / 'out'}",
                         limit_s=240)
    finally:
        daemon.resume()
    assert build.returncode == 0, build.stderr
    assert f"build socket {kept_cluster['relay']} does not answer" in build.stderr
    assert "joins its Ray cluster directly" in build.stderr and "built 1, failed 0" in build.stderr


@pytest.mark.slow
@pytest.mark.cluster
def test_sigkilled_daemon_leaves_no_ray_behind(project: Path, cluster: dict) -> None:
    """Case 14: after the daemon's SIGKILL its Ray agents lingered for minutes, one listening on loopback.
    The next farm command ends every process the daemon recorded (verified one by one)."""
    ray_procs = cluster["processes"]
    assert any(Path(p["cmdline"][0]).name == "raylet" for p in ray_procs)
    os.kill(cluster["pid"], signal.SIGKILL)
    status = run_farm(project, "cluster", "status", check=True)
    assert status.stdout.strip() == "no standing cluster is up"
    assert "removed a stale standing-cluster state" in status.stderr and "Ray processes it had left" in status.stderr
    assert still_running(ray_procs) == []


@pytest.mark.slow
@pytest.mark.cluster
def test_down_ends_the_daemon_group_and_its_ray_when_sigterm_fails(project: Path, cluster: dict) -> None:
    """Case 5: `down`'s SIGKILL fallback killed the daemon alone and left its Ray tree orphaned. The daemon is
    stopped (SIGSTOP; `down` lets it run again to act on SIGTERM) and given no time to stop by itself."""
    daemon = psutil.Process(cluster["pid"])
    assert os.getpgid(daemon.pid) == daemon.pid  # its own process group
    tree = [procs.identity(p) for p in daemon.children(recursive=True)]
    assert tree
    daemon.suspend()
    assert standing.down(project, timeout_s=0.01) is True
    assert still_running([cluster["daemon"], *tree, *cluster["processes"]]) == []
    assert not _state_path(project).exists()


def test_num_cpus_is_validated_before_ray_starts(project: Path) -> None:
    """Case 13: executor.num_cpus=abc failed inside Ray with the hint `check executor.address`."""
    from farm.core.errors import FarmError

    for args in (("build", f"targets=[{TARGET}]", "executor.num_cpus=abc"),
                 ("cluster", "up", "executor.num_cpus=0")):
        proc = _bounded(project, *args, limit_s=120)
        assert proc.returncode == 2, proc.stderr
        value = args[-1].split("=", 1)[1]
        assert "executor.num_cpus=" in proc.stderr and value in proc.stderr and "positive" in proc.stderr
        assert "executor.address" not in proc.stderr, proc.stderr
    assert not _state_path(project).exists()
    # The executor checks it too (a caller that skips the config's check), before Ray is imported.
    for bad in ("abc", 0, -2, "1.5", True):
        with pytest.raises(FarmError, match=r"executor\.num_cpus=.* is not a positive whole number"):
            executor.RayExecutor({"kind": "local", "num_cpus": bad}, 60).__enter__()
    assert local.num_cpus({"num_cpus": "3"}) == 3 and local.num_cpus({}) is None


@pytest.mark.slow
@pytest.mark.cluster
def test_private_cluster_keeps_ray_in_a_private_temp_dir_and_records_its_processes() -> None:
    """Case 14: Ray's session directories were under /tmp/ray, world-writable without the sticky bit."""
    import ray

    with executor.RayExecutor({"kind": "local", "num_cpus": 1, "max_retries": 0}, 60):
        context = ray.get_runtime_context()
        assert context.get_temp_dir() == local.ray_temp_dir()
        session = Path(context.get_temp_dir()) / context.get_session_name()
        assert session.name.startswith("session_") and (session / "sockets").is_dir()
        assert len(str(session)) + len("/sockets/plasma_store") < 107
        record = json.loads(procs.record_path(os.getpid()).read_text())
        assert any(Path(p["cmdline"][0]).name == "raylet" for p in record["processes"])
    assert not procs.record_path(os.getpid()).exists()


def test_leftovers_of_a_killed_driver_are_ended_only_when_proven_its_own() -> None:
    """Case 14: a later farm command ends the recorded Ray processes of a farm process that is gone,
    and nothing whose start time or command line does not match."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    leftover, foreign, live_owners = _sleeper(), _sleeper(), _sleeper()
    try:
        dead_owner = {"pid": gone.pid, "started": time.time() - 50, "cmdline": ["python", "-m", "farm.cli"]}
        left = procs.identity(psutil.Process(leftover.pid))
        wrong = dict(procs.identity(psutil.Process(foreign.pid)), started=time.time() - 1000)
        mine = procs.identity(psutil.Process(live_owners.pid))
        records = {90000001: {"owner": dead_owner, "processes": [left, wrong]},
                   90000002: {"owner": procs.identity(psutil.Process()), "processes": [mine]}}
        for fake_pid, record in records.items():
            procs.record_path(fake_pid).write_text(json.dumps(record))
        assert procs.end_leftovers() == 1
        assert procs.verified(left) is None  # ended (psutil reaped it, so Popen sees no status)
        assert foreign.poll() is None and live_owners.poll() is None
        assert not procs.record_path(90000001).exists() and procs.record_path(90000002).exists()
    finally:
        procs.record_path(90000002).unlink(missing_ok=True)
        for proc in (leftover, foreign, live_owners):
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class _Request:
    key: str


class _Flaky:
    """A stand-in compile actor: answers each request with an object-less success, except that its
    process exits on a `die/once` row the first time any actor sees it, and on every `die/always` row."""

    def __init__(self, marks: str) -> None:
        self.marks = Path(marks)

    def hello(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_actor_id())

    def compile_parcel(self, requests: list[_Request]) -> list[CompileResult]:
        calls = self.marks / "calls"
        with calls.open("a") as out:  # one line per call: its rows
            out.write(" ".join(r.key for r in requests) + "\n")
        return [self._compile(request, len(requests)) for request in requests]

    def _compile(self, request: _Request, parcel: int) -> CompileResult:
        mark = self.marks / request.key.replace("/", "_")
        if request.key == "die/always" or (request.key == "die/once" and not mark.exists()):
            mark.write_text(str(os.getpid()))
            # One file per actor that died: the row, and how many rows its call had.
            (self.marks / f"death-{os.getpid()}").write_text(f"{request.key} {parcel}")
            # A moment before dying: the reply of the call this actor ran just before must reach the driver
            # first. Exiting at once can lose it (on a loaded machine) and charge that innocent row a try.
            time.sleep(0.5)
            os._exit(1)
        return CompileResult(key=request.key, ok=True, worker=f"pid {os.getpid()}", finished_unix=time.time())


@contextlib.contextmanager
def private_local_cluster() -> Iterator[None]:
    """A two-CPU local Ray cluster in this process, ended after; Ray's token variables as they were (its
    ray.init turns token mode on in this process, and later builds on the shared cluster inherit them)."""
    import ray

    auth = ray_auth.save()
    local.start(2)
    try:
        yield
    finally:
        ray.shutdown()
        ray_auth.restore(auth)


@pytest.mark.slow
@pytest.mark.cluster
def test_a_dead_actor_s_row_is_retried_on_another_and_the_actor_replaced(tmp_path: Path) -> None:
    """Rows go to actors through Ray's ActorPool; a row whose actor dies goes to another actor, up to
    executor.max_retries times, then fails as "Ray task failed"; each dead actor is replaced."""
    import ray
    from ray import cloudpickle

    from farm.execute.dispatch import Dispatch

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    flaky = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_Flaky)
    started: list = []

    def new_actor() -> object:
        started.append(flaky.remote(str(tmp_path)))
        return started[-1]

    with private_local_cluster():
        dispatch = Dispatch(lambda actor, requests: actor.compile_parcel.remote(requests), retries=1,
                            replace=new_actor)
        assert dispatch.start([new_actor(), new_actor()], 120) == 2
        keys = [f"ok/{i}" for i in range(6)] + ["die/once", "die/always"]
        for key in keys:
            dispatch.submit(_Request(key))
        results = [r for batch in dispatch.batches(0.1) for r in batch]
    by_key = {r.key: r for r in results}
    assert sorted(by_key) == sorted(keys) and len(results) == len(keys)
    failed = {k: by_key[k].error for k in keys if k != "die/always" and not by_key[k].ok}
    assert not failed, (failed, (tmp_path / "calls").read_text())  # die/once: retried on another actor
    assert not by_key["die/always"].ok and by_key["die/always"].error.startswith("Ray task failed: ")
    assert len({by_key[k].worker for k in keys if k != "die/always"}) >= 2
    # Each actor that died was replaced, once: die/once's death and die/always's on its try and retry (how
    # many that is depends on which rows shared a dead actor's two slots: 6 actors were seen once for 5).
    deaths = len(list(tmp_path.glob("death-*")))
    assert deaths >= 2 and len(started) == 2 + deaths


@pytest.mark.slow
@pytest.mark.cluster
def test_rows_go_in_parcels_and_a_lost_parcel_s_rows_go_again_alone_uncharged(tmp_path: Path) -> None:
    """While many rows wait, a call carries several (up to MAX_PARCEL), and the last ones go one to a call.
    A parcel lost with its actor charges none of its rows a try: each goes again alone, so with no retries
    at all the rows beside a row that kills its actor still compile, and die/once (which killed its actor
    inside a parcel) too; die/always, alone, then fails on its own account."""
    import ray
    from ray import cloudpickle

    from farm.execute.dispatch import MAX_PARCEL, Dispatch

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    flaky = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(_Flaky)
    started: list = []

    def new_actor() -> object:
        started.append(flaky.remote(str(tmp_path)))
        return started[-1]

    keys = [f"ok/{i:02d}" for i in range(40)]
    keys[1], keys[6] = "die/once", "die/always"  # both in the first parcels (40 rows, 4 slots: 4 a call)
    with private_local_cluster():
        dispatch = Dispatch(lambda actor, requests: actor.compile_parcel.remote(requests), retries=0,
                            replace=new_actor)
        assert dispatch.start([new_actor(), new_actor()], 120) == 2
        for key in keys:
            dispatch.submit(_Request(key))
        results = [r for batch in dispatch.batches(0.1) for r in batch]
        returned = {r.key: dispatch.returned_unix(r.key) for r in results}
    by_key = {r.key: r for r in results}
    assert sorted(by_key) == sorted(keys) and len(results) == len(keys)
    assert all(by_key[k].ok for k in keys if k != "die/always")
    assert not by_key["die/always"].ok and by_key["die/always"].error.startswith("Ray task failed: ")
    calls = [line.split() for line in (tmp_path / "calls").read_text().splitlines()]
    sizes = [len(call) for call in calls]
    assert max(sizes) == MAX_PARCEL and sizes[-1] == 1 and len(calls) < len(keys)
    deaths = [f.read_text().split() for f in tmp_path.glob("death-*")]
    assert ["die/once", str(MAX_PARCEL)] in deaths  # it killed its actor inside a parcel: not charged
    assert ["die/always", "1"] in deaths  # alone, charged, and with no retries failed
    assert all(returned[k] is not None for k in keys if k != "die/always")


@pytest.mark.parametrize("name", ["daemon.lock", "in-use.lock"])
@pytest.mark.parametrize("planted", ["symlink", "fifo", "directory"])
def test_a_planted_lock_file_is_one_farm_error_and_nothing_is_written_through_it(tmp_path: Path, name: str,
                                                                                    planted: str) -> None:
    """The standing cluster's lock files are the farm's own: a symlink, FIFO or directory planted at one is
    refused with one error naming it, and a symlink's target is neither created nor written."""
    from farm.core.errors import FarmError
    from farm.execute import standing_files, standing_use

    where = tmp_path / ".farm" / "cluster"
    where.mkdir(parents=True, mode=0o700)
    target = tmp_path / "elsewhere"
    lock = where / name
    if planted == "symlink":
        lock.symlink_to(target)
    elif planted == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    if name == "daemon.lock":
        call = lambda: standing_files.spawn(tmp_path, 1, 1.0)  # noqa: E731
    else:
        call = lambda: standing_use.being_replaced(tmp_path)  # noqa: E731
    with pytest.raises(FarmError) as caught:
        call()
    assert str(lock) in caught.value.what and caught.value.fix and "remove" in caught.value.fix
    assert not target.exists()
    assert lock.is_symlink() == (planted == "symlink")
