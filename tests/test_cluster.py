"""A real multi-node Ray cluster on loopback (`ray.cluster_utils.Cluster`: a 0-CPU head and 1-CPU
worker nodes, all on 127.0.0.1), real compiles of a small rmsnorm table for one target, and faults:
the driver killed mid-build, a node whose toolchain differs (a worker node killed mid-build is in
tests/test_real_cluster.py, on nodes started with `ray start`).

What "the worker nodes share no disk with the driver" means here, and what is proven: the nodes are
processes on this machine, so they *could* read the driver's files. Every Python process of a worker
node runs a test-only `sitecustomize` (through the node's PYTHONPATH) whose audit hook refuses, and
logs, any open / listdir / scandir / chdir under the project directory or the driver's `farm`
package directory; the build's Ray workers are shown to run under it, a probe task shows it bites,
and a build (run from the project directory, as documented) must log no refusal. So the workers'
kernel sources came from the object store and their farm code from Ray's runtime_env. The compile
processes the workers start (warm server, forked compiles) get a scrubbed environment, so the hook
does not follow them; they are told only the request, and the test checks that no request and no
source name carries a path of the driver's disk. Not proven: C-level reads by native code (raylet,
LLVM), and anything about a second machine's filesystem layout or network.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import REPO, last_line, latest_report, run_farm, small_one_target_copy

import farm

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

# Ray reads this when it is imported, and every node this module starts inherits it: with it, the
# nodes advertise and bind 127.0.0.1. Set before anything here imports ray.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

TARGET = "gfx942"
ROWS = 6  # the small rmsnorm table (conftest) for one target
FARM_PACKAGE = Path(farm.__file__).resolve().parent  # the driver's farm code
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
PIN_DIFF = "flydsl: pinned '0.3.4', found '0.3.3'"

# Installed on worker nodes only (PYTHONPATH of the node): refuse and log any access to the project.
GUARD_SITECUSTOMIZE = '''\
import os
import sys

_FORBID = [p for p in os.environ.get("FARM_TEST_FORBID", "").split(os.pathsep) if p]
_LOG = os.environ.get("FARM_TEST_FORBID_LOG")


def _note(line):
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line[:400] + "\\n").encode())
    finally:
        os.close(fd)


def _hook(event, args):
    if event not in ("open", "os.listdir", "os.scandir", "os.chdir") or not args:
        return
    path = args[0]
    if path is None or isinstance(path, int):
        return
    full = os.path.abspath(os.fsdecode(path))
    if any(full == root or full.startswith(root + os.sep) for root in _FORBID):
        _note(f"DENIED {event} {full} pid {os.getpid()} {' '.join(sys.argv)}")
        raise PermissionError(f"{full}: the driver's disk is not reachable from this node (test guard)")


if _FORBID and _LOG:
    sys.addaudithook(_hook)
    _note(f"ARMED pid {os.getpid()} {' '.join(getattr(sys, 'argv', []))}")
'''

# Processes this module caused (cluster nodes, their workers, killed builds' Ray): reaped at the end.
_REAP: dict[int, psutil.Process] = {}


def _remember(procs: list[psutil.Process]) -> None:
    for p in procs:
        _REAP.setdefault(p.pid, p)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill(procs: list[psutil.Process]) -> list[psutil.Process]:
    """SIGKILL each still-running process (psutil checks its start time: no pid reuse), and what it
    spawned meanwhile; returns the ones that were still running."""
    running = [p for p in procs if p.is_running()]
    for p in list(running):
        running += [c for c in _descendants(p.pid) if c.pid not in {r.pid for r in running}]
    for p in running:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(running, timeout=15)
    return running


def short_tmp(prefix: str) -> Path:
    """Ray's unix sockets live under its temp dir; pytest's tmp paths are too long for them."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def temporaries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith(".tmp"))


