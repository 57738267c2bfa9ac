"""The message between the driver and a compile worker: one request in, one result back.

The driver builds a `CompileRequest` per row (farm/build.py `compile_request`); the executor ships it to a
worker (Ray pickles it); `farm.worker.isolate.compile_isolated` answers with a `CompileResult`. Inside the
worker, the fresh compile process reads a `CompileJob` (the request plus where its sources were written)
from a JSON file and leaves a `ProcessRecord` (what it read and ran) beside the object.

Both sides import this module and nothing else of each other. Whatever is read back from a file is checked
here (`from_json`): a malformed file is a ContractError, never a half-read value.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from farm.toolchain.shapes import LinkerPin, ToolchainPin

# The farm package's directory: files of the farm's own code are named relative to it (a result's
# `generator`, a manifest's `generator` and `verifier` records).
FARM_DIR = Path(__file__).resolve().parent

# JSON values as they travel: knobs are config data, passed through (the pin and linker entry: shapes.py).
Json = Any


class ContractError(ValueError):
    """A request, job or process record that does not have the contract's shape."""


def farm_rel(file: str | None) -> str | None:
    """The path of a farm module's source file relative to the farm package, None when not one."""
    if not file or not file.endswith(".py"):
        return None
    full = os.path.realpath(file)
    base = str(FARM_DIR) + os.sep
    return os.path.relpath(full, FARM_DIR).replace(os.sep, "/") if full.startswith(base) else None


def _need(data: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(data, dict) or key not in data or not isinstance(data[key], kind):
        raise ContractError(f"{what}: {key!r} missing or not {getattr(kind, '__name__', kind)}")
    return data[key]


# A kernel's per-compile LLVM options ({cl::opt name: value}); what the farm honours: farm/worker/llvm_options.py.
LlvmOptions = dict[str, bool | int | str]


def llvm_options_of(data: Any, what: str) -> LlvmOptions:
    """`data` as LLVM options: a JSON object of names to booleans, integers or strings."""
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, bool | int | str)
                                             for k, v in data.items()):
        raise ContractError(f"{what}: 'llvm_options' must map option names to booleans, integers or strings")
    return dict(data)


def _str_list(data: Any, key: str, what: str) -> tuple[str, ...]:
    items = _need(data, key, list, what)
    if not all(isinstance(i, str) for i in items):
        raise ContractError(f"{what}: {key!r} holds a non-string")
    return tuple(items)


@dataclass(frozen=True)
class TargetFacts:
    """What a compile needs to know about its target."""

    name: str  # stamped into the object (FlyDSL's ARCH)
    python_arch: str  # a concrete member FlyDSL's Python-side arch checks accept (FLYDSL_GPU_ARCH)
    mlir_chipset: str  # what convert-gpu-to-rocdl lowers for (a generic target's lowest member)

    @classmethod
    def from_json(cls, data: Any) -> TargetFacts:
        return cls(*(_need(data, key, str, "target") for key in ("name", "python_arch", "mlir_chipset")))


@dataclass(frozen=True)
class CompileRequest:
    """One row to compile. It names no path of the driver's disk: sources travel by relative name."""

    key: str  # op/target/name
    generator: str  # module under kernels_src/ with `launcher_and_args(knobs)`
    knobs: dict[str, Json]
    target: TargetFacts
    linker: LinkerPin | None = None  # the pin's linker entry (farm/toolchain/shapes.py)
    pin: ToolchainPin | None = None  # the part of the pin a worker's toolchain must match; None: unchecked

    def to_json(self) -> dict[str, Json]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> CompileRequest:
        what = "compile request"
        linker, pin = (data.get(k) if isinstance(data, dict) else None for k in ("linker", "pin"))
        if not isinstance(linker, dict | None) or not isinstance(pin, dict | None):
            raise ContractError(f"{what}: 'linker' and 'pin' must be objects or null")
        return cls(_need(data, "key", str, what), _need(data, "generator", str, what),
                   dict(_need(data, "knobs", dict, what)), TargetFacts.from_json(_need(data, "target", dict, what)),
                   linker, pin)


@dataclass(frozen=True)
class CompileJob:
    """What the isolated compile process reads: the request, and where its kernel sources were written."""

    request: CompileRequest
    kernels_root: str

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"request": self.request.to_json(), "kernels_root": self.kernels_root}))

    @classmethod
    def read(cls, path: Path) -> CompileJob:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ContractError(f"compile job {path} unreadable: {exc}") from None
        return cls(CompileRequest.from_json(_need(data, "request", dict, "compile job")),
                   _need(data, "kernels_root", str, "compile job"))


