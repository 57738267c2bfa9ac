"""Shared fixtures: a private copy of the project per test module, and a way to run `farm` in it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import psutil
import pytest
import yaml

from farm.toolchain.pin_file import pin_text

if TYPE_CHECKING:
    from farm.execute.processes import Identity

REPO = Path(__file__).resolve().parent.parent

# No test's build auto-starts a standing cluster (it would outlive the test): the farm's CI switch, set
# for the whole session and inherited by every `farm` the tests run. tests/test_warm_default.py and
# tests/test_standing.py turn it off for their own builds and stop what they start.
os.environ["CI"] = "true"

# A small rmsnorm table that still covers every target, both tiers, both phases and three dtype forms.
SMALL_RMSNORM_GROUPS = """groups:
  - name: baked
    name_format: 'rmsnorm_{dtype}_{phase}_n{n}'
    axes:
      dtype: [bf16, f16_f32gamma]
      phase: [train]
      n: [2560, 16384]
  - name: generic
    name_format: 'rmsnorm_{dtype}_{phase}_generic'
    axes:
      dtype: [f32, bf16]
      phase: [infer]
      n: [0]
"""
SMALL_ROWS_PER_TARGET = 6


def copy_project(dest: Path) -> Path:
    """conf/, kernels_src/ and instances/ of this checkout, in `dest` (the farm package stays installed)."""
    for name in ("conf", "kernels_src", "instances"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def burn_cpu(cpu_s: float = 0.03) -> None:
    """Spend `cpu_s` of this thread's CPU: a fixed amount of work took 9 ms on a fast machine, under what the
    verify-thread checks need, and ~40 ms on a slow one."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        hashlib.sha256(b"burn").hexdigest()


def built_copy(built: Path, dest: Path) -> Path:
    """A private copy of a built project (sources, table, outputs), to damage freely."""
    for name in ("conf", "kernels_src", "instances", "outputs"):
        shutil.copytree(built / name, dest / name)
    return dest


def built_one_target_copy(built: Path, dest: Path, target: str) -> Path:
    """`built_copy` whose outputs/ holds only `target`'s directories: byte for byte what `farm build
    targets=[target]` writes in a fresh copy of the small project (a rebuild anywhere is identical:
    tests/test_audit.py), without building again."""
    project = built_copy(built, dest)
    for directory in (project / "outputs").glob("*/*"):
        if directory.name != target:
            shutil.rmtree(directory)
    return project


def shrink_op(project: Path, op: str, groups_yaml: str) -> None:
    """Replace an op's groups with a small table (then `farm expand` must run)."""
    path = project / "conf" / "op" / f"{op}.yaml"
    text = path.read_text()
    path.write_text(text[: text.index("groups:")] + groups_yaml)


def shrink_rmsnorm(project: Path) -> None:
    shrink_op(project, "rmsnorm", SMALL_RMSNORM_GROUPS)


class RayHead(TypedDict):
    """The session's Ray cluster as the workers' shared record keeps it."""

    address: str  # HOST:PORT of its GCS
    pid: int  # the `ray start --head --block` process
    started: float  # that process's start time: a reused pid is not it
    temp: str  # its temp dir (logs)


