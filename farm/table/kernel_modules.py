"""Import modules from kernels_src/ (the families' spec and generator modules), and run spec code safely.

Every command expands the instance table, which imports each selected family's spec module and calls
its `check_row` on every row. That is project code anyone can edit: an infinite loop, a syntax error
or a stray `sys.exit` there must not hang or crash the farm. So `check_rows` runs it in a child
interpreter (`python -I -S` on this file) under a deadline, and hands back per row the spec's refusal
(a ValueError's text) or, for a broken module, where it broke (file:line).

Run as a script, this file is that child: a JSON request on stdin, JSON lines on stdout. Its imports
stay few and small (no site, no dataclasses, no pathlib at the top): the child runs on every command.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

TIMEOUT_ENV = "FARM_SPEC_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 30.0
GRACE_S = 5.0  # after the child's own deadline (which names the line it hung on), the parent kills it
NO_CHECK_ROW = "it has no check_row(knobs)"


def import_kernel_module(kernels_dir: Path | str, dotted: str) -> ModuleType:
    """Import `dotted` with `kernels_dir` first on sys.path, never a same-named module from elsewhere."""
    root = os.path.realpath(kernels_dir)
    top = dotted.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None and not str(getattr(loaded, "__file__", "") or "").startswith(root):
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[name]
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(dotted)


class SpecFailure:
    """A spec module that could not answer: it does not import, lacks check_row, raised something other
    than ValueError, exited, or ran past the deadline. `file`/`line` locate it when known; `fix` is the
    fix when the failure itself tells it (no such module; a package around the spec that does not import)."""

    def __init__(self, module: str, what: str, file: str | None = None, line: int | None = None,
                 row: int | None = None, fix: str | None = None) -> None:
        self.module = module
        self.what = what
        self.file = file
        self.line = line
        self.row = row  # index of the row whose check_row call failed
        self.fix = fix

    def location(self, root: Path) -> str:
        """'kernels_src/x/spec.py:12' (relative to `root` when inside it), or the module name."""
        if self.file is None:
            return self.module
        shown = os.path.relpath(self.file, root) if self.file.startswith(str(root) + os.sep) else self.file
        return f"{shown}:{self.line}" if self.line else shown


def spec_timeout_s() -> float:
    """The deadline for all spec code of one command (FARM_SPEC_TIMEOUT_S, default 30 s)."""
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        value = DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def module_file(kernels_dir: Path | str, dotted: str) -> str:
    """Where a spec module should live (for messages about a module that never reported back)."""
    return os.path.join(os.path.realpath(kernels_dir), *dotted.split(".")) + ".py"


def check_rows(kernels_dir: Path, jobs: list[tuple[str, list[dict]]], timeout_s: float | None = None
               ) -> list[list[str | None] | SpecFailure]:
    """For each (spec module, rows) job, in order: per row None (served) or the ValueError text of its
    check_row; or a SpecFailure. One child interpreter serves all jobs. After a failure that ends the
    child (deadline, exit), the jobs after it come back as failures naming the one that stopped it.
    Measured on 2 busy cores: 52-77 ms for the whole table of 1,453 rows, against 14-23 ms in-process
    (`farm plan` of everything: ~460 ms -> ~510 ms)."""
    if not jobs:
        return []
    import sysconfig

    limit = spec_timeout_s() if timeout_s is None else timeout_s
    # -S skips site (and its .pth processing, most of the start-up); installed packages stay importable.
    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    request = json.dumps({"kernels_dir": os.path.realpath(kernels_dir), "timeout_s": limit, "paths": paths,
                          "jobs": [[module, rows] for module, rows in jobs]})
    stdout, code = _run_child(request, limit + GRACE_S)
    return _results(kernels_dir, jobs, stdout, code, limit)


def _run_child(request: str, kill_after_s: float) -> tuple[str, int | None]:
    """The child's stdout and exit code (None when it had to be killed). Its stderr is ours: what spec
    code prints reaches the user as it did when it ran in-process."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-I", "-S", os.path.realpath(__file__)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, _ = proc.communicate(request, timeout=kill_after_s)
        return stdout, proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        stdout, _ = proc.communicate()
        return stdout, None
    finally:
        # Whatever spec code started in the child's session goes with it (also on Ctrl-C here).
        _kill_group(proc.pid)
        proc.wait()


def _kill_group(pid: int) -> None:
    """End the child's session: processes spec code started would otherwise outlive the command."""
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _results(kernels_dir: Path, jobs: list[tuple[str, list[dict]]], stdout: str, code: int | None,
             limit: float) -> list[list[str | None] | SpecFailure]:
    done: dict[int, list[str | None] | SpecFailure] = {}
    started = -1
    dump: list[str] = []
    for line in stdout.splitlines():
        try:
            msg = json.loads(line) if line.startswith("{") else None
        except json.JSONDecodeError:
            msg = None  # cut off when the child was killed mid-line
        if not isinstance(msg, dict):
            dump.append(line)  # faulthandler's traceback at the deadline
        elif "start" in msg:
            started = msg["start"]
        elif "failure" in msg:
            done[msg["job"]] = SpecFailure(**msg["failure"])
        else:
            done[msg["job"]] = msg["rows"]
    if len(done) == len(jobs):
        return [done[i] for i in range(len(jobs))]
    stopped = started if started >= 0 and started not in done else len(done)
    failure = _stopped(kernels_dir, jobs[stopped][0], dump, code, limit)
    later = SpecFailure(jobs[stopped][0], f"not evaluated: spec module {jobs[stopped][0]} stopped the run",
                        failure.file, failure.line)
    return [done.get(i, failure if i == stopped else later) for i in range(len(jobs))]