def recorded(out: Path) -> set[str]:
    """Objects the manifests record and that are on disk (what a resumed build counts as done)."""
    manifest = out / "rmsnorm" / TARGET / "manifest.json"
    try:
        entries = json.loads(manifest.read_text())["objects"]
    except (OSError, ValueError):
        return set()
    return {e["file"] for e in entries if (manifest.parent / e["file"]).is_file()}


def node_id_of(row: dict[str, Any]) -> str:
    """The node-id part of a report row's "node" (host/ip/node id prefix)."""
    return str(row["node"]).split("/")[2]


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def ray_temp() -> Iterator[Path]:
    """Every Ray session of this module (cluster nodes, local builds) and the cluster's
    `ray_current_cluster` file live in a private directory, not /tmp/ray; all processes are reaped."""
    root = short_tmp("fc-")
    before = {p.pid for p in _descendants(os.getpid())}
    with environment(RAY_TMPDIR=str(root)):
        yield root
    _remember([p for p in _descendants(os.getpid()) if p.pid not in before])
    _kill(list(_REAP.values()))
    # Nothing of this module's Ray may outlive it: no process may still use its temp directory.
    left = [p for p in psutil.process_iter() if p.pid != os.getpid() and _uses(p, str(root))]
    named = [f"{p.pid} {' '.join(p.cmdline())[:100]}" for p in left if p.is_running()]
    _kill(left)
    shutil.rmtree(root, ignore_errors=True)
    assert not named, f"processes left behind: {named}"


def _uses(proc: psutil.Process, root: str) -> bool:
    """Does the process run from, or hold a file in, `root` (this module's Ray and node temp dirs)?"""
    try:
        if any(root in arg for arg in proc.cmdline()) or proc.cwd().startswith(root):
            return True
        return any(f.path.startswith(root) for f in proc.open_files())
    except psutil.Error:
        return False


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_one_target_copy(tmp_path_factory.mktemp("cluster"), TARGET)


@pytest.fixture(scope="module")
def reference(built: Path) -> dict[str, bytes]:
    """The same rows built locally (default executor): the session's build of the small table, TARGET's
    directory (objects, manifest.json, SOURCE.md)."""
    ref = {name: data for name, data in tree_bytes(built / "outputs").items() if name.startswith(f"rmsnorm/{TARGET}/")}
    assert sum(name.endswith(".hsaco") for name in ref) == ROWS
    return ref


@pytest.fixture(scope="module")
def guard(project: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("guard")
    (where / "site").mkdir()
    (where / "site" / "sitecustomize.py").write_text(GUARD_SITECUSTOMIZE)
    # A flydsl that is not the pin, as far as importlib.metadata can tell; the real one still imports.
    meta = where / "fake-flydsl" / "flydsl-0.3.3.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: flydsl\nVersion: 0.3.3\n")
    return {"site": str(where / "site"), "fake": str(where / "fake-flydsl"),
            "log": where / "guard.log", "forbid": [str(project.resolve()), str(FARM_PACKAGE)]}


# Each worker node's own temp directory (its compiles' private work dirs land there), by node id.
NODE_TMP: dict[str, Path] = {}


def add_worker(cluster: Any, guard: dict[str, Any], *extra_path: str) -> Any:
    """A 1-CPU worker node whose processes cannot touch the project (and see `extra_path` first),
    with a temp directory of its own."""
    path = os.pathsep.join([guard["site"], *extra_path, *filter(None, [os.environ.get("PYTHONPATH")])])
    # Under the module's Ray temp dir, whose users are swept at the end (a node's orphaned compiles too).
    tmp = Path(tempfile.mkdtemp(prefix="node-", dir=os.environ["RAY_TMPDIR"]))
    with environment(PYTHONPATH=path, TMPDIR=str(tmp), FARM_TEST_FORBID=os.pathsep.join(guard["forbid"]),
                     FARM_TEST_FORBID_LOG=str(guard["log"])):
        node = cluster.add_node(num_cpus=1)
    NODE_TMP[node.node_id] = tmp
    # Compiles on the nodes (the raylet's future children) yield the CPU to this test's polling, on 2 cores.
    for proc in [psutil.Process(raylet_pid(node)), *_descendants(raylet_pid(node))]:
        with contextlib.suppress(psutil.Error):
            proc.nice(10)
    return node


