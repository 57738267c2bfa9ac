"""Every import statement of a Python file, read from its source (AST), never by importing it: the one
reader behind the farm's import-closure walks (the farm code a manifest records, farm/plan/code_closure.py;
the files `farm vendor add` brings in, farm/vendoring/closure.py). In farm.plan, a boundary package of the
verifier record (farm/plan/code_closure.py): deriving that record runs it, and it decides no recorded fact.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# An import inside `try:` whose handler catches one of these may fail: the file runs without it.
OPTIONAL_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class Import:
    module: str  # absolute dotted name; a relative import reaching above the top keeps its leading dots
    names: tuple[str, ...]  # `from module import a, b`: a, b (may be submodules); () for `import module`
    line: int
    function: str | None  # the innermost function the import is in (it runs only when that runs)
    optional: bool  # guarded by `try: ... except ImportError` (or broader), or under `if TYPE_CHECKING:`


def imports(tree: ast.AST, package: list[str]) -> list[Import]:
    """Every import in `tree` at any depth, relative ones resolved against `package` (the parts of the
    package the file is in: [a] for a/b.py, [a, b] for a/b/__init__.py)."""
    found: list[Import] = []

    def visit(node: ast.AST, optional: bool, function: str | None) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, (), node.lineno, function, optional) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(a.name for a in node.names if a.name != "*")
            found.append(Import(_absolute(node, package), names, node.lineno, function, optional))
        inner = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        for child in ast.iter_child_nodes(node):
            # A guarded import and its fallback in the handler are both optional: the file runs without them.
            guarded = optional or (isinstance(node, ast.Try) and (child in node.body or child in node.handlers)
                                   and _optional_try(node)) \
                or (isinstance(node, ast.If) and child in node.body and _type_checking(node))
            visit(child, guarded, inner)

    visit(tree, False, None)
    return found


def _absolute(node: ast.ImportFrom, package: list[str]) -> str:
    if not node.level:
        return node.module or ""
    if node.level - 1 > len(package) or (node.level - 1 == len(package) and not node.module):
        # Beyond the top: Python would raise "attempted relative import beyond top-level package".
        return "." * node.level + (node.module or "")
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _optional_try(node: ast.Try) -> bool:
    for handler in node.handlers:
        if handler.type is None:
            return True
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(k, ast.Name) and k.id in OPTIONAL_ERRORS for k in kinds):
            return True
    return False


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