class SessionClusters:
    """The session's two clusters, shared by all its test workers (pytest-xdist):
    - one Ray cluster on loopback, for audits' rebuilds, `farm emulate`'s tasks and the small tree's build;
    - one standing cluster for builds: a project of its own whose daemon keeps warm compilers between the tests'
      builds, started by `farm cluster up` on the first build that needs it. A build sent there
      (`executor.standing_root`) costs ~3 CPU s for one row on this kind of machine, against ~10 on the Ray
      cluster, where each build starts its own actors and their warm servers.
    One of each per session, not per worker: each start costs some 10 CPU s, and idle a standing cluster costs ~6%
    of a core, a Ray head ~3%.
    The workers meet in a directory of the session: a lock, and a JSON record of the clusters and of how many
    workers use them. The last worker to leave stops both."""

    def __init__(self) -> None:
        self.meet: Path | None = None  # the session's meeting directory, while this worker is in the session
        self.ray_address: str | None = None  # the Ray cluster's HOST:PORT, while this worker is in the session
        self.standing: Path | None = None  # the standing cluster's project, once this worker used it

    @contextlib.contextmanager
    def record(self) -> Iterator[dict[str, Any]]:
        """The shared record, read and written back under the session's lock."""
        assert self.meet is not None, "the session_clusters fixture sets the meeting directory"
        path = self.meet / "clusters.json"
        with open(self.meet / "clusters.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            record = json.loads(path.read_text()) if path.exists() else {}
            yield record
            path.write_text(json.dumps(record))

    def root_for_builds(self) -> Path:
        if self.standing is None:
            assert self.meet is not None, "the session_clusters fixture sets the meeting directory"
            with self.record() as record:
                if not record.get("standing"):
                    root = copy_project(self.meet / "hub")
                    run_farm(root, "cluster", "up", "executor.standing_idle_minutes=600", check=True)
                    record["standing"] = str(root)
                self.standing = Path(record["standing"])
        return self.standing

    def join(self, meet: Path) -> str:
        """Count this worker in; start the Ray cluster if it is the first. Returns the cluster's address."""
        self.meet = meet
        with self.record() as record:
            record["users"] = record.get("users", 0) + 1
            if "ray" not in record:
                record["ray"] = _start_ray()
            self.ray_address = record["ray"]["address"]
        return self.ray_address

    def leave(self, failed: bool) -> None:
        """Count this worker out; the last one stops both clusters (keeping Ray's logs when any worker failed)."""
        with self.record() as record:
            record["users"] -= 1
            record["failed"] = record.get("failed", False) or failed
            if record["users"] == 0:
                if record.get("standing"):
                    stop_cluster(Path(record["standing"]))
                _stop_ray(record["ray"], keep_logs=record["failed"])
                record.clear()
        self.meet = self.standing = self.ray_address = None


SESSION_CLUSTERS = SessionClusters()


def on_shared_cluster(project: Path, args: tuple[str, ...], env: dict[str, str] | None,
                      driver_env: bool = False) -> tuple[str, ...]:
    """A `farm build`, `farm audit` or `farm emulate` that says nothing of its executor and runs in the session's
    environment runs on the session's clusters (`SessionClusters`): a build on its standing cluster (warm
    compilers kept between builds), an audit (whose rebuild takes private workers) and emulate's tasks on its
    shared Ray cluster (executor=cluster).
    What such a test tests is not how a build starts its own cluster, and starting one costs ~5 s of Ray start
    and stop per build. Tests of the private and standing clusters name an executor setting or their own
    environment, and keep theirs (so does the audit test whose varied conditions must reach private workers: it
    passes an environment); so does a project where a standing cluster was ever started (its builds are to use
    it). `driver_env`: the test's environment is for the command's own process only (say, its private files),
    not for the compilers."""
    if (SESSION_CLUSTERS.ray_address and args and args[0] in ("build", "audit", "emulate")
            and (env is None or driver_env) and not (project / ".farm" / "cluster").exists()
            and not any(a.startswith(("executor", "--help", "-h")) for a in args)):
        if args[0] == "build":
            return (*args, f"executor.standing_root={SESSION_CLUSTERS.root_for_builds()}")
        return (*args, *on_shared_ray())  # an audit's rebuild, or `farm emulate`'s tasks
    return args


def on_shared_ray() -> tuple[str, ...]:
    """The overrides that send a build, an audit or `farm emulate` to the session's shared Ray cluster, where each
    command starts workers of its own (a build's report then shows every worker's warm-up, as on a private
    cluster)."""
    token = Path.home() / ".ray" / "auth_token"  # where `ray start` keeps the cluster's token
    # An audit's rebuild runs with another HOME: it is told where the token is.
    told = (f"executor.auth_token_path={token}",) if token.is_file() else ()
    return ("executor=cluster", f"executor.address={SESSION_CLUSTERS.ray_address}", *told)


# Verbs that read and write only files (vendor also runs `ruff format`; push and pull run DVC, whose import alone
# costs ~1.5 s of CPU a process) and start no compiler, worker, daemon or cluster: `run_farm` calls them in this
# process (an interpreter's start and the farm's imports cost ~0.5 s of CPU a call, a few hundred calls a session).
# A test whose subject is the process itself (its exit, its signals, an interpreter setting) passes `process=True`;
# an environment naming PYTHON* settings always gets a process.
# A build sent to the session's standing cluster is one too: it relays its rows to the daemon's socket, so its own
# process only reads, verifies and writes files (no Ray, no compiler). FARM_TEST_SUBPROCESS=1 runs every command in
# a process of its own (how the suite ran before).
IN_PROCESS_VERBS = frozenset({"check", "plan", "expand", "status", "golden", "diff", "vendor", "push", "pull"})


def _clear_farm_caches() -> None:
    """Forget what the farm caches once per process (code identities, import closures, Hydra answers): a
    process per command never reuses them, and tests edit files between commands."""
    for name, module in list(sys.modules.items()):
        if name == "farm" or name.startswith("farm."):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == name:
                    value.cache_clear()


def _run_in_process(args: tuple[str, ...], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`farm *args` through farm.cli.main in this process, with `env` as its whole environment and `cwd` as its
    directory for the call, its output captured: what `subprocess.run` of `python -m farm.cli` returns."""
    import io
    import traceback
    from contextlib import redirect_stderr, redirect_stdout

    from farm import cli
    from farm.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv = [str(Path(cli.__file__).with_name("__main__.py")), *args]  # as `python -m farm.cli` has it:
        # reports and lock holders name the command from it
        tempfile.tempdir = None  # tempfile keeps the directory it found first: TMPDIR is read again
        _clear_farm_caches()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            except Exception:  # noqa: BLE001 (what the interpreter does with an uncaught exception)
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        tempfile.tempdir = None
    return subprocess.CompletedProcess([sys.executable, "-m", "farm.cli", *args], code, out.getvalue(),
                                       err.getvalue())


def run_farm(project: Path, *args: str, env: dict[str, str] | None = None, driver_env: bool = False,
             cwd: Path | None = None, check: bool = False, process: bool = False) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("FARM_PROJECT", None)
    full_env.update(env or {})
    if cwd is not None and cwd != project:
        full_env["FARM_PROJECT"] = str(project)
    routed = on_shared_cluster(project, args, env, driver_env)
    relayed_build = routed[:1] == ("build",) and routed != args
    args = routed
    start = time.perf_counter()
    if (not process and args and (args[0] in IN_PROCESS_VERBS or relayed_build)
            and not os.environ.get("FARM_TEST_SUBPROCESS") and not any(key.startswith("PYTHON") for key in env or {})):
        proc = _run_in_process(args, cwd or project, full_env)
    else:
        proc = subprocess.run([sys.executable, "-m", "farm.cli", *args], cwd=cwd or project, env=full_env,
                              capture_output=True, text=True, timeout=1800)
    if os.environ.get("FARM_TEST_CALL_LOG"):  # a developer's measure of where the suite's time goes
        with open(os.environ["FARM_TEST_CALL_LOG"], "a") as log:
            log.write(f"{time.perf_counter() - start:.2f}\t{os.environ.get('PYTEST_CURRENT_TEST', '')}\t"
                      f"{' '.join(args)[:200]}\n")
    if check and proc.returncode != 0:
        raise AssertionError(f"farm {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def stop_cluster(project: Path) -> None:
    """End whatever standing cluster a test started in `project`, even one still coming up."""
    from farm.execute import standing_files

    if standing_files.starting(project):
        try:
            standing_files.wait_up(project, None, 120)
        except Exception:  # noqa: BLE001 (it failed to come up: nothing left to stop)
            pass
    run_farm(project, "cluster", "down")


def still_running(idents: list[Identity], timeout_s: float = 30) -> list[Identity]:
    """Which of these very processes (identities: pid and start time) still run after up to `timeout_s`."""
    from farm.execute.processes import verified

    deadline = time.monotonic() + timeout_s
    while (alive := [i for i in idents if verified(i) is not None]) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive


# Auto-start of the standing cluster on (conftest turns it off for every other test), and the line a build
# prints when it starts one.
AUTO_START_ON = {"CI": "false"}
STARTED = "started a standing cluster"


def latest_report(project: Path) -> dict:
    """The build report of the project's last build."""
    return json.loads((project / ".farm" / "reports" / "latest-build.json").read_text())


def worker_pid(worker: str) -> int:
    """The pid in a report's worker name ("... pid 1234")."""
    return int(worker.rsplit(" pid ", 1)[1])


LLD19 = Path("/usr/lib/llvm-19/bin/ld.lld")
# The disassembler block of the project's pin, for test toolchains (verification stays the same).
PINNED_DISASSEMBLER = "disassembler:" + (REPO / "conf/toolchain/pinned.yaml").read_text().split("\ndisassembler:")[1]


def write_lld19_toolchain(project: Path, name: str) -> None:
    """conf/toolchain/<name>.yaml pinning Debian's LLD 19: a second, real toolchain for the tests."""
    assert os.access(LLD19, os.X_OK), f"{LLD19} missing: run scripts/setup.sh --tests (apt lld-19)"
    digest = hashlib.sha256(LLD19.read_bytes()).hexdigest()
    pin = yaml.safe_load((REPO / "conf/toolchain/pinned.yaml").read_text())  # the same Python toolchain
    pin["linker"] = {"path": str(LLD19), "version": "Debian LLD 19.1.7", "sha256": digest}
    (project / "conf" / "toolchain" / f"{name}.yaml").write_text(pin_text(pin))


def edit(path: Path, old: str, new: str) -> None:
    """Replace the first `old` in the file with `new`; `old` must be there."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def small_copy(dest: Path) -> Path:
    """A project copy with the small rmsnorm table, selecting only rmsnorm by default
    (tests that need other ops select them: ops=[...]). `farm expand` still has to run."""
    project = copy_project(dest)
    shrink_rmsnorm(project)
    config = project / "conf" / "config.yaml"
    config.write_text(config.read_text().replace("\nops: []", "\nops: [rmsnorm]", 1))
    return project


def small_expanded_copy(dest: Path) -> Path:
    """`small_copy` with its table expanded."""
    project = small_copy(dest)
    run_farm(project, "expand", check=True)
    return project


def small_one_target_copy(dest: Path, target: str) -> Path:
    """`small_copy` selecting one target, with its table expanded (the cluster tests' project)."""
    project = small_copy(dest)
    config = project / "conf" / "config.yaml"
    config.write_text(config.read_text().replace("\ntargets: []", f"\ntargets: [{target}]", 1))
    run_farm(project, "expand", check=True)
    return project


def ray_auth_variables() -> dict[str, str]:
    """Ray's token variables (RAY_AUTH_*) in this process's environment."""
    return {k: v for k, v in os.environ.items() if k.startswith("RAY_AUTH")}


@pytest.fixture(autouse=True)
def ray_auth_left_as_found() -> Iterator[None]:
    """No test leaves Ray's token variables changed in this process: every later build on the shared cluster
    would inherit them (RAY_AUTH_MODE=token left behind made each one lose its actors at once)."""
    before = ray_auth_variables()
    yield
    assert ray_auth_variables() == before, "this test changed RAY_AUTH_* in the test process"


@pytest.fixture(scope="session", autouse=True)
def session_clusters(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                     worker_id: str) -> Iterator[str]:
    """This worker's part in the session's clusters (see SessionClusters): the Ray cluster's address."""
    base = tmp_path_factory.getbasetemp()
    address = SESSION_CLUSTERS.join(base if worker_id == "master" else base.parent)
    try:
        yield address
    finally:
        SESSION_CLUSTERS.leave(failed=bool(request.session.testsfailed))


def _start_ray() -> RayHead:
    """`ray start --head` on loopback, detached (its parent, a shell, exits at once: tests that reap every
    descendant of their process, tests/test_cluster.py, must not end it). `ray stop` would end every Ray process
    of this user, so the cluster is stopped as this `ray start`'s process tree (`_stop_ray`)."""
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths sit below it
    port = _free_port()
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")  # loopback only
    command = " ".join(shlex.quote(a) for a in [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
        f"--port={port}", f"--num-cpus={os.cpu_count() or 1}", f"--temp-dir={temp}", "--disable-usage-stats",
        "--include-dashboard=false"])
    launched = subprocess.run(["sh", "-c", f"{command} >/dev/null 2>&1 </dev/null & echo $!"], env=env,
                              capture_output=True, text=True, check=True)
    head = psutil.Process(int(launched.stdout))
    ray = RayHead(address=f"127.0.0.1:{port}", pid=head.pid, started=head.create_time(), temp=temp)
    try:
        _wait_for_port(port, head, 120)
    except RuntimeError:
        _stop_ray(ray, keep_logs=True)
        raise
    return ray


def _stop_ray(ray: RayHead, keep_logs: bool) -> None:
    """End the process tree `_start_ray` started (the same process: its start time is checked)."""
    with contextlib.suppress(psutil.Error):
        head = psutil.Process(ray["pid"])
        tree = [head, *head.children(recursive=True)] if head.create_time() == ray["started"] else []
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.kill()  # SIGTERM leaves most of Ray's processes up for more than 15 s
        psutil.wait_procs(tree, timeout=30)
    if keep_logs:  # they say whether the cluster itself broke
        sys.stderr.write(f"\nthe session's Ray cluster logs are kept in {ray['temp']}/session_latest/logs\n")
    else:
        shutil.rmtree(ray["temp"], ignore_errors=True)


def _wait_for_port(port: int, head: psutil.Process, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and head.is_running() and head.status() != psutil.STATUS_ZOMBIE:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the session's Ray cluster did not come up on 127.0.0.1:{port}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A private directory with a short path (a socket's path has ~100 bytes; pytest's tmp_path can be long)."""
    where = Path(tempfile.mkdtemp(prefix="sock-", dir="/tmp"))
    os.chmod(where, 0o700)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="session")
def small_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with the small rmsnorm table expanded (no objects yet)."""
    return small_expanded_copy(tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="session")
def built(small_project: Path, tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The small project built once into its outputs/ (every target: real compiles). Under pytest-xdist the
    first worker to get here builds and leaves its outputs/ and build reports beside the workers' temporary
    directories; the others copy them into their own project (the same bytes a build of theirs would write:
    tests/test_audit.py shows a rebuild anywhere is identical), so the small tree compiles once a session."""
    # On fresh compile actors, not the warm standing cluster: tests/test_build.py reads each worker's warm-up
    # in this build's report.
    if worker_id == "master":
        run_farm(small_project, "build", *on_shared_ray(), check=True)
        return small_project
    shared = tmp_path_factory.getbasetemp().parent / "built"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (shared / "done").exists():
            run_farm(small_project, "build", *on_shared_ray(), check=True)
            for name in ("outputs", ".farm/reports"):
                shutil.copytree(small_project / name, shared / name, symlinks=True)
            (shared / "done").touch()
            return small_project
    for name in ("outputs", ".farm/reports"):  # an earlier test of this worker may have written reports here
        shutil.copytree(shared / name, small_project / name, symlinks=True, dirs_exist_ok=True)
    return small_project


def _file_seconds() -> dict[str, float]:
    lines = (Path(__file__).parent / "file_seconds.txt").read_text().splitlines()
    return {name: float(seconds) for seconds, name in (line.split() for line in lines if not line.startswith("#"))}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first (tests/file_seconds.txt): the workers take whole files in this order (--dist
    loadfile), and a long file started last would run alone while the other workers sit idle. The order of
    the tests within a file is kept."""
    seconds = _file_seconds()
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))
