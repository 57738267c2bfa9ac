"""One object's emulation as a task: what the driver ships (`Task`: the object's bytes, its row and the ISA's
decoder by name) and what comes back (`ObjectResult`), both plain dataclasses, so the task runs the same in
a Ray worker (farm/emulate/parallel.py) as in the command's own process.

An object that cannot be run to the end (not launchable, an instruction the model lacks, an access out of
bounds, bytes LLVM cannot decode, a check that raised) is NOT EMULATED, with the reason in `stopped`; a
missing or failing llvm-mc is the machine's problem, not the object's (`tool_failure`: the command stops).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import traceback
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from amdgpu_models.core.memory import BoundsError
from amdgpu_models.core.wave import Unsupported
from amdgpu_models.disasm import ToolFailed, ToolMissing, Undecodable
from farm.emulate.families import named
from farm.emulate.launch import NotLaunchable, load
from farm.emulate.outcome import CaseOutcome

WITHIN, OUTSIDE, NOT_EMULATED = "within", "OUTSIDE", "NOT EMULATED"


@dataclass(frozen=True)
class Task:
    key: str
    op: str
    target: str
    knobs: dict[str, Any]
    data: bytes
    check: str  # the family's check, as farm/emulate/families.py CHECKS names it
    isa: str  # the ISA's module, as ISAS names it
    llvm_mc: str  # LLVM's decoder, beside the pinned disassembler (farm/emulate/isa.py)


@dataclass
class ObjectResult:
    key: str
    op: str
    target: str
    sha256: str | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU time of the task and its llvm-mc processes: what a busy machine moves least
    outcomes: list[CaseOutcome] = field(default_factory=list)
    stopped: str | None = None  # why the object was not emulated (not run, or not run to the end)
    tool_failure: str | None = None  # llvm-mc missing or failing: no object's fault, the command stops
    node: str | None = None  # the Ray node the task ran on (host/ip/node id), None when not run on Ray

    @property
    def emulated(self) -> bool:
        return self.stopped is None and self.tool_failure is None and bool(self.outcomes)

    @property
    def within(self) -> bool:
        return self.emulated and all(o.within for o in self.outcomes)

    @property
    def status(self) -> str:
        return NOT_EMULATED if not self.emulated else WITHIN if self.within else OUTSIDE

    @property
    def max_err(self) -> float:
        return max((m.error for o in self.outcomes for m in o.measures), default=0.0)

    def line(self) -> str:
        if not self.emulated:
            return f"{NOT_EMULATED} {self.key}: {self.stopped or self.tool_failure or 'the check gave no case'}"
        worst: dict[tuple[str, str], tuple[float, float]] = {}  # (output, criterion) -> (error, bound)
        for o in self.outcomes:
            for m in o.measures:
                if m.error >= worst.get((m.output, m.criterion), (-1.0, 0.0))[0]:
                    worst[(m.output, m.criterion)] = (m.error, m.bound)
        parts = ", ".join(f"{out}{'' if crit == 'relative' else f' [{crit}]'} {v:.2e} (tolerance {t:.2e})"
                          for (out, crit), (v, t) in worst.items())
        return f"{self.status} {self.key}: {parts}; {len(self.outcomes)} cases in {self.seconds:.1f} s"

    def as_json(self) -> dict[str, object]:
        return {"key": self.key, "sha256": self.sha256, "seconds": round(self.seconds, 3),
                "cpu_seconds": round(self.cpu_seconds, 3), "status": self.status,
                "within": self.within, "stopped": self.stopped, "node": self.node,
                "cases": [{**o.case.facts(), "within": o.within,
                           "measures": [{"output": m.output, "criterion": m.criterion, "dtype": m.dtype,
                                         "error": json_number(m.error), "bound": m.bound, "within": m.within}
                                        for m in o.measures]}
                          for o in self.outcomes]}


def json_number(value: float) -> float | str:
    """JSON has no infinity: a NaN or infinite output's error is written as text."""
    return value if math.isfinite(value) else str(value)


def run(task: Task) -> ObjectResult:
    """Every case of the object's family on the model of its target."""
    result = ObjectResult(task.key, task.op, task.target, sha256=hashlib.sha256(task.data).hexdigest())
    started, cpu = time.monotonic(), _cpu()
    try:
        decoder = partial(named(task.isa), llvm_mc=Path(task.llvm_mc))
        result.outcomes = named(task.check)(load(task.data), task.op, task.knobs, decoder)
    except (NotLaunchable, Undecodable, Unsupported, BoundsError) as exc:
        result.stopped = f"stopped: {type(exc).__name__}: {exc}"
    except (ToolMissing, ToolFailed) as exc:
        result.tool_failure = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 (a check's own failure is this object's reason, not the run's end)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.stopped = (f"the check raised {type(exc).__name__}: {exc} "
                          f"(at {Path(where.filename).name}:{where.lineno})")
    result.seconds = time.monotonic() - started
    result.cpu_seconds = _cpu() - cpu
    return result


def _cpu() -> float:
    """CPU seconds of this process and of its children that ended (the decoder's llvm-mc)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
