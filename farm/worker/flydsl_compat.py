"""Every way the farm reaches into FlyDSL (flydsl==0.3.4), in one place, but for the LLVM codegen process's:
that one loads only FlyDSL's MLIR bindings, without its package and torch (farm/worker/flydsl_mlir.py).

Public faces first: the farm's pipeline changes are a compile backend registered through FlyDSL's backend
registry (`register_backend`), and FlyDSL's external-codegen mode (FLYDSL_COMPILE_LLVM_DIR set) stops its
pipeline before the binary pass (`gpu-module-to-binary`), which the farm then runs in a process of its own
(farm/worker/binary_step.py).

What is still private, each marked `PRIVATE:` with why and what public API would replace it:
- `flydsl._mlir` (the MLIR bindings FlyDSL bundles): parse a module, run one pass, read a gpu.binary;
- `jit_function._create_mlir_context`: the context FlyDSL compiles in (multithreading off, dialects loaded);
- `JitFunction._last_compiled`: the module a COMPILE_ONLY call compiled (read only when FlyDSL's own pipeline
  ran whole: a farm compile takes its object from its binary step, whatever kind of callable launched it);
- the list of modules FlyDSL imports lazily during its first compile (the zygote preloads them);
- `external_llvm.run_external_binary_codegen`, FlyDSL's external binary step, replaced by the farm's
  (`use_external_codegen`): FlyDSL's own runs `<dir>/bin/mlir-opt` as a process, which for the farm was a
  script starting a Python client (~50 ms a row) only to forward the job to the codegen server; the farm's
  step reaches that server from the compile process itself. The bench's in-process way replaces it with
  the pass run in place (`use_in_process_codegen`).
Re-check all of it when the pin moves.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import flydsl.compiler  # noqa: F401  (loads the backends: the registry below needs `rocm`)

# PRIVATE: the MLIR Python bindings bundled with FlyDSL (parse a module, run one pass, read a gpu.binary).
# FlyDSL has no public module for them; a public `flydsl.ir` re-export would replace these three imports.
from flydsl._mlir import ir
from flydsl._mlir.dialects import gpu
from flydsl._mlir.passmanager import PassManager
from flydsl.compiler import external_llvm
from flydsl.compiler.backends import register_backend
from flydsl.compiler.backends.rocm import RocmBackend

# PRIVATE: the context FlyDSL itself compiles in (multithreading off, all dialects loaded). Codegen runs in
# the same kind of context, as FlyDSL's own would; a public context factory would replace it.
from flydsl.compiler.jit_function import _create_mlir_context
from flydsl.utils import env as flydsl_env

from farm.worker import llvm_options
from farm.worker.phases import COMPILE

# The farm's backend takes the built-in ROCm backend's name: FlyDSL's extension libraries (flydsl.extension,
# e.g. coop reductions) pick their ROCm implementations by backend name, so under any other name a kernel
# traces to other code (measured: another object). `register_backend(..., force=True)` replaces it.
BACKEND = "rocm"
LLVM_DIR_ENV = "FLYDSL_COMPILE_LLVM_DIR"  # set: FlyDSL stops before the binary pass and calls its external step

# PRIVATE (in effect): modules FlyDSL 0.3.4 imports lazily during a process's first compile (measured on
# every kernel family here). The warm server imports them once instead of in every child: a forked
# RMSNorm compile went from ~0.23 s to ~0.17 s. A public "warm up" call in FlyDSL would replace the list.
LAZY_MODULES = (
    "flydsl._mlir.dialects.builtin", "flydsl._mlir.dialects.rocdl", "flydsl._mlir.dialects.fly_rocdl",
    "flydsl.compiler.llvm_options", "flydsl.expr.rocdl", "flydsl.extension.coop",
)


class FarmRocmBackend(RocmBackend):
    """FlyDSL's ROCm backend with the farm's two changes, made through its public backend methods.

    - MLIR's convert-gpu-to-rocdl rejects generic chipsets: that one fragment lowers for the family's
      lowest member (`lowering_chipset`) while rocdl-attach-target keeps the generic name.
    - gpu.modules are created without targets: FlyDSL stamps one (`#rocdl.target<chip=...>`) and
      rocdl-attach-target adds a second on wave32 targets, so the module would hold two code objects, the
      first compiled wave64. The attach pass stays the only source of targets (one object).
    """

    lowering_chipset: str | None = None  # set per compile process (`use_farm_backend`)

    def pipeline_fragments(self, *, compile_hints: dict) -> list[str]:
        _passes_start(compile_hints)
        return self._lowered(super().pipeline_fragments(compile_hints=compile_hints))

    def external_binary_pipeline_fragments(self, *, compile_hints: dict) -> tuple[list[str], str]:
        _passes_start(compile_hints)
        pre, binary = super().external_binary_pipeline_fragments(compile_hints=compile_hints)
        return self._lowered(pre), binary

    def gpu_module_targets(self) -> list[str]:
        return []

    def _lowered(self, fragments: list[str]) -> list[str]:
        chipset = type(self).lowering_chipset
        if not chipset or chipset == self.target.arch:
            return list(fragments)
        needle = f"chipset={self.target.arch} "
        if not any(needle in fragment for fragment in fragments):
            raise RuntimeError(f"flydsl pipeline has no '{needle.strip()}' fragment to lower for {chipset}; "
                               "FarmRocmBackend in farm/worker/flydsl_compat.py needs updating")
        return [f.replace(needle, f"chipset={chipset} ") for f in fragments]


def _passes_start(compile_hints: dict) -> None:
    """FlyDSL asks for the pipeline right before it runs it (MlirCompiler.compile): the front end is done.
    It has not set the compile's LLVM options yet: one the farm cannot honour stops the compile here,
    before LLVM sees it (farm/worker/llvm_options.py)."""
    llvm_options.check(compile_hints.get("llvm_options"))
    if COMPILE.current == "front_end":
        COMPILE.switch("mlir_passes")


def use_farm_backend(lowering_chipset: str) -> None:
    """In the compile process: FlyDSL compiles with FarmRocmBackend, lowering for `lowering_chipset`."""
    FarmRocmBackend.lowering_chipset = lowering_chipset
    register_backend(BACKEND, FarmRocmBackend, force=True)


# A module's gpu.module as text, the binary fragment and the compile's LLVM options, in: the same module
# holding its gpu.binary, as text, out.
Codegen = Callable[[str, str, llvm_options.LlvmOptions], str]


def use_external_codegen(codegen: Codegen) -> None:
    """In the compile process: FlyDSL stops before the binary pass, and `codegen(module_text, fragment,
    options)` runs it elsewhere (in a process of its own, binary_step.py), with the compile's LLVM options."""
    os.environ[LLVM_DIR_ENV] = "farm"  # only its being set matters: FlyDSL's tool lookup is replaced below
    external_llvm.run_external_binary_codegen = partial(_codegen_elsewhere, codegen)