@dataclass(frozen=True)
class ProcessRecord:
    """What the compile process consulted and ran, written beside the object it made."""

    sources: tuple[str, ...]  # files it read under the kernels root (relative)
    lookups: tuple[str, ...]  # lookups there whose outcome depends on which files exist
    farm: dict[str, str]  # {farm-relative path: SHA256} of every farm module it loaded
    max_rss_kib: int  # its peak resident memory
    llvm_options: LlvmOptions = field(default_factory=dict)  # the kernel's per-compile LLVM options

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"sources": list(self.sources), "lookups": list(self.lookups),
                                    "farm": self.farm, "max_rss_kib": self.max_rss_kib,
                                    "llvm_options": self.llvm_options}))

    @classmethod
    def read(cls, path: Path) -> ProcessRecord:
        what = f"compile record {path.name}"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ContractError(f"{what} unreadable: {exc}") from None
        farm = _need(data, "farm", dict, what)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in farm.items()):
            raise ContractError(f"{what}: 'farm' must map file names to hashes")
        return cls(_str_list(data, "sources", what), _str_list(data, "lookups", what), dict(farm),
                   _need(data, "max_rss_kib", int, what), llvm_options_of(data.get("llvm_options", {}), what))


class PhaseJson(TypedDict):
    """A `Phase` as a report row's `phases` list holds it."""

    name: str
    start_unix: float
    seconds: float


@dataclass(frozen=True)
class Phase:
    """Where part of a row's time went: `seconds` spent in `name`, first entered at `start_unix` (time.time()).
    A row's phases come in time order and together cover its worker wall time (farm/worker/phases.py)."""

    name: str
    start_unix: float
    seconds: float

    def to_json(self) -> PhaseJson:
        return PhaseJson(name=self.name, start_unix=self.start_unix, seconds=self.seconds)

    @classmethod
    def from_json(cls, data: Any) -> Phase:
        number = (int, float)
        return cls(_need(data, "name", str, "phase"), float(_need(data, "start_unix", number, "phase")),
                   float(_need(data, "seconds", number, "phase")))


# The fields of a result the build report keeps per row (farm/build.py), in this order.
REPORT_FIELDS = ("key", "ok", "seconds", "warmup_seconds", "compile_seconds", "started_unix", "finished_unix",
                 "node", "worker", "pid", "toolchain", "max_rss_mib", "warnings", "error", "stderr", "phases")


@dataclass(frozen=True)
class CompileResult:
    """How one row's compile ended: the object's bytes, or why there is none; and what it consulted."""

    key: str
    ok: bool = False
    elf: bytes | None = None
    error: str | None = None  # one line: why there is no object
    stderr: str = ""  # the compiler's own output
    warnings: tuple[str, ...] | None = None  # the compiler's warning lines (None: it never ran)
    node: str | None = None
    worker: str | None = None  # "node pid P"
    pid: int | None = None
    toolchain: ToolchainPin | None = None  # the worker's toolchain fingerprint
    sources: dict[str, str] = field(default_factory=dict)  # {kernels_src-relative path: SHA256} it read
    lookups: tuple[str, ...] = ()
    generator: dict[str, str] = field(default_factory=dict)  # {farm-relative path: SHA256} that made the bytes
    llvm_options: LlvmOptions = field(default_factory=dict)  # the kernel's per-compile LLVM options (most: none)
    max_rss_mib: float | None = None
    started_unix: float | None = None
    finished_unix: float | None = None
    seconds: float | None = None
    warmup_seconds: float | None = None
    compile_seconds: float | None = None
    phases: tuple[Phase, ...] = ()  # worker-side phases in time order (the driver appends its own to the row)

    @classmethod
    def failure(cls, key: str, error: str, **facts: Any) -> CompileResult:
        """A result without an object (a task that died, a toolchain that does not match)."""
        return cls(key=key, ok=False, error=error, **facts)

    def report_fields(self) -> dict[str, Json]:
        """This result as one row of the build report (JSON values, no object bytes)."""
        row = {name: getattr(self, name) for name in REPORT_FIELDS}
        row["warnings"] = None if self.warnings is None else list(self.warnings)
        row["phases"] = [phase.to_json() for phase in self.phases]
        return row
