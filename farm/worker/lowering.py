"""Inside the isolated compile process: trace one row with FlyDSL and return the ELF bytes.

Everything here relies on flydsl==0.3.4 behaviour, measured on this farm's machines; re-check it when the
pin moves: COMPILE_ONLY=1 makes a @flyc.jit launcher trace and compile without launching; how the farm
changes FlyDSL's pipeline and where it finds the object is farm/worker/flydsl_compat.py.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from farm.contract import CompileJob
from farm.worker import flydsl_compat
from farm.worker.binary_step import run_in_own_process
from farm.worker.farm_code import mark_modules, modules_since
from farm.worker.llvm_options import LlvmOptions
from farm.worker.phases import COMPILE

# How the compile's reads and lookups under the kernels root are recorded (farm/plan/sources.py `lookup_state`
# re-evaluates each lookup against a tree): "import D/N" (the path-based finder looked for module N in
# directory D), "list D" (code other than the import system listed D), "open P" (P was opened but absent).
IMPORT, LIST, OPEN = "import", "list", "open"


@dataclass(frozen=True)
class Consulted:
    """What one compile consulted under the kernels root, as paths relative to it (sorted, deduplicated)."""

    read: list[str]  # files it opened or imported
    lookups: list[str]  # lookups whose outcome depends on what exists: hits and misses alike


class _LookupFinder:
    """First on sys.meta_path: notes every directory under the kernels root that the path-based finder is
    about to search for a module, then declines, so the normal finders go on exactly as before."""

    def __init__(self, recorder: SourceRecorder) -> None:
        self.recorder = recorder

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        tail = fullname.rpartition(".")[2]
        for entry in list(sys.path if path is None else path):
            rel = self.recorder.relative(os.path.join(os.getcwd(), entry or "."))
            if rel is not None:
                self.recorder.lookups.add(f"{IMPORT} {tail if rel == '.' else rel + '/' + tail}")
        return None


class SourceRecorder:
    """Records every file under the kernels root that this process opens or imports, every module lookup
    the import system makes there (found or not), every directory other code lists, and every absent file
    it tried to open."""

    def __init__(self, root: Path) -> None:
        self.base = str(root.resolve())
        self.root = self.base + os.sep
        self.opened: set[str] = set()
        self.lookups: set[str] = set()
        # Modules already loaded (FlyDSL, torch: thousands) cannot be kernel sources; `consulted` looks only
        # at those added since (walking them all would copy their pages from the warm server: farm_code.py).
        self.mark = mark_modules()
        sys.addaudithook(self._hook)
        sys.meta_path.insert(0, _LookupFinder(self))

    def relative(self, path: str) -> str | None:
        """`path` relative to the kernels root ('.' for the root itself), None when outside it."""
        full = os.path.normpath(path)
        if full == self.base:
            return "."
        return os.path.relpath(full, self.base) if full.startswith(self.root) else None

    def _hook(self, event: str, args: tuple) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            full = os.path.realpath(path) if not os.path.isabs(path) else os.path.normpath(path)
            if full.startswith(self.root):
                self.opened.add(full)
        elif event in ("os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
            # The import system's own directory listings are covered by the "import" lookups.
            caller = sys._getframe(1).f_code.co_filename
            rel = self.relative(os.path.realpath(os.fsdecode(args[0])))
            if rel is not None and not caller.startswith("<frozen importlib"):
                self.lookups.add(f"{LIST} {rel}")

    def consulted(self) -> Consulted:
        found = set(self.opened)
        added = modules_since(self.mark)
        # None: a module was removed since the start; then every module is looked at (none loaded before
        # the start can be under the kernels root: a compile's root is new).
        for module in list(sys.modules.values()) if added is None else added:
            file = getattr(module, "__file__", None)
            if file and os.path.normpath(file).startswith(self.root):
                found.add(os.path.normpath(file))
        read, absent = set(), set()
        for full in found:
            rel = os.path.relpath(full, self.root)
            if "__pycache__" in rel.split(os.sep):
                continue
            (read if os.path.isfile(full) else absent).add(rel)
        lookups = self.lookups | {f"{OPEN} {rel}" for rel in absent}
        return Consulted(sorted(read), sorted(lookups))


@dataclass(frozen=True)
class Compiled:
    """One row's compile: its object, what it consulted under the kernels root, the LLVM options it ran with."""

    elf: bytes
    consulted: Consulted
    llvm_options: LlvmOptions


def compile_row(job: CompileJob) -> Compiled:
    """Compile the row `job` describes. The launcher may be any callable whose call compiles exactly one
    code object (a @flyc.jit function, or a function or object that calls one): the object is taken from
    the binary step that call ran."""
    kernels_root = Path(job.kernels_root)
    recorder = SourceRecorder(kernels_root)
    flydsl_compat.use_farm_backend(job.request.target.mlir_chipset)
    # LLVM codegen runs in a process of its own (binary_step.py); its job files go in the row's directory.
    flydsl_compat.use_external_codegen(partial(run_in_own_process, work=Path.cwd()))
    sys.path.insert(0, str(kernels_root))
    generator = importlib.import_module(job.request.generator)
    launcher, args = generator.launcher_and_args(dict(job.request.knobs))
    launcher(*args)
    COMPILE.switch("return")  # FlyDSL holds the module with the object: what is left is taking it out
    step = flydsl_compat.take_binary_step()
    return Compiled(step.objects[0], recorder.consulted(), step.llvm_options)
