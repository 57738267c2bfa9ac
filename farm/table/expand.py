"""conf/ -> instances/: expand every op's axes into rows, validate them, write the table."""

from __future__ import annotations

import itertools
from pathlib import Path

from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError
from farm.table.config import SAFE_NAME, FarmConfig, Op
from farm.table.kernel_modules import NO_CHECK_ROW, TIMEOUT_ENV, SpecFailure, check_rows, spec_timeout_s
from farm.table.rows import Row, load_table, render_table, select, sort_key, table_path


def _expand(cfg: FarmConfig, ops: list[Op]) -> list[list[Row]]:
    """Rows of each op; spec code (import and check_row) runs in one time-limited child for all of them."""
    candidates = [_candidates(op) for op in ops]
    jobs = [(op.spec, [dict(row.knobs) for _, row in rows]) for op, rows in zip(ops, candidates, strict=True)]
    results = check_rows(cfg.kernels_dir, jobs)
    return [_accepted(cfg, op, rows, result) for op, rows, result in zip(ops, candidates, results, strict=True)]


def _candidates(op: Op) -> list[tuple[str, Row]]:
    """(where, row) of every row the op's config calls for, before its spec module has judged them."""
    rows: list[tuple[str, Row]] = []
    # Per target: a name or a knob set may appear once (groups for different targets may share them).
    by_name: dict[tuple[str, str], dict] = {}
    by_knobs: dict[tuple[str, str], str] = {}
    used = [0] * len(op.tuning)
    for group in op.groups:
        axes = list(group.axes)
        for values in itertools.product(*(group.axes[a] for a in axes)):
            knobs = dict(zip(axes, values, strict=True))
            where = f"op {op.name!r} group {group.name!r} row {knobs}"
            name = _object_name(group.name_format, knobs, where)
            for target in group.targets:
                knob_key = (target, repr(sorted(knobs.items())))
                if knob_key in by_knobs:
                    raise FarmError(f"{where}: duplicate row for {target} (same knobs as {by_knobs[knob_key]!r})",
                                    f"remove the repeated value from conf/op/{op.name}.yaml")
                if (target, name) in by_name:
                    raise FarmError(f"{where}: object name {name!r} is also made by row {by_name[(target, name)]} "
                                    f"for {target}", "make name_format include every axis that differs")
                by_knobs[knob_key] = name
                by_name[(target, name)] = knobs
                tuned = _tuned(op, target, knobs, axes, used)
                rows.append((f"{where} for {target}", Row(op=op.name, target=target, name=name, group=group.name,
                                                          knobs=tuned, allow=dict(group.allow))))
    for i, count in enumerate(used):
        if not count:
            raise FarmError(f"op {op.name!r} tuning[{i}] {op.tuning[i].match} matches no row",
                            f"fix its match (and targets) in conf/op/{op.name}.yaml, or remove it")
    return rows


def _accepted(cfg: FarmConfig, op: Op, rows: list[tuple[str, Row]],
              result: list[str | None] | SpecFailure) -> list[Row]:
    """The op's rows once its spec module served every one; else the first refusal or the breakage."""
    if isinstance(result, SpecFailure):
        raise _broken(cfg, op, rows, result)
    for (where, _), refusal in zip(rows, result, strict=True):
        if refusal is not None:
            raise FarmError(f"{where}: {refusal}", f"fix the axis or tuning values in conf/op/{op.name}.yaml")
    return sorted((row for _, row in rows), key=sort_key)


