"""The farm's way for bench/throughput.py: `farm build` as a user runs it, on the defaults.

Whatever the defaults do is measured: with the standing cluster up (or auto-started by the build), its warm
compilers; otherwise a private cluster. The build that may start the daemon is run first and printed apart
(the warm-up); the measured build is the same command run again once the warm-up's outputs and reports
are removed (`again`): what a user's next `farm build` of those rows finds (the daemon up, the composed
config kept: farm/table/config_cache.py), compiling every row. A daemon that the
bench's builds started is stopped at the end (`farm cluster down`); one that was up before is left up.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from peak_memory import PeakMemory

from farm.execute import autostart, standing, standing_files
from farm.observe.report import ReportRow
from farm.table.config import FarmConfig
from farm.table.rows import Row

USING_STANDING = "using the standing cluster"  # the build's log line when it runs on the warm daemon


@dataclass(frozen=True)
class FarmRun:
    """One `farm build` of the bench's rows."""

    wall: float  # seconds, process start to exit
    peak_gib: float  # the build's process tree plus the standing daemon's, if any
    objects: dict[str, bytes]  # by the bench's file name (key with / as __)
    report_rows: list[ReportRow]  # the build report's rows (JSON as written)
    cluster: str  # "standing" or "private": where the build ran

    @property
    def isolated_compile_s(self) -> float:
        """The sum of the compiled rows' isolated compile seconds (the worker's own measure)."""
        return sum(r.get("compile_seconds") or 0.0 for r in self.report_rows if r.get("ok"))

    @property
    def compiled_rows(self) -> int:
        return sum(1 for r in self.report_rows if r.get("ok") and r.get("compile_seconds") is not None)


def file_name(key: str) -> str:
    return key.replace("/", "__") + ".hsaco"


class CodeChanged(SystemExit):
    """A build whose rows were refused because the farm's code changed under it (a transient failure)."""


CODE_CHANGED = "runs different farm generator code"  # the build's refusal when worker and driver code differ


def farm_build(overrides: list[str], rows: list[Row], work: Path, root: Path, extra: tuple[str, ...] = ()) -> FarmRun:
    """`farm build` of the selection into `work`/outputs (report in `work`/reports); SystemExit on failure.
    A build refused because the farm's code changed while it ran (someone editing farm/) is run once more,
    into a fresh directory, and said so."""
    try:
        return _farm_build(overrides, rows, work, root, extra)
    except CodeChanged as exc:
        print(f"  ({work.name}: {exc}; running that build again into a fresh directory)", flush=True)
        return _farm_build(overrides, rows, work.with_name(work.name + "-again"), root, extra)


def again(overrides: list[str], rows: list[Row], work: Path, root: Path) -> FarmRun:
    """The `farm build` that `farm_build(overrides, rows, work, root)` ran, run again from nothing: its outputs
    and reports removed first (`rm -rf outputs`), the same command line."""
    for built in (work / "outputs", work / "reports"):
        shutil.rmtree(built)
    return farm_build(overrides, rows, work, root)


def _farm_build(overrides: list[str], rows: list[Row], work: Path, root: Path, extra: tuple[str, ...]) -> FarmRun:
    outputs, reports = work / "outputs", work / "reports"
    # cache.restore=false: the bench measures compiling; restoring published objects from the DVC cache
    # (the default for a row outputs.dvc publishes) would measure a download instead.
    command = [sys.executable, "-m", "farm.cli", "build", *overrides, f"outputs_dir={outputs}",
               f"report_dir={reports}", "cache.restore=false", *extra]
    daemon = standing.running(root)
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = PeakMemory(proc.pid, *([int(daemon["pid"])] if daemon else []))
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    peak_gib = peak.stop()
    if proc.returncode != 0 and CODE_CHANGED in stderr:
        raise CodeChanged(f"farm build had rows that {CODE_CHANGED} (farm/ was edited while it ran)")
    if proc.returncode != 0:
        raise SystemExit(f"farm build failed ({' '.join(command[3:])}):\n{stdout}\n{stderr[-3000:]}")
    objects = {file_name(r.key): (outputs / r.op / r.target / r.file_name).read_bytes() for r in rows}
    report = json.loads((reports / "latest-build.json").read_text())
    run = FarmRun(wall, peak_gib, objects, list(report["rows"]), "standing" if USING_STANDING in stderr else "private")
    if run.compiled_rows != len(rows):
        raise SystemExit(f"farm build compiled {run.compiled_rows} of {len(rows)} rows into a fresh outputs directory; "
                         "the bench's ratios need every row compiled")
    return run


@contextmanager
def default_path(root: Path) -> Iterator[bool]:
    """Yields whether a standing cluster was up before the bench; on exit, stops one the bench's builds
    started (auto-start), and leaves one that was already up."""
    before = standing.running(root) is not None
    try:
        yield before
    finally:
        if not before:
            _let_a_start_finish(root)
        if not before and standing.running(root) is not None:
            subprocess.run([sys.executable, "-m", "farm.cli", "cluster", "down"], stdout=subprocess.DEVNULL,
                           check=False, cwd=root)  # root's daemon, wherever the bench runs from
            print("  (stopped the standing cluster the bench's builds started: farm cluster down)", flush=True)


def _let_a_start_finish(root: Path) -> None:
    """A daemon a build started but stopped waiting for (it built on a private cluster) is still coming up:
    wait for it to be up or gone, so that it can be stopped instead of left running."""
    deadline = time.monotonic() + standing.START_TIMEOUT_S
    while standing_files.starting(root) and standing.running(root) is None and time.monotonic() < deadline:
        time.sleep(1.0)


def auto_start_note(cfg: FarmConfig) -> str | None:
    """Why the build here does not start a standing cluster (CI=true, executor.auto_start=false, ...): its
    path is then a private cluster unless one is already up."""
    reason = autostart.off_reason(cfg)
    return f"this farm build does not auto-start a standing cluster ({reason})" if reason else None
