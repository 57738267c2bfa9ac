"""conf/ -> instances/: expand every op's axes into rows, validate them, write the table."""

from __future__ import annotations

import itertools
from pathlib import Path

from .atomic import write_text_atomic
from .config import SAFE_NAME, FarmConfig, Op
from .errors import FarmError
from .kernel_modules import import_kernel_module
from .rows import Row, load_table, render_table, select, sort_key, table_path


def expand_op(cfg: FarmConfig, op: Op) -> list[Row]:
    """Rows of one op over all its targets; raises FarmError on any row the kernel cannot serve."""
    spec = import_kernel_module(cfg.kernels_dir, op.spec)
    check_row = getattr(spec, "check_row", None)
    if check_row is None:
        raise FarmError(f"{op.spec} (kernels_src) has no check_row(knobs)", "define it in the family's spec module")
    rows: list[Row] = []
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
                try:
                    check_row(dict(tuned))
                except ValueError as exc:
                    raise FarmError(f"{where} for {target}: {exc}",
                                    f"fix the axis or tuning values in conf/op/{op.name}.yaml") from None
                rows.append(Row(op=op.name, target=target, name=name, group=group.name, knobs=tuned,
                                allow=dict(group.allow)))
    for i, count in enumerate(used):
        if not count:
            raise FarmError(f"op {op.name!r} tuning[{i}] {op.tuning[i].match} matches no row",
                            f"fix its match (and targets) in conf/op/{op.name}.yaml, or remove it")
    return sorted(rows, key=sort_key)


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
    return {table_path(cfg.instances_dir, name): render_table(expand_op(cfg, cfg.ops[name]))
            for name in cfg.selected_ops}


def stale_tables(cfg: FarmConfig) -> list[Path]:
    """instances/ files that differ from what conf/ expands to."""
    return [p for p, text in expand_tables(cfg).items() if not p.is_file() or p.read_text() != text]


def write_tables(cfg: FarmConfig) -> list[tuple[Path, int, int]]:
    """Write instances/; returns (path, rows before, rows after) for each table that changed."""
    changed = []
    for path, text in expand_tables(cfg).items():
        old = path.read_text() if path.is_file() else ""
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
