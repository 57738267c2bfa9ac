"""The driver's CPU per row at the batch sizes many cores produce (issue 16 point 5).

On a 2-core machine every batch of results holds one row, so per-batch costs (a disassembler start, a
manifest flush, a Ray wake-up) all land on that row; a driver feeding 250 cores sees batches of many rows.
This replays real results through the driver's real code at chosen batch sizes:

- accept+write: the objects of outputs/ with their CompileResults rebuilt from the manifests (the generator
  files rehashed from this checkout, as a worker running today's code would report them), fed in batches
  of N to farm/build.py `_collect` (disassembly, acceptance, object writes, manifest flushes: what
  `farm build` runs) writing into a fresh temporary outputs dir. Counted by farm/observe/driver_cost.py: the
  driver's own process CPU, and the disassembler children's CPU apart.
- ray: `--ray`: a private Ray cluster on 127.0.0.1 whose dummy actors return pre-made CompileResults of
  real sizes through the real farm/execute/dispatch.py `Dispatch`; the driver's process CPU per result
  (submit, wait, get, deserialize), with each batch size measured, for one row a call and for parcels of up
  to MAX_PARCEL rows (what the dispatch sends), side by side.

Usage: .venv/bin/python bench/driver_cost.py [--rows 384] [--batches 1,16,128] [--ray 8,32]
The last line: `driver_ms_per_row batch=N:ms ... disassembler_ms_per_row batch=N:ms ...
ray_actors=A/parcelP:ms ...`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from farm import build as farm_build
from farm.contract import CompileRequest, CompileResult, TargetFacts
from farm.execute.settings import MAX_PARCEL
from farm.observe import driver_cost
from farm.observe.driver_cost import DriverCost, DriverReport
from farm.plan.digest import farm_hashes
from farm.plan.sources import Tree, collect
from farm.store import manifest
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig, find_project_root, load
from farm.table.rows import Row
from farm.toolchain.installed import compile_part


@dataclass(frozen=True)
class Case:
    row: Row
    result: CompileResult


def load_cases(cfg: FarmConfig, limit: int) -> list[Case]:
    """Up to `limit` objects of outputs/, taken in turn from each op/target directory (a mix of sizes)."""
    per_dir: list[list[Case]] = []
    toolchain = compile_part(cfg.toolchain_pin)
    for op in sorted(cfg.ops):
        for target in sorted(cfg.targets):
            with OutputDir(cfg.outputs_dir, op, target) as out:
                if not out.exists:
                    continue
                listing = manifest.read(out)
                cases = []
                for file, entry in sorted(listing.entries.items()):
                    data = out.read_bytes(file)
                    inputs = entry.get("inputs")
                    if data is None or not isinstance(inputs, dict):
                        continue
                    row = Row(op, target, str(entry["name"]), str(entry["group"]), dict(entry["knobs"]),
                              dict(entry["allow"]))
                    cases.append(Case(row, CompileResult(
                        key=row.key, ok=True, elf=data, node="bench", toolchain=toolchain,
                        sources=dict(inputs.get("sources") or {}), lookups=tuple(inputs.get("lookups") or ()),
                        generator={k: v for k, v in farm_hashes(inputs.get("generator")).items() if v},
                        finished_unix=time.time())))
                per_dir.append(cases)
    mixed = [c for group in _interleave(per_dir) for c in group]
    return mixed[:limit]


def _interleave(groups: list[list[Case]]) -> Iterator[list[Case]]:
    for i in range(max(map(len, groups), default=0)):
        yield [g[i] for g in groups if i < len(g)]


class _Batches:
    """A pool that hands the driver pre-made results in batches of `size` (what many cores would send)."""

    def __init__(self, cases: list[Case], size: int) -> None:
        self.batches = [[c.result for c in cases[i:i + size]] for i in range(0, len(cases), size)]

    def completed_batches(self, gather_s: float = 0.0) -> Iterator[list[CompileResult]]:
        yield from self.batches

    def taken_unix(self, key: str) -> float | None:
        return None  # handed over at once: the batch's time is the time taken

    def returned_unix(self, key: str) -> float | None:
        return None


class _Bar:
    def write(self, text: str) -> None:
        pass  # refusals are counted after the run

    def update(self, n: int) -> None:
        pass


def replay(cfg: FarmConfig, cases: list[Case], size: int, tree: Tree) -> DriverReport:
    """`_collect` over the cases in batches of `size` into a fresh outputs dir; the driver's cost of it."""
    scratch = Path(tempfile.mkdtemp(prefix="driver-cost-"))
    cases = _today(cases)
    try:
        run_cfg = _with_outputs(cfg, scratch / "outputs")
        cost = DriverCost()
        failures: list = []
        with farm_build.DirectoryWriter(run_cfg) as writer, driver_cost.recording(cost), cost.window():
            farm_build._collect(run_cfg, _Batches(cases, size), {c.row.key: c.row for c in cases}, tree, writer,
                                [], failures, _Bar(), lambda: None, 0.0)
            with cost.section("write", "flush"):
                writer.flush()
        if failures:
            raise SystemExit(f"{len(failures)} rows refused, e.g. {failures[0][0].key}: {failures[0][1]}")
        return cost.report()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _today(cases: list[Case]) -> list[Case]:
    """The generator files rehashed now: others may edit farm/ while the bench runs (a worker running
    today's code reports today's hashes)."""
    return [Case(c.row, dataclasses.replace(c.result, generator={
        k: v for k, v in farm_hashes(c.result.generator).items() if v})) for c in cases]


