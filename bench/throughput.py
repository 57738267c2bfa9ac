"""Build the same rows three ways in one run and print how the farm's default path compares.

    python bench/throughput.py [--private] [farm selection overrides]     e.g. ops=[rmsnorm] targets=[gfx942]
    python bench/throughput.py --guards [--outputs=DIR]      the speed guards: PASS or FAIL (bench/guards.py)

(a) sequential: one process per target compiling its rows in sequence (imports once, no isolation),
    up to one such process per core at a time: how per-target generator scripts work. Its per-row
    compile seconds are the in-process reference of the tax, and it records each row's in-process
    phases (front end, MLIR passes, codegen with link). It runs twice, right before and right after the
    measured farm build, and the ratios use the mean of the two: this machine kind's speed drifts by up
    to ~25% within minutes, and one sequential run minutes away from the farm's once made the tax 0.90
    in one run and 1.33 in the next, with the same code. Both runs and their ratio are printed;
    after the second run, the same in-process compiles with every core busy (each target's rows dealt to
    one process per core): not in the ratios, it splits the tax into compiles sharing the machine and the
    isolation itself (the line `tax split`);
(b) fresh:      one fresh interpreter per row (`python -m farm.worker.zygote --fresh`), one per core at a
    time: how `make -j` over per-kernel compile commands works;
(c) farm:       `farm build` on the defaults (run the bench with CI unset: CI=true turns auto-start off),
    twice: first the warm-up build into a fresh outputs directory (it may start the standing cluster's
    daemon; printed, not used in the ratios), then the measured build: the same command again, its
    outputs and reports removed first, as a user regenerates them. The output says
    which cluster each ran on. A daemon the bench's builds started is stopped at the end
    (`farm cluster down`); one that was up before the bench is used and left up. A build refused because
    farm/ was edited while it ran is run once more (bench/farm_way.py).
--private adds a reference line: `farm build executor.standing=false` (a private cluster per build).

Numbers, all from the measured farm build and the same run's sequential way (the mean of its two runs):
    tax         = the farm's isolated compile seconds per row (mean of its report rows' compile_seconds)
                  over the in-process compile seconds per row (the sequential way);
    efficiency  = the farm's isolated compile seconds summed, over the cores, over the farm's wall time;
    peak_gib    = the largest summed resident memory of the build's process tree plus the standing daemon's
                  (shared pages count once per process: an upper bound).
It prints the phase breakdown (mean seconds per row per phase) of the in-process way and the farm's
(its report rows' worker and driver phases) side by side, checks that every way made byte-identical
objects (and compares them with outputs.sha256), and ends with one machine-readable line:
    farm_vs_fresh=X farm_vs_sequential=Y efficiency=Z tax=T peak_gib=M
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import phase_table
from farm_way import FarmRun, again, auto_start_note, default_path, farm_build, file_name
from ways import WayRun, way_fresh, way_in_process_busy, way_sequential

from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.table.rows import Row


def _print_way(name: str, run: WayRun | FarmRun, rows: int, note: str = "") -> None:
    print(f"  {name:14} {run.wall:8.1f} s  {rows / run.wall:6.2f} rows/s  peak {run.peak_gib:.2f} GiB{note}",
          flush=True)


def _golden(root: Path, rows: list[Row]) -> dict[str, str]:
    """The recorded SHA256 of each row's object (outputs.sha256), by the bench's file name."""
    path = root / "outputs.sha256"
    recorded = dict(reversed(line.split(None, 1)) for line in path.read_text().splitlines() if line.strip())
    wanted = {r.relpath(): file_name(r.key) for r in rows}
    return {wanted[rel.strip()]: digest for rel, digest in recorded.items() if rel.strip() in wanted}


def _identity_lines(ways: dict[str, dict[str, bytes]], golden: dict[str, str], count: int) -> list[str]:
    """One line per way: how many of its objects equal the sequential way's, and outputs.sha256's digests."""
    reference = ways["sequential"]
    lines = []
    for name, objects in ways.items():
        same = sum(objects.get(k) == v for k, v in reference.items())
        recorded = sum(hashlib.sha256(v).hexdigest() == golden.get(k) for k, v in objects.items())
        lines.append(f"  objects of {name:14} identical to sequential's: {same}/{count}; "
                     f"to outputs.sha256: {recorded}/{len(golden)}")
    return lines


def _phase_lines(seq: WayRun, farm: FarmRun) -> list[str]:
    in_process, in_rows = phase_table.mean_per_row(seq.phases.values())
    farm_means, farm_rows = phase_table.mean_per_row(phase_table.farm_rows_phases(farm.report_rows))
    lines = phase_table.render(in_process, farm_means, in_rows, farm_rows)
    phased, worker = phase_table.coverage(farm.report_rows)
    if worker:
        lines.append(f"  (the farm's worker phases cover {phased:.2f} s of its rows' {worker:.2f} worker seconds)")
    return lines


def bracketing(before: WayRun, after: WayRun) -> WayRun:
    """The sequential way as the mean of its runs before and after the measured farm build: mean wall, each
    row's mean in-process seconds, and both runs' phases (the phase table's means then cover both)."""
    seconds = {k: (before.seconds[k] + after.seconds[k]) / 2 for k in before.seconds if k in after.seconds}
    phases = {**{f"{k} (before)": v for k, v in before.phases.items()},
              **{f"{k} (after)": v for k, v in after.phases.items()}}
    return WayRun((before.wall + after.wall) / 2, max(before.peak_gib, after.peak_gib), before.objects,
                  seconds, phases)


def summary(seq: WayRun, fresh: WayRun, farm: FarmRun, cores: int) -> str:
    """The last line: the measured farm build against the same run's reference ways."""
    in_process = sum(seq.seconds.values()) / len(seq.seconds)
    isolated = farm.isolated_compile_s / farm.compiled_rows
    efficiency = farm.isolated_compile_s / cores / farm.wall
    return (f"farm_vs_fresh={fresh.wall / farm.wall:.2f} farm_vs_sequential={seq.wall / farm.wall:.2f} "
            f"efficiency={efficiency:.2f} tax={isolated / in_process:.2f} peak_gib={farm.peak_gib:.2f}")


def isolation(busy: WayRun, farm: FarmRun) -> float:
    """The isolation factor: the farm's isolated compile seconds per row over in-process ones with every core
    busy (what is left of the tax once compiles sharing the machine are taken out)."""
    return farm.isolated_compile_s / max(farm.compiled_rows, 1) / (sum(busy.seconds.values()) / len(busy.seconds))


def tax_split(seq: WayRun, busy: WayRun, farm: FarmRun) -> str:
    """The tax as two factors: compiles sharing the machine (in-process with every core busy against alone)
    and the isolation itself (the farm's isolated compiles against in-process ones with every core busy)."""
    alone = sum(seq.seconds.values()) / len(seq.seconds)
    shared = sum(busy.seconds.values()) / len(busy.seconds)
    isolated = farm.isolated_compile_s / max(farm.compiled_rows, 1)
    return (f"  tax split: in-process {alone:.3f} s per row alone, {shared:.3f} with every core busy "
            f"(sharing {shared / alone:.2f}x); the farm's isolated {isolated:.3f} "
            f"(isolation {isolation(busy, farm):.2f}x)")


@dataclass(frozen=True)
class Measured:
    """One selection's farm builds and the in-process ways around them, as `measure` ran them."""

    warm: FarmRun  # the warm-up build (may start the standing cluster); not in the ratios
    before: WayRun  # the sequential way right before the measured build
    farm: FarmRun  # the measured build
    after: WayRun  # the sequential way right after it
    busy: WayRun  # in-process compiles with every core busy (the tax split)

    @property
    def seq(self) -> WayRun:
        return bracketing(self.before, self.after)

    def objects(self) -> dict[str, dict[str, bytes]]:
        return {"sequential": self.before.objects, "sequential after": self.after.objects,
                "farm warm-up": self.warm.objects, "farm": self.farm.objects, "in-process busy": self.busy.objects}


def cores_of(cfg: config_mod.FarmConfig) -> int:
    return int(cfg.executor.get("num_cpus") or os.cpu_count() or 1)


def header(cfg: config_mod.FarmConfig, rows: list[Row]) -> None:
    print(f"bench: {len(rows)} rows ({', '.join(sorted({r.op for r in rows}))}) on "
          f"{len(set(r.target for r in rows))} target(s), {cores_of(cfg)} cores", flush=True)
    if auto_start_note(cfg):
        print(f"  note: {auto_start_note(cfg)}", flush=True)


def measure(cfg: config_mod.FarmConfig, rows: list[Row], overrides: list[str], work: Path, was_up: bool) -> Measured:
    """The warm-up farm build, then the sequential way, the measured build, the sequential way again and the
    in-process compiles with every core busy, each printed as it ends. Run inside `default_path`."""
    cores = cores_of(cfg)
    warm = farm_build(overrides, rows, work / "farm", cfg.root)
    _print_way("farm warm-up", warm, len(rows), f"  on the {warm.cluster} cluster"
               + (" (already up before the bench)" if was_up and warm.cluster == "standing" else "")
               + "; not in the ratios")
    before = way_sequential(cfg, rows, work / "sequential", cores)
    _print_way("sequential", before, len(rows), "  right before the measured farm build")
    farm = again(overrides, rows, work / "farm", cfg.root)
    _print_way("farm", farm, len(rows), f"  on the {farm.cluster} cluster; measured")
    after = way_sequential(cfg, rows, work / "sequential-after", cores)
    _print_way("sequential", after, len(rows), "  right after it")
    busy = way_in_process_busy(cfg, rows, work / "in-process-busy", cores)
    _print_way("in-process busy", busy, len(rows), f"  {cores} in-process compiles at once; not in the ratios")
    print(f"  sequential, the mean of both: {(before.wall + after.wall) / 2:.1f} s; the second took "
          f"{after.wall / before.wall:.2f}x the first (the machine's drift while the farm built)", flush=True)
    return Measured(warm, before, farm, after, busy)


def details(cfg: config_mod.FarmConfig, rows: list[Row], run: Measured, ways: dict[str, dict[str, bytes]]) -> list[str]:
    """The per-row compile seconds, the tax split, the phase table and the byte-identity lines."""
    seq, farm = run.seq, run.farm
    pure = sum(seq.seconds.values())
    return [f"  in-process compile {pure:.1f} s summed, {pure / len(rows):.3f} s per row; the farm's isolated "
            f"compiles {farm.isolated_compile_s:.1f} s summed over {farm.compiled_rows} rows, "
            f"{farm.isolated_compile_s / max(farm.compiled_rows, 1):.3f} s per row",
            tax_split(seq, run.busy, farm), *_phase_lines(seq, farm),
            *_identity_lines(ways, _golden(cfg.root, rows), len(rows))]


def main(argv: list[str]) -> int:
    if "--guards" in argv:
        import guards  # noqa: PLC0415  (its own bench module: throughput is what it reuses)

        return guards.main([a for a in argv if a != "--guards"])
    private = "--private" in argv
    overrides = [a for a in argv if a != "--private"]
    cfg = config_mod.load(config_mod.find_project_root(), overrides)
    rows, _ = fresh_rows(cfg)
    if not rows:
        raise SystemExit("the selection has no rows")
    header(cfg, rows)
    work = Path(tempfile.mkdtemp(prefix="farm-bench-"))
    try:
        fresh = way_fresh(cfg, rows, work / "fresh", cores_of(cfg))
        _print_way("fresh", fresh, len(rows))
        with default_path(cfg.root) as was_up:
            run = measure(cfg, rows, overrides, work, was_up)
        ways = {**run.objects(), "fresh": fresh.objects}
        if private:
            ref = farm_build(overrides, rows, work / "farm-private", cfg.root, ("executor.standing=false",))
            _print_way("farm-private", ref, len(rows), "  reference only (executor.standing=false)")
            ways["farm-private"] = ref.objects
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in details(cfg, rows, run, ways):
        print(line)
    print(summary(run.seq, fresh, run.farm, cores_of(cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
