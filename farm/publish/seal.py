"""farm golden: record the golden digests of the selected ops (outputs.sha256) from their complete, clean
tables, the farm code their manifests record (farm/assure/golden_code.py), and, when outputs/ is the whole
table and exactly what outputs.sha256 then records, the DVC pointer of that tree.

`farm golden ops=[A,B]` replaces the lines of A and B and keeps every other op's line byte for byte; the
order of the list does not matter. Lines of ops that conf/op/ no longer has are dropped only by a golden of
the whole table (every op selected), which says so."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from farm.assure.check import check
from farm.assure.golden import golden_path, load, op_of, tree_digests
from farm.assure.golden import render as render_golden
from farm.assure.golden_code import code_path, load_code, merge, recorded_code
from farm.assure.golden_code import render as render_code
from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError
from farm.publish.brevity import first_few, lines_shown
from farm.publish.commands import command, outputs_args
from farm.publish.pointer import record_pointer
from farm.publish.survey import DirKey, Survey, survey
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.table.config import FarmConfig
from farm.table.rows import Row, table_path


@dataclass(frozen=True)
class Record:
    """What `farm golden` writes: the digests, the farm code, and what it kept or dropped of the old file."""

    digests: dict[str, str]
    code: dict[str, str]
    recorded: int  # lines of the selected ops
    kept: int  # lines of other ops, byte for byte
    dropped: list[str]  # ops with no conf/op/ file whose lines a whole-table golden dropped
    clashes: list[str]  # farm files the kept lines and the selected ops' manifests record with other hashes


def seal_golden(cfg: FarmConfig, rows: list[Row], every: list[Row], out: TextIO = sys.stdout,
                everything: bool = False) -> int:
    """Record the golden digests (and the pointer, from a complete tree); the report or the refusal goes to
    `out`; `everything` lists every name instead of the first few. Exit status."""
    if {r.key for r in rows} != {r.key for r in every}:
        raise FarmError("farm golden records the whole table of the selected ops, not a part of it",
                        "drop targets=/dtypes=/names= (ops=[...] may stay)")
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        return _seal_locked(cfg, every, out, everything)


def _seal_locked(cfg: FarmConfig, rows: list[Row], out: TextIO, everything: bool) -> int:
    ops = set(cfg.selected_ops)
    whole = ops == set(cfg.ops)
    found = survey(cfg)
    dirs = sorted({(r.op, r.target) for r in rows})
    problems = _problems(cfg, found, dirs, ops if not whole else None)
    if problems:
        for line in lines_shown(problems, everything):
            print(line, file=out)
        print(f"refusing to record golden digests: {len(problems)} problem(s); `farm build`, then `farm golden`",
              file=out)
        return 1
    record = _record(cfg, ops, whole, dirs)
    if record.clashes:
        clashes, name = first_few(record.clashes, everything), code_path(cfg).name
        print(f"refusing to record golden digests: the golden lines of the other ops were made with other farm "
              f"code than the manifests of ops=[{','.join(sorted(ops))}] record ({clashes} differ from {name}), so "
              f"{name} cannot describe both; rebuild every row from nothing (`rm -rf outputs && farm build "
              "cache.restore=false`), then `farm golden`", file=out)
        return 1
    left = _not_whole(cfg, found, record.digests, everything)
    path = golden_path(cfg)
    write_text_atomic(path, render_golden(record.digests))
    write_text_atomic(code_path(cfg), render_code(record.code))
    pointer = record_pointer(cfg) if left is None else None
    kept = f"; kept the {record.kept} lines of other ops as they were" if record.kept else ""
    dropped = (f"; dropped the lines of ops conf/op/ no longer has: {', '.join(record.dropped)}"
               if record.dropped else "")
    print(f"wrote {path}: {record.recorded} files of ops=[{','.join(sorted(ops))}] ({len(rows)} objects in "
          f"{len(dirs)} directories){kept}{dropped}", file=out)
    print(f"wrote {code_path(cfg).name}: the {len(record.code)} farm files those manifests record"
          + (" and those of the kept lines" if record.kept else ""), file=out)
    dvc_name = path.with_suffix(".dvc").name
    if pointer is None:
        print(f"left {dvc_name} as it was: {left}; commit {path.name} and {code_path(cfg).name}", file=out)
    else:
        print(f"wrote {dvc_name}: md5 {pointer.md5} ({pointer.nfiles} files); commit all three "
              f"({path.name}, {code_path(cfg).name}, {dvc_name})", file=out)
    return 0


def _problems(cfg: FarmConfig, found: Survey, dirs: list[DirKey], ops: set[str] | None) -> list[str]:
    """Why the selected ops cannot be recorded: rows without an object, drift, and entries under their
    <op>/ folders (under all of outputs/ when `ops` is None: the whole table) that no row accounts for."""
    lines = []
    for key in dirs:
        d = found.dirs[key]
        if d.missing:
            build = command("build", f"ops=[{d.op}]", f"targets=[{d.target}]", *outputs_args(cfg))
            lines.append(f"NOT BUILT {cfg.outputs_dir / d.op / d.target}/: {len(d.missing)} of {len(d.rows)} rows "
                         f"have no object here; build them: {build}")
    present = [r for key in dirs for r in found.dirs[key].present]
    lines += [f"DRIFT {line}" for line in check(cfg, present, found.every) if present]
    strays = found.strays if ops is None else [s for s in found.strays if _under(cfg.outputs_dir, s, ops)]
    return lines + [f"DRIFT {line}" for line in strays]


def _under(outputs: Path, stray: str, ops: set[str]) -> bool:
    """Whether a survey's stray line (it starts with the entry's path) is an entry under one of `ops`."""
    return any(stray.startswith(f"{outputs / op}/") or stray.startswith(f"{outputs / op}:") for op in ops)


def _record(cfg: FarmConfig, ops: set[str], whole: bool, dirs: list[DirKey]) -> Record:
    """The new digests: the selected ops' files as they are now, every other op's line as it was (a golden of
    the whole table drops the lines of ops conf/op/ no longer has); the farm code likewise."""
    mine = tree_digests(cfg.outputs_dir, ops)
    old = load(cfg)
    before = old.sha256 if old is not None else {}
    gone = {op_of(p) for p in before if op_of(p) not in cfg.ops} if whole else set()
    kept = {p: sha for p, sha in before.items() if op_of(p) not in ops and op_of(p) not in gone}
    code, clashes = recorded_code(cfg, dirs), []
    if kept:
        code, clashes = merge(load_code(code_path(cfg)), code)
    return Record(digests={**kept, **mine}, code=code, recorded=len(mine), kept=len(kept), dropped=sorted(gone),
                  clashes=clashes)


def _not_whole(cfg: FarmConfig, found: Survey, digests: dict[str, str], everything: bool) -> str | None:
    """Why outputs/ is not a tree outputs.dvc may describe (None when it is): it must hold every row of the
    whole table and be exactly what outputs.sha256 now records."""
    rel = cfg.outputs_dir.name
    untabled = [op for op in sorted(cfg.ops) if not table_path(cfg.instances_dir, op).is_file()]
    if untabled:
        return (f"instances/ has no table for {first_few(untabled, everything)}, so {rel}/ cannot be shown to be "
                "the whole table; run `farm expand`, build, then `farm golden`")
    lacking, partial = found.lacking, [d.key for d in found.incomplete]
    if lacking or partial:
        ops = sorted({op for op, _ in lacking + partial})
        parts = ([f"{len(lacking)} of its {len(found.table_dirs)} directories have no object here: "
                  f"{first_few([f'{o}/{t}' for o, t in lacking], everything)}"] if lacking else [])
        parts += ([f"{len(partial)} are built in part: {first_few([f'{o}/{t}' for o, t in partial], everything)}"]
                  if partial else [])
        build = command("build", "ops=[" + ",".join(ops) + "]", *outputs_args(cfg))
        return (f"{rel}/ is not the whole table ({'; '.join(parts)}); outputs.dvc describes the whole {rel}/ and "
                f"is written only from a complete tree: {build}, then `farm golden`")
    try:
        tree = tree_digests(cfg.outputs_dir)
    except FarmError as exc:
        return exc.what
    differ = sorted(p for p in tree.keys() | digests.keys() if tree.get(p) != digests.get(p))
    if differ:
        return (f"{len(differ)} files of {rel}/ differ from {golden_path(cfg).name} or have no line in it: "
                f"{first_few(differ, everything)}; outputs.dvc describes the whole {rel}/ and is written only from "
                "a tree that is exactly what outputs.sha256 records: `farm check` says why they differ; `farm build` "
                "them, or record their ops (`farm golden ops=[...]`)")
    return None