def _broken(cfg: FarmConfig, op: Op, rows: list[tuple[str, Row]], failure: SpecFailure) -> FarmError:
    """One error naming file:line of a spec module that does not work (not a row it refuses)."""
    during = f", in check_row for {rows[failure.row][0]}" if failure.row is not None else ""
    what = f"{failure.location(cfg.root)}: {failure.what} (spec module {op.spec} of op {op.name!r}{during})"
    others = [name for name, other in cfg.ops.items() if other.spec != op.spec]
    meanwhile = f"; ops using other spec modules still work, e.g. ops=[{others[0]}]" if others else ""
    if failure.fix:  # the failure tells its own fix (kernel_modules.py: no such module, a package that breaks)
        return FarmError(what, failure.fix + meanwhile)
    if failure.what == NO_CHECK_ROW:
        return FarmError(what, "define check_row(knobs) there (raise ValueError for a row it cannot serve)")
    if "did not finish" in failure.what:
        return FarmError(what, f"make that code finish: spec code runs with a {spec_timeout_s():g} s limit "
                               f"({TIMEOUT_ENV}){meanwhile}")
    return FarmError(what, f"fix it there (spec modules must import cleanly and check_row may raise only "
                           f"ValueError){meanwhile}")


def _object_name(name_format: str, knobs: dict, where: str) -> str:
    try:
        name = name_format.format(**knobs)
    except (KeyError, IndexError, ValueError) as exc:
        raise FarmError(f"{where}: name_format {name_format!r} cannot be filled ({exc})",
                        "name_format may use only this group's axes") from None
    if not SAFE_NAME.match(name):
        raise FarmError(f"{where}: object name {name!r} leaves the safe alphabet [a-z0-9_.-]",
                        "change name_format or the axis values")
    return name


def _tuned(op: Op, target: str, knobs: dict, axes: list[str], used: list[int]) -> dict:
    """The row's knobs after every matching tuning entry (in order) is applied."""
    tuned = dict(knobs)
    for i, tuning in enumerate(op.tuning):
        if tuning.targets and target not in tuning.targets:
            continue
        if all(knobs.get(k) == v for k, v in tuning.match.items()):
            renamed = sorted(set(tuning.set) & set(axes))
            if renamed:
                raise FarmError(f"op {op.name!r} tuning[{i}] sets axis knob(s) {renamed}",
                                "tuning sets knobs that are not axes; to change an axis, edit its values")
            tuned.update(tuning.set)
            used[i] += 1
    return tuned


def expand_tables(cfg: FarmConfig) -> dict[Path, str]:
    """The instances/ files the selected ops' configs call for, as text."""
    names = list(cfg.selected_ops)
    expanded = _expand(cfg, [cfg.ops[name] for name in names])
    return {table_path(cfg.instances_dir, name): render_table(rows) for name, rows in zip(names, expanded, strict=True)}


def stale_tables(cfg: FarmConfig) -> list[Path]:
    """instances/ files that differ from what conf/ expands to."""
    # Bytes, not text: a table that is not even UTF-8 is simply stale (and `farm expand` rewrites it).
    return [p for p, text in expand_tables(cfg).items() if not p.is_file() or p.read_bytes() != text.encode()]


def write_tables(cfg: FarmConfig) -> list[tuple[Path, int, int]]:
    """Write instances/; returns (path, rows before, rows after) for each table that changed."""
    changed = []
    for path, text in expand_tables(cfg).items():
        old = path.read_bytes().decode("utf-8", "replace") if path.is_file() else ""
        if old != text:
            write_text_atomic(path, text)
            changed.append((path, old.count("\n"), text.count("\n")))
    return changed


def require_fresh(cfg: FarmConfig) -> None:
    stale = stale_tables(cfg)
    if stale:
        names = ", ".join(str(p.relative_to(cfg.root)) if p.is_relative_to(cfg.root) else str(p) for p in stale)
        raise FarmError(f"instance table out of date with conf/: {names}",
                        "run `farm expand` (and commit instances/)")


def fresh_rows(cfg: FarmConfig) -> tuple[list[Row], list[Row]]:
    """(selected rows, every row of the selected ops) from instances/, refusing a stale table."""
    require_fresh(cfg)
    every = [row for op in cfg.selected_ops for row in load_table(cfg, op)]
    return select(cfg, every), every
