"""Build the same rows four ways (three ways of compiling, the farm on two clusters), one after another
in one run, and print how they compare.

    python bench/throughput.py [farm selection overrides]      e.g. ops=[rmsnorm] targets=[gfx942]

(a) sequential: one process per target compiling its rows in sequence (imports once, no isolation),
    up to one such process per core at a time: how per-target generator scripts work;
(b) fresh:      one fresh interpreter per row (`python -m farm.worker.zygote --fresh`), one per core at a
    time: how `make -j` over per-kernel compile commands works;
(c) farm:       `farm build` into a private outputs directory, twice:
    farm-private   on a private local Ray cluster that the build starts and stops (a build from nothing);
    farm-standing  on the standing local cluster (`farm cluster up`, started before and not timed: it is
                   a daemon that serves every build until `farm cluster down`; its start time is printed).

The limit is the sum of the pure compile times (trace + lower + link per row, measured in (a)) over
the cores; the farm's efficiency is that limit over its wall time. An isolated compile costs more
than one in a process that compiled the row before it, so the bench also prints each farm way's
scheduling efficiency: its own isolated compile seconds (from its build report) over the cores,
over its wall time. Peak memory is the largest sum
of resident set sizes over the whole process tree of each way (for farm-standing: the build's tree
plus the standing cluster's; shared pages count once per process, so it is an upper bound).
The line before the last gives farm-private's ratios; the last line, farm-standing's, is machine-readable:
    farm_vs_fresh=X farm_vs_sequential=Y efficiency=Z peak_gib=M
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from fresh_compile import compile_fresh, private_env

from farm.build import compile_request
from farm.execute import standing
from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.table.rows import Row

HERE = Path(__file__).resolve().parent


class PeakMemory:
    """Samples the resident memory of processes and all their descendants until stopped."""

    def __init__(self, *pids: int, interval_s: float = 0.1) -> None:
        self.roots = [psutil.Process(pid) for pid in pids]
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for root in self.roots:
                try:
                    for proc in [root, *root.children(recursive=True)]:
                        try:
                            total += proc.memory_info().rss
                        except psutil.Error:
                            pass
                except psutil.Error:
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(self.interval_s)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_bytes / 2**30


def _file_name(key: str) -> str:
    return key.replace("/", "__") + ".hsaco"


def way_sequential(cfg: config_mod.FarmConfig, rows: list[Row], work: Path, cores: int) -> dict[str, Any]:
    by_target: dict[str, list[Row]] = {}
    for row in rows:
        by_target.setdefault(row.target, []).append(row)
    out = work / "objects"
    out.mkdir(parents=True)
    peak = PeakMemory(psutil.Process().pid)

    def one_target(target: str) -> dict[str, float]:
        tdir = work / target
        requests = [compile_request(cfg, r) for r in by_target[target]]
        job = {"target": requests[0].to_json()["target"], "kernels_root": str(cfg.kernels_dir), "out_dir": str(out),
               "seconds_file": str(work / f"{target}.seconds.json"), "requests": [r.to_json() for r in requests]}
        (work / f"{target}.json").write_text(json.dumps(job))
        env = private_env(tdir, requests[0].target, cfg.toolchain_pin.get("linker"))
        proc = subprocess.run([sys.executable, str(HERE / "sequential_generator.py"), str(work / f"{target}.json")],
                              cwd=tdir, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"sequential generator for {target} failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(job["seconds_file"]).read_text())

    started = time.monotonic()
    seconds: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=min(cores, len(by_target))) as pool:
        for part in pool.map(one_target, sorted(by_target)):
            seconds.update(part)
    wall = time.monotonic() - started
    return {"wall": wall, "peak_gib": peak.stop(), "seconds": seconds, "objects": _objects(out)}


def way_fresh(cfg: config_mod.FarmConfig, rows: list[Row], work: Path, cores: int) -> dict[str, Any]:
    out = work / "objects"
    out.mkdir(parents=True)
    peak = PeakMemory(psutil.Process().pid)

    def one_row(index_row: tuple[int, Row]) -> None:
        index, row = index_row
        compile_fresh(cfg, row, work / f"row{index}", out / _file_name(row.key))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=cores) as pool:
        list(pool.map(one_row, enumerate(rows)))
    wall = time.monotonic() - started
    return {"wall": wall, "peak_gib": peak.stop(), "objects": _objects(out)}


def way_farm(overrides: list[str], rows: list[Row], work: Path, standing: dict[str, Any] | None) -> dict[str, Any]:
    outputs = work / "outputs"
    command = [sys.executable, "-m", "farm.cli", "build", *overrides, f"outputs_dir={outputs}",
               f"report_dir={work / 'reports'}", f"executor.standing={'true' if standing else 'false'}"]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = PeakMemory(proc.pid, *([int(standing["pid"])] if standing else []))
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    peak_gib = peak.stop()
    if proc.returncode != 0:
        raise SystemExit(f"farm build failed:\n{stdout}\n{stderr[-3000:]}")
    if standing and "using the standing cluster" not in stderr:
        raise SystemExit(f"farm build did not use the standing cluster:\n{stderr[-3000:]}")
    objects = {_file_name(r.key): (outputs / r.op / r.target / r.file_name).read_bytes() for r in rows}
    report = json.loads((work / "reports" / "latest-build.json").read_text())
    isolated = sum(r["compile_seconds"] for r in report["rows"])
    return {"wall": wall, "peak_gib": peak_gib, "objects": objects, "isolated_compile_s": isolated}


def _objects(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob("*.hsaco")}


@contextmanager
def standing_cluster(root: Path, overrides: list[str]) -> Iterator[tuple[dict[str, Any], float | None]]:
    """The project's standing cluster and the seconds `farm cluster up` took (None: it was already up,
    and is left up)."""
    state = standing.running(root)
    if state:
        yield state, None
        return
    selection = [o for o in overrides if o.startswith("executor.")]
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "farm.cli", "cluster", "up", *selection], check=True,
                   stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - started
    try:
        state = standing.running(root)
        if not state:
            raise SystemExit("farm cluster up returned but no standing cluster is running")
        yield state, seconds
    finally:
        subprocess.run([sys.executable, "-m", "farm.cli", "cluster", "down"], stdout=subprocess.DEVNULL)


def _ratios(way: dict[str, Any], fresh: dict[str, Any], seq: dict[str, Any], limit: float) -> str:
    return (f"farm_vs_fresh={fresh['wall'] / way['wall']:.2f} farm_vs_sequential={seq['wall'] / way['wall']:.2f} "
            f"efficiency={limit / way['wall']:.2f} peak_gib={way['peak_gib']:.2f}")


def main(overrides: list[str]) -> int:
    cfg = config_mod.load(config_mod.find_project_root(), overrides)
    rows, _ = fresh_rows(cfg)
    if not rows:
        raise SystemExit("the selection has no rows")
    cores = int(cfg.executor.get("num_cpus") or os.cpu_count() or 1)
    families = sorted({r.op for r in rows})
    print(f"bench: {len(rows)} rows ({', '.join(families)}) on {len(set(r.target for r in rows))} target(s), "
          f"{cores} cores", flush=True)
    root = Path(tempfile.mkdtemp(prefix="farm-bench-"))
    results: dict[str, dict[str, Any]] = {}

    def run(name: str, way: Any) -> None:
        (root / name).mkdir()
        results[name] = way(root / name)
        print(f"  {name:14} {results[name]['wall']:8.1f} s  {len(rows) / results[name]['wall']:6.2f} rows/s  "
              f"peak {results[name]['peak_gib']:.2f} GiB", flush=True)

    try:
        run("sequential", lambda w: way_sequential(cfg, rows, w, cores))
        run("fresh", lambda w: way_fresh(cfg, rows, w, cores))
        run("farm-private", lambda w: way_farm(overrides, rows, w, None))
        with standing_cluster(cfg.root, overrides) as (state, up_seconds):
            print("  (standing cluster " + (f"started in {up_seconds:.1f} s, not counted below)" if up_seconds
                                            else "was already up)"), flush=True)
            run("farm-standing", lambda w: way_farm(overrides, rows, w, state))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    fresh, seq = results["fresh"], results["sequential"]
    pure = sum(seq["seconds"].values())
    limit = pure / cores
    print(f"  pure compile time {pure:.1f} s summed, {pure / len(rows):.2f} s per row; "
          f"limit on {cores} cores {limit:.1f} s")
    for name in ("farm-private", "farm-standing"):
        isolated = results[name]["isolated_compile_s"]
        print(f"  {name}: its isolated compiles took {isolated:.1f} s summed ({isolated / len(rows):.2f} s per row); "
              f"scheduling efficiency {isolated / cores / results[name]['wall']:.2f} (that sum over the cores, "
              "over its wall time: what Ray, the driver and start-up cost beyond the compiles)")
    for name in ("farm-private", "farm-standing"):
        same_fresh = sum(results[name]["objects"][k] == v for k, v in fresh["objects"].items())
        same_seq = sum(results[name]["objects"][k] == v for k, v in seq["objects"].items())
        print(f"  objects identical to {name}'s: fresh {same_fresh}/{len(rows)}, sequential {same_seq}/{len(rows)}")
    print(f"farm-private: {_ratios(results['farm-private'], fresh, seq, limit)}")
    print(_ratios(results["farm-standing"], fresh, seq, limit))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
