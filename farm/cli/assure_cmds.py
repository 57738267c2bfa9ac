"""farm check, audit, diff and emulate: is what outputs/ holds what the farm made, and what does it compute?"""

from __future__ import annotations

import sys

from farm.assure.audit import audit
from farm.assure.check import check
from farm.assure.elfdiff import main as diff_main
from farm.assure.golden import drift as golden_drift
from farm.cli.parser import Invocation
from farm.cli.selection import load, selected_rows
from farm.emulate.command import emulate, read_objects
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.store.preflight import require_writable
from farm.toolchain.here import installed_mismatch


def cmd_check(inv: Invocation) -> int:
    cfg = load(inv.words)
    rows, every = selected_rows(cfg)
    # A shared hold: checks run side by side, but never see a build's half-written batch.
    with tree_lock(cfg.outputs_dir, command_line(), shared=True, wait_s=lock_wait(cfg)):
        found = check(cfg, rows, every) + golden_drift(cfg, rows)
    # What check re-derives is measured against the pin; a toolchain here that is not the pin cannot
    # rebuild what it checks, so it is named like any other drift.
    mismatch = installed_mismatch(cfg.toolchain_pin)
    if mismatch is not None:
        found += [f"toolchain: {line}" for line in mismatch.lines[:-1]]
        found.append(f"toolchain: {mismatch.lines[-1]}; fix: {mismatch.fix}")
    for line in found:
        print(f"DRIFT {line}")
    dirs = len({(r.op, r.target) for r in rows})
    print(f"checked {len(rows)} objects in {dirs} directories: "
          + ("no drift" if not found else f"{len(found)} problem(s)"))
    return 1 if found else 0


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
    with tree_lock(cfg.outputs_dir, command_line(), shared=True, wait_s=lock_wait(cfg)):
        objects = read_objects(cfg, rows)
    return emulate(cfg, rows, objects, sys.stdout)


def cmd_diff(inv: Invocation) -> int:
    """farm diff A.hsaco B.hsaco [--json]: what differs between two code objects, at the code-object level."""
    return diff_main(set(inv.flags), inv.words)
