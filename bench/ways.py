"""The reference ways of bench/throughput.py: sequential (in-process) and fresh (one interpreter per row)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import psutil
from farm_way import file_name
from fresh_compile import compile_fresh, private_env
from peak_memory import PeakMemory
from phase_table import PhaseRecord

from farm.build import compile_request
from farm.table.config import FarmConfig
from farm.table.rows import Row

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class WayRun:
    """One reference way's run over the bench's rows."""

    wall: float
    peak_gib: float
    objects: dict[str, bytes]  # by the bench's file name (key with / as __)
    seconds: dict[str, float] = field(default_factory=dict)  # in-process compile seconds by key (sequential)
    phases: dict[str, list[PhaseRecord]] = field(default_factory=dict)  # in-process phases by key (sequential)


class SequentialResult(TypedDict):
    """What bench/sequential_generator.py leaves for one target (its result file)."""

    seconds: dict[str, float]  # in-process compile seconds by row key
    phases: dict[str, list[PhaseRecord]]  # in-process phases by row key (empty without the phase helper)


def _objects(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob("*.hsaco")}


def _one_target(cfg: FarmConfig, rows: list[Row], work: Path, out: Path) -> SequentialResult:
    """Run bench/sequential_generator.py over one target's rows; its result file as read back."""
    target = rows[0].target
    requests = [compile_request(cfg, r) for r in rows]
    result = work / f"{target}.result.json"
    job = {"target": requests[0].to_json()["target"], "kernels_root": str(cfg.kernels_dir), "out_dir": str(out),
           "result_file": str(result), "requests": [r.to_json() for r in requests]}
    (work / f"{target}.json").write_text(json.dumps(job))
    env = private_env(work / target, requests[0].target, cfg.toolchain_pin.get("linker"))
    proc = subprocess.run([sys.executable, str(HERE / "sequential_generator.py"), str(work / f"{target}.json")],
                          cwd=work / target, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"sequential generator for {target} failed:\n{proc.stderr[-3000:]}")
    data: SequentialResult = json.loads(result.read_text())
    return data


def way_sequential(cfg: FarmConfig, rows: list[Row], work: Path, cores: int) -> WayRun:
    """(a) one process per target compiling its rows in sequence, up to one per core at a time."""
    by_target: dict[str, list[Row]] = {}
    for row in rows:
        by_target.setdefault(row.target, []).append(row)
    out = work / "objects"
    out.mkdir(parents=True)
    peak = PeakMemory(psutil.Process().pid)
    started = time.monotonic()
    seconds: dict[str, float] = {}
    phases: dict[str, list[PhaseRecord]] = {}
    with ThreadPoolExecutor(max_workers=min(cores, len(by_target))) as pool:
        for part in pool.map(lambda t: _one_target(cfg, by_target[t], work, out), sorted(by_target)):
            seconds.update(part["seconds"])
            phases.update(part["phases"])
    wall = time.monotonic() - started
    return WayRun(wall, peak.stop(), _objects(out), seconds, phases)


def way_fresh(cfg: FarmConfig, rows: list[Row], work: Path, cores: int) -> WayRun:
    """(b) one fresh interpreter per row, one per core at a time."""
    out = work / "objects"
    out.mkdir(parents=True)
    peak = PeakMemory(psutil.Process().pid)

    def one_row(index_row: tuple[int, Row]) -> None:
        index, row = index_row
        compile_fresh(cfg, row, work / f"row{index}", out / file_name(row.key))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=cores) as pool:
        list(pool.map(one_row, enumerate(rows)))
    wall = time.monotonic() - started
    return WayRun(wall, peak.stop(), _objects(out))
