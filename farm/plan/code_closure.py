"""Which farm files can run when given functions run, outside the boundary packages: a static superset, the
same in every process.

A row's verifier record (manifest `inputs.verifier`) must name every farm file whose code can decide the
row's acceptance or the facts recorded about its object, and be the same set in every build (a compile, a
restore from the cache, a re-verify), whichever other farm modules the process happened to load. Profiling
what ran gives only what one run took; this derives, from the code itself, everything that can run (the
boundary packages left out, see below):

1. the files of the entry functions, and of every function or class of their own module they name
   (their code objects' names, nested code included), transitively;
2. every farm module those functions name that lives elsewhere (a module, or a function, class or object
   imported from one), and the modules of the entry functions' annotated parameter types (the objects a
   caller hands in: their methods run too);
3. the import closure of those modules, read from their source (AST): every `import`/`from ... import`
   anywhere in the file, inside functions too, transitively; with each package's `__init__.py` on the way.

Why a superset: Python code runs only through a name (no file of the record imports farm code by a
computed name, importlib.import_module or __import__: tests/test_driver_cost.py checks). Code in a
function runs what its module's globals and its arguments lead to; a module's code can reach only what it
imports (at the top or in a function), or what is handed to it, which was made by code of the same
closure. Third-party code (pyelftools, json) calls farm code only through farm objects it was handed,
which come from the same closure.

Where it stops: the boundary packages (`BOUNDARY`). A manifest records the code that makes an object's bytes
(the compile: `inputs.generator`) and the code that derives the facts recorded about it (ELF reading,
disassembly into instruction classes, the resource and identity checks: `inputs.verifier`); not the code
that only selects rows, loads and caches the config, plans, measures, stores or moves data. What that code
decides that can matter for an object is recorded as values in the same inputs: the knobs and resource
rules (`knobs`, `allow`), the op and target config (`op`, `target`: digests of the very values the checks
read, see farm/verify/rules.py `Rules`), the toolchain pin (`toolchain`), the sources and lookups. So the
walk does not enter these packages: a module, function, class or annotated type of one is not followed, and
neither is anything imported only through one. Recording them would change every shipped manifest (and
golden digest) when, say, the config cache is refactored, though no object or recorded fact can change.

What keeps the cut honest: the checks take plain values (`Rules`, built from the op's compile identity and
the target's fields, both recorded), never call code of a boundary package to decide a fact, and the
compile process loads none of these packages (farm.worker may not import them: pyproject.toml's import
rules). tests/test_driver_cost.py profiles whole acceptances: every file they run is recorded or is in a
boundary package.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from farm.contract import FARM_DIR, farm_rel
from farm.plan.pyimports import imports

# Packages whose code is not recorded (see the module doc): rows and config (table), what to build and the
# records themselves (plan), manifests and output files (store), build progress, reports and measurement
# (observe), scheduling and moving rows (execute), fetching objects back from a cache (restore), the command
# line (cli).
BOUNDARY = ("farm.table", "farm.plan", "farm.store", "farm.observe", "farm.execute", "farm.restore", "farm.cli")


def in_boundary(module: str) -> bool:
    """Whether the module `module` (dotted name) is one of the boundary packages or inside one."""
    return any(module == b or module.startswith(b + ".") for b in BOUNDARY)


def boundary_file(rel: str) -> bool:
    """Whether a farm file (path relative to farm/) belongs to a boundary package."""
    return in_boundary("farm." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", "."))


def files_of(functions: Sequence[Callable[..., object]]) -> frozenset[str]:
    """Paths relative to farm/ of every farm file that can run when `functions` run (see the module doc)."""
    files: set[str] = set()
    roots: set[str] = set()
    seen: set[int] = set()
    todo = list(functions)
    while todo:
        fn = inspect.unwrap(todo.pop())
        code = getattr(fn, "__code__", None)
        if code is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        rel = farm_rel(code.co_filename)
        if rel is None or boundary_file(rel):
            continue
        files.add(rel)
        home = sys.modules[fn.__module__]
        roots |= _annotation_modules(fn)
        for name in _names(code):
            value = vars(home).get(name)
            owner = _module_name(value)
            if owner == home.__name__:  # the module's own function or class: its code, followed
                todo += _functions(value)
            elif owner is not None and owner.split(".")[0] == "farm" and not in_boundary(owner):
                roots.add(owner)
    return frozenset(files | import_closure(frozenset(roots)))


def _names(code: types.CodeType) -> Iterator[str]:
    """Every name a code object uses (globals, attributes), nested functions and comprehensions included."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _module_name(value: object) -> str | None:
    if isinstance(value, types.ModuleType):
        return value.__name__
    name = getattr(value, "__module__", None) if callable(value) else getattr(type(value), "__module__", None)
    return name if isinstance(name, str) else None


def _functions(value: object) -> list[Callable[..., object]]:
    """A function itself (unwrapped: functools.cache), or every function and method defined on a class
    (properties included)."""
    if callable(value) and hasattr(value, "__wrapped__"):
        value = inspect.unwrap(value)  # type: ignore[arg-type]
    if inspect.isclass(value):
        out: list[Callable[..., object]] = []
        for member in vars(value).values():
            member = getattr(member, "__func__", member)  # staticmethod, classmethod
            if isinstance(member, property):
                out += [f for f in (member.fget, member.fset, member.fdel) if f is not None]
            elif inspect.isfunction(member) or inspect.isclass(member):
                out += _functions(member) if inspect.isclass(member) else [member]
        return out
    return [value] if inspect.isfunction(value) else []  # type: ignore[list-item]


def _annotation_modules(fn: Callable[..., object]) -> set[str]:
    """The farm modules that define the types of `fn`'s annotated parameters and result."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001  an annotation that does not resolve: the module's imports cover it
        return set()
    out: set[str] = set()
    todo = list(hints.values())
    while todo:
        hint = todo.pop()
        todo += typing.get_args(hint)
        name = getattr(hint, "__module__", None)
        if isinstance(name, str) and name.split(".")[0] == "farm" and not in_boundary(name):
            out.add(name)
    return out


@functools.cache
def import_closure(modules: frozenset[str]) -> frozenset[str]:
    """Files (relative to farm/) of `modules` and every farm module their source imports, transitively;
    the boundary packages are not entered (nor anything reached only through them)."""
    files: set[str] = set()
    todo = sorted(modules)
    done: set[str] = set()
    while todo:
        name = todo.pop()
        if name in done or in_boundary(name):
            continue
        done.add(name)
        path = _module_file(name)
        if path is None:
            continue
        files.add(path.relative_to(FARM_DIR).as_posix())
        todo += _packages_of(name)
        todo += _imports(path, name)
    return frozenset(files)


def _module_file(name: str) -> Path | None:
    """farm.a.b -> farm/a/b.py or farm/a/b/__init__.py; None when it is not a farm source file."""
    parts = name.split(".")
    if parts[0] != "farm":
        return None
    base = FARM_DIR.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _packages_of(name: str) -> list[str]:
    """The packages an import of `name` runs first: farm, farm.a for farm.a.b."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imports(path: Path, name: str) -> list[str]:
    """The farm modules `path` imports anywhere (top level, functions, TYPE_CHECKING blocks)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[str] = []
    for item in imports(ast.parse(path.read_bytes(), str(path)), package):
        found.append(item.module)
        found += [f"{item.module}.{alias}" for alias in item.names]  # `from pkg import module`
    return [m for m in found if m.split(".")[0] == "farm"]
