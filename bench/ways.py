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


def _one_target(cfg: FarmConfig, rows: list[Row], work: Path, out: Path, part: str = "") -> SequentialResult:
    """Run bench/sequential_generator.py over rows of one target (all of them, or the part named `part`);
    its result file as read back."""
    name = rows[0].target + (f".{part}" if part else "")
    requests = [compile_request(cfg, r) for r in rows]
    result = work / f"{name}.result.json"
    job = {"target": requests[0].to_json()["target"], "kernels_root": str(cfg.kernels_dir), "out_dir": str(out),
           "result_file": str(result), "requests": [r.to_json() for r in requests]}
    (work / f"{name}.json").write_text(json.dumps(job))
    env = private_env(work / name, requests[0].target, cfg.toolchain_pin.get("linker"))
    proc = subprocess.run([sys.executable, str(HERE / "sequential_generator.py"), str(work / f"{name}.json")],
                          cwd=work / name, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"sequential generator for {name} failed:\n{proc.stderr[-3000:]}")
    data: SequentialResult = json.loads(result.read_text())
    return data


def way_sequential(cfg: FarmConfig, rows: list[Row], work: Path, cores: int) -> WayRun:
    """(a) one process per target compiling its rows in sequence, up to one per core at a time."""
    by_target = _by_target(rows)
    return _in_process(cfg, [("", by_target[t]) for t in sorted(by_target)], work, min(cores, len(by_target)))


def way_in_process_busy(cfg: FarmConfig, rows: list[Row], work: Path, cores: int) -> WayRun:
    """In-process compiles with every core busy, as the farm keeps them: each target's rows dealt round-robin
    to `cores` processes, `cores` processes at a time. Not a user's way: it tells how much of the tax is
    compiles sharing the machine (the sequential way of a one-target selection compiles alone), and how much
    is the isolation itself."""
    return _in_process(cfg, dealt(rows, cores), work, cores)


def dealt(rows: list[Row], cores: int) -> list[tuple[str, list[Row]]]:
    """Each target's rows dealt round-robin into up to `cores` named parts (one generator process each)."""
    return [(str(i), group[i::cores]) for group in _by_target(rows).values() for i in range(cores) if group[i::cores]]


def _by_target(rows: list[Row]) -> dict[str, list[Row]]:
    by_target: dict[str, list[Row]] = {}
    for row in rows:
        by_target.setdefault(row.target, []).append(row)
    return by_target


def _in_process(cfg: FarmConfig, parts: list[tuple[str, list[Row]]], work: Path, workers: int) -> WayRun:
    """One sequential generator process per (part name, rows of one target), `workers` at a time."""
    out = work / "objects"
    out.mkdir(parents=True)
    peak = PeakMemory(psutil.Process().pid)
    started = time.monotonic()
    seconds: dict[str, float] = {}
    phases: dict[str, list[PhaseRecord]] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(lambda p: _one_target(cfg, p[1], work, out, p[0]), parts):
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
