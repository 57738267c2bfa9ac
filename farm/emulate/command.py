"""`farm emulate [selection]`: each selected RMSNorm object for gfx11-generic runs on the instruction-level
model of RDNA3 (wave32) against a numpy reference, as it is in outputs/ (its bytes are emulated as they
are, and its SHA256 recorded). Other objects are refused, one line each, and never counted as passing.

An object passes when every output of every case is within its type's tolerance (farm/emulate/numerics.py);
one that cannot run (not built, not launchable, an instruction or access the model stops at) is outside.
The last line is `emulated=N within=W outside=O max_err=E`; the run exits 0 only when O is 0 and N > 0.
This is a model, not hardware: it has no timing, caches or memory ordering between waves, and it is only as
faithful as the semantics its unit tests pin down.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TextIO

from amdgpu_models.core.memory import BoundsError
from amdgpu_models.core.wave import Unsupported
from amdgpu_models.disasm import ToolFailed, ToolMissing, Undecodable
from amdgpu_models.isa import gfx11
from farm.core.atomic import write_text_atomic
from farm.core.canonical import canonical_json
from farm.core.errors import FarmError
from farm.emulate.isa import tools
from farm.emulate.launch import NotLaunchable, load
from farm.emulate.outcome import CaseOutcome
from farm.emulate.rmsnorm_check import check
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain.disasm import FIX

TARGET = "gfx11-generic"
OPS = ("rmsnorm", "rmsnorm_bwd")


@dataclass
class ObjectResult:
    key: str
    sha256: str | None = None
    seconds: float = 0.0
    outcomes: list[CaseOutcome] = field(default_factory=list)
    stopped: str | None = None  # why the object could not be run to the end

    @property
    def within(self) -> bool:
        return self.stopped is None and bool(self.outcomes) and all(o.within for o in self.outcomes)

    @property
    def max_err(self) -> float:
        return max((m.error for o in self.outcomes for m in o.measures), default=0.0)

    def line(self) -> str:
        if self.stopped:
            return f"OUTSIDE {self.key}: stopped: {self.stopped}"
        worst: dict[tuple[str, str], tuple[float, float]] = {}  # (output, criterion) -> (error, bound)
        for o in self.outcomes:
            for m in o.measures:
                if m.error >= worst.get((m.output, m.criterion), (-1.0, 0.0))[0]:
                    worst[(m.output, m.criterion)] = (m.error, m.bound)
        parts = ", ".join(f"{out}{'' if crit == 'relative' else f' [{crit}]'} {v:.2e} (tolerance {t:.2e})"
                          for (out, crit), (v, t) in worst.items())
        return f"{'within' if self.within else 'OUTSIDE'} {self.key}: {parts}; {len(self.outcomes)} cases in " \
               f"{self.seconds:.1f} s"

    def as_json(self) -> dict[str, object]:
        return {"key": self.key, "sha256": self.sha256, "seconds": round(self.seconds, 3), "within": self.within,
                "stopped": self.stopped,
                "cases": [{**o.case.facts(), "within": o.within,
                           "measures": [{"output": m.output, "criterion": m.criterion, "error": _json_number(m.error),
                                         "bound": m.bound, "within": m.within} for m in o.measures]}
                          for o in self.outcomes]}


def _json_number(value: float) -> float | str:
    """JSON has no infinity: a NaN or infinite output's error is written as text."""
    return value if math.isfinite(value) else str(value)


def refusal(row: Row) -> str | None:
    if row.op not in OPS:
        return f"REFUSED {row.key}: the model runs only the RMSNorm families ({', '.join(OPS)})"
    if row.target != TARGET:
        return f"REFUSED {row.key}: the model is of RDNA3 wave32; it runs only {TARGET} objects"
    return None


def read_objects(cfg: FarmConfig, rows: list[Row]) -> dict[str, bytes | None]:
    """The bytes of each selected object the model runs (None: not there as a regular file; never read
    through a symlink). The caller holds the tree's lock only for this, not for the emulation."""
    found: dict[str, bytes | None] = {}
    for row in rows:
        if refusal(row) is None:
            with OutputDir(cfg.outputs_dir, row.op, row.target) as out:
                found[row.key] = out.read_bytes(row.file_name)
    return found


def emulate_row(cfg: FarmConfig, row: Row, data: bytes | None) -> ObjectResult:
    result = ObjectResult(row.key)
    if data is None:
        result.stopped = f"{row.relpath()} is not in {cfg.outputs_dir} (run `farm build` for it)"
        return result
    result.sha256 = hashlib.sha256(data).hexdigest()
    llvm_mc = tools(cfg.toolchain_pin.get("disassembler")).llvm_mc  # decoding is LLVM's (amdgpu_models.disasm)
    started = time.monotonic()
    try:
        result.outcomes = check(load(data), row.op, row.knobs, partial(gfx11.decode, llvm_mc=llvm_mc))
    except (NotLaunchable, Undecodable, Unsupported, BoundsError) as exc:
        result.stopped = f"{type(exc).__name__}: {exc}"
    except ToolMissing as exc:
        raise FarmError(str(exc), FIX) from None
    except ToolFailed as exc:
        raise FarmError(f"llvm-mc failed: {exc}", "check the llvm-22 install (scripts/setup.sh)") from None
    result.seconds = time.monotonic() - started
    return result


def emulate(cfg: FarmConfig, rows: list[Row], objects: dict[str, bytes | None], out: TextIO) -> int:
    """`objects`: from `read_objects`, keyed by row."""
    started = time.monotonic()
    results: list[ObjectResult] = []
    refused = []
    for row in sorted(rows, key=lambda r: r.key):
        why = refusal(row)
        if why:
            refused.append(row.key)
            print(why, file=out)
            continue
        result = emulate_row(cfg, row, objects.get(row.key))
        print(result.line(), file=out, flush=True)
        results.append(result)
    within = sum(r.within for r in results)
    max_err = max((r.max_err for r in results), default=0.0)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    report = {"finished_utc": stamp, "seconds": round(time.monotonic() - started, 3),
              "model": "instruction-level model of RDNA3 wave32 (amdgpu_models), not hardware",
              "emulated": len(results), "within": within, "outside": len(results) - within,
              "max_err": _json_number(max_err),
              "refused": refused, "objects": [r.as_json() for r in results], "outputs_dir": str(cfg.outputs_dir)}
    path = cfg.report_dir / f"emulate-{stamp}-{os.getpid()}.json"
    write_text_atomic(path, canonical_json(report))
    write_text_atomic(cfg.report_dir / "latest-emulate.json", canonical_json(report))
    print(f"report: {path}", file=out)
    print(f"emulated={len(results)} within={within} outside={len(results) - within} max_err={max_err:.3g}",
          file=out)
    return 0 if results and within == len(results) else 1
