"""The one entry point: `farm VERB [--flag] [key=value ...]` (Hydra overrides for every option)."""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable
from pathlib import Path

from farm.core.errors import FarmError
from farm.core.private import private_dir
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.store.preflight import require_writable, require_writable_dir, selected_dirs
from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.table.rows import Row

USAGE = """usage: farm VERB [--flags] [key=value ...]

verbs:
  expand [--check]   conf/ -> instances/ (--check: exit 1 if instances/ is stale)
  plan               which selected rows are up to date and which would build, and why
  build              compile what must build (Ray), verify, write outputs/ and manifests
  check              drift guard: re-derive every selected object, manifest and digest
  audit              rebuild the selection elsewhere, varied; compare byte-for-byte with outputs/
                     (audit.sample=N for a deterministic sample; audit.vary.umask=false etc.)
  pin                move the toolchain pin to what is installed (rebuilds everything)
  golden             record outputs.sha256 (+ outputs.dvc) from a complete, clean tree; commit them
  push / pull        publish outputs/ with DVC (after farm check) / fetch it and check it
  status             does outputs/ match outputs.dvc and the instance table? the fixing command
  cluster up|down|status  a standing local Ray cluster with warm compilers, used by every build
                     while it is up (saves each build the Ray start and the workers' warm-up)
  diff A B           compare two code objects: header, sections, notes, kernel metadata, .text
  vendor add|diff|note  upstream sources in kernels_src/ with recorded provenance (README: Vendoring):
                     vendor add from=CHECKOUT commit=SHA upstream=NAME paths=[PATH,...] [into=DIR]
                     vendor diff from=CHECKOUT [pinned=true] [strict=true]
                     vendor note path=FILE why="REASON" from=CHECKOUT   (record a local modification)

selection and paths (Hydra overrides):
  ops=[rmsnorm] targets=[gfx942,gfx950] dtypes=[bf16] outputs_dir=PATH
  executor=cluster executor.address=HOST:PORT
"""


def _load(overrides: list[str]) -> config_mod.FarmConfig:
    return config_mod.load(config_mod.find_project_root(), overrides)


def _selected_rows(cfg: config_mod.FarmConfig) -> tuple[list[Row], list[Row]]:
    """(selected rows, every row of the selected ops); a selection matching no row is an error, not a
    silent success that did nothing."""
    if not selected_dirs(cfg):  # before rows.select, whose dtype check would blame the dtypes
        built_for = "; ".join(f"{op}: {', '.join(cfg.ops[op].targets)}" for op in cfg.selected_ops)
        raise FarmError(f"no row matches the selection {_describe(cfg)}: no selected op is built for a "
                        "selected target", f"choose targets the ops are built for ({built_for})")
    rows, every = fresh_rows(cfg)
    if not rows:
        raise FarmError(f"no row matches the selection {_describe(cfg)}",
                        "widen it (fewer dtypes=/names=, other targets=); `farm plan -v ops=[...]` lists the rows")
    return rows, every


def _describe(cfg: config_mod.FarmConfig) -> str:
    parts = [f"ops=[{','.join(cfg.selected_ops)}]", f"targets=[{','.join(cfg.selected_targets)}]"]
    parts += [f"dtypes=[{','.join(cfg.selected_dtypes)}]"] if cfg.selected_dtypes else []
    parts += [f"names=[{','.join(cfg.selected_names)}]"] if cfg.selected_names else []
    return " ".join(parts)


def cmd_expand(flags: set[str], overrides: list[str]) -> int:
    from farm.table.expand import stale_tables, write_tables

    cfg = _load(overrides)
    if "--check" in flags:
        stale = stale_tables(cfg)
        for path in stale:
            print(f"stale: {path} differs from what conf/ expands to (run `farm expand`)")
        print("instances/ is up to date with conf/" if not stale else f"{len(stale)} stale table(s)")
        return 1 if stale else 0
    changed = write_tables(cfg)
    from farm.table.rows import load_table

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


