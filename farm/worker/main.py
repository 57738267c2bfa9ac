"""The isolated compile process: `python -m farm.worker.main REQUEST.json RESULT.bin`.

It compiles one row and writes the ELF to RESULT.bin, and to RESULT.bin.json what it consulted under
the kernels root (files read, lookups made), the farm code it ran (every farm module this process
loaded, the warm server's included) and its peak memory.
An LLVM abort kills only this process; its stderr reaches the user through the parent.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
from pathlib import Path
from types import ModuleType

FARM_DIR = Path(__file__).resolve().parent.parent


def farm_rel(file: str | None) -> str | None:
    """The path of a farm module's source file relative to the farm package, None when not one."""
    if not file or not file.endswith(".py"):
        return None
    full = os.path.realpath(file)
    base = str(FARM_DIR) + os.sep
    return os.path.relpath(full, FARM_DIR).replace(os.sep, "/") if full.startswith(base) else None


def farm_files(modules: list[ModuleType]) -> dict[str, str]:
    """{path relative to farm/: SHA256} of the source files of the farm modules among `modules`."""
    out = {}
    for module in modules:
        rel = farm_rel(getattr(module, "__file__", None))
        if rel is not None:
            out[rel] = hashlib.sha256((FARM_DIR / rel).read_bytes()).hexdigest()
    return dict(sorted(out.items()))


def loaded_farm_files() -> dict[str, str]:
    """The farm code this process loaded (`__main__` included: a fresh worker runs as `__main__`)."""
    return farm_files(list(sys.modules.values()))


def module_closure(root: ModuleType) -> list[ModuleType]:
    """`root` and every farm module it references at module level, transitively: a module it imported,
    or the module that defines a function or class it imported (`from .x import f`). Imports inside
    functions are not seen: the code that prepares a compile imports farm modules at module level."""
    seen: dict[str, ModuleType] = {}
    todo = [root]
    while todo:
        module = todo.pop()
        if module.__name__ in seen or farm_rel(getattr(module, "__file__", None)) is None:
            continue
        seen[module.__name__] = module
        for value in list(vars(module).values()):
            name = getattr(value, "__module__", None)
            owner = value if isinstance(value, ModuleType) else sys.modules.get(name) if isinstance(name, str) else None
            # A package's submodules are bound on it by the import system, not by its code: not followed.
            if isinstance(owner, ModuleType) and not owner.__name__.startswith(module.__name__ + "."):
                todo.append(owner)
    return list(seen.values())


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    from farm.worker.lowering import compile_row

    elf, consulted = compile_row(request)
    result = Path(argv[1])
    result.write_bytes(elf)
    # Peak resident memory of this compile process (KiB on Linux; a forked child counts the pages
    # it shares with its warm parent too).
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result.with_suffix(".json").write_text(json.dumps({
        "sources": consulted.read, "lookups": consulted.lookups, "farm": loaded_farm_files(),
        "max_rss_kib": peak_kib}))
    return 0


if __name__ == "__main__":
    # A fresh compile first imports what the warm server imports before it forks, so both kinds of
    # compile process load the same farm code and make the same lookups (the same manifest entry).
    from farm.worker.zygote import preload

    preload()
    sys.exit(main(sys.argv[1:]))
