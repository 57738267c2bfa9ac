"""Every way the farm reaches into FlyDSL (flydsl==0.3.4), in one place.

Public faces first: the farm's pipeline changes are a compile backend registered through FlyDSL's backend
registry (`register_backend`), and LLVM code generation runs outside the compile process through FlyDSL's
external-toolchain hook (FLYDSL_COMPILE_LLVM_DIR, an `mlir-opt` the farm provides: farm/worker/binary_step.py).

What is still private, each marked `PRIVATE:` with why and what public API would replace it:
- `flydsl._mlir` (the MLIR bindings FlyDSL bundles): parse a module, run one pass, read a gpu.binary;
- `jit_function._create_mlir_context`: the context FlyDSL compiles in (multithreading off, dialects loaded);
- `JitFunction._last_compiled`: the module a COMPILE_ONLY call compiled;
- the list of modules FlyDSL imports lazily during its first compile (the zygote preloads them);
- `external_llvm.run_external_binary_codegen`: wrapped, to note when the hand-off to codegen starts
  (farm/worker/phases.py), or replaced by an in-process codegen for the bench (`use_in_process_codegen`).
Re-check all of it when the pin moves.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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

from farm.worker.phases import COMPILE, Timeline

# The farm's backend takes the built-in ROCm backend's name: FlyDSL's extension libraries (flydsl.extension,
# e.g. coop reductions) pick their ROCm implementations by backend name, so under any other name a kernel
# traces to other code (measured: another object). `register_backend(..., force=True)` replaces it.
BACKEND = "rocm"
LLVM_DIR_ENV = "FLYDSL_COMPILE_LLVM_DIR"  # FlyDSL runs `<dir>/bin/mlir-opt` for the binary pass

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
        _passes_start()
        return self._lowered(super().pipeline_fragments(compile_hints=compile_hints))

    def external_binary_pipeline_fragments(self, *, compile_hints: dict) -> tuple[list[str], str]:
        _passes_start()
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


def _passes_start() -> None:
    """FlyDSL asks for the pipeline right before it runs it (MlirCompiler.compile): the front end is done."""
    if COMPILE.current == "front_end":
        COMPILE.switch("mlir_passes")


def use_farm_backend(lowering_chipset: str) -> None:
    """In the compile process: FlyDSL compiles with FarmRocmBackend, lowering for `lowering_chipset`."""
    FarmRocmBackend.lowering_chipset = lowering_chipset
    register_backend(BACKEND, FarmRocmBackend, force=True)


def use_external_codegen(llvm_dir: Path) -> None:
    """In the compile process: FlyDSL runs the binary pass through `llvm_dir`/bin/mlir-opt."""
    os.environ[LLVM_DIR_ENV] = str(llvm_dir)
    external_llvm.run_external_binary_codegen = _timed_external_codegen


# PRIVATE: FlyDSL's external codegen step, which it imports from its module at each compile; the farm
# wraps it (to note when the hand-off starts) or replaces it (in-process codegen for the bench). A public
# "codegen step" hook on the backend would replace this.
_FLYDSL_EXTERNAL_CODEGEN = external_llvm.run_external_binary_codegen


def _timed_external_codegen(module: Any, binary_fragment: str, **options: Any) -> None:
    COMPILE.switch("handoff")
    _FLYDSL_EXTERNAL_CODEGEN(module, binary_fragment, **options)


def use_in_process_codegen() -> None:
    """For the bench's in-process compiles: FlyDSL splits its pipeline before the binary pass (the external
    mode), and the farm runs that pass in this process, on FlyDSL's module, as FlyDSL's own pipeline
    would (it runs inside FlyDSL's LLVM-options context, like the rest of the pipeline)."""
    os.environ[LLVM_DIR_ENV] = "in-process"  # only its being set matters: the step below never runs a tool
    external_llvm.run_external_binary_codegen = _in_process_codegen


def _in_process_codegen(module: Any, binary_fragment: str, **_options: Any) -> None:
    COMPILE.switch("codegen")
    PassManager.parse(f"builtin.module({binary_fragment})").run(module.operation)


def preload() -> None:
    """Import what a compile imports before it compiles (the warm server does it once for all children)."""
    import flydsl.expr  # noqa: F401  (the expensive imports, done once)

    for name in LAZY_MODULES:
        importlib.import_module(name)


@contextmanager
def mlir_context() -> Iterator[Any]:
    with _create_mlir_context() as context:
        yield context


def run_binary_pass(module_text: str, pipeline: str, timeline: Timeline) -> str:
    """Parse `module_text`, run `pipeline` (the binary pass), return the module (holding gpu.binary) as text.
    `timeline` notes the pass itself as codegen (its parse and print are the hand-off's)."""
    with mlir_context():
        module = ir.Module.parse(module_text)
        timeline.switch("codegen")
        PassManager.parse(pipeline).run(module.operation)
        timeline.switch("handoff")
        return module.operation.get_asm()


def elf_from_compiled(launcher: Any) -> bytes:
    """The single code object inside the launcher's last compiled module."""
    # PRIVATE: `_last_compiled` is where a COMPILE_ONLY call leaves its artifact (flyc.compile returns None
    # then). A public "compile and return the artifact without launching" call would replace it; the
    # artifact's module text is public (`.ir`).
    last = getattr(launcher, "_last_compiled", None)
    if not last:
        raise RuntimeError("the generator's launcher compiled nothing (is it a @flyc.jit function?)")
    objects: list[bytes] = []
    with mlir_context():
        module = ir.Module.parse(last[1].ir)
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                objects += [bytes(gpu.ObjectAttr(a).object) for a in op.operation.attributes["objects"]]
    if len(objects) != 1:
        raise RuntimeError(f"expected one code object in the compiled module, found {len(objects)}")
    return objects[0]