@pytest.fixture(scope="module")
def cluster(ray_temp: Path, guard: dict[str, Any]) -> Iterator[Any]:
    """A head with no CPUs (nothing runs there) and two 1-CPU worker nodes, on loopback."""
    import ray
    from ray.cluster_utils import Cluster

    from farm.execute import ray_compat

    ray_compat.keep_loopback_switch()  # in case ray was imported before this module set the switch
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            add_worker(cluster, guard)
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        yield cluster
    finally:
        _remember(_descendants(os.getpid()))
        ray.shutdown()
        cluster.shutdown()
        # A node's processes die with it; whatever outlived it (a warm compile server) goes now.
        _kill(list(_REAP.values()))


def set_worker_nodes(cluster: Any, guard: dict[str, Any], count: int) -> list[Any]:
    """Exactly `count` guarded worker nodes (removing or adding), all alive and on loopback."""
    while len(cluster.worker_nodes) > count:
        node = sorted(cluster.worker_nodes, key=lambda n: n.node_id)[0]
        _remember(_descendants(raylet_pid(node)))
        cluster.remove_node(node)
    while len(cluster.worker_nodes) < count:
        add_worker(cluster, guard)
    cluster.wait_for_nodes()
    assert_loopback(cluster)
    return sorted(cluster.worker_nodes, key=lambda n: n.node_id)


def raylet_pid(node: Any) -> int:
    return node.all_processes["raylet"][0].process.pid


def assert_loopback(cluster: Any) -> None:
    """Every node advertises 127.0.0.1, and every socket of the cluster's processes is on loopback."""
    import ray

    nodes = ray.nodes()
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}, nodes
    alive = {n["NodeID"] for n in nodes if n["Alive"]}
    assert alive == {cluster.head_node.node_id} | {n.node_id for n in cluster.worker_nodes}
    assert_sockets_on_loopback(_descendants(os.getpid()))


def assert_sockets_on_loopback(procs: list[psutil.Process]) -> int:
    """Every inet socket of these processes is on loopback; returns how many there were."""
    count = 0
    for proc in procs:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        for c in conns:
            assert c.laddr.ip in LOOPBACK, f"{proc.name()} {proc.pid} bound to {c.laddr}"
            assert not c.raddr or c.raddr.ip in LOOPBACK, f"{proc.name()} {proc.pid} talks to {c.raddr}"
            count += 1
    return count


def on_node(node: Any, fn: Any, *args: Any) -> Any:
    """Run `fn` as a Ray task on that node (from this test process, a driver of the cluster)."""
    import ray
    from ray import cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # The probes travel by value: the worker nodes cannot import this test module.
    cloudpickle.register_pickle_by_value(sys.modules[fn.__module__])
    task = ray.remote(num_cpus=1, max_retries=0)(fn).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
    return ray.get(task.remote(*args), timeout=120)


def _probe_read(path: str) -> str:
    try:
        with open(path, "rb"):
            return "readable"
    except PermissionError as exc:
        return f"refused: {exc}"


def _probe_flydsl() -> tuple[str, str]:
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("flydsl")
    return importlib.metadata.version("flydsl"), str(spec.origin if spec else None)


def cluster_build(project: Path, cluster: Any, *overrides: str) -> subprocess.CompletedProcess:
    """`farm build executor=cluster` from the project directory (Ray tells workers the driver's cwd)."""
    return run_farm(project, "build", "executor=cluster", f"executor.address={cluster.address}", *overrides)


def guard_log(guard: dict[str, Any]) -> list[str]:
    path = guard["log"]
    return path.read_text().splitlines() if path.is_file() else []


# ------------------------------------------------------------------------------------------- tests