def cmd_plan(flags: set[str], overrides: list[str]) -> int:
    from farm.plan.decide import decide, summary_line

    cfg = _load(overrides)
    rows, _ = _selected_rows(cfg)
    decisions = decide(cfg, rows)
    verbose = "--verbose" in flags or "-v" in flags
    for d in decisions:
        if d.builds or verbose:
            print(f"{d.status:15} {d.row.key}" + (f"  ({d.reason})" if d.reason else ""))
    print(summary_line(decisions))
    return 0


def cmd_build(flags: set[str], overrides: list[str]) -> int:
    from farm.build import build_selection

    cfg = _load(overrides)
    require_writable(cfg)  # before any compile: a read-only outputs_dir used to fail after all of them
    rows, every = _selected_rows(cfg)
    failed = build_selection(cfg, rows, every)
    return 1 if failed else 0


def cmd_check(flags: set[str], overrides: list[str]) -> int:
    from farm.assure.check import check
    from farm.assure.golden import drift as golden_drift
    cfg = _load(overrides)
    rows, every = _selected_rows(cfg)
    # A shared hold: checks run side by side, but never see a build's half-written batch.
    with tree_lock(cfg.outputs_dir, command_line(), shared=True, wait_s=lock_wait(cfg)):
        found = check(cfg, rows, every) + golden_drift(cfg, rows)
    for line in found:
        print(f"DRIFT {line}")
    dirs = len({(r.op, r.target) for r in rows})
    print(f"checked {len(rows)} objects in {dirs} directories: "
          + ("no drift" if not found else f"{len(found)} problem(s)"))
    return 1 if found else 0


def cmd_golden(flags: set[str], overrides: list[str]) -> int:
    """farm golden: record outputs.sha256 (and outputs.dvc) from a complete, clean tree."""
    from farm.publish.dvc_stage import seal_golden

    cfg = _load(overrides)
    rows, every = _selected_rows(cfg)
    return seal_golden(cfg, rows, every, sys.stdout)


def cmd_audit(flags: set[str], overrides: list[str]) -> int:
    from farm.assure.audit import audit

    cfg = _load(overrides)
    require_writable(cfg, outputs=False)  # the audit writes only its report
    rows, every = _selected_rows(cfg)
    return audit(cfg, rows, every, overrides)


def cmd_pin(flags: set[str], overrides: list[str]) -> int:
    from farm.core.atomic import write_text_atomic
    from farm.toolchain.pin import DEFAULT_DISASSEMBLER, differences, installed, pin_text

    cfg = _load(overrides)
    pin = cfg.toolchain_pin
    found = installed(private_dir("toolchain-cache"), pin.get("linker"),
                      pin.get("disassembler") or DEFAULT_DISASSEMBLER)
    diff = differences(cfg.toolchain_pin, found)
    if not diff:
        print("the pin already matches the installed toolchain")
        return 0
    path = cfg.root / "conf" / "toolchain" / "pinned.yaml"
    _require_pin_writable(path)
    # Under the output tree's lock: a build running now must not record a pin that moves under it.
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        write_text_atomic(path, pin_text(found))
    print(f"moved the pin in {path}:\n  " + "\n  ".join(diff))
    print("objects built under the old pin are now out of date: `farm plan` lists them, `farm build` rebuilds "
          "them; then commit conf/toolchain/ and publish (farm push)")
    return 0


def _require_pin_writable(pin: Path) -> None:
    """conf/toolchain/ must take the new pin file, written by replacing it (a symlink would be lost)."""
    if os.path.islink(pin):
        raise FarmError(f"{pin} is a symlink (to {os.readlink(pin)}): moving the pin would replace the link",
                        f"replace {pin} with the file it points to, then run `farm pin` again")
    require_writable_dir(pin.parent, "the toolchain pin's directory")


def cmd_push(flags: set[str], overrides: list[str]) -> int:
    from farm.publish.dvc_stage import push

    return push(_load(overrides), flags)


