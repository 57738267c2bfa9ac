"""The import closure of the files `farm vendor add` brings in: every module they import must be found.

A family's generator runs in the compile process with kernels_src/ first on sys.path, so a vendored
file's `import a.b` is served by kernels_src/a/b.py (or a/b/__init__.py, or the directory a/b/ as a
namespace package), else by the farm's environment (the standard library and installed packages).
A module found in neither fails every compile of the family, long after the add; `farm vendor add`
names it up front instead, with the file and line that import it.

What is checked, statically (nothing is imported or run):
- every `import` and `from ... import` in the files, at any depth (a function's imports run at trace
  time too), relative imports resolved against the file's place under kernels_src/;
- transitively, every module those imports find under kernels_src/ (vendored or the project's own);
- for an installed package, only that its top-level name is installed (its insides are its own business);
- an import guarded by `try: ... except ImportError` (or a broader except), or under
  `if TYPE_CHECKING:`, is optional and never reported.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from farm.plan.pyimports import Import, imports


@dataclass(frozen=True)
class Missing:
    module: str  # dotted name as the import asks for it
    importer: str  # the importing file, relative to kernels_src/
    line: int
    function: str | None = None  # the function the import is in (it runs only when that runs); None: module level
    names: tuple[str, ...] = ()  # `from module import a, b`: a, b (one may be a submodule of the missing package)


class Tree:
    """kernels_src/ as it will be after the add: files on disk, overlaid by the incoming ones."""

    def __init__(self, kernels_dir: Path, incoming: dict[str, str]) -> None:
        self.kernels_dir = kernels_dir
        self.incoming = incoming

    def is_file(self, rel: str) -> bool:
        return rel in self.incoming or (self.kernels_dir / rel).is_file()

    def is_dir(self, rel: str) -> bool:
        return any(r.startswith(rel + "/") for r in self.incoming) or (self.kernels_dir / rel).is_dir()

    def text(self, rel: str) -> str:
        if rel in self.incoming:
            return self.incoming[rel]
        return (self.kernels_dir / rel).read_text(encoding="utf-8", errors="replace")


def _module_file(tree: Tree, dotted: str) -> tuple[str | None, str | None]:
    """(file, kind) of `dotted` under kernels_src/: kind is "module", "package" (file is its __init__.py),
    "namespace" (file None) or None when it is not there."""
    base = dotted.replace(".", "/")
    if tree.is_file(base + ".py"):
        return base + ".py", "module"
    if tree.is_file(base + "/__init__.py"):
        return base + "/__init__.py", "package"
    if tree.is_dir(base):
        return None, "namespace"
    return None, None


def installed(top: str, exclude: list[Path]) -> bool:
    """Whether the environment has top-level module `top` (found the way the import system finds it, with the
    project's own directories left out, without importing it)."""
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "__future__":
        return True
    skip = {os.path.realpath(p) for p in exclude}
    path = [p for p in sys.path if p and os.path.realpath(p) not in skip and os.path.realpath(p) != os.getcwd()]
    if importlib.machinery.PathFinder.find_spec(top, path) is not None:
        return True
    for finder in sys.meta_path:  # e.g. editable installs' finders
        if finder in (importlib.machinery.PathFinder, importlib.machinery.BuiltinImporter,
                      importlib.machinery.FrozenImporter) or not hasattr(finder, "find_spec"):
            continue
        try:
            if finder.find_spec(top, None) is not None:
                return True
        except (ImportError, ValueError, AttributeError):
            continue
    return False


def _package_of(rel: str) -> list[str]:
    """The package a file's relative imports start from: kernels_src/a/b.py -> [a]; a/b/__init__.py -> [a, b]."""
    parts = rel[:-len(".py")].split("/")
    return parts[:-1]


def _bound_names(text: str) -> set[str] | None:
    """Top-level names a package's __init__.py binds; None when it cannot tell (a star import, __getattr__)."""
    names: set[str] = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


class _Walk:
    """Resolves imports against the tree and the environment, queueing the kernels_src/ files it finds."""

    def __init__(self, tree: Tree, exclude: list[Path]) -> None:
        self.tree, self.exclude = tree, exclude
        self.queue: list[str] = []
        self.seen: set[str] = set()

    def visit_file(self, rel: str | None) -> None:
        if rel is not None and rel not in self.seen:
            self.seen.add(rel)
            self.queue.append(rel)

    def resolve(self, dotted: str) -> str | None:
        """The kind of `dotted` once found ("module", "package", "namespace", "installed"), None if missing."""
        if not dotted or dotted.startswith(".") or any(not p.isidentifier() for p in dotted.split(".")):
            return None
        top = dotted.split(".")[0]
        _, kind = _module_file(self.tree, top)
        if kind in (None, "namespace") and installed(top, self.exclude):
            return "installed"  # an installed regular package wins over a namespace directory
        if kind is None:
            return None
        parts = dotted.split(".")
        for depth in range(1, len(parts) + 1):
            file, kind = _module_file(self.tree, ".".join(parts[:depth]))
            if kind is None:
                return None
            self.visit_file(file)
        return kind

    def check(self, item: Import, importer: str) -> list[Missing]:
        kind = self.resolve(item.module)
        if kind is None:
            return [Missing(item.module, importer, item.line, item.function, item.names)]
        if kind in ("installed", "module") or not item.names:
            return []
        bound: set[str] | None = set()  # a namespace package binds no names: only its submodules import
        if kind == "package":
            bound = _bound_names(self.tree.text(item.module.replace(".", "/") + "/__init__.py"))
        missing = []
        for name in item.names:
            sub = f"{item.module}.{name}"
            if self.resolve(sub) is None and bound is not None and name not in bound:
                missing.append(Missing(sub, importer, item.line, item.function))  # no submodule, no name it binds
        return missing


def missing_imports(tree: Tree, start: list[str], exclude: list[Path]) -> list[Missing]:
    """Every module the files `start` (relative to kernels_src/) need, directly or through other files
    under kernels_src/, that is neither under kernels_src/ nor installed. SyntaxError for an unparsable file."""
    walk = _Walk(tree, exclude)
    for rel in start:
        walk.visit_file(rel)
    missing: list[Missing] = []
    while walk.queue:
        rel = walk.queue.pop(0)
        parsed = ast.parse(tree.text(rel), filename=rel)
        for item in imports(parsed, _package_of(rel)):
            if not item.optional:  # a guarded import may fail: the file runs without it
                missing += walk.check(item, rel)
    return sorted(set(missing), key=lambda m: (m.importer, m.line, m.module))
