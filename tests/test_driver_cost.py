"""The driver's own cost: CPU per row counted by kind of work and consistent, the timeline's driver lane and
nested phases, and the verifier record: a static closure holding every file an acceptance runs, the same in
any process (farm/observe/driver_cost.py, farm/observe/trace.py, farm/plan/code_closure.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from farm import build
from farm.contract import CompileResult, PhaseJson
from farm.elf import code_object as elfinfo
from farm.elf import fast as elffast
from farm.observe import driver_cost
from farm.observe.driver_cost import DriverBreakdown, DriverCost, DriverReport
from farm.observe.trace import chrome_trace
from farm.plan.code_closure import boundary_file, files_of, import_closure
from farm.plan.digest import CodeRecorder, CompileRecord, farm_hashes
from farm.plan.sources import Tree, collect
from farm.store import manifest
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig, load
from farm.table.rows import Row
from farm.toolchain.installed import compile_part
from farm.verify import accept as acceptance

REPO = Path(__file__).resolve().parent.parent


class FakeCpu:
    """The clocks farm/observe/driver_cost.py reads, advanced by hand: each thread's CPU, the process's (the sum of
    its threads'), the children's and the wall clock. The accounting is then checked to the microsecond, with
    no dependence on how fast the machine is."""

    def __init__(self) -> None:
        self.threads: dict[int, float] = {}
        self.process = self.children = 0.0
        self.wall = 1000.0

    def burn(self, seconds: float) -> None:
        """The calling thread spends `seconds` of CPU (and as much wall-clock time)."""
        me = threading.get_ident()
        self.threads[me] = self.threads.get(me, 0.0) + seconds
        self.process += seconds
        self.wall += seconds

    # time's functions, as driver_cost calls them
    def thread_time(self) -> float:
        return self.threads.get(threading.get_ident(), 0.0)

    def process_time(self) -> float:
        return self.process

    def time(self) -> float:
        return self.wall


@pytest.fixture()
def cpu(monkeypatch: pytest.MonkeyPatch) -> FakeCpu:
    fake = FakeCpu()
    monkeypatch.setattr(driver_cost, "time", fake)
    monkeypatch.setattr(driver_cost, "_children_cpu", lambda: fake.children)
    return fake


def test_driver_cost_report_is_consistent(cpu: FakeCpu) -> None:
    cost = DriverCost()
    with cost.window():
        with cost.section("verify", "disassemble"):
            cpu.burn(0.010)
        with cost.section("write", "flush"):
            cpu.burn(0.020)
        cpu.burn(0.005)  # other
        cpu.children += 0.004  # a disassembler process
    cost.rows = 4
    found = cost.report()
    assert set(found) == set(DriverReport.__annotations__)
    assert set(found["breakdown"]) == set(DriverBreakdown.__annotations__)
    assert found["rows"] == 4
    assert found["cpu_seconds"] == pytest.approx(0.035)
    assert found["breakdown"] == pytest.approx({"verify": 0.010, "write": 0.020, "ray": 0.0, "threads": 0.0,
                                                "other": 0.005})
    assert sum(found["breakdown"].values()) == pytest.approx(found["cpu_seconds"])
    assert found["ms_per_row"] == pytest.approx(8.75)
    assert (found["disassembler_cpu_seconds"], found["disassembler_ms_per_row"]) == pytest.approx((0.004, 1.0))
    assert found["daemon_cpu_seconds"] is None and found["daemon_ms_per_row"] is None
    # Each section is a span of the main thread's lane, where and as long as it ran.
    assert [s["name"] for s in cost.spans] == ["disassemble", "flush"]
    assert [s["start_unix"] for s in cost.spans] == pytest.approx([1000.0, 1000.010], abs=1e-9)
    assert [s["seconds"] for s in cost.spans] == pytest.approx([0.010, 0.020])
    assert cost.verify_spans == []
    assert cost.line() == ("driver: 8.75 ms CPU per row over 4 rows (verify 2.50, write 5.00, ray 0.00, "
                           "Ray's threads 0.00); disassembler processes 1.00 ms per row")


def test_other_threads_cpu_is_counted_apart_from_the_main_threads_ray_work(cpu: FakeCpu) -> None:
    """Ray's threads (any thread the build did not start) are `threads`; the build's own helper threads report
    their CPU (add_helper, count) and stay out of it, less the one-time work they were told to exclude."""
    cost = DriverCost()
    with cost.window():
        ray_thread = threading.Thread(target=cpu.burn, args=(0.020,))  # as Ray's core-worker threads run
        ray_thread.start()
        ray_thread.join()

        def helper() -> None:  # as the build's verify thread: 0.003 s, of which 0.001 s one-time preparation
            cpu.burn(0.003)
            cost.add_helper(0.003)
            cost.exclude(0.001)
            cost.count("verify", 0.002)

        helper_thread = threading.Thread(target=helper)
        helper_thread.start()
        helper_thread.join()
        with cost.section("ray", "ray results"):
            cpu.burn(0.001)
    cost.rows = 1
    found = cost.report()
    assert found["cpu_seconds"] == pytest.approx(0.023)  # 0.024 spent, 0.001 of it excluded
    assert found["breakdown"] == pytest.approx({"verify": 0.002, "write": 0.0, "ray": 0.001, "threads": 0.020,
                                                "other": 0.0})
    assert sum(found["breakdown"].values()) == pytest.approx(found["cpu_seconds"])
    assert "Ray's threads 20.00" in cost.line() and "ray 1.00" in cost.line()


def test_cpu_outside_a_window_is_not_counted(cpu: FakeCpu) -> None:
    cost = DriverCost()
    cpu.burn(0.050)
    cpu.children += 0.050
    with cost.window():
        pass
    with cost.section("verify"):  # a section outside every window: its thread's CPU only, not the process's
        cpu.burn(0.010)
    cpu.burn(0.050)
    found = cost.report()
    assert (found["cpu_seconds"], found["disassembler_cpu_seconds"]) == (0.0, 0.0)
    assert found["breakdown"]["threads"] == 0.0


def _phase(name: str, start: float, seconds: float) -> PhaseJson:
    return PhaseJson(name=name, start_unix=start, seconds=seconds)


def test_trace_has_a_driver_lane_and_nested_phases() -> None:
    rows = [{"key": "op/t/a", "ok": True, "node": "n1", "pid": 7, "started_unix": 100.0, "finished_unix": 101.0,
             "phases": [_phase("fork", 100.0, 0.2), _phase("codegen", 100.2, 0.8), _phase("ray_return", 101.0, 0.1),
                        _phase("verify", 101.1, 0.05), _phase("write", 101.15, 0.01)]}]
    driver = [_phase("ray results", 100.9, 0.2), _phase("disassemble", 101.1, 0.04), _phase("flush", 101.2, 0.01)]
    events = chrome_trace(rows, driver)["traceEvents"]  # type: ignore[arg-type]
    processes = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    lanes = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    driver_pid = processes["driver"]
    assert lanes["driver work"] == lanes["rows on the driver"] == driver_pid
    work = [e for e in events if e["ph"] == "X" and e.get("cat") == "driver"]
    assert [e["name"] for e in work] == ["ray results", "disassemble", "flush"]
    assert all(e["pid"] == driver_pid for e in work)
    row = next(e for e in events if e["ph"] == "X" and e["name"] == "op/t/a")
    worker_phases = [e for e in events if e.get("cat") == "phase" and e["pid"] == row["pid"]]
    assert [e["name"] for e in worker_phases] == ["fork", "codegen"]
    for e in worker_phases:  # nested inside the row's event, on its lane
        assert e["tid"] == row["tid"] and row["ts"] <= e["ts"] and e["ts"] + e["dur"] <= row["ts"] + row["dur"]
    on_driver = [e for e in events if e.get("cat") == "phase" and e["pid"] == driver_pid]
    assert [e["name"] for e in on_driver] == ["ray_return", "verify", "write"]
    assert all(e["args"] == {"row": "op/t/a"} for e in on_driver)


def _real_case(project: Path, op: str, target: str) -> tuple[FarmConfig, Row, CompileResult, CompileRecord]:
    """An object the session's small project built, and the result a worker running today's farm code would
    send for it."""
    cfg = load(project, [])
    with OutputDir(cfg.outputs_dir, op, target) as out:
        file, entry = sorted(manifest.read(out).entries.items())[0]
        data = out.read_bytes(file)
    inputs = entry["inputs"]
    assert data is not None and isinstance(inputs, dict)
    row = Row(op, target, str(entry["name"]), str(entry["group"]), dict(entry["knobs"]), dict(entry["allow"]))
    result = CompileResult(key=row.key, ok=True, elf=data, node="test", toolchain=compile_part(cfg.toolchain_pin),
                           sources=dict(inputs["sources"]), lookups=tuple(inputs["lookups"]),
                           generator={k: v for k, v in farm_hashes(inputs["generator"]).items() if v})
    return cfg, row, result, CompileRecord.of_result(result, Tree.of(collect(cfg.kernels_dir)))


def test_the_build_steps_report_to_the_recorder_of_the_build_under_way(cpu: FakeCpu) -> None:
    """A step is not handed the DriverCost: it reports to the one being recorded, from any thread; outside a
    recording it records nothing."""
    with driver_cost.phase("verify", "accept"):  # no build under way: nothing to report to, nothing raised
        cpu.burn(0.5)
    cost = DriverCost()
    with driver_cost.recording(cost), driver_cost.window():
        with driver_cost.phase("verify", "accept"):
            cpu.burn(0.002)
        helper = threading.Thread(target=_helper_step, args=(cpu,))
        helper.start()
        helper.join()
        driver_cost.rows_done(2)
    with driver_cost.phase("write"):  # the recording ended
        cpu.burn(0.5)
    found = cost.report()
    assert found["rows"] == 2
    assert found["breakdown"]["verify"] == pytest.approx(0.005) and found["breakdown"]["write"] == 0.0
    assert [s["name"] for s in cost.spans] == ["accept"]


def _helper_step(cpu: FakeCpu) -> None:
    with driver_cost.helper_thread("verify"):  # a disassembly thread: all of its CPU is verification
        cpu.burn(0.003)


@pytest.mark.slow
@pytest.mark.parametrize(("op", "target"), [("rmsnorm", "gfx942"), ("rmsnorm", "gfx11-generic")])
def test_verifier_record_holds_every_file_an_acceptance_ran(built: Path, op: str, target: str) -> None:
    cfg, row, result, compiled = _real_case(built, op, target)
    with CodeRecorder() as code:  # profiles every call of one full acceptance: disassembly, checks, entry
        counts = acceptance.disassemble(cfg, [(row, result)])
        entry, refused = acceptance.accept(cfg, row, result, compiled, counts[row.key])
    assert refused is None and entry is not None
    ran = code.farm_files()
    assert {"verify/accept.py", "verify/rules.py", "elf/code_object.py", "toolchain/disasm.py"} <= ran
    recorded = set(entry["inputs"]["verifier"])
    # Code of the boundary packages ran too (the config's values, the input digests, the entry's shape): what
    # it decides is recorded as values (farm/plan/code_closure.py). Every other file that ran is recorded.
    outside = {rel for rel in ran if boundary_file(rel)}
    assert {"table/model.py", "plan/digest.py", "store/manifest.py"} <= outside
    assert ran - outside <= recorded, f"ran but not recorded: {sorted(ran - outside - recorded)}"
    assert recorded == set(acceptance.verifier_files())


def test_verifier_record_does_not_depend_on_what_the_process_loaded() -> None:
    show = "import json, farm.verify.accept; print(json.dumps(sorted(farm.verify.accept.verifier_files())))"
    alone = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, check=True, cwd=REPO)
    others = "import farm.cli, farm.build, farm.execute.executor, farm.restore.stage; "
    loaded = subprocess.run([sys.executable, "-c", others + show], capture_output=True, text=True, check=True, cwd=REPO)
    assert json.loads(alone.stdout) == json.loads(loaded.stdout) == sorted(acceptance.verifier_files())


def test_the_closure_follows_imports_inside_functions() -> None:
    # toolchain/installed.py imports the disassembler's module inside a function, not at its top.
    assert "toolchain/disasm.py" in import_closure(frozenset({"farm.toolchain.installed"}))
    # _compile_and_write imports the Ray executor inside the function too; the executor's package is a
    # boundary (it schedules rows and moves them), so the walk does not enter it.
    assert "build.py" in files_of([build._compile_and_write])
    assert not any(rel.startswith("execute/") for rel in files_of([build._compile_and_write]))
    assert "execute/executor.py" not in acceptance.verifier_files()  # acceptance never reaches it
    # The build loop is not the verifier: how rows are scheduled, batched and reported is not recorded.
    assert "build.py" not in acceptance.verifier_files()


def test_the_verifier_record_stops_at_the_boundary_packages() -> None:
    """What derives an object's recorded facts is recorded; the config, its cache, the plan, the manifest
    store and measurement are not (their outputs are recorded as values), though verify/accept.py imports some."""
    recorded = acceptance.verifier_files()
    assert {"verify/accept.py", "verify/rules.py", "elf/code_object.py", "elf/fast.py", "toolchain/disasm.py",
            "toolchain/listing.py", "elf/structure.py", "elf/image.py"} <= recorded
    assert not any(boundary_file(rel) for rel in recorded), sorted(rel for rel in recorded if boundary_file(rel))
    for rel in ("table/config.py", "table/config_cache.py", "table/rows.py", "plan/digest.py",
                "plan/code_closure.py", "store/manifest.py"):
        assert (REPO / "farm" / rel).is_file() and rel not in recorded, rel
    assert boundary_file("table/__init__.py") and boundary_file("observe/driver_cost.py")
    assert not boundary_file("verify/rules.py") and not boundary_file("tablet.py")


@pytest.mark.slow
def test_the_plain_reader_gives_what_pyelftools_gives_on_every_object_at_hand(built: Path) -> None:
    """Every object the session built (every target), and this checkout's outputs/ when it holds a build."""
    objects = sorted(built.glob("outputs/*/*/*.hsaco")) + sorted((REPO / "outputs").glob("*/*/*.hsaco"))
    assert len(objects) >= 30
    for path in objects:
        data = path.read_bytes()
        assert elfinfo._read_plain(data) == elfinfo._read_general(data), path


@pytest.mark.slow
def test_an_odd_file_is_judged_by_the_general_reader(built: Path) -> None:
    data = bytearray((built / "outputs").glob("rmsnorm/gfx942/*.hsaco").__next__().read_bytes())
    data[18] = 62  # e_machine: x86-64
    with pytest.raises(elffast.Irregular):
        elffast.read(bytes(data))
    assert elfinfo.read_code_object(bytes(data)) == elfinfo._read_general(bytes(data))
    with pytest.raises(elfinfo.NotACodeObject, match="not a readable ELF file"):
        elfinfo.read_code_object(b"\x7fELF" + bytes(40))


def test_no_file_of_the_verifier_record_imports_code_by_name_at_run_time() -> None:
    # The closure is read from import statements: a module imported by a computed name would escape it.
    for rel in acceptance.verifier_files():
        text = (REPO / "farm" / rel).read_text()
        assert "import_module(" not in text and "__import__(" not in text, rel


def test_within_one_look_a_farm_file_is_looked_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch is accepted at one moment (one stat per file for all its rows); the next batch sees a change."""
    from farm.plan import digest
    monkeypatch.setattr(digest, "FARM_DIR", tmp_path)
    for cache in ("_PATHS", "_HASHED"):
        monkeypatch.setattr(digest, cache, {})
    code = tmp_path / "x.py"
    code.write_text("a = 1\n")
    first = farm_hashes({"x.py": None})["x.py"]
    with digest.one_look():
        assert farm_hashes({"x.py": None})["x.py"] == first
        code.write_text("a = 22\n")  # changed within the batch: this batch keeps the stamp it took
        assert farm_hashes({"x.py": None})["x.py"] == first
    now = farm_hashes({"x.py": None})["x.py"]
    assert now == hashlib.sha256(b"a = 22\n").hexdigest() != first
    code.unlink()
    with digest.one_look():
        assert farm_hashes({"x.py": None}) == {"x.py": None}


def test_recorded_farm_names_are_judged_the_same_when_asked_again() -> None:
    from farm.plan.digest import farm_path_ok
    for _ in range(2):
        assert farm_path_ok("build.py") and farm_path_ok("plan/digest.py")
        assert not any(farm_path_ok(bad) for bad in ("../x.py", "/abs.py", "a.txt", "", "a//b.py", 3, None))


def test_a_rows_way_back_splits_its_wait_for_its_parcel_from_rays_return() -> None:
    """A row that ended before the rest of its call (its parcel) waited on its worker for them: `parcel_wait`
    until the call ended, then `ray_return` until the driver took it; the two add up to the whole way back.
    A row that ended its call has only `ray_return`."""
    early = CompileResult("op/t/a", ok=True, finished_unix=100.0)
    phases = build._ray_return(early, returned=100.6, taken=100.65)
    assert [p["name"] for p in phases] == ["parcel_wait", "ray_return"]
    assert phases[0]["start_unix"] == 100.0 and abs(phases[0]["seconds"] - 0.6) < 1e-9
    assert phases[1]["start_unix"] == 100.6 and abs(sum(p["seconds"] for p in phases) - 0.65) < 1e-9
    last = CompileResult("op/t/b", ok=True, finished_unix=100.6)
    assert [p["name"] for p in build._ray_return(last, returned=100.6, taken=100.65)] == ["ray_return"]
    assert [p["name"] for p in build._ray_return(last, returned=None, taken=100.65)] == ["ray_return"]
    assert build._ray_return(CompileResult("op/t/c", ok=False), returned=None, taken=1.0) == []