def cmd_pull(flags: set[str], overrides: list[str]) -> int:
    from farm.publish.dvc_stage import pull

    cfg = _load(overrides)
    require_writable(cfg, reports=False)  # the pull checks out into outputs_dir
    return pull(cfg, flags)


def cmd_status(flags: set[str], overrides: list[str]) -> int:
    from farm.publish.dvc_stage import status

    return status(_load(overrides), flags)


def cmd_diff(flags: set[str], overrides: list[str]) -> int:
    """farm diff A.hsaco B.hsaco: what differs between two code objects, at the code-object level."""
    from farm.assure.elfdiff import main as diff_main

    return diff_main(flags, overrides)


def cmd_cluster(flags: set[str], overrides: list[str]) -> int:
    """farm cluster up|down|status: the standing local cluster with warm compilers (farm/execute/standing.py)."""
    from farm.execute import standing

    actions = [a for a in overrides if "=" not in a]
    if len(actions) != 1 or actions[0] not in ("up", "down", "status"):
        raise FarmError(f"farm cluster needs one of up, down, status; got {' '.join(actions) or 'nothing'}",
                        "e.g. farm cluster up executor.num_cpus=2")
    cfg = _load([a for a in overrides if "=" in a])
    if cfg.executor.get("kind") != "local":
        raise FarmError("a standing cluster is local; executor=cluster already names a running cluster",
                        "drop the executor=cluster override")
    action = actions[0]
    if action == "up":
        num_cpus = standing.num_cpus(cfg.executor) or os.cpu_count() or 1  # a bad value: its own error
        state = standing.up(cfg.root, num_cpus, float(cfg.executor.get("standing_idle_minutes") or 30))
        print(f"standing cluster up at {state['address']}: {state['num_cpus']} warm compilers, daemon pid "
              f"{state['pid']}; builds use it until `farm cluster down` or "
              f"{state['idle_s'] / 60:.0f} minutes without a build")
    elif action == "down":
        print("standing cluster stopped" if standing.down(cfg.root) else "no standing cluster was up")
    else:
        state = standing.running(cfg.root)
        print(f"standing cluster up at {state['address']}: {state['num_cpus']} warm compilers, daemon pid "
              f"{state['pid']}" if state else "no standing cluster is up")
    return 0


def cmd_vendor(flags: set[str], overrides: list[str]) -> int:
    """farm vendor add|diff|note key=value ...: plain keys, not Hydra overrides (farm/vendoring/)."""
    from farm.vendoring.cli import main as vendor_main

    return vendor_main(flags, overrides)


VERBS: dict[str, Callable[[set[str], list[str]], int]] = {
    "expand": cmd_expand, "plan": cmd_plan, "build": cmd_build, "check": cmd_check, "pin": cmd_pin,
    "audit": cmd_audit, "push": cmd_push, "pull": cmd_pull, "status": cmd_status, "diff": cmd_diff,
    "vendor": cmd_vendor, "golden": cmd_golden, "cluster": cmd_cluster,
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    verb, rest = args[0], args[1:]
    if verb not in VERBS:
        print(f"farm: unknown verb {verb!r}; accepted: {', '.join(VERBS)}", file=sys.stderr)
        return 2
    flags = {a for a in rest if a.startswith("-")}
    overrides = [a for a in rest if not a.startswith("-")]
    try:
        return VERBS[verb](flags, overrides)
    except FarmError as exc:
        print(f"farm {verb}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The reader went away (`farm plan -v | head -3`): stop quietly, as a process killed by SIGPIPE
        # would; stdout goes to /dev/null so the flush at exit cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        print(f"farm {verb}: interrupted; finished objects are kept, run it again to resume", file=sys.stderr)
        return 130


def _stdout_closed() -> bool:
    """Is stdout a pipe whose reader has gone (and not, say, a Ray or subprocess pipe that broke)?"""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())


