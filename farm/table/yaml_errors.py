"""A conf/ file that is not valid YAML, as one FarmError naming the file, the line, the column and the problem.

PyYAML's errors reach the farm from two readers: Hydra composing conf/config.yaml and its group files, and
OmegaConf reading each op and target file (farm/table/tables.py). Neither wraps them, so without this a
typo anywhere in conf/ was a traceback. PyYAML is imported only when an error is being described: a
command whose config is kept (farm/table/config_cache.py) never loads it.
"""

from __future__ import annotations

from pathlib import Path

from farm.core.errors import FarmError
from farm.table.quoting import shortened

# Every op and target file is read and checked by every command (the table is loaded as a whole, as the
# config cache keys it), so the fix says why a file the command did not select still matters.
TABLES = ("conf/op/", "conf/target/")


def yaml_error(root: Path, exc: BaseException, path: Path | None = None) -> FarmError | None:
    """The FarmError for the YAML error that `exc` is or was caused by; None when it is not one. `path` is
    the file being read, when the caller knows it (else the error's own mark names it)."""
    import yaml

    found: BaseException | None = exc
    seen: set[int] = set()
    while found is not None and not isinstance(found, yaml.YAMLError) and id(found) not in seen:
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    if not isinstance(found, yaml.YAMLError):
        return None
    at = near = context = ""
    named: str | None = None
    if isinstance(found, yaml.MarkedYAMLError):
        problem = found.problem or found.context or type(found).__name__
        mark = found.problem_mark or found.context_mark
        if mark is not None:
            named = mark.name
            at, near = f":{mark.line + 1}:{mark.column + 1}", f" near line {mark.line + 1}, column {mark.column + 1}"
        opened = found.context_mark
        if found.context and found.problem and opened is not None:
            context = f" ({found.context} that starts at line {opened.line + 1}, column {opened.column + 1})"
    elif isinstance(found, yaml.reader.ReaderError):  # a character YAML does not allow (e.g. a control byte)
        named = found.name
        char = chr(found.character) if isinstance(found.character, int) else found.character
        problem = f"{found.reason}: {char!r}"
        line, column = _line_column(path or Path(named), found.position)
        if line:
            at, near = f":{line}:{column}", f" near line {line}, column {column}"
    else:
        problem = str(found)
    where = _where(root, path, named)
    return FarmError(f"{where}{at}: not valid YAML: {shortened(problem, 200)}{context}",
                     f"fix the YAML syntax of {where}{near}{_why(where)}; `git diff -- {where}` shows what changed")


def undecodable(root: Path, files: list[Path]) -> FarmError | None:
    """The first of `files` that is not UTF-8 text (YAML files are read as UTF-8), as one FarmError."""
    for path in files:
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            where = _where(root, path, None)
            return FarmError(f"{where}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r})",
                             f"save {where} as UTF-8{_why(where)}")
        except OSError:
            continue
    return None


def _where(root: Path, path: Path | None, named: str | None) -> str:
    """The file as the user knows it: relative to the project root when it is inside."""
    if path is None and named and not named.startswith("<"):  # "<unicode string>": read from no file
        path = Path(named)
    if path is None:
        return "a file under conf/"
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except (ValueError, OSError):
            return str(path)


def _why(where: str) -> str:
    """Why a file the command did not select must be fixed all the same (op and target files)."""
    return " (every command reads every op and target file, selected or not)" if where.startswith(TABLES) else ""


def _line_column(path: Path, position: int) -> tuple[int, int] | tuple[None, None]:
    """The 1-based line and column of character `position` in the file; (None, None) when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None, None
    return text.count("\n", 0, position) + 1, position - text.rfind("\n", 0, position)