def use_in_process_codegen() -> None:
    """For the bench's in-process compiles: FlyDSL splits its pipeline before the binary pass, and the farm
    runs that pass in this process, on FlyDSL's module, as FlyDSL's own pipeline would (inside FlyDSL's
    LLVM-options context, like the rest of the pipeline)."""
    os.environ[LLVM_DIR_ENV] = "in-process"
    external_llvm.run_external_binary_codegen = _codegen_in_place


# PRIVATE (both steps below): they take the place of `external_llvm.run_external_binary_codegen`, which
# FlyDSL imports from its module at each compile, with its signature (module, binary_fragment, *,
# llvm_options, ...). A public "binary step" hook on the backend would replace the assignment.
def _codegen_in_place(module: Any, binary_fragment: str, *, llvm_options: Any = None, **_options: Any) -> None:
    """The pass run here, inside FlyDSL's own LLVM-options context (so the options are set as FlyDSL sets them)."""
    COMPILE.switch("codegen")
    PassManager.parse(f"builtin.module({binary_fragment})").run(module.operation)
    _keep_objects(_only(module, "gpu.binary"), _checked(llvm_options))


def _codegen_elsewhere(codegen: Codegen, module: Any, binary_fragment: str, *, llvm_options: Any = None,
                       **_options: Any) -> None:
    """The gpu.module goes out as text exactly as FlyDSL's external step writes it (a module holding only
    it, printed with FlyDSL's debug-info setting), with the compile's LLVM options; its gpu.binary comes
    back in its place."""
    COMPILE.switch("handoff")
    options = _checked(llvm_options)
    gpu_module = _only(module, "gpu.module")
    alone = ir.Module.create(loc=ir.Location.unknown(module.context))
    alone.operation.attributes["gpu.container_module"] = ir.UnitAttr.get(module.context)
    ir.InsertionPoint.at_block_begin(alone.body).insert(gpu_module.clone())
    text = alone.operation.get_asm(enable_debug_info=flydsl_env.debug.enable_debug_info)
    returned = ir.Module.parse(codegen(text, binary_fragment, options), context=module.context)
    binary = _only(returned, "gpu.binary")
    if ir.StringAttr(binary.attributes["sym_name"]).value != ir.StringAttr(gpu_module.attributes["sym_name"]).value:
        raise RuntimeError("farm codegen returned a gpu.binary named unlike the gpu.module it was given")
    ir.InsertionPoint(gpu_module).insert(binary.clone())
    gpu_module.erase()
    _keep_objects(binary, options)


