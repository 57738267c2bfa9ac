"""Which farm code a process ran: the files recorded as a row's `generator` (farm/contract.py)."""

from __future__ import annotations

import hashlib
import sys
from types import ModuleType

from farm.contract import FARM_DIR, farm_rel

# Which module files are farm code: resolving a path (realpath) for each of the ~1,300 modules a compile
# process holds cost ~60 ms a row. The warm server resolves those it loaded once (`remember_loaded`)
# and its children inherit the answers; the files' contents are still hashed at each compile.
_FARM_REL: dict[str | None, str | None] = {}


def _farm_rel(file: str | None) -> str | None:
    if file not in _FARM_REL:
        _FARM_REL[file] = farm_rel(file)
    return _FARM_REL[file]


def remember_loaded() -> None:
    """Resolve now which of the loaded modules are farm code (the warm server, before it forks)."""
    for module in list(sys.modules.values()):
        _farm_rel(getattr(module, "__file__", None))


def farm_files(modules: list[ModuleType]) -> dict[str, str]:
    """{path relative to farm/: SHA256} of the source files of the farm modules among `modules`."""
    out = {}
    for module in modules:
        rel = _farm_rel(getattr(module, "__file__", None))
        if rel is not None:
            out[rel] = hashlib.sha256((FARM_DIR / rel).read_bytes()).hexdigest()
    return dict(sorted(out.items()))


def loaded_farm_files() -> dict[str, str]:
    """The farm code this process loaded (`__main__` included: a compile process runs as `__main__`)."""
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