def golden_digests() -> dict[str, str]:
    """The committed golden digests (outputs.sha256 of the checkout), by path relative to outputs/."""
    lines = (REPO / "outputs.sha256").read_text().splitlines()
    return {path: digest for digest, path in (line.split(maxsplit=1) for line in lines if line.strip())}


def test_rows_spread_over_four_worker_nodes_and_match_a_local_build(cluster: Any, project: Path, guard: dict[str, Any],
                                                                    reference: dict[str, bytes]) -> None:
    """Four 1-CPU worker nodes each compile rows of one build (issue 16 point 5), never the head, never touching
    the driver's disk; every object is the local build's and the committed golden one. Why every node gets a
    row: the build waits for all its actors (one per CPU, so one per node here) to answer before it sends rows,
    and the pool hands the first four rows to four idle actors, one each; the table has more rows than nodes."""
    workers = set_worker_nodes(cluster, guard, 4)
    worker_ids = {n.node_id[:8] for n in workers}
    assert len(worker_ids) == 4 and ROWS > len(worker_ids)
    assert cluster.head_node.node_id[:8] not in worker_ids
    # The guard bites on every worker node (a control: without it the no-refusal check below means nothing).
    for node in workers:
        for path in (project / "conf" / "config.yaml", FARM_PACKAGE / "execute" / "executor.py"):
            assert on_node(node, _probe_read, str(path)).startswith("refused:")
    seen = len(guard_log(guard))

    proc = cluster_build(project, cluster)
    assert proc.returncode == 0, proc.stderr
    assert f"rows={ROWS} up_to_date=0 to_build={ROWS}" in proc.stderr

    report = latest_report(project)
    rows = report["rows"]
    assert len(rows) == ROWS and all(r["written"] for r in rows)
    per_node = {node: sum(node_id_of(r) == node for r in rows) for node in worker_ids}
    assert all(per_node.values()), f"rows per worker node: {per_node}"
    used = {node_id_of(r) for r in rows}
    assert used == worker_ids, f"rows ran on {used}, worker nodes are {worker_ids} (head {cluster.head_node.node_id})"
    assert all(r["node"].split("/")[1] == "127.0.0.1" for r in rows)

    assert tree_bytes(project / "outputs") == reference
    golden = golden_digests()
    for name, data in reference.items():
        if name.endswith(".hsaco"):
            assert hashlib.sha256(data).hexdigest() == golden[name], f"{name} differs from its golden digest"
    check = run_farm(project, "check")
    assert check.returncode == 0, check.stdout
    assert last_line(check.stdout) == (f"checked {ROWS} objects and 1 manifest in 1 directory "
                                       "against the build record (outputs.sha256 not recorded yet: `farm golden`): "
                                       "no drift")

    # No process of a worker node touched the project or the driver's farm package; Ray workers ran guarded.
    new = guard_log(guard)[seen:]
    denied = [line for line in new if line.startswith("DENIED")]
    assert not denied, "a worker node touched the driver's disk:\n" + "\n".join(denied)
    assert any(line.startswith("ARMED") and "default_worker" in line for line in new), new
    # What the driver hands a worker names no path of its disk: sources by relative name, requests by value.
    from farm.build import compile_request
    from farm.plan.sources import collect
    from farm.table.config import load
    from farm.table.expand import fresh_rows

    cfg = load(project, [])
    selected, _ = fresh_rows(cfg)
    assert len(selected) == ROWS
    for row in selected:
        text = json.dumps(compile_request(cfg, row).to_json())
        assert str(project) not in text and str(project.resolve()) not in text, text
    names = list(collect(cfg.kernels_dir))
    assert names and not [n for n in names if n.startswith("/") or ".." in n.split("/")]
    assert_loopback(cluster)


