"""A Ray cluster set up the way a user sets one up (issue 18): `ray start --head` plus two
`ray start --address=...` worker nodes, real processes on loopback, each node with its own temp
directory, token authentication on (the head found a token in ~/.ray/auth_token), and a private HOME
so that the user's ~/.ray is never touched. Builds go through `executor=cluster`; one worker node is
killed mid-build; every process the test started is ended by pid and checked gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from conftest import run_farm, small_one_target_copy
from test_cluster import (
    TARGET,
    _descendants,
    _kill,
    _uses,
    assert_sockets_on_loopback,
    golden_digests,
    recorded,
    short_tmp,
    temporaries,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

RAY = Path(sys.executable).with_name("ray")
ROWS = 6  # the small rmsnorm table (conftest) for one target
# The environment every Ray process of this module gets: loopback, no usage stats, no inherited auth.
RAY_ENV_DROP = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS", "RAY_TMPDIR",
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Ray 2.60's `ray start` cannot keep a multi-node cluster on loopback by itself: without the switch at 0
# the head's GCS advertises the machine's address and listens on every interface (--node-ip-address is
# not passed to it), and with the switch at 0 a joining node refuses to start ("Multi-node Ray clusters
# are not supported") and, past that, turns --address=127.0.0.1:PORT into the machine's address. So the
# head is `ray start --head` with the switch at 0, and a worker node is `ray start --address=...` run
# with the switch on and that one address rewrite turned off; the sockets are checked below.
WORKER_START = """
import sys
from ray._private import services
services.resolve_ip_for_localhost = lambda host: host  # --address=127.0.0.1:PORT stays on loopback
from ray.scripts.scripts import main
sys.argv[0] = "ray"
main()
"""


@dataclass
class RealCluster:
    root: Path        # everything of this module: nodes' temp dirs, the private HOME
    home: Path        # HOME of every node and of the builds (holds .ray/auth_token, mode 0600)
    address: str      # 127.0.0.1:PORT of the head's GCS
    node_dirs: dict[str, Path] = field(default_factory=dict)  # node name -> its --temp-dir
    seen: dict[int, psutil.Process] = field(default_factory=dict)  # every process seen of this module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RAY_ENV_DROP}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


def node_processes(rc: RealCluster, name: str) -> list[psutil.Process]:
    """Every process of one node: the ones that use its temp dir, and what they started."""
    root = str(rc.node_dirs[name])
    procs = {p.pid: p for p in psutil.process_iter() if p.pid != os.getpid() and _uses(p, root)}
    for p in list(procs.values()):
        procs.update({c.pid: c for c in _descendants(p.pid)})
    rc.seen.update(procs)
    return list(procs.values())


def raylet_of(rc: RealCluster, name: str) -> psutil.Process:
    for p in node_processes(rc, name):
        with contextlib.suppress(psutil.Error):
            if p.name() == "raylet":
                return p
    raise AssertionError(f"no raylet for node {name}")


def start_node(rc: RealCluster, name: str, *args: str, **env: str) -> None:
    temp = rc.root / name
    temp.mkdir()
    (temp / "tmp").mkdir()
    rc.node_dirs[name] = temp
    # TMPDIR: the node's compiles keep their private work dirs (job.json) there, so rows in flight on
    # this node can be seen from outside.
    head = "--head" in args
    ray_cli = [str(RAY)] if head else [sys.executable, "-c", WORKER_START]
    env[LOOPBACK_SWITCH] = "0" if head else "1"
    proc = subprocess.run([*ray_cli, "start", "--node-ip-address=127.0.0.1", f"--temp-dir={temp}",
                           "--disable-usage-stats", *args],
                          env=ray_env(rc.home, TMPDIR=str(temp / "tmp"), **env), capture_output=True,
                          text=True, timeout=180)
    node_processes(rc, name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[RealCluster]:
    root = short_tmp("frc-")
    home = root / "home"
    (home / ".ray").mkdir(parents=True, mode=0o700)
    token = home / ".ray" / "auth_token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    rc = RealCluster(root, home, f"127.0.0.1:{free_port()}")
    try:
        start_node(rc, "head", "--head", f"--port={rc.address.split(':')[1]}", "--num-cpus=0",
                   "--include-dashboard=false")
        # A worker node joining a token cluster must be told to send its token (ray start only
        # turns token mode on by itself for a head).
        for name in ("w1", "w2"):
            start_node(rc, name, f"--address={rc.address}", "--num-cpus=1", RAY_AUTH_MODE="token")
        everything = [p for name in rc.node_dirs for p in node_processes(rc, name)]
        assert assert_sockets_on_loopback(everything) > 0
        yield rc
    finally:
        for name in rc.node_dirs:
            node_processes(rc, name)
        _kill(list(rc.seen.values()))
        left = [p for p in psutil.process_iter() if p.pid != os.getpid() and _uses(p, str(root))]
        named = [f"{p.pid} {' '.join(p.cmdline())[:100]}" for p in left if p.is_running()]
        _kill(left)
        running = [p.pid for p in rc.seen.values() if p.is_running()]
        shutil.rmtree(root, ignore_errors=True)
        assert not named and not running, f"processes left behind: {named} {running}"


def live_worker_nodes(rc: RealCluster) -> list[str]:
    """The worker nodes whose raylet runs, after starting a new one for each worker node a test killed (the
    node-kill test leaves one dead; a test after it that needs two worker nodes gets two)."""
    def alive(name: str) -> bool:
        with contextlib.suppress(AssertionError, psutil.Error):
            return raylet_of(rc, name).is_running()
        return False

    workers = [name for name in rc.node_dirs if name != "head"]
    live = [name for name in workers if alive(name)]
    while len(live) < 2:
        name = f"w{len(rc.node_dirs)}"
        start_node(rc, name, f"--address={rc.address}", "--num-cpus=1", RAY_AUTH_MODE="token")
        live.append(name)
    return live


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_one_target_copy(tmp_path_factory.mktemp("real-cluster"), TARGET)


def build_cmd(rc: RealCluster, out: Path, reports: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "farm.cli", "build", "executor=cluster", f"executor.address={rc.address}",
            f"outputs_dir={out}", f"report_dir={reports}", *extra]


def build_env(home: Path, **extra: str) -> dict[str, str]:
    env = ray_env(home, **extra)
    env.pop("FARM_PROJECT", None)
    return env


def assert_golden(out: Path, count: int) -> None:
    golden = golden_digests()
    objects = sorted(out.rglob("*.hsaco"))
    assert len(objects) == count
    for path in objects:
        name = path.relative_to(out).as_posix()
        assert hashlib.sha256(path.read_bytes()).hexdigest() == golden[name], f"{name} differs from outputs.sha256"


def in_flight(rc: RealCluster, name: str) -> set[str]:
    keys = set()
    for job in (rc.node_dirs[name] / "tmp").glob("farm-compile-*/job.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            keys.add(json.loads(job.read_text())["request"]["key"])
    return keys


# ------------------------------------------------------------------------------------------- tests


def test_missing_or_wrong_token_is_named(real_cluster: RealCluster, project: Path, tmp_path: Path) -> None:
    """Without the token (an empty HOME), or with another one, the build fails at once with one error
    that names the token; before, ray.init retried ~20 s and blamed executor.address."""
    empty = tmp_path / "empty-home"
    empty.mkdir()
    cases = {"missing": (empty, {}, "requires an auth token, and none was found"),
             "wrong": (real_cluster.home, {"RAY_AUTH_TOKEN": "0" * 64},
                       "refused the auth token from the RAY_AUTH_TOKEN environment variable")}
    for case, (home, extra, said) in cases.items():
        proc = subprocess.run(build_cmd(real_cluster, tmp_path / case, tmp_path / f"{case}-rep"), cwd=project,
                              env=build_env(home, **extra), capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("farm build: error:")]
        assert len(errors) == 1 and said in errors[0] and "InvalidAuthToken" in errors[0], proc.stderr
        assert "executor.address" not in proc.stderr, proc.stderr
        assert "gcs_client.cc" not in proc.stderr, "Ray's own log lines leaked: " + proc.stderr
        assert "executor.auth_token_path=FILE" in proc.stderr
        assert not (tmp_path / case).exists()


def test_token_path_key(real_cluster: RealCluster, project: Path, tmp_path: Path) -> None:
    """executor.auth_token_path names the token when it is not in Ray's standard places."""
    empty = tmp_path / "empty-home"
    empty.mkdir()
    out = tmp_path / "outputs"
    token = real_cluster.home / ".ray" / "auth_token"
    proc = subprocess.run(build_cmd(real_cluster, out, tmp_path / "rep", "dtypes=[f32]",
                                    f"executor.auth_token_path={token}"),
                          cwd=project, env=build_env(empty), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "readable by other users" not in proc.stderr
    rows = json.loads((tmp_path / "rep" / "latest-build.json").read_text())["rows"]
    assert rows and all(r["written"] for r in rows)
    assert_golden(out, len(rows))


def kill_now(procs: list[psutil.Process]) -> None:
    """SIGKILL each at once, in order (a node's raylet first, so that it restarts nothing)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def node_with_a_row_in_flight(build: subprocess.Popen, out: Path, log: Path, nodes: Iterable[str],
                              busy: Callable[[str], bool], timeout_s: float = 300) -> str:
    """The first of `nodes` with a row in flight (`busy`: its compile has started, so its node is warm). Not
    gated on objects written: manifests are flushed at most every 5 s, so a small build may finish before
    any object is recorded."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert build.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "no row was in flight on a worker node after the first objects"
        found = next((node for node in nodes if busy(node)), None)
        if found is not None:
            return found
        time.sleep(0.02)


def test_build_survives_a_worker_node_killed_mid_build(real_cluster: RealCluster, project: Path,
                                                       tmp_path: Path) -> None:
    """The token in ~/.ray/auth_token is found with nothing exported; a worker node dies mid-build (its
    raylet and every process of it, by pid); the build completes on the other with golden bytes. The one
    node-kill test (test_cluster.py had a second, on Ray's in-process test cluster): the rows cut off are
    compiled again on the survivor, nothing came back from the dead node after it died, the driver talks to
    the cluster over loopback only, no temporary is left and `farm check` passes."""
    rc = real_cluster
    out, reports = tmp_path / "outputs", tmp_path / "reports"
    with open(tmp_path / "build.log", "wb") as log:
        build = subprocess.Popen(build_cmd(rc, out, reports), cwd=project, env=build_env(rc.home),
                                 stdout=log, stderr=subprocess.STDOUT)
    try:
        victim = node_with_a_row_in_flight(build, out, tmp_path / "build.log", ("w1", "w2"),
                                           lambda name: in_flight(rc, name))
        # Mid-build, the driver (a Ray client of the cluster) talks to it over loopback only.
        assert assert_sockets_on_loopback([psutil.Process(build.pid)]) > 0
        raylet = raylet_of(rc, victim)
        doomed = [raylet, *[p for p in node_processes(rc, victim) if p.pid != raylet.pid]]
        kill_now(doomed)
        written_at_kill = len(recorded(out))
        killed_at = time.time()
        _kill(doomed)
        interrupted = in_flight(rc, victim)  # their work dirs were never cleaned up
        assert not [p.pid for p in doomed if p.is_running()]
        code = build.wait(timeout=600)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    text = (tmp_path / "build.log").read_text()
    assert code == 0, text
    assert written_at_kill < ROWS, "the node died after the build had everything"
    assert "gcs_client.cc" not in text and "InvalidAuthToken" not in text, text
    rows = json.loads((reports / "latest-build.json").read_text())["rows"]
    assert len(rows) == ROWS and all(r["written"] for r in rows)
    # The rows cut off by the kill were compiled again, after it, on the surviving node.
    assert interrupted, "the kill cut off no row"
    by_key = {r["key"]: r for r in rows}
    for key in interrupted:
        assert by_key[key]["finished_unix"] > killed_at, by_key[key]
    (survivor,) = {r["node"] for r in rows if r["key"] in interrupted}
    # Two worker nodes (the head has no CPUs): every row of the other one came back before it died.
    assert len({r["node"] for r in rows}) <= 2
    for r in rows:
        if r["node"] != survivor:
            assert r["finished_unix"] <= killed_at, f"{r['key']} came back from a dead node"
    assert not temporaries(out), temporaries(out)
    assert_golden(out, ROWS)
    check = run_farm(project, "check", f"outputs_dir={out}")
    assert check.returncode == 0, check.stdout + check.stderr


def test_emulate_spreads_over_the_worker_nodes(real_cluster: RealCluster, built: Path, tmp_path: Path) -> None:
    """`farm emulate` with executor=cluster runs its objects as tasks on the cluster's nodes: the six RMSNorm
    objects of one target are all within, and they ran on both worker nodes (the head has no CPUs)."""
    workers = live_worker_nodes(real_cluster)
    assert len(workers) == 2, workers
    reports = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "emulate", "ops=[rmsnorm]", "targets=[gfx11-generic]",
                           "executor=cluster", f"executor.address={real_cluster.address}", f"report_dir={reports}"],
                          cwd=built, env=build_env(real_cluster.home), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((reports / "latest-emulate.json").read_text())
    assert (report["emulated"], report["within"], report["executor"]["kind"]) == (ROWS, ROWS, "cluster")
    nodes = {o["node"] for o in report["objects"]}
    assert None not in nodes and len(nodes) == 2, nodes


