"""farm check: the drift guard. Re-derive every selected directory and name each file that drifted."""

from __future__ import annotations

from pathlib import Path

from farm.accept.elfinfo import NotACodeObject, read_code_object
from farm.accept.verify import describe, problems
from farm.core.canonical import canonical_json, digest_of, sha256_bytes
from farm.core.errors import FarmError
from farm.plan.decide import REVERIFY_NOTE
from farm.plan.digest import current_inputs, input_changes
from farm.plan.sources import Tree, shipped_names
from farm.store import manifest
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain import disasm
from farm.toolchain.compare import differences, require_pin

DERIVED_FIELDS = ("code_object", "kernels")


def check(cfg: FarmConfig, rows: list[Row], all_rows: list[Row]) -> list[str]:
    """Problems found, one line each, each naming a file; empty means no drift."""
    found: list[str] = []
    tree = Tree.of(shipped_names(cfg.kernels_dir))  # what a build would ship now: the lookups' answers
    # Instruction classes are recomputed, so the disassembler must be the pinned one.
    pinned = cfg.toolchain_pin.get("disassembler") or {}
    require_pin({"disassembler": pinned}, {"disassembler": disasm.installed(pinned)})
    by_dir: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        by_dir.setdefault((row.op, row.target), []).append(row)
    known = {(r.op, r.target, r.file_name) for r in all_rows}
    for (op, target), dir_rows in sorted(by_dir.items()):
        found += _check_directory(cfg, op, target, dir_rows, known, tree)
    return found


def _check_directory(cfg: FarmConfig, op: str, target: str, rows: list[Row],
                     known: set[tuple[str, str, str]], tree: Tree) -> list[str]:
    try:
        with OutputDir(cfg.outputs_dir, op, target) as out:
            return _check_opened(cfg, out, op, target, rows, known, tree)
    except FarmError as exc:  # a symlinked directory: named, and the other directories are still checked
        return [exc.what]


def _check_opened(cfg: FarmConfig, out: OutputDir, op: str, target: str, rows: list[Row],
                  known: set[tuple[str, str, str]], tree: Tree) -> list[str]:
    where = out.path
    mpath = where / manifest.MANIFEST
    try:
        listing = manifest.read(out)
    except manifest.ManifestUnreadable as exc:
        return [exc.what]
    if listing.data is None:
        return [f"{mpath}: missing ({len(rows)} rows selected here were never built or were deleted)"]
    data = listing.data
    found: list[str] = list(listing.bad)
    entries = listing.entries
    if listing.text != canonical_json(data).encode():
        found.append(f"{mpath}: edited by hand (not in the form the farm writes)")
    for key in ("schema", "op", "target", "toolchain"):
        expected = {"schema": manifest.SCHEMA, "op": op, "target": cfg.targets[target].as_dict(),
                    "toolchain": cfg.toolchain_pin}[key]
        if data.get(key) != expected:
            detail = "; ".join(differences(expected, data.get(key) or {})) if key == "toolchain" else ""
            found.append(f"{mpath}: '{key}' block differs from the config{': ' + detail if detail else ''}")
    paths = [where / row.file_name for row in rows if out.kind(row.file_name) == "file"]
    disassembled = disasm.count_files(cfg.toolchain_pin.get("disassembler"), target, paths)
    for row in rows:
        path = where / row.file_name
        found += _check_object(cfg, row, entries.get(row.file_name), out, mpath, tree, disassembled.get(path))
    for file in sorted(entries):
        if (op, target, file) not in known:
            found.append(f"{where / file}: manifest entry for an object no row in instances/ makes")
    for name in out.names():
        if name not in entries and name not in (manifest.MANIFEST, manifest.PROVENANCE):
            found.append(f"{where / name}: file not recorded in {mpath.name}")
    source_md = out.read_bytes(manifest.PROVENANCE)
    if source_md is None or source_md != manifest.render_source_md(cfg, op, target, entries).encode():
        found.append(f"{where / manifest.PROVENANCE}: missing or differs from the provenance the manifest implies")
    return found


def _check_object(cfg: FarmConfig, row: Row, entry: manifest.RecordedEntry | None, out: OutputDir, mpath: Path,
                  tree: Tree, functions: dict[str, dict[str, int]] | str | None) -> list[str]:
    path = out.path / row.file_name
    if entry is None:
        return [f"{path}: row {row.key} has no entry in {mpath}"]
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
    found += [f"{path}: {p}" for p in problems(co, row, cfg.ops[row.op], cfg.targets[row.target], functions)]
    described = describe(co, functions)
    for key in DERIVED_FIELDS:
        if entry.get(key) != described[key]:
            found.append(f"{path}: manifest '{key}' does not match the object (manifest edited or object replaced)")
    for key in ("name", "group", "knobs", "allow"):
        if entry.get(key) != row.to_json()[key]:
            found.append(f"{path}: manifest '{key}' differs from the row in instances/")
    inputs = entry.get("inputs", {})
    if digest_of(inputs) != entry.get("input_digest"):
        found.append(f"{path}: input_digest does not match the recorded inputs (manifest edited)")
    recorded = inputs if isinstance(inputs, dict) else {}
    for change in input_changes(recorded, current_inputs(cfg, row, tree, recorded)):
        note = f" (farm build: {REVERIFY_NOTE})" if change.verify_only else ""
        found.append(f"{path}: input drift: {change.reason} since it was built{note}")
    return found
