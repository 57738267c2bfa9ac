"""Which farm code a process ran: the files recorded as a row's `generator` (farm/contract.py)."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ModuleMark:
    """sys.modules at one moment, cheap to take and to compare with later (`modules_since`).

    Why: a forked compile process that walks all ~1,300 loaded modules writes to each (reference counts),
    so it copies their pages from the warm server: ~1,000 page faults, ~10 ms a row on a loaded machine.
    The modules added since the mark are the keys after `last` (dicts keep insertion order)."""

    count: int  # len(sys.modules) then
    last: str | None  # its last key then
    last_module: object  # and that key's module


def mark_modules() -> ModuleMark:
    last = next(reversed(sys.modules), None)
    return ModuleMark(len(sys.modules), last, sys.modules.get(last) if last is not None else None)


def modules_since(mark: ModuleMark) -> list[ModuleType] | None:
    """The modules added to sys.modules since `mark` (oldest first), touching only them; None when that
    cannot be told (a module loaded at the mark was removed since): the caller then walks them all."""
    added: list[str] = []
    for name in reversed(sys.modules):
        if name == mark.last:
            break
        added.append(name)
    else:
        if mark.last is not None:
            return None
    # Every key before `last` is one of the mark's exactly when none was removed (a removed one re-added
    # would sit after `last`): then the count is the mark's plus those added.
    if len(sys.modules) != mark.count + len(added) or (
            mark.last is not None and sys.modules[mark.last] is not mark.last_module):
        return None
    return [sys.modules[name] for name in reversed(added)]


# The warm server's mark and farm modules, taken before it forks (`remember_loaded`); none in a fresh interpreter.
_SERVER: list[tuple[ModuleMark, list[ModuleType]]] = []


def remember_loaded() -> None:
    """Resolve now which of the loaded modules are farm code (the warm server, before it forks), and mark
    what is loaded: its children then look only at the modules they added."""
    farm = [m for m in list(sys.modules.values()) if _farm_rel(getattr(m, "__file__", None)) is not None]
    _SERVER[:] = [(mark_modules(), farm)]


def farm_files(modules: list[ModuleType]) -> dict[str, str]:
    """{path relative to farm/: SHA256} of the source files of the farm modules among `modules`."""
    out = {}
    for module in modules:
        rel = _farm_rel(getattr(module, "__file__", None))
        if rel is not None:
            out[rel] = hashlib.sha256((FARM_DIR / rel).read_bytes()).hexdigest()
    return dict(sorted(out.items()))


def loaded_farm_files() -> dict[str, str]:
    """The farm code this process loaded (`__main__` included: a compile process runs as `__main__`): a
    fork of the warm server adds the modules it loaded itself to the farm modules the server had."""
    if _SERVER:
        mark, farm = _SERVER[0]
        added = modules_since(mark)
        if added is not None:
            return farm_files(farm + added)
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