def test_a_private_local_cluster_writes_no_readable_token(real_cluster: RealCluster, tmp_path: Path) -> None:
    """ray.init starting a local cluster writes ~/.ray/auth_token with a plain open() (mode 0644 under
    umask 022) when it finds none; the farm's private cluster writes it first, for this user only."""
    home = real_cluster.root / "home2"  # below the module's root: its processes are swept at the end
    home.mkdir()
    temp = real_cluster.root / "t"
    temp.mkdir(mode=0o700)
    # The usual umask, under which Ray's own write makes the token readable by everyone.
    script = ("import os\nos.umask(0o022)\nimport ray\nfrom farm.execute import ray_compat\n"
              f"ray_compat.init_local(1, {str(temp)!r}, include_dashboard=False, logging_level='ERROR')\n"
              "ray.shutdown()\n")
    proc = subprocess.run([sys.executable, "-c", script], env=ray_env(home), capture_output=True, text=True,
                          timeout=300, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    token = home / ".ray" / "auth_token"
    assert token.is_file() and len(token.read_text()) == 64
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700


def test_token_path_key_naming_no_file(project: Path, tmp_path: Path) -> None:
    """A token path that holds no token is named before anything is asked of Ray."""
    missing = tmp_path / "no-token"
    nowhere = RealCluster(tmp_path, tmp_path, "127.0.0.1:1")
    proc = subprocess.run(build_cmd(nowhere, tmp_path / "out", tmp_path / "rep", f"executor.auth_token_path={missing}"),
                          cwd=project, env=build_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("farm build: error:")]
    said = f"farm build: error: executor.auth_token_path={missing}: no such file, or it is empty"
    assert errors == [said], proc.stderr