def _with_outputs(cfg: FarmConfig, outputs: Path) -> FarmConfig:
    from dataclasses import replace
    return replace(cfg, outputs_dir=outputs)


def ray_cost(cases: list[Case], actors: int, results: int, gather_s: float,
             max_parcel: int) -> tuple[float, float, float]:
    """(driver process CPU ms per result, mean batch size, mean rows per call) for `results` pre-made results
    returned by `actors` dummy actors through the real Dispatch, rows going `max_parcel` at most to a call,
    on a private Ray cluster on 127.0.0.1."""
    import ray

    from farm.execute import local
    from farm.execute.dispatch import Dispatch

    @ray.remote(num_cpus=0)
    class Dummy:
        def __init__(self, made: list[CompileResult]) -> None:
            self.made = made

        def hello(self) -> str:
            return ray.get_runtime_context().get_actor_id()

        def compile_parcel(self, requests: list[CompileRequest]) -> list[CompileResult]:
            # A real result of this row's size, under the bench's own key (each key is submitted once).
            return [dataclasses.replace(self.made[r.knobs["i"] % len(self.made)], key=r.key) for r in requests]

    made = [c.result for c in cases]
    calls: list[int] = []
    local.start(2)  # the farm's own private cluster: loopback only, its private temp dir
    try:
        made_ref = ray.put(made)
        pool = [Dummy.remote(made_ref) for _ in range(actors)]

        def send(actor: object, requests: list[CompileRequest]) -> object:
            calls.append(len(requests))
            return actor.compile_parcel.remote(requests)  # type: ignore[attr-defined]

        dispatch = Dispatch(send, retries=0, max_parcel=max_parcel)
        dispatch.start(pool, 120)
        facts = TargetFacts("gfx942", "gfx942", "gfx942")
        start = time.process_time()
        for i in range(results):
            dispatch.submit(CompileRequest(key=f"bench/{i}", generator="bench", knobs={"i": i}, target=facts,
                                           linker=None, pin={}))
        sizes = [len(batch) for batch in dispatch.batches(gather_s)]
        cpu = time.process_time() - start
        return (cpu * 1000 / max(sum(sizes), 1), statistics.mean(sizes) if sizes else 0.0,
                results / max(len(calls), 1))
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=384)
    parser.add_argument("--batches", default="1,16,128")
    parser.add_argument("--ray", default="", help="dummy actor counts, e.g. 8,32 (empty: no Ray part)")
    parser.add_argument("--ray-results", type=int, default=2000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = load(find_project_root(), [])
    cases = load_cases(cfg, args.rows)
    tree = Tree.of(collect(cfg.kernels_dir))
    sizes = [int(s) for s in args.batches.split(",") if s]
    mean = sum(len(c.result.elf or b"") for c in cases) // len(cases)
    print(f"{len(cases)} real objects from {cfg.outputs_dir}, {mean} B mean; driver CPU ms per row "
          "(process CPU, all threads; disassembler children apart)")
    print(f"{'batch':>6} {'driver':>8} {'verify':>8} {'write':>8} {'ray':>6} {'threads':>7} {'other':>6} {'disasm':>8}")
    found = {}
    for size in sizes:
        rep = replay(cfg, cases, size, tree)
        per = {k: v * 1000 / rep["rows"] for k, v in rep["breakdown"].items()}
        found[size] = rep
        print(f"{size:>6} {rep['ms_per_row']:>8.2f} {per['verify']:>8.2f} {per['write']:>8.2f} {per['ray']:>6.2f} "
              f"{per['threads']:>7.2f} {per['other']:>6.2f} {rep['disassembler_ms_per_row']:>8.2f}")
    ray_found = {}
    for actors in [int(a) for a in args.ray.split(",") if a]:
        for parcel in (1, MAX_PARCEL):  # one row a call (the dispatch before parcels) and today's, side by side
            ms, mean, per_call = ray_cost(cases, actors, args.ray_results, 0.1, parcel)
            ray_found[f"{actors}/parcel{parcel}"] = ms
            print(f"ray: {actors} dummy actors, {args.ray_results} results, up to {parcel} rows a call "
                  f"({per_call:.2f} on average), mean batch {mean:.1f}: {ms:.2f} ms driver CPU per result")
    last = " ".join(f"batch={s}:{r['ms_per_row']:.2f}" for s, r in found.items())
    last += " disassembler_ms_per_row " + " ".join(f"batch={s}:{r['disassembler_ms_per_row']:.2f}"
                                                    for s, r in found.items())
    last += "".join(f" ray_actors={a}:{ms:.2f}" for a, ms in ray_found.items())
    print(f"driver_ms_per_row {last}")


if __name__ == "__main__":
    main()
