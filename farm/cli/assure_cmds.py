"""farm check, audit, diff and emulate: is what outputs/ holds what the farm made, and what does it compute?"""

from __future__ import annotations

import sys
from pathlib import Path

from farm.assure.audit import audit
from farm.assure.check import Checked, NotBuilt, build_command, check_tree
from farm.assure.elfdiff import main as diff_main
from farm.assure.golden import complete, golden_path
from farm.assure.golden import drift as golden_drift
from farm.cli.parser import Invocation
from farm.cli.selection import load, selected_rows
from farm.core.errors import FarmError
from farm.core.words import count
from farm.emulate.command import emulate, read_objects
from farm.emulate.sample import ci_sample
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.store.preflight import require_writable
from farm.table.config import FarmConfig
from farm.toolchain.here import installed_mismatch


def cmd_check(inv: Invocation) -> int:
    """Drift is exit 1; rows never built are NOT BUILT lines and exit 0, unless --complete asks for all."""
    cfg = load(inv.words)
    rows, every = selected_rows(cfg)
    # A shared hold: checks run side by side, but never see a build's half-written batch.
    with tree_lock(cfg.outputs_dir, command_line(), shared=True, wait_s=lock_wait(cfg)):
        result = check_tree(cfg, rows, every)
        found = _merged(result.drift, golden_drift(cfg, rows, every))
        incomplete = sum(not complete(cfg, op, target, every) for op, target in result.directories)
    # What check re-derives is measured against the pin; a toolchain here that is not the pin cannot
    # rebuild what it checks, so it is named like any other drift.
    mismatch = installed_mismatch(cfg.toolchain_pin)
    if mismatch is not None:
        found += [f"toolchain: {line}" for line in mismatch.lines[:-1]]
        found.append(f"toolchain: {mismatch.lines[-1]}; fix: {mismatch.fix}")
    for line in _not_built_lines(result.not_built, inv.verbose):
        print(line)
    for line in found:
        print(f"DRIFT {line}")
    print(_summary(cfg, result, found, incomplete, "--complete" in inv.flags))
    return 1 if found or ("--complete" in inv.flags and result.not_built) else 0


def _merged(lines: list[str], golden: list[tuple[Path, str]]) -> list[str]:
    """The drift lines with the golden differences added: a file already named gets its golden difference
    in the same line (before its fix), so one damaged file is one line."""
    lines = list(lines)
    for path, what in golden:
        at = next((i for i, line in enumerate(lines) if line.startswith(f"{path}: ")), None)
        if at is None:
            lines.append(f"{path}: {what}")
            continue
        head, sep, fix = lines[at].rpartition("; fix: ")
        lines[at] = f"{head}; {what}{sep}{fix}" if sep else f"{lines[at]}; {what}"
    return lines


def _not_built_lines(not_built: list[NotBuilt], verbose: bool) -> list[str]:
    """One line per directory (never one per row, unless -v lists them)."""
    lines = []
    for n in not_built:
        if n.absent:
            state = "empty directory" if n.path.is_dir() else "no such directory"
            lines.append(f"NOT BUILT {n.path}/: {state}; {count(n.selected, 'selected row')} would be here")
            continue
        lines.append(f"NOT BUILT {n.path}/: {len(n.rows)} of its {count(n.selected, 'selected row')} "
                     f"{'have' if len(n.rows) != 1 else 'has'} no object and no manifest entry"
                     + ("" if verbose else " (-v lists them)"))
        lines += [f"  {n.path / r.file_name}" for r in n.rows] if verbose else []
    return lines


def _summary(cfg: FarmConfig, result: Checked, found: list[str], incomplete: int, whole: bool) -> str:
    """The last line: what was compared with what, the verdict, and the rows not built (one line)."""
    golden = golden_path(cfg)
    against = (f"the build record and the golden digests in {golden.name}"
               + (f" (objects only, in {count(incomplete, 'incomplete directory')})" if incomplete else "")
               if golden.is_file() else f"the build record ({golden.name} not recorded yet: `farm golden`)")
    line = (f"checked {count(result.objects, 'object')} and {count(result.manifests, 'manifest')} in "
            f"{count(len(result.directories), 'directory')} against {against}: "
            + (count(len(found), "problem") if found else "no drift"))
    if result.not_built:
        line += (f"; {count(result.unbuilt_rows, 'row')} not built"
                 + (" (--complete: every selected row must be built)" if whole else "")
                 + f": {build_command(cfg, result.not_built)} builds them")
    return line


def cmd_audit(inv: Invocation) -> int:
    cfg = load(inv.words)
    require_writable(cfg, outputs=False)  # the audit writes only its report
    rows, every = selected_rows(cfg)
    return audit(cfg, rows, every, inv.words)


def cmd_emulate(inv: Invocation) -> int:
    """farm emulate [selection]: the objects as outputs/ holds them, read under a shared hold of the tree's
    lock (a build never half-way through a batch), then emulated without holding it."""
    cfg = load(inv.words)
    rows, _ = selected_rows(cfg)
    if "--ci-sample" in inv.flags:
        rows = ci_sample(rows)
        if not rows:
            raise FarmError("--ci-sample: no selected object is of a family and target the models run",
                            "widen the selection (the sample takes what farm/emulate/families.py runs)")
    with tree_lock(cfg.outputs_dir, command_line(), shared=True, wait_s=lock_wait(cfg)):
        objects = read_objects(cfg, rows)
    return emulate(cfg, rows, objects, sys.stdout)


def cmd_diff(inv: Invocation) -> int:
    """farm diff A.hsaco B.hsaco [--json]: what differs between two code objects, at the code-object level."""
    return diff_main(set(inv.flags), inv.words)
