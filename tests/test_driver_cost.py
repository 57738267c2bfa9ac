"""The driver's own cost: CPU per row counted by kind of work and consistent, the timeline's driver lane and
nested phases, and the verifier recorder that records each kind of path once (farm/store/driver_cost.py,
farm/store/trace.py, farm/plan/digest.py CodeRecorder)."""

from __future__ import annotations

import hashlib
import sys

from farm.contract import PhaseJson
from farm.plan.digest import CodeRecorder
from farm.store.driver_cost import DriverCost
from farm.store.trace import chrome_trace


def _burn() -> None:
    for i in range(20000):
        hashlib.sha256(str(i).encode()).hexdigest()


def test_driver_cost_report_is_consistent() -> None:
    cost = DriverCost()
    with cost.window():
        with cost.section("verify", "disassemble"):
            _burn()
        with cost.section("write", "flush"):
            _burn()
        _burn()  # other
    cost.rows = 4
    found = cost.report()
    assert found["rows"] == 4
    assert all(isinstance(v, float) for v in found["breakdown"].values())
    assert found["cpu_seconds"] > 0 and found["breakdown"]["verify"] > 0 and found["breakdown"]["write"] > 0
    assert abs(found["ms_per_row"] - found["cpu_seconds"] * 1000 / 4) < 1e-2
    assert abs(sum(found["breakdown"].values()) - found["cpu_seconds"]) < 1e-4
    assert found["disassembler_cpu_seconds"] >= 0 and isinstance(found["disassembler_ms_per_row"], float)
    assert [s["name"] for s in cost.spans] == ["disassemble", "flush"]
    assert "ms CPU per row over 4 rows" in cost.line()


def test_cpu_outside_a_window_is_not_counted() -> None:
    cost = DriverCost()
    _burn()
    with cost.window():
        pass
    assert cost.report()["cpu_seconds"] < 0.005


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


def _checked(n: int) -> int:
    return hashlib.sha256(str(n).encode()).digest()[0]


def test_a_path_is_recorded_once_it_was_accepted() -> None:
    path = "test.path"
    CodeRecorder._paths.pop(path, None)
    refused = CodeRecorder(path)
    with refused:
        _checked(1)
    assert refused.recording and __file__ in refused.filenames
    assert path not in CodeRecorder._paths  # not remembered: a refused run does not define the path

    first = CodeRecorder(path)
    with first:
        _checked(2)
    first.remember()
    second = CodeRecorder(path)
    with second:
        assert sys.getprofile() is None  # replayed: nothing profiles the second run
        _checked(3)
    assert not second.recording and second.filenames == first.filenames and __file__ in second.filenames
    unnamed = CodeRecorder()
    with unnamed:
        _checked(4)
    assert unnamed.recording and __file__ in unnamed.filenames
    CodeRecorder._paths.pop(path, None)
