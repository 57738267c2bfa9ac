"""bench/throughput.py: the last line's numbers, the byte-identity lines and the guard line, from fabricated runs."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import guards  # noqa: E402  (bench/ is scripts, not a package)
import throughput  # noqa: E402
from farm_way import FarmRun  # noqa: E402
from ways import WayRun, dealt  # noqa: E402

from farm.table.rows import Row  # noqa: E402


def _farm(wall: float, compile_seconds: list[float], peak: float = 3.0) -> FarmRun:
    rows = [{"key": f"op/t/r{i}", "ok": True, "compile_seconds": s} for i, s in enumerate(compile_seconds)]
    rows.append({"key": "op/t/old", "ok": True, "reverified": True})  # no compile: not counted
    return FarmRun(wall, peak, {}, rows, "standing")  # type: ignore[arg-type]  (fabricated report rows)


def test_summary_is_the_issue_line_from_one_run() -> None:
    seq = WayRun(wall=12.0, peak_gib=0.5, objects={}, seconds={"a": 0.1, "b": 0.3})  # 0.2 s per row in process
    fresh = WayRun(wall=60.0, peak_gib=1.5, objects={})
    farm = _farm(wall=8.0, compile_seconds=[0.2, 0.3, 0.25, 0.25])  # 1.0 s summed, 0.25 s per row
    line = throughput.summary(seq, fresh, farm, cores=2)
    assert line == "farm_vs_fresh=7.50 farm_vs_sequential=1.50 efficiency=0.06 tax=1.25 peak_gib=3.00"


def test_efficiency_is_isolated_compile_seconds_over_cores_over_wall() -> None:
    seq = WayRun(wall=10.0, peak_gib=0.5, objects={}, seconds={"a": 1.0})
    farm = _farm(wall=5.0, compile_seconds=[4.5, 4.5])  # 9 s of compiles on 2 cores in 5 s
    fields = dict(item.split("=") for item in throughput.summary(seq, seq, farm, cores=2).split())
    assert fields["efficiency"] == "0.90" and fields["tax"] == "4.50"


def test_the_sequential_reference_is_the_mean_of_its_runs_around_the_farm_build() -> None:
    phase = {"name": "front_end", "start_unix": 0.0, "seconds": 0.1}
    before = WayRun(wall=10.0, peak_gib=0.5, objects={"a.hsaco": b"x"}, seconds={"a": 0.2, "b": 0.4},
                    phases={"a": [phase], "b": [phase]})
    after = WayRun(wall=14.0, peak_gib=0.6, objects={"a.hsaco": b"x"}, seconds={"a": 0.4, "b": 0.6},
                   phases={"a": [phase], "b": [phase]})
    seq = throughput.bracketing(before, after)
    assert seq.wall == 12.0 and seq.peak_gib == 0.6 and seq.seconds == pytest.approx({"a": 0.3, "b": 0.5})
    assert len(seq.phases) == 4  # both runs' rows go into the phase table's means
    farm = _farm(wall=6.0, compile_seconds=[0.4, 0.4])
    fields = dict(item.split("=") for item in throughput.summary(seq, seq, farm, cores=2).split())
    assert fields["farm_vs_sequential"] == "2.00" and fields["tax"] == "1.00"


def test_identity_lines_count_objects_equal_to_the_sequential_way_and_the_golden_digests() -> None:
    good, bad = b"\x7fELF good", b"\x7fELF other"
    golden = {"a.hsaco": hashlib.sha256(good).hexdigest(), "b.hsaco": hashlib.sha256(good).hexdigest()}
    ways = {"sequential": {"a.hsaco": good, "b.hsaco": good}, "farm": {"a.hsaco": good, "b.hsaco": bad}}
    lines = throughput._identity_lines(ways, golden, 2)
    assert lines[0].endswith("identical to sequential's: 2/2; to outputs.sha256: 2/2")
    assert lines[1].endswith("identical to sequential's: 1/2; to outputs.sha256: 1/2")


def test_golden_digests_are_read_for_the_bench_rows_only(tmp_path: Path) -> None:
    (tmp_path / "outputs.sha256").write_text(
        "aa  op/gfx942/one.hsaco\nbb  op/gfx942/manifest.json\ncc  op/gfx942/two.hsaco\n")
    row = Row(op="op", target="gfx942", name="one", group="g", knobs={}, allow={})
    assert throughput._golden(tmp_path, [row]) == {"op__gfx942__one.hsaco": "aa"}


def test_the_measured_build_is_the_warm_up_s_command_again_from_nothing(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import farm_way  # noqa: PLC0415  (bench/ is on the path only once this module set it)

    work = tmp_path / "farm"
    seen: list[tuple[list[str], Path, bool]] = []

    def build(overrides: list[str], rows: list[Row], where: Path, root: Path, extra: tuple[str, ...]) -> FarmRun:
        seen.append((overrides, where, (where / "outputs").exists() or (where / "reports").exists()))
        for made in ("outputs/op/t", "reports"):
            (where / made).mkdir(parents=True, exist_ok=True)
        (where / "outputs/op/t/r.hsaco").write_bytes(b"object")
        return _farm(1.0, [0.1])

    monkeypatch.setattr(farm_way, "_farm_build", build)
    farm_way.farm_build(["ops=[op]"], [], work, tmp_path)
    farm_way.again(["ops=[op]"], [], work, tmp_path)
    assert seen == [(["ops=[op]"], work, False), (["ops=[op]"], work, False)]


def test_the_tax_splits_into_sharing_the_machine_and_the_isolation() -> None:
    alone = WayRun(wall=10.0, peak_gib=0.5, objects={}, seconds={"a": 0.2, "b": 0.2})
    busy = WayRun(wall=6.0, peak_gib=0.5, objects={}, seconds={"a": 0.25, "b": 0.25})
    farm = _farm(wall=8.0, compile_seconds=[0.3, 0.3])
    line = throughput.tax_split(alone, busy, farm)
    assert "0.200 s per row alone, 0.250 with every core busy (sharing 1.25x)" in line
    assert "isolated 0.300 (isolation 1.20x)" in line  # 1.25 x 1.20 = the tax, 1.50


def test_every_row_is_dealt_once_to_a_part_of_its_own_target() -> None:
    rows = [Row(op="op", target=t, name=f"r{i}", group="g", knobs={}, allow={})
            for t in ("gfx942", "gfx950") for i in range(5)]
    parts = dealt(rows, cores=2)
    assert [(name, len(part)) for name, part in parts] == [("0", 3), ("1", 2), ("0", 3), ("1", 2)]
    assert all(len({r.target for r in part}) == 1 for _, part in parts)
    assert sorted(r.key for _, part in parts for r in part) == sorted(r.key for r in rows)
    assert dealt(rows[:1], cores=4) == [("0", rows[:1])]  # no empty parts


GUARD_VALUES = {"attention": 1.62, "rmsnorm": 1.13, "isolation attention": 1.25, "isolation rmsnorm": 1.52,
                "incremental": 2.1, "restore": 7.6}


def test_the_guard_line_passes_when_every_guard_holds_its_limit() -> None:
    held, line = guards.verdict(GUARD_VALUES)
    assert held and line == ("guards: PASS attention 1.62x>=1.45 rmsnorm 1.13x>=1.0 isolation attention 1.25<=1.35 "
                             "isolation rmsnorm 1.52<=1.6 incremental 2.1s<=3 restore 7.6s<=15")
    assert guards.verdict(GUARD_VALUES | {"attention": 1.45, "incremental": 3.0})[0]  # a value at its limit holds


def test_the_guard_line_fails_naming_each_guard_past_its_limit() -> None:
    held, line = guards.verdict(GUARD_VALUES | {"rmsnorm": 0.97, "isolation attention": 1.4, "restore": 15.2})
    assert not held and line.startswith("guards: FAIL (rmsnorm, isolation attention, restore) attention 1.62x>=1.45 ")
    assert "rmsnorm 0.97x<1.0" in line and "isolation attention 1.40>1.35" in line and line.endswith("restore 15.2s>15")


def test_the_isolation_factor_is_the_farm_s_isolated_seconds_over_in_process_with_every_core_busy() -> None:
    busy = WayRun(wall=6.0, peak_gib=0.5, objects={}, seconds={"a": 0.2, "b": 0.3})
    assert throughput.isolation(busy, _farm(wall=8.0, compile_seconds=[0.3, 0.3, 0.3, 0.3])) == pytest.approx(1.2)


def test_each_incremental_round_deletes_other_rows_and_rebuilds_exactly_them(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [Row(op="op", target="gfx942", name=f"r{i:02}", group="g", knobs={}, allow={}) for i in range(90)]
    where = tmp_path / "outputs" / "op" / "gfx942"
    where.mkdir(parents=True)
    for row in rows:
        (where / row.file_name).write_bytes(b"object")
    rebuilt: list[list[str]] = []

    def build(overrides: list[str], gone: list[Row], work: Path, root: Path) -> FarmRun:
        assert not any((where / r.file_name).exists() for r in gone)  # deleted before the build
        rebuilt.append([r.name for r in gone])
        for row in gone:
            (where / row.file_name).write_bytes(b"object")
        return _farm(2.0, [0.1] * len(gone))

    monkeypatch.setattr(guards, "farm_build", build)
    assert guards.incremental(["ops=[op]"], rows, tmp_path, tmp_path) == [2.0] * guards.ROUNDS
    assert [len(names) for names in rebuilt] == [guards.DELETED] * guards.ROUNDS
    assert len({name for names in rebuilt for name in names}) == guards.ROUNDS * guards.DELETED  # no row twice
