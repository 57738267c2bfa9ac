"""Where a row's worker time goes: phase switches recorded by each process of a compile, merged into phases.

Every process that works on a row notes the moments (time.time()) at which the row's time starts being
spent on another phase: the worker (prepare, warmup, fork, return), the compile process (front_end,
mlir_passes, handoff, return), the codegen process (codegen, then handoff again) and the linker shim (link,
then codegen again). Each process writes its switches into the row's private directory; the worker merges
them (`merged`) into contiguous phases: a phase is every stretch between its switch and the next one, so
the phases cover the row's wall time exactly, and a phase entered twice (handoff: out to codegen and back)
is one entry with its summed seconds, starting where it was first entered.

Contract names in time order (farm/contract.py `Phase`): prepare, [warmup], fork, front_end, mlir_passes,
handoff, codegen, link, return. `warmup` appears only on a row that started its worker's warm server.

`in_process_phases` gives the bench the same boundaries for a compile in one process (front_end,
mlir_passes, codegen+link).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from farm.contract import Phase
from farm.toolchain.linker import LINK_TIMES_ENV  # noqa: F401  (set per codegen job: binary_step.py)

# Where the processes of one compile leave their switches: the row's private directory (set by the worker
# in the compile's environment; the codegen job and the linker shim get a file under it).
PHASES_DIR_ENV = "FARM_PHASES_DIR"
COMPILE_FILE, CODEGEN_FILE, LINK_FILE = "phases-compile.json", "phases-codegen.json", "phases-link.txt"

Switch = tuple[float, str]  # (time.time(), the phase the row's time goes to from then on)


@dataclass
class Timeline:
    """One process's phase switches for the row it works on."""

    switches: list[Switch] = field(default_factory=list)

    def switch(self, name: str, at: float | None = None) -> None:
        self.switches.append((time.time() if at is None else at, name))

    @property
    def current(self) -> str | None:
        return self.switches[-1][1] if self.switches else None

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.switches))


# The compile process's own timeline: one compile per process, and FlyDSL calls back into the farm
# (flydsl_compat.py) from deep inside its compile, where no timeline could be passed down.
COMPILE = Timeline()


def read_switches(path: Path) -> list[Switch]:
    """A process's switches as it wrote them; none when the file is missing or unreadable (a process that
    died before writing: its phases end where the last readable switch says)."""
    try:
        data = json.loads(path.read_text())
        return [(float(at), str(name)) for at, name in data]
    except (OSError, ValueError, TypeError):
        return []


def read_link_times(path: Path, resume: str = "codegen") -> list[Switch]:
    """The linker shim's lines "start end": a switch to link at start and back to `resume` at end."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    found: list[Switch] = []
    for line in lines:
        parts = line.split()
        try:
            start, end = float(parts[0]), float(parts[1])
        except (IndexError, ValueError):
            continue  # a link killed halfway leaves no end: its time stays codegen's
        found += [(start, "link"), (end, resume)]
    return found


def merged(switches: list[Switch], end: float) -> tuple[Phase, ...]:
    """Contiguous phases from switches of several processes (sorted by time), until `end`."""
    ordered = sorted(switches, key=lambda s: s[0])
    seconds: dict[str, float] = {}
    first: dict[str, float] = {}
    for (at, name), (until, _) in zip(ordered, [*ordered[1:], (end, "")], strict=True):
        first.setdefault(name, at)
        seconds[name] = seconds.get(name, 0.0) + max(0.0, until - at)
    return tuple(Phase(name, round(first[name], 6), round(seconds[name], 6)) for name in first)


def row_switches(work: Path) -> list[Switch]:
    """The switches the row's compile and codegen processes and its linker left in `work`."""
    return [*read_switches(work / COMPILE_FILE), *read_switches(work / CODEGEN_FILE),
            *read_link_times(work / LINK_FILE)]


@dataclass
class InProcessRow:
    """The phases of one compile done in this process (`in_process_phases`), filled when it ends."""

    phases: tuple[Phase, ...] = ()


@contextmanager
def in_process_phases() -> Iterator[InProcessRow]:
    """Time one compile in this process with the farm's boundaries: front_end from here until FlyDSL asks
    the farm's backend for its pass pipeline, mlir_passes until codegen starts, codegen+link from there to
    the end of the block (FlyDSL putting the object in its artifact, and whatever else the block does).
    Needs `flydsl_compat.use_farm_backend(...)` and `flydsl_compat.use_in_process_codegen()` once in the
    process; rows run one after another:

        with in_process_phases() as row:
            launcher(*args)
            elf = flydsl_compat.elf_from_compiled(launcher)
        row.phases  # (Phase("front_end", ...), Phase("mlir_passes", ...), Phase("codegen+link", ...))
    """
    row = InProcessRow()
    COMPILE.switches.clear()
    COMPILE.switch("front_end")
    try:
        yield row
    finally:
        end = time.time()
        row.phases = merged([(at, "codegen+link" if name == "codegen" else name) for at, name in COMPILE.switches],
                            end)
        COMPILE.switches.clear()


def phases_dir() -> Path | None:
    """The row's directory for phase files, when this process is part of a farm compile."""
    found = os.environ.get(PHASES_DIR_ENV)
    return Path(found) if found else None
