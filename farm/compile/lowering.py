"""Inside the isolated compile process: trace one row with FlyDSL and return the ELF bytes.

Everything here relies on flydsl==0.3.4 behaviour (TOOLCHAIN.md); re-check it when the pin moves:
- COMPILE_ONLY=1 makes a @flyc.jit launcher trace and compile without launching;
- the compiled module is kept on the launcher (`_last_compiled`), its `gpu.binary` op holds the ELF;
- MLIR's convert-gpu-to-rocdl rejects generic chipsets, so that one fragment is lowered for the
  family's lowest member while rocdl-attach-target keeps the generic name;
- FlyDSL stamps the gpu.module with a target (`#rocdl.target<chip=...>`) and rocdl-attach-target adds
  a second one on wave32 targets (`flags = {no_wave64}`): the module would hold two code objects, the
  first one compiled wave64. The farm leaves the attach pass as the only source of targets.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from . import binary_step


def patch_lowering_chipset(target_name: str, chipset: str) -> None:
    """Lower with `chipset` while the object stays stamped `target_name` (no-op for concrete targets)."""
    if chipset == target_name:
        return
    from flydsl.compiler.backends import rocm

    original = rocm.RocmBackend._pipeline_parts

    def pipeline_parts(self: Any, *, compile_hints: dict) -> tuple[list[str], str]:
        pre, binary = original(self, compile_hints=compile_hints)
        needle = f"chipset={self.target.arch} "
        if not any(needle in fragment for fragment in pre):
            raise RuntimeError(f"flydsl pipeline has no '{needle.strip()}' fragment to lower for {chipset}; "
                               "the generic-target patch in farm/compile/lowering.py needs updating")
        return [f.replace(needle, f"chipset={chipset} ") for f in pre], binary

    rocm.RocmBackend._pipeline_parts = pipeline_parts


def attach_target_only() -> None:
    """Create gpu.modules without targets, so rocdl-attach-target alone decides (one object)."""
    from flydsl.compiler.backends import rocm

    rocm.RocmBackend.gpu_module_targets = lambda self: []


def elf_from_compiled(launcher: Any) -> bytes:
    """The single code object inside the launcher's last compiled module."""
    from flydsl._mlir import ir
    from flydsl._mlir.dialects import gpu
    from flydsl.compiler.jit_function import _create_mlir_context

    last = getattr(launcher, "_last_compiled", None)
    if not last:
        raise RuntimeError("the generator's launcher compiled nothing (is it a @flyc.jit function?)")
    text = last[1]._ir_text
    objects: list[bytes] = []
    with _create_mlir_context():
        module = ir.Module.parse(text)
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                objects += [bytes(gpu.ObjectAttr(a).object) for a in op.operation.attributes["objects"]]
    if len(objects) != 1:
        raise RuntimeError(f"expected one code object in the compiled module, found {len(objects)}")
    return objects[0]


class SourceRecorder:
    """Records every file under the kernels root that this process opens or imports."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve()) + os.sep
        self.opened: set[str] = set()
        # Modules already loaded (FlyDSL, torch: thousands) cannot be kernel sources; `files` skips them.
        self.preloaded = set(sys.modules)
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            full = os.path.realpath(path) if not os.path.isabs(path) else os.path.normpath(path)
            if full.startswith(self.root):
                self.opened.add(full)

    def files(self) -> list[str]:
        found = set(self.opened)
        for name, module in list(sys.modules.items()):
            if name in self.preloaded:
                continue
            file = getattr(module, "__file__", None)
            if file and os.path.normpath(file).startswith(self.root):
                found.add(os.path.normpath(file))
        rel = {os.path.relpath(f, self.root) for f in found if os.path.isfile(f)}
        return sorted(r for r in rel if "__pycache__" not in r.split(os.sep))


def compile_row(request: dict[str, Any]) -> tuple[bytes, list[str]]:
    """Compile the row described by `request`; returns (ELF bytes, kernel sources read)."""
    kernels_root = Path(request["kernels_root"])
    recorder = SourceRecorder(kernels_root)
    patch_lowering_chipset(request["target"]["name"], request["target"]["mlir_chipset"])
    attach_target_only()
    binary_step.install(Path.cwd())
    sys.path.insert(0, str(kernels_root))
    import importlib

    generator = importlib.import_module(request["generator"])
    launcher, args = generator.launcher_and_args(dict(request["knobs"]))
    launcher(*args)
    return elf_from_compiled(launcher), recorder.files()