def _checked(options: Any) -> llvm_options.LlvmOptions:
    """The options FlyDSL hands its binary step (checked already when it asked for the pipeline)."""
    return llvm_options.check(options)


def _only(module: Any, op_name: str) -> Any:
    found = [op.operation for op in module.body.operations if op.operation.name == op_name]
    if len(found) != 1:
        raise RuntimeError(f"expected one {op_name} in the module, found {len(found)}")
    return found[0]


@dataclass(frozen=True)
class BinaryStep:
    """One binary step of this process: the code objects it made and the LLVM options it ran with."""

    objects: list[bytes]
    llvm_options: llvm_options.LlvmOptions


# This process's binary steps not yet taken (`take_binary_step`): their objects are read where the module is
# already parsed, in FlyDSL's context, so taking the object out needs no second parse in a new context.
_STEPS: list[BinaryStep] = []


def _keep_objects(binary: Any, options: llvm_options.LlvmOptions) -> None:
    _STEPS.append(BinaryStep([bytes(gpu.ObjectAttr(a).object) for a in binary.attributes["objects"]], options))


def take_binary_step() -> BinaryStep:
    """The one binary step a generator's launcher call made, holding one code object. Whatever kind of
    callable the launcher is (a @flyc.jit function, or a function or object that calls one), the call
    must have compiled exactly one module."""
    steps = list(_STEPS)
    _STEPS.clear()
    if not steps:
        raise RuntimeError("the generator's launcher compiled nothing: calling it must compile exactly one "
                           "code object (a @flyc.jit function, or a callable that calls one once)")
    if len(steps) != 1:
        raise RuntimeError(f"the generator's launcher compiled {len(steps)} modules in one call; a row is one "
                           "code object: return a launcher that compiles exactly one")
    if len(steps[0].objects) != 1:
        raise RuntimeError(f"expected one code object in the compiled module, found {len(steps[0].objects)}")
    return steps[0]


def preload() -> None:
    """Import what a compile imports before it compiles (the warm server does it once for all children)."""
    import flydsl.expr  # noqa: F401  (the expensive imports, done once)

    for name in LAZY_MODULES:
        importlib.import_module(name)


@contextmanager
def mlir_context() -> Iterator[Any]:
    with _create_mlir_context() as context:
        yield context


def use_premade_context() -> None:
    """Make the context FlyDSL's next compile in this process asks for now, and hand it that one; any later
    ask gets a new context as usual. The warm server calls it before it forks: each child then starts with
    the same fresh, unused context instead of making its own (in a fork that took ~12 ms and ~1,700 page
    faults a row), as the codegen server does for its children (binary_step.py)."""
    premade = [_create_mlir_context()]

    def next_context(*, load_dialects: bool = True) -> Any:
        if premade and load_dialects:
            return premade.pop()
        return _create_mlir_context(load_dialects=load_dialects)

    # PRIVATE: FlyDSL's compile looks `_create_mlir_context` up in its module at each compile; a public
    # context factory (or a context argument) would replace the assignment.
    flydsl.compiler.jit_function._create_mlir_context = next_context


def elf_from_compiled(launcher: Any) -> bytes:
    """The single code object the launcher's call compiled: from the farm's binary step when one ran
    (`take_binary_step`), else from the @flyc.jit launcher's last compiled module (FlyDSL's own pipeline
    ran whole)."""
    if _STEPS:
        return take_binary_step().objects[0]
    # PRIVATE: `_last_compiled` is where a COMPILE_ONLY call leaves its artifact (flyc.compile returns None
    # then). A public "compile and return the artifact without launching" call would replace it; the
    # artifact's module text is public (`.ir`).
    last = getattr(launcher, "_last_compiled", None)
    if not last:
        raise RuntimeError("the generator's launcher compiled nothing (is it a @flyc.jit function?)")
    objects = _objects_in(last[1].ir)
    if len(objects) != 1:
        raise RuntimeError(f"expected one code object in the compiled module, found {len(objects)}")
    return objects[0]


def _objects_in(module_text: str) -> list[bytes]:
    """The code objects of every gpu.binary in a module (FlyDSL's own pipeline ran: no binary step kept them)."""
    objects: list[bytes] = []
    with mlir_context():
        module = ir.Module.parse(module_text)
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                objects += [bytes(gpu.ObjectAttr(a).object) for a in op.operation.attributes["objects"]]
    return objects
