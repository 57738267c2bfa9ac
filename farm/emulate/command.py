"""`farm emulate [selection]`: each selected object whose family has a check and whose target an ISA model
(farm/emulate/families.py) runs on that instruction-level model against its family's numpy reference, as it
is in outputs/ (its bytes are emulated as they are, and its SHA256 recorded). The objects run as tasks on the
farm's executor (farm/emulate/parallel.py); each object's line is printed as it finishes.

Every selected object ends as one of:
- within: every output of every case is within its bound (farm/emulate/outcome.py);
- OUTSIDE: it ran to the end and an output is not;
- NOT EMULATED: the models cannot run it (no check for its family, no model of its target, not built, not
  launchable, stopped by an instruction the model lacks, an access out of bounds or bytes LLVM cannot
  decode), named with the reason. It is never counted as passing.
Then a table by family and target, the report's path, and the last line
`emulated=N within=W outside=O not_emulated=X max_err=E` (N = W + O). The run exits 0 only when every
selected object was emulated and is within (X = 0, O = 0, N > 0), else 1.
This is a model, not hardware: it has no timing, caches or memory ordering between waves, and it is only as
faithful as the semantics its unit tests pin down.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from farm.core.atomic import write_text_atomic
from farm.core.canonical import canonical_json
from farm.core.errors import FarmError
from farm.emulate import parallel
from farm.emulate.families import CHECKS, ISAS, refusal
from farm.emulate.isa import tools
from farm.emulate.summary import groups, table
from farm.emulate.task import ObjectResult, Task, json_number
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain.disasm import FIX

LATEST = "latest-emulate.json"


def read_objects(cfg: FarmConfig, rows: list[Row]) -> dict[str, bytes | None]:
    """The bytes of each selected object the models run (None: not there as a regular file; never read
    through a symlink). The caller holds the tree's lock only for this, not for the emulation."""
    found: dict[str, bytes | None] = {}
    for row in rows:
        if refusal(row.op, row.target) is None:
            with OutputDir(cfg.outputs_dir, row.op, row.target) as out:
                found[row.key] = out.read_bytes(row.file_name)
    return found


def not_emulated(cfg: FarmConfig, row: Row, data: bytes | None) -> ObjectResult | None:
    """The result of an object that is not run at all, or None when it runs."""
    why = refusal(row.op, row.target)
    if why is None and data is None:
        why = f"not built: {row.relpath()} is not in {cfg.outputs_dir} (run `farm build` for it)"
    return ObjectResult(row.key, row.op, row.target, stopped=why) if why else None


def emulate(cfg: FarmConfig, rows: list[Row], objects: dict[str, bytes | None], out: TextIO) -> int:
    """`objects`: from `read_objects`, keyed by row."""
    started = time.monotonic()
    results: list[ObjectResult] = []
    tasks: list[Task] = []
    llvm_mc = None
    for row in sorted(rows, key=lambda r: r.key):
        data = objects.get(row.key)
        early = not_emulated(cfg, row, data)
        if early is not None:
            results.append(early)
            print(early.line(), file=out, flush=True)
            continue
        assert data is not None
        llvm_mc = llvm_mc or str(tools(cfg.toolchain_pin.get("disassembler")).llvm_mc)  # LLVM decodes
        tasks.append(Task(row.key, row.op, row.target, dict(row.knobs), data, CHECKS[row.op], ISAS[row.target],
                          llvm_mc))
    tasks = longest_first(tasks, cfg.report_dir / LATEST)
    with closing(parallel.results(cfg.executor, tasks)) as finished:  # the cluster ends on a FarmError too
        for result in finished:
            if result.tool_failure:
                raise FarmError(f"{result.key}: {result.tool_failure}", FIX)
            results.append(result)
            print(result.line(), file=out, flush=True)
    return _finish(cfg, results, time.monotonic() - started, out)


def longest_first(tasks: list[Task], latest: Path) -> list[Task]:
    """The tasks in the order they go to the workers: those the last report timed, slowest first, after those
    it did not (unknown: maybe slow); by key within equals. A long object started last would leave the other
    CPUs idle at the end. The report's order is by key whatever the order they ran in."""
    try:
        report = json.loads(latest.read_text())
        took = {str(o["key"]): float(o["seconds"]) for o in report["objects"] if o.get("status") != "NOT EMULATED"}
    except (OSError, ValueError, KeyError, TypeError):
        took = {}
    return sorted(tasks, key=lambda t: (-took.get(t.key, math.inf), t.key))


def _finish(cfg: FarmConfig, results: Iterable[ObjectResult], seconds: float, out: TextIO) -> int:
    results = sorted(results, key=lambda r: r.key)
    emulated = [r for r in results if r.emulated]
    within = sum(r.within for r in emulated)
    missing = len(results) - len(emulated)
    max_err = max((r.max_err for r in emulated), default=0.0)
    found = groups(results)
    for line in table(found):
        print(line, file=out)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    report = {"finished_utc": stamp, "seconds": round(seconds, 3),
              "model": "instruction-level models of the ISAs (amdgpu_models), not hardware",
              "executor": {k: cfg.executor.get(k) for k in ("kind", "address", "num_cpus")},
              "emulated": len(emulated), "within": within, "outside": len(emulated) - within,
              "not_emulated": missing, "max_err": json_number(max_err),
              "table": [{"op": op, "target": target, **g.as_json()} for (op, target), g in found.items()],
              "objects": [r.as_json() for r in results], "outputs_dir": str(cfg.outputs_dir)}
    path = cfg.report_dir / f"emulate-{stamp}-{os.getpid()}.json"
    write_text_atomic(path, canonical_json(report))
    write_text_atomic(cfg.report_dir / LATEST, canonical_json(report))
    print(f"wall {seconds:.1f} s; report: {path}", file=out)
    print(f"emulated={len(emulated)} within={within} outside={len(emulated) - within} not_emulated={missing} "
          f"max_err={max_err:.3g}", file=out)
    return 0 if emulated and within == len(results) else 1
