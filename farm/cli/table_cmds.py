"""farm expand and farm plan: the instance tables and what a build would do."""

from __future__ import annotations

from farm.cli.parser import Invocation
from farm.cli.selection import load, selected_rows
from farm.plan.decide import decide, summary_line
from farm.table.expand import stale_tables, write_tables
from farm.table.rows import load_table
from farm.toolchain.here import installed_mismatch


def cmd_expand(inv: Invocation) -> int:
    cfg = load(inv.words)
    if "--check" in inv.flags:
        stale = stale_tables(cfg)
        for path in stale:
            print(f"stale: {path} differs from what conf/ expands to (run `farm expand`)")
        print("instances/ is up to date with conf/" if not stale else f"{len(stale)} stale table(s)")
        return 1 if stale else 0
    changed = write_tables(cfg)
    total = 0
    for op in cfg.selected_ops:
        rows = load_table(cfg, op)
        total += len(rows)
        per_target = {t: sum(r.target == t for r in rows) for t in cfg.ops[op].targets}
        print(f"{op}: {len(rows)} rows ({', '.join(f'{t} {n}' for t, n in per_target.items())})")
    for path, before, after in changed:
        print(f"wrote {path} ({before} -> {after} rows)")
    print(f"rows={total} changed_tables={len(changed)}")
    return 0


def cmd_plan(inv: Invocation) -> int:
    cfg = load(inv.words)
    rows, _ = selected_rows(cfg)
    decisions = decide(cfg, rows)
    for d in decisions:
        if d.builds or inv.verbose:
            print(f"{d.status:15} {d.row.key}" + (f"  ({d.reason})" if d.reason else ""))
    print(summary_line(decisions))
    # Rows are planned against the pin; a build compiles only with the pinned toolchain installed.
    mismatch = installed_mismatch(cfg.toolchain_pin)
    if mismatch is None:
        return 0
    for line in mismatch.lines:
        print(f"TOOLCHAIN {line}")
    print(f"farm build refuses to compile here: the installed toolchain differs from the pin "
          f"(conf/toolchain/pinned.yaml); fix: {mismatch.fix}")
    return 1
