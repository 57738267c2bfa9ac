"""bench/phase_table.py: the in-process and farm phase breakdowns, from a fabricated build report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import phase_table  # noqa: E402  (bench/ is scripts, not a package)


def _phases(**seconds: float) -> list[phase_table.PhaseRecord]:
    start, out = 1000.0, []
    for name, s in seconds.items():
        out.append({"name": name, "start_unix": start, "seconds": s})
        start += s
    return out


WORKER = dict(prepare=0.01, fork=0.02, front_end=0.10, mlir_passes=0.04, handoff=0.03, codegen=0.05, link=0.01,
              **{"return": 0.02})
REPORT_ROWS = [
    {"key": "a", "ok": True, "seconds": 0.28, "phases": _phases(**WORKER, ray_return=0.002, verify=0.004, write=0.001)},
    {"key": "b", "ok": True, "seconds": 0.38,
     "phases": _phases(**{**WORKER, "front_end": 0.20}, ray_return=0.004, verify=0.002, write=0.003)},
    {"key": "c", "ok": True, "reverified": True, "written": True},  # re-verified: no phases
    {"key": "d", "ok": False, "seconds": 1.0, "phases": _phases(prepare=1.0)},  # failed: not counted
]


def test_farm_means_are_per_compiled_row() -> None:
    means, count = phase_table.mean_per_row(phase_table.farm_rows_phases(REPORT_ROWS))
    assert count == 2
    assert means["front_end"] == pytest.approx(0.15)
    assert means["verify"] == pytest.approx(0.003)
    assert "reverified" not in means and means["prepare"] == pytest.approx(0.01)


def test_a_missing_phase_counts_zero_in_the_mean() -> None:
    means, count = phase_table.mean_per_row([_phases(front_end=0.2, other=0.1), _phases(front_end=0.4)])
    assert count == 2 and means == pytest.approx({"front_end": 0.3, "other": 0.05})


def test_no_phases_gives_an_empty_mean() -> None:
    assert phase_table.mean_per_row([[], []]) == ({}, 0)


def test_coverage_sums_worker_phases_against_worker_seconds() -> None:
    phased, worker = phase_table.coverage(REPORT_ROWS)
    assert worker == pytest.approx(0.66)
    assert phased == pytest.approx(0.28 + 0.38)  # driver phases left out


def test_render_puts_both_ways_side_by_side() -> None:
    farm, farm_rows = phase_table.mean_per_row(phase_table.farm_rows_phases(REPORT_ROWS))
    one = _phases(front_end=0.08, mlir_passes=0.03, **{"codegen+link": 0.04})
    in_process, in_rows = phase_table.mean_per_row([one])
    lines = phase_table.render(in_process, farm, in_rows, farm_rows)
    table = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert "in-process 1, farm 2" in lines[0]
    assert table["front_end"] == ["0.080", "0.150"]
    assert table["codegen+link"] == ["0.040", "0.060"]  # the farm's codegen and link summed
    assert table["codegen"] == ["-", "0.050"] and table["fork"] == ["-", "0.020"]
    assert table["verify"] == ["-", "0.003"]
    assert [k for k in table if k in phase_table.WORKER_PHASES + phase_table.DRIVER_PHASES] == [
        "prepare", "fork", "front_end", "mlir_passes", "handoff", "codegen", "link", "return",
        "ray_return", "verify", "write"]
    assert lines[-2].split()[-2:] == ["0.150", "0.330"]  # worker totals: in-process, farm
    assert lines[-1].split()[-1] == "0.338"  # with the driver's phases: 0.003 + 0.003 + 0.002


def test_render_shows_a_phase_outside_the_contract() -> None:
    lines = phase_table.render({}, {"front_end": 0.1, "mystery": 0.2}, 0, 1)
    assert any(line.split()[:1] == ["mystery"] for line in lines)
    assert lines[-2].split()[-2:] == ["-", "0.300"]