def test_worker_with_another_toolchain_fails_its_rows(cluster: Any, project: Path, guard: dict[str, Any],
                                                      reference: dict[str, bytes], tmp_path: Path) -> None:
    (good,) = set_worker_nodes(cluster, guard, 1)
    bad = add_worker(cluster, guard, guard["fake"])  # PYTHONPATH: a flydsl-0.3.3 dist-info, nothing else
    try:
        cluster.wait_for_nodes()
        assert_loopback(cluster)
        # The bad node's processes see flydsl 0.3.3 in its metadata while the real package still imports.
        version, origin = on_node(bad, _probe_flydsl)
        assert version == "0.3.3" and origin.startswith(sys.prefix), (version, origin)
        assert on_node(good, _probe_flydsl)[0] == "0.3.4"

        out, reports = tmp_path / "outputs", tmp_path / "reports"
        proc = cluster_build(project, cluster, f"outputs_dir={out}", f"report_dir={reports}")
        report = json.loads((reports / "latest-build.json").read_text())
        rows = report["rows"]
        assert len(rows) == ROWS
        on_bad = [r for r in rows if node_id_of(r) == bad.node_id[:8]]
        on_good = [r for r in rows if node_id_of(r) == good.node_id[:8]]
        assert len(on_bad) + len(on_good) == ROWS
        assert on_bad, "no row ran on the node with the other toolchain"
        assert proc.returncode == 1, proc.stderr
        written = {p.name for p in (out / "rmsnorm" / TARGET).glob("*.hsaco")} if out.exists() else set()
        for r in on_bad:
            assert not r["written"], r
            reason = r["refused"]
            assert bad.node_id[:8] in reason and "/127.0.0.1/" in reason and PIN_DIFF in reason, reason
            name = r["key"].split("/")[-1]
            assert f"--- {r['key']} failed: {reason}" in proc.stderr
            assert f"{name}.hsaco" not in written
        for r in on_good:
            assert r["written"], r
        assert written == {r["key"].split("/")[-1] + ".hsaco" for r in on_good}
        assert recorded(out) == written
        for name in written:
            assert (out / "rmsnorm" / TARGET / name).read_bytes() == reference[f"rmsnorm/{TARGET}/{name}"]
        assert not (out.exists() and temporaries(out))
    finally:
        _remember(_descendants(raylet_pid(bad)))
        cluster.remove_node(bad)


