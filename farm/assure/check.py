"""farm check: the drift guard. Re-derive every selected directory and name each file that drifted.

A selected row with neither an object nor a manifest entry was never built (or its build failed before
writing it): that is "not built", counted per directory, never drift. Drift is what exists and differs
from what the farm would write: an object, a manifest, a SOURCE.md, a stray file, stale inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from farm.core.canonical import canonical_json, digest_of, sha256_bytes
from farm.core.errors import FarmError
from farm.elf.code_object import NotACodeObject, read_code_object
from farm.plan.decide import REVERIFY_NOTE
from farm.plan.digest import current_inputs, input_changes
from farm.plan.record_memo import DERIVED_FIELDS, RecordMemo, memo_key, record_digest
from farm.plan.sources import Tree, shipped_names
from farm.store import manifest
from farm.store.outtree import TEMPORARY, OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain import disasm
from farm.toolchain.compare import differences, require_pin
from farm.verify.accept import rules_of
from farm.verify.rules import describe, problems


@dataclass(frozen=True)
class NotBuilt:
    """The selected rows of one directory that have neither an object nor a manifest entry there."""

    path: Path  # the <op>/<target>/ directory
    rows: tuple[Row, ...]
    selected: int  # selected rows of the directory, built or not
    absent: bool  # the directory holds nothing: no such directory, or an empty one


@dataclass
class Checked:
    """What `check_tree` compared and what it found."""

    drift: list[str] = field(default_factory=list)  # one line each, naming a file (see `check`)
    not_built: list[NotBuilt] = field(default_factory=list)
    objects: int = 0  # selected rows whose object or manifest entry exists: each compared
    manifests: int = 0  # manifests read and compared with what the farm would write
    directories: list[tuple[str, str]] = field(default_factory=list)  # (op, target) of those holding anything

    @property
    def unbuilt_rows(self) -> int:
        return sum(len(n.rows) for n in self.not_built)


def check(cfg: FarmConfig, rows: list[Row], all_rows: list[Row]) -> list[str]:
    """Problems found, one line each, each naming a file and, where a command repairs it, ending with
    `; fix: <that command>`; empty means no drift (rows never built are not drift: see `check_tree`)."""
    return check_tree(cfg, rows, all_rows).drift


def check_tree(cfg: FarmConfig, rows: list[Row], all_rows: list[Row]) -> Checked:
    """The drift guard on the selected rows: the drift lines, the rows not built, and what was compared.
    Every record re-derived from an object's bytes is remembered (farm/plan/record_memo.py), so `farm plan`
    need not disassemble that object again."""
    result = Checked()
    memo = RecordMemo(cfg.outputs_dir)
    tree = Tree.of(shipped_names(cfg.kernels_dir))  # what a build would ship now: the lookups' answers
    # Instruction classes are recomputed, so the disassembler must be the pinned one.
    pinned = cfg.toolchain_pin.get("disassembler") or {}
    require_pin({"disassembler": pinned}, {"disassembler": disasm.installed(pinned)})
    by_dir: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        by_dir.setdefault((row.op, row.target), []).append(row)
    known = {(r.op, r.target, r.file_name) for r in all_rows}
    for (op, target), dir_rows in sorted(by_dir.items()):
        _check_directory(cfg, op, target, dir_rows, known, tree, memo, result)
    memo.save()
    return result


def build_command(cfg: FarmConfig, not_built: list[NotBuilt]) -> str:
    """`farm build ...` that builds exactly the rows not built (and nothing the selection leaves out): the
    selection narrowed to the ops and targets that have such rows."""
    ops = sorted({r.op for n in not_built for r in n.rows})
    targets = sorted({r.target for n in not_built for r in n.rows})
    words = ["farm", "build"]
    words += [f"ops=[{','.join(ops)}]"] if set(ops) != set(cfg.ops) else []
    words += [f"targets=[{','.join(targets)}]"] if set(targets) != set(cfg.targets) else []
    words += [f"dtypes=[{','.join(cfg.selected_dtypes)}]"] if cfg.selected_dtypes else []
    words += [f"names=[{','.join(cfg.selected_names)}]"] if cfg.selected_names else []
    if cfg.outputs_dir.absolute() != (cfg.root / "outputs").absolute():
        words.append(f"outputs_dir={cfg.outputs_dir}")
    return "`" + " ".join(words) + "`"


def build_fix(cfg: FarmConfig, op: str, target: str, names: list[str] | None = None) -> str:
    """`; fix: farm build ...` for one directory (or some of its rows), as a user types it."""
    words = ["farm", "build", f"ops=[{op}]", f"targets=[{target}]"]
    if names:
        words.append(f"names=[{','.join(names)}]")
    if cfg.outputs_dir.absolute() != (cfg.root / "outputs").absolute():
        words.append(f"outputs_dir={cfg.outputs_dir}")
    return "; fix: `" + " ".join(words) + "`"


def _check_directory(cfg: FarmConfig, op: str, target: str, rows: list[Row], known: set[tuple[str, str, str]],
                     tree: Tree, memo: RecordMemo, result: Checked) -> None:
    try:
        with OutputDir(cfg.outputs_dir, op, target) as out:
            _check_opened(cfg, out, op, target, rows, known, tree, memo, result)
    except FarmError as exc:  # a symlinked directory: named, and the other directories are still checked
        result.drift.append(exc.what)
        result.directories.append((op, target))


def _not_built(out: OutputDir, rows: list[Row], entries: dict[str, object], result: Checked) -> None:
    """Record the rows with neither an object nor an entry here; count the others as compared."""
    unbuilt = tuple(r for r in rows if r.file_name not in entries and out.kind(r.file_name) is None)
    result.objects += len(rows) - len(unbuilt)
    if unbuilt:
        result.not_built.append(NotBuilt(out.path, unbuilt, len(rows), absent=not out.names()))


def _check_opened(cfg: FarmConfig, out: OutputDir, op: str, target: str, rows: list[Row],
                  known: set[tuple[str, str, str]], tree: Tree, memo: RecordMemo, result: Checked) -> None:
    where = out.path
    mpath = where / manifest.MANIFEST
    if not out.names():  # no such directory, or an empty one: nothing of it was built
        _not_built(out, rows, {}, result)
        return
    result.directories.append((op, target))
    try:
        listing = manifest.read(out)
    except manifest.ManifestUnreadable as exc:
        _not_built(out, rows, {}, result)
        result.drift += [exc.what + build_fix(cfg, op, target)] + _unexpected_files(cfg, out, op, target, {}, known)
        return
    if listing.data is None:  # the directory holds files, but no manifest records them
        _not_built(out, rows, {}, result)
        result.drift += ([f"{mpath}: missing, while the directory holds files (deleted, or a build that failed "
                          "before recording them)" + build_fix(cfg, op, target)]
                         + _unexpected_files(cfg, out, op, target, {}, known))
        return
    result.manifests += 1
    data = listing.data
    found = [line + build_fix(cfg, op, target) for line in listing.bad]  # the build drops them, rebuilds their rows
    entries = listing.entries
    _not_built(out, rows, entries, result)
    if listing.text != canonical_json(data).encode():
        found.append(f"{mpath}: edited by hand (not in the form the farm writes)" + build_fix(cfg, op, target))
    for key in ("schema", "op", "target", "toolchain"):
        expected = {"schema": manifest.SCHEMA, "op": op, "target": cfg.targets[target].as_dict(),
                    "toolchain": cfg.toolchain_pin}[key]
        if data.get(key) != expected:
            detail = "; ".join(differences(expected, data.get(key) or {})) if key == "toolchain" else ""
            found.append(f"{mpath}: '{key}' block differs from the config{': ' + detail if detail else ''}"
                         + build_fix(cfg, op, target))
    paths = [where / row.file_name for row in rows if out.kind(row.file_name) == "file"]
    disassembled = disasm.count_files(cfg.toolchain_pin.get("disassembler"), target, paths)
    for row in rows:
        entry = entries.get(row.file_name)
        if entry is None:  # not built, or an object no entry records (named with the unexpected files below)
            continue
        path = where / row.file_name
        fix = build_fix(cfg, op, target, [row.name])
        found += [line + fix for line in _check_object(cfg, row, entry, out, mpath, tree,
                                                      disassembled.get(path), memo)]
    for file in sorted(entries):
        if (op, target, file) not in known:
            found.append(f"{where / file}: manifest entry for an object no row in instances/ makes"
                         + build_fix(cfg, op, target))  # the build removes it and its entry
    found += _unexpected_files(cfg, out, op, target, entries, known)
    source_md = out.read_bytes(manifest.PROVENANCE)
    if source_md is None or source_md != manifest.render_source_md(cfg, op, target, entries).encode():
        found.append(f"{where / manifest.PROVENANCE}: missing or differs from the provenance the manifest implies"
                     + build_fix(cfg, op, target))
    result.drift += found


def _unexpected_files(cfg: FarmConfig, out: OutputDir, op: str, target: str, entries: dict[str, object],
                      known: set[tuple[str, str, str]]) -> list[str]:
    """One line for every name in the directory the farm does not expect there: not a recorded object, not
    manifest.json or SOURCE.md. Each says what repairs it."""
    found = []
    mpath = out.path / manifest.MANIFEST
    for name in out.names():
        if name in entries or name in (manifest.MANIFEST, manifest.PROVENANCE):
            continue
        line = f"{out.path / name}: file not recorded in {mpath.name}"
        temporary = TEMPORARY.match(name)
        if temporary:
            line += (f" (a temporary of a farm write, pid {temporary['pid']}, that never finished; the build "
                     "removes it once that process is gone)" + build_fix(cfg, op, target))
        elif (op, target, name) in known:
            line += (" (an object of a row no manifest entry records: a build that failed before recording it?)"
                     + build_fix(cfg, op, target, [name.removesuffix(manifest.OBJECT_SUFFIX)]))
        else:
            line += ("; fix: remove it (no row of instances/ makes it, and the farm deletes only what its "
                     "manifests recorded)")
        found.append(line)
    return found


def _check_object(cfg: FarmConfig, row: Row, entry: manifest.RecordedEntry, out: OutputDir, mpath: Path,
                  tree: Tree, functions: dict[str, dict[str, int]] | str | None, memo: RecordMemo) -> list[str]:
    path = out.path / row.file_name
    kind = out.kind(row.file_name)
    data = out.read_bytes(row.file_name)
    if data is None:
        return [f"{path}: " + ("missing" if kind is None else f"a {kind}, not a regular file")
                + f" (recorded in {mpath.name})"]
    found: list[str] = []
    if sha256_bytes(data) != entry.get("sha256") or len(data) != entry.get("size"):
        found.append(f"{path}: SHA256/size differ from {mpath.name} (object tampered or manifest edited)")
    try:
        co = read_code_object(data)
    except NotACodeObject as exc:
        return found + [f"{path}: {exc}"]
    if not isinstance(functions, dict):  # disasm.count_files: the reason this file alone cannot be read
        return found + [f"{path}: {functions or 'the pinned disassembler could not read it'}"]
    found += [f"{path}: {p}" for p in problems(co, rules_of(cfg, row), functions)]
    inputs = entry.get("inputs", {})
    recorded = inputs if isinstance(inputs, dict) else {}
    changes = input_changes(recorded, current_inputs(cfg, row, tree, recorded))
    described = describe(co, functions)
    if not changes:  # derived under the code and toolchain the entry names: `farm plan` may trust it
        memo.remember(memo_key(sha256_bytes(data), inputs), record_digest(described))
    for key in DERIVED_FIELDS:
        if entry.get(key) != described[key]:
            found.append(f"{path}: manifest '{key}' does not match the object (manifest edited or object replaced)")
    for key in ("name", "group", "knobs", "allow"):
        if entry.get(key) != row.to_json()[key]:
            found.append(f"{path}: manifest '{key}' differs from the row in instances/")
    if digest_of(inputs) != entry.get("input_digest"):
        found.append(f"{path}: input_digest does not match the recorded inputs (manifest edited)")
    for change in changes:
        note = f" (farm build: {REVERIFY_NOTE})" if change.verify_only else ""
        found.append(f"{path}: input drift: {change.reason} since it was built{note}")
    return found
