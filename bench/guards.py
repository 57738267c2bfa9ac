"""The speed guards: five numbers measured in one run, each checked against its limit, and one last line
`guards: PASS ...` or `guards: FAIL (names) ...` (exit 1 on FAIL).

    python bench/throughput.py --guards [--outputs=DIR]

- attention, rmsnorm: farm_vs_sequential (the sequential way's wall over the measured farm build's) of
  `ops=[sdpa_cdna] targets=[gfx942]` (78 rows) and `ops=[rmsnorm] targets=[gfx942]` (90 rows), measured as
  bench/throughput.py measures them (`measure`: the warm-up build, the sequential way right before and right
  after the measured build, their mean), without its `fresh` way (no guard, and the slowest);
- isolation attention, isolation rmsnorm: the isolation factor of the same runs (their `tax split` line);
- incremental: 10 objects of the RMSNorm run's measured build deleted, then the same `farm build ...
  cache.restore=false` again on the defaults (the warm standing cluster), wall clock with process start; five
  rounds, each deleting other rows, and their mean;
- restore: the whole table restored from the remote cache: a temporary clone of the project gets a complete
  outputs/ (a copy of the project's, or of --outputs=DIR, when `farm check --complete` passes on it; otherwise
  it is built there first, which takes minutes and is said), `farm push` to the clone's own local remote
  (.farm/dvc-remote: fresh), `rm -rf outputs .dvc/cache`, then `farm build`, wall clock with process start;
  every row must come back restored.

Everything is built in temporary directories; the project's outputs/ is only read (copied).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import throughput
from farm_way import default_path, farm_build

from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.table.rows import Row


@dataclass(frozen=True)
class Guard:
    name: str  # as the guard line says it
    limit: float
    unit: str  # printed after the value: "x", "s" or nothing
    at_least: bool  # True: the value passes at or above the limit; False: at or below it


# The limits, on 2 cores of this machine kind, in the order the guard line gives them.
GUARDS = (
    Guard("attention", 1.45, "x", True),  # farm_vs_sequential
    Guard("rmsnorm", 1.0, "x", True),  # farm_vs_sequential
    Guard("isolation attention", 1.35, "", False),
    Guard("isolation rmsnorm", 1.6, "", False),
    Guard("incremental", 3, "s", False),  # a 10-row rebuild, mean of ROUNDS
    Guard("restore", 15, "s", False),  # the whole table from the remote cache
)
SELECTIONS = {"attention": ["ops=[sdpa_cdna]", "targets=[gfx942]"], "rmsnorm": ["ops=[rmsnorm]", "targets=[gfx942]"]}
ROUNDS, DELETED = 5, 10


def verdict(values: Mapping[str, float]) -> tuple[bool, str]:
    """Whether every guard holds, and the guard line (each value with its comparison to its limit)."""
    parts, failed = [], []
    for guard in GUARDS:
        value = values[guard.name]
        held = value >= guard.limit if guard.at_least else value <= guard.limit
        sign = (">=" if held else "<") if guard.at_least else ("<=" if held else ">")
        parts.append(f"{guard.name} {value:.{1 if guard.unit == 's' else 2}f}{guard.unit}{sign}{guard.limit}")
        if not held:
            failed.append(guard.name)
    return not failed, f"guards: {'FAIL (' + ', '.join(failed) + ')' if failed else 'PASS'} {' '.join(parts)}"


def incremental(overrides: list[str], rows: list[Row], work: Path, root: Path) -> list[float]:
    """ROUNDS rebuilds of DELETED rows each: the objects deleted from the built tree under `work` (its measured
    build's), the same `farm build` again (farm_way.farm_build: it checks that exactly those compiled). Walls."""
    step = max(len(rows) // DELETED, 1)
    walls = []
    for round_ in range(ROUNDS):
        gone = rows[round_ % step::step][:DELETED]  # other rows each round, spread over the table
        for row in gone:
            (work / "outputs" / row.op / row.target / row.file_name).unlink()
        run = farm_build(overrides, gone, work, root)
        print(f"  incremental {round_ + 1}: {len(gone)} rows rebuilt in {run.wall:.2f} s on the {run.cluster} cluster",
              flush=True)
        walls.append(run.wall)
    return walls


def _farm(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A farm command in `project` (cwd: its own farm/ and conf/), output kept."""
    return subprocess.run([sys.executable, "-m", "farm.cli", *args], cwd=project, capture_output=True, text=True)


def _tail(proc: subprocess.CompletedProcess[str], lines: int = 1) -> str:
    return "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-lines:])


def _must(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{_tail(proc, 20)}")


def restore(root: Path, source: Path, work: Path, selection: Sequence[str] = ()) -> float:
    """The wall of `farm build` restoring every selected row (default: the whole table) into a clone of
    `root` whose tree was pushed to a fresh local remote and then removed with the DVC cache. A narrowing
    `selection` must hold whole <op>/<target> directories (it is pushed with --partial)."""
    project = work / "project"  # a clone: the committed code and conf/, as a user's checkout has them
    subprocess.run(["git", "clone", "-q", str(root), str(project)], check=True)
    if source.is_dir():
        shutil.copytree(source, project / "outputs", symlinks=True)
    check = _farm(project, "check", "--complete", *selection)
    if check.returncode != 0:
        why = _tail(check) if source.is_dir() else "there is none"
        print(f"  {source} is not a complete tree here ({why}); building it in the copy first "
              "(cache.restore=false on a private cluster; not measured)", flush=True)
        started = time.monotonic()
        _must(_farm(project, "build", *selection, "cache.restore=false", "executor.standing=false"), "farm build")
        _must(_farm(project, "check", "--complete", *selection), "farm check --complete after that build")
        print(f"  built in {time.monotonic() - started:.0f} s", flush=True)
    _must(_farm(project, "push", *(["--partial"] if selection else []), *selection), "farm push")
    for gone in (project / "outputs", project / ".dvc" / "cache"):  # rm -rf outputs .dvc/cache
        if gone.exists():
            shutil.rmtree(gone)
    cfg = config_mod.load(project, list(selection))
    rows = len(fresh_rows(cfg)[0])
    (cfg.report_dir / "latest-build.json").unlink(missing_ok=True)
    with default_path(project):  # stops a daemon this build might start (it should start none)
        started = time.monotonic()
        proc = _farm(project, "build", *selection)
        wall = time.monotonic() - started
    _must(proc, "the restoring farm build")
    report = json.loads((cfg.report_dir / "latest-build.json").read_text())
    print(f"  restore: {_tail(proc)} ({wall:.1f} s with process start)", flush=True)
    if (report.get("restored"), report.get("built"), report.get("failed")) != (rows, 0, 0):
        raise SystemExit(f"the restoring farm build restored {report.get('restored')} of {rows} rows, compiled "
                         f"{report.get('built')}, failed {report.get('failed')}: not a restore of the whole selection")
    return wall


def main(argv: list[str]) -> int:
    """`bench/throughput.py --guards [--outputs=DIR]`: every guard measured, then the guard line."""
    started = time.monotonic()
    root = config_mod.find_project_root()
    given = [a.split("=", 1)[1] for a in argv if a.startswith("--outputs=")]
    unknown = [a for a in argv if not a.startswith("--outputs=")]
    if unknown:
        raise SystemExit(f"--guards measures fixed selections; not accepted: {' '.join(unknown)}")
    source = Path(given[0]).resolve() if given else config_mod.load(root, []).outputs_dir
    values: dict[str, float] = {}
    work = Path(tempfile.mkdtemp(prefix="farm-guards-"))
    try:
        with default_path(root) as was_up:
            for name, overrides in SELECTIONS.items():
                cfg = config_mod.load(root, overrides)
                rows, _ = fresh_rows(cfg)
                throughput.header(cfg, rows)
                run = throughput.measure(cfg, rows, overrides, work / name, was_up)
                for line in throughput.details(cfg, rows, run, run.objects()):
                    print(line)
                values[name] = run.seq.wall / run.farm.wall
                values[f"isolation {name}"] = throughput.isolation(run.busy, run.farm)
                print(f"  {name}: farm_vs_sequential={values[name]:.2f} "
                      f"isolation={values[f'isolation {name}']:.2f}", flush=True)
                if name == "rmsnorm":
                    walls = incremental(overrides, rows, work / name / "farm", root)
                    values["incremental"] = sum(walls) / len(walls)
                    print(f"  incremental: {len(walls)} rounds of {DELETED} rows, {min(walls):.2f}-{max(walls):.2f} s, "
                          f"mean {values['incremental']:.2f} s", flush=True)
        print(f"restore: the whole table from a fresh local remote, the tree taken from {source}", flush=True)
        values["restore"] = restore(root, source, work / "restore")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    held, line = verdict(values)
    print(f"(the guards took {time.monotonic() - started:.0f} s)")
    print(line)
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
