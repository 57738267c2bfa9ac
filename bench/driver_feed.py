"""How many workers one driver keeps busy: the driver's real verify-and-write code fed by emulated workers.

A worker slot gets its next row only when the driver takes the last one's result (Ray's ActorPool, used by
farm/execute/dispatch.py, submits the next row from inside the driver's `get_next_unordered`). So whatever
holds the driver's main thread between two takes leaves finished slots idle. This bench measures that, side
by side in one run, for two ways of running the same per-batch code (farm/build.py `_BatchWriter.take`:
batch disassembly, acceptance, object writes, manifest flushes):

- inline: the main thread verifies and writes each batch before it takes the next (the build before the
  verify thread);
- thread: the main thread only takes results and queues them for `VerifyThread`, which disassembles,
  accepts and writes each batch;
- farm: what `farm build` does (`_collect`): as `thread`, and each batch's disassembly starts when the main
  thread takes it, on threads of its own (`EarlyDisassembly`), while the verify thread works on the batches
  before it.

The workers are emulated, not Ray: `--slots` slots, each row taking `--row-s` seconds of wall time (no CPU),
batches gathered as the real dispatch gathers them (`--gather-s` after a batch's first result). Their
results are real: the objects of outputs/ with their CompileResults rebuilt from the manifests (as
bench/driver_cost.py does), written into a temporary outputs dir, every one verified for real (the
disassembler runs on this machine).

Usage: .venv/bin/python bench/driver_feed.py [--rows 1453] [--slots 64,256] [--row-s 0.25] [--gather-s 1]
Per way and slot count it prints rows/s and the slots' busy share (rows x row-s / (slots x wall)); the
last line: `driver_feed rows_per_s inline/thread/farm slots=N:A/B/C(xC/A) ...`.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import driver_cost

from farm import build as farm_build
from farm.contract import CompileResult
from farm.plan.sources import Tree, collect
from farm.store.driver_cost import DriverCost
from farm.table.config import FarmConfig, find_project_root, load


class EmulatedWorkers:
    """`slots` workers compiling `results` in order, `row_s` seconds each; a slot starts its next row when
    the driver takes its last result. Yields batches the way the dispatch does."""

    def __init__(self, results: list[CompileResult], slots: int, row_s: float) -> None:
        self.waiting = list(reversed(results))
        self.row_s = row_s
        self.running: list[tuple[float, int, CompileResult]] = []  # (finishes at, tie-break, result)
        self.started = 0
        now = time.monotonic()
        for _ in range(min(slots, len(results))):
            self._start(now)

    def _start(self, now: float) -> None:
        if self.waiting:
            self.started += 1
            heapq.heappush(self.running, (now + self.row_s, self.started, self.waiting.pop()))

    def _take_finished(self, batch: list[CompileResult]) -> None:
        now = time.monotonic()
        while self.running and self.running[0][0] <= now:
            batch.append(heapq.heappop(self.running)[2])
            self._start(now)  # this slot's next row starts only now, when the driver took the result

    def completed_batches(self, gather_s: float) -> Iterator[list[CompileResult]]:
        while self.running:
            batch: list[CompileResult] = []
            time.sleep(max(0.0, self.running[0][0] - time.monotonic()))
            self._take_finished(batch)
            deadline = time.monotonic() + gather_s
            while self.running and time.monotonic() < deadline:
                time.sleep(max(0.0, min(self.running[0][0], deadline) - time.monotonic()))
                self._take_finished(batch)
            yield batch

    def taken_unix(self, key: str) -> float | None:
        return None

    def returned_unix(self, key: str) -> float | None:
        return None


WAYS = ("inline", "thread", "farm")


def run(cfg: FarmConfig, cases: list[driver_cost.Case], tree: Tree, slots: int, row_s: float, gather_s: float,
        way: str) -> float:
    """One way's wall seconds for all `cases`."""
    scratch = Path(tempfile.mkdtemp(prefix="driver-feed-"))
    try:
        run_cfg = driver_cost._with_outputs(cfg, scratch / "outputs")
        rows = {c.row.key: c.row for c in cases}
        workers = EmulatedWorkers([c.result for c in cases], slots, row_s)
        cost, failures = DriverCost(), []
        began = time.monotonic()
        with farm_build.DirectoryWriter(run_cfg) as writer, cost.window():
            per_batch = farm_build._BatchWriter(run_cfg, workers, rows, tree, writer, [], failures,
                                                driver_cost._Bar(), cost)
            if way == "farm":
                farm_build._collect(run_cfg, workers, rows, tree, writer, [], failures, driver_cost._Bar(),
                                    lambda: None, cost, gather_s)
            elif way == "thread":
                with farm_build.VerifyThread(per_batch.take, cost) as verifying:
                    for batch in workers.completed_batches(gather_s):
                        verifying.put(batch, time.time())
            else:
                for batch in workers.completed_batches(gather_s):
                    per_batch.take(batch, time.time())
            writer.flush()
        wall = time.monotonic() - began
        if failures:
            raise SystemExit(f"{len(failures)} rows refused, e.g. {failures[0][0].key}: {failures[0][1]}")
        return wall
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1453)
    parser.add_argument("--slots", default="64,256")
    parser.add_argument("--row-s", type=float, default=0.25, help="a row's compile time (RMSNorm's is ~0.25 s)")
    parser.add_argument("--gather-s", type=float, default=1.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = load(find_project_root(), [])
    cases = driver_cost._today(driver_cost.load_cases(cfg, args.rows))
    tree = Tree.of(collect(cfg.kernels_dir))
    print(f"{len(cases)} real objects from {cfg.outputs_dir}; emulated rows of {args.row_s} s, "
          f"gather {args.gather_s} s; disassembly threads {farm_build.DISASSEMBLY_THREADS}")
    print(f"{'slots':>6} {'way':>7} {'wall s':>8} {'rows/s':>8} {'busy':>6} {'ideal rows/s':>13}")
    last = []
    for slots in [int(s) for s in args.slots.split(",") if s]:
        found = {}
        for way in WAYS:
            wall = run(cfg, cases, tree, slots, args.row_s, args.gather_s, way)
            found[way] = len(cases) / wall
            busy = len(cases) * args.row_s / (slots * wall)
            print(f"{slots:>6} {way:>7} {wall:>8.2f} {found[way]:>8.1f} {busy:>6.2f} {slots / args.row_s:>13.1f}")
        last.append(f"slots={slots}:{found['inline']:.1f}/{found['thread']:.1f}/{found['farm']:.1f}"
                    f"(x{found['farm'] / found['inline']:.2f})")
    print("driver_feed rows_per_s inline/thread/farm " + " ".join(last))


if __name__ == "__main__":
    main()
