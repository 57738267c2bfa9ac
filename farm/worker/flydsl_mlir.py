"""The LLVM codegen process's only use of FlyDSL: its bundled MLIR bindings, loaded without its package.

`import flydsl` (any `flydsl.*` import) first runs FlyDSL's package `__init__`, which imports its autotuner
and with it torch. The codegen server (binary_step.py) needs only the MLIR bindings (`flydsl._mlir`): with
torch it held ~167 MB of anonymous memory (~310 MB resident) against ~20 MB (~100 MB) without, and every
row's fork copies the server's page tables and every child's exit tears them down (measured: the server's
own CPU ~5 ms a fork with torch, ~1 ms without; its start 1.5 s against 0.13 s of imports).

The front end keeps FlyDSL whole (farm/worker/flydsl_compat.py); so does every process that imported
`flydsl` before this module: the bindings are then taken from it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

from farm.worker.phases import Timeline

PACKAGE = "flydsl"


def _bare_package() -> None:
    """Register FlyDSL's package module without running its `__init__` (nothing in it is needed here).

    PRIVATE: `flydsl._mlir` is FlyDSL's internal copy of the MLIR bindings (no public module exposes them,
    see flydsl_compat.py). A package whose `__init__` imported nothing heavy, or a public bindings module,
    would replace this: the import system's public pieces are used (find_spec, module_from_spec), only the
    `__init__` is not run.
    """
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("FlyDSL is not installed in this Python (run `bash scripts/setup.sh`)")
    sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)  # its __path__ set, its __init__ not run


def _bindings() -> tuple[ModuleType, Any]:
    _bare_package()  # first: the imports below would run FlyDSL's package __init__
    from flydsl._mlir import ir
    from flydsl._mlir.passmanager import PassManager

    return ir, PassManager


def fly_extension() -> ModuleType:
    """FlyDSL's own extension module, which holds its LLVM option setters (farm/worker/llvm_options.py).

    PRIVATE: `_mlirDialectsFly` is what FlyDSL's `flydsl.compiler.llvm_options` sets options with; that
    public module imports FlyDSL's package (and with it torch). Loaded only for a compile with options."""
    _bare_package()
    from flydsl._mlir._mlir_libs import _mlirDialectsFly

    return _mlirDialectsFly


def new_context() -> Any:
    """An MLIR context made as FlyDSL makes the one it compiles in (flydsl 0.3.4,
    `jit_function._create_mlir_context`: multithreading off, every available dialect loaded). Not entered."""
    ir, _ = _bindings()
    context = ir.Context()
    context.enable_multithreading(False)
    context.load_all_available_dialects()
    return context


def run_binary_pass(module_text: str, pipeline: str, timeline: Timeline, context: Any = None) -> str:
    """Parse `module_text`, run `pipeline` (the binary pass), return the module (holding gpu.binary) as text.
    `timeline` notes the pass itself as codegen (its parse and print are the hand-off's). In `context`
    (made by `new_context`, still unused), else in a new one."""
    ir, pass_manager = _bindings()
    with context if context is not None else new_context():
        module = ir.Module.parse(module_text)
        timeline.switch("codegen")
        pass_manager.parse(pipeline).run(module.operation)
        timeline.switch("handoff")
        return module.operation.get_asm()