def _stopped(kernels_dir: Path, module: str, dump: list[str], code: int | None, limit: float) -> SpecFailure:
    """Why the child ended inside `module`: the deadline (with the line it was running) or an exit."""
    root = os.path.realpath(kernels_dir)
    frames = [_frame(line) for line in dump]
    inside = [f for f in frames if f and f[0].startswith(root + os.sep)]
    file, line = inside[0] if inside else (module_file(kernels_dir, module), None)
    if code is None or any(d.startswith("Timeout") for d in dump):
        return SpecFailure(module, f"spec code did not finish within {limit:g} s", file, line)
    return SpecFailure(module, f"the interpreter running spec code ended (exit status {code})", file, line)


def _frame(line: str) -> tuple[str, int | None] | None:
    """('/path/spec.py', 12) from faulthandler's '  File "/path/spec.py", line 12 in check_row'."""
    text = line.strip()
    if not text.startswith('File "') or '", line ' not in text:
        return None
    file, rest = text[len('File "'):].split('", line ', 1)
    number = rest.split(" ", 1)[0]
    return file, int(number) if number.isdigit() else None


# ---- the child ----------------------------------------------------------------------------------


def _where(exc: BaseException, root: str) -> tuple[str | None, int | None]:
    """file:line of an exception: a SyntaxError's own position, else the innermost frame in kernels_src."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return exc.filename, exc.lineno
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    inside = [f for f in frames if f[0].startswith(root + os.sep)] or frames
    return inside[-1] if inside else (None, None)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__}: {exc.msg}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _failure(module: str, exc: BaseException, root: str, row: int | None = None) -> dict:
    file, line = _where(exc, root)
    return {"module": module, "what": _describe(exc), "file": file, "line": line, "row": row}


def _shown(root: str, path: str) -> str:
    return "kernels_src/" + os.path.relpath(path, root).replace(os.sep, "/")


def _import_failure(module: str, exc: BaseException, root: str) -> dict:
    """Why spec module `module` did not import, with the fix when the failure tells it: the module (or a
    package it is in) does not exist; or a package around it failed in its __init__.py, which runs first."""
    failure = _failure(module, exc, root)
    parts = module.split(".")
    if isinstance(exc, ModuleNotFoundError) and exc.name and (module + ".").startswith(exc.name + "."):
        path = module_file(root, module)
        failure.update(file=path, line=None, what=f"no such file (nor {_shown(root, path[:-3])}/__init__.py): "
                                                   "the spec module does not exist",
                       fix="create it there, or name an existing module in the op's spec: (its import name "
                           "under kernels_src/)")
        return failure
    inits = {os.path.join(root, *parts[:depth], "__init__.py"): ".".join(parts[:depth])
             for depth in range(1, len(parts))}
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(os.path.normpath(tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    package = next((inits[f] for f in frames if f in inits), None)
    own = {module_file(root, module), os.path.join(root, *parts, "__init__.py")}
    if package is not None and not own & set(frames):
        top = parts[0]
        failure["what"] += f" (raised while package {package}'s __init__.py ran, before the spec module)"
        failure["fix"] = (f"a spec's packages are imported with it, by every command, in an interpreter of its "
                          f"own: make kernels_src/{package.replace('.', '/')}/__init__.py import cleanly there, or "
                          f"keep the spec module out of package {package} (e.g. kernels_src/{top}_farm/spec.py, "
                          f"then spec: {top}_farm.spec)")
    return failure


def _serve(module: str, rows: list[dict], root: str, imported: dict[str, object]) -> dict:
    """One job: {"rows": [...]} or {"failure": {...}}."""
    if module not in imported:
        try:
            imported[module] = import_kernel_module(root, module)
        except BaseException as exc:  # noqa: BLE001 (anything spec code raises is its failure to report)
            imported[module] = _import_failure(module, exc, root)
    spec = imported[module]
    if isinstance(spec, dict):
        return {"failure": spec}
    check_row = getattr(spec, "check_row", None)
    if not callable(check_row):
        return {"failure": {"module": module, "what": NO_CHECK_ROW, "file": getattr(spec, "__file__", None),
                            "line": None, "row": None}}
    out: list[str | None] = []
    for i, knobs in enumerate(rows):
        try:
            check_row(dict(knobs))
            out.append(None)
        except ValueError as exc:
            out.append(str(exc))
        except BaseException as exc:  # noqa: BLE001
            return {"failure": _failure(module, exc, root, i)}
    return {"rows": out}


def _child() -> None:
    import faulthandler

    request = json.loads(sys.stdin.read())
    sys.path.extend(request["paths"])
    # Answers go out on a private copy of stdout; spec code's prints go to stderr, never into them.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    faulthandler.dump_traceback_later(request["timeout_s"], exit=True, file=answers)
    imported: dict[str, object] = {}
    for i, (module, rows) in enumerate(request["jobs"]):
        answers.write(json.dumps({"start": i}) + "\n")
        answers.write(json.dumps({"job": i, **_serve(module, rows, request["kernels_dir"], imported)}) + "\n")
    faulthandler.cancel_dump_traceback_later()
    answers.close()


if __name__ == "__main__":
    _child()