def test_driver_killed_mid_build_resumes(project: Path, reference: dict[str, bytes], tmp_path: Path,
                                        ray_temp: Path) -> None:
    """The local executor: the driver owns a private Ray (gcs_server, raylet, workers) that a SIGKILL orphans."""
    out, reports = tmp_path / "outputs", tmp_path / "reports"
    ray_tmp = Path(tempfile.mkdtemp(prefix="d-", dir=ray_temp))  # swept at the end of the module
    # Each result verified and recorded on its own (no 1 s gather): on a fast machine all six rows finished
    # within one gather, so the first manifest flush recorded every object before the kill could land.
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp), FARM_BATCH_GATHER_S="0")
    env.pop("FARM_PROJECT", None)
    # One worker: rows finish one at a time, so the kill lands between two objects.
    cmd = [sys.executable, "-m", "farm.cli", "build", f"outputs_dir={out}", f"report_dir={reports}",
           "executor.num_cpus=1"]
    seen: dict[int, psutil.Process] = {}
    driver = None
    try:
        with open(tmp_path / "killed.log", "wb") as log:
            driver = subprocess.Popen(cmd, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        deadline = time.monotonic() + 300
        while not recorded(out):
            assert driver.poll() is None, (tmp_path / "killed.log").read_text()
            assert time.monotonic() < deadline, "no object was written"
            for p in _descendants(driver.pid):  # the driver's Ray, as it grows
                seen.setdefault(p.pid, p)
            time.sleep(0.05)
        # The driver only, not its process group. Whatever its Ray started since the last look is a
        # descendant of a process seen already (gcs_server, raylet, a worker): reaped below with it.
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        done = recorded(out)
    finally:
        # What the driver leaves behind (its Ray: gcs_server, raylet, workers, warm servers), by pid:
        # its descendants as seen while it ran, and anything still in its process group.
        _remember(list(seen.values()))
        group = [p for p in psutil.process_iter() if driver and _pgid(p.pid) == driver.pid]
        _kill(list(seen.values()) + group)
    assert not [p for p in seen.values() if p.is_running()]
    assert 1 <= len(done) < ROWS, f"{len(done)} of {ROWS} objects were written when the driver died"

    # A stale address file (Ray's ray_current_cluster) must not matter: the local executor always starts
    # its own cluster.
    (ray_tmp / "ray").mkdir(exist_ok=True)
    (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")
    proc = run_farm(project, "build", f"outputs_dir={out}", f"report_dir={reports}", env={"RAY_TMPDIR": str(ray_tmp)})
    assert proc.returncode == 0, proc.stderr
    missing = ROWS - len(done)
    assert f"rows={ROWS} up_to_date={len(done)} to_build={missing}" in proc.stderr, proc.stderr
    report = json.loads((reports / "latest-build.json").read_text())
    assert report["built"] == missing and report["up_to_date"] == len(done)
    assert {r["key"].split("/")[-1] + ".hsaco" for r in report["rows"]} == {
        name.split("/")[-1] for name in reference if name.endswith(".hsaco")} - done
    assert not temporaries(out), temporaries(out)
    assert tree_bytes(out) == reference
    check = run_farm(project, "check", f"outputs_dir={out}")
    assert check.returncode == 0, check.stdout


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@contextlib.contextmanager
def _not_ray(kind: str) -> Iterator[str]:
    """A loopback address where no Ray GCS answers: nothing listening (`refused`), a web server (`web`), a port
    that accepts and says nothing (`silent`), or one that speaks HTTP/2 like gRPC but is no GCS (`grpc`)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{server.getsockname()[1]}"
    if kind == "refused":
        server.close()
        yield address
        return
    server.listen(8)
    answer = {"web": b"HTTP/1.0 400 Bad Request\r\n\r\n", "grpc": bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])}.get(kind)
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed
            accepted.append(conn)
            conn.sendall(answer or b"")

    if answer is not None:
        threading.Thread(target=serve, daemon=True).start()
    try:
        yield address
    finally:
        server.close()
        for conn in accepted:
            conn.close()


@pytest.mark.parametrize(("kind", "said"), [
    ("refused", "nothing answers at executor.address=ADDR ("),
    ("web", "executor.address=ADDR is not a Ray cluster's GCS port: it does not speak gRPC (it answered b'HTTP/1.0"),
    ("silent", "executor.address=ADDR is not a Ray cluster's GCS port: it does not speak gRPC (it said nothing"),
    ("grpc", "executor.address=ADDR does not answer as a Ray cluster's GCS (Ray: "),
])
def test_an_address_where_no_ray_answers_is_one_error_alone(project: Path, kind: str, said: str,
                                                           tmp_path: Path) -> None:
    """Issue 37: an address pointing at nothing, or at a port that is not Ray's, printed about 20 lines of Ray's
    warnings before the farm's error (at a web server, ray.init retried for good). Now the farm's error comes
    alone, one line and its fix, and nothing of Ray's."""
    env = dict(os.environ)
    env.pop("FARM_PROJECT", None)
    # Ray's own budget for reaching a GCS (30 s by default) shortened: what is tested is what the
    # farm says once Ray gives up, not how long Ray tries.
    env["RAY_py_gcs_connect_timeout_s"] = "3"
    with _not_ray(kind) as address:
        proc = subprocess.run([sys.executable, "-m", "farm.cli", "build", "executor=cluster",
                               f"executor.address={address}", f"outputs_dir={tmp_path / 'out'}"], cwd=project,
                              env=env, capture_output=True, text=True, timeout=300)  # rows to compile: none built
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("farm build: error: ")]
    assert len(errors) == 1 and said.replace("ADDR", address) in lines[errors[0]], proc.stderr
    assert lines[errors[0] + 1].startswith("  fix: ") and errors[0] + 2 == len(lines), proc.stderr
    assert not [line for line in lines if line.startswith("[")], proc.stderr  # Ray's native log lines
