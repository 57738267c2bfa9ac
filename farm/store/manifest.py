"""Per-directory manifest.json and SOURCE.md under outputs/<op>/<target>/.

Both are pure functions of the objects, their rows, their recorded inputs and the toolchain pin,
so rebuilding from the same inputs gives the same bytes, and `farm check` can re-derive them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from farm.core.canonical import canonical_json, digest_of
from farm.core.errors import FarmError
from farm.store.outtree import MANIFEST, OBJECT_SUFFIX, PROVENANCE, OutputDir, object_name_problem
from farm.store.vendored import vendored_sources
from farm.table.config import FarmConfig
from farm.table.rows import RowJson

SCHEMA = 2  # 2: instruction classes per object and per kernel


# {relative path: SHA256}; None where a recorded file is gone (only in inputs re-derived today).
Hashes = dict[str, str | None]


class RequiredInputs(TypedDict):
    """A row's inputs as the farm records them (entry `inputs`, digested into `input_digest`); computed by
    farm/plan/digest.py `inputs_of`, defined here with the rest of the manifest's format (store sits below plan).
    The JSON keys are these names; canonical JSON sorts them, so this order is not the file's order."""

    knobs: dict[str, Any]  # the row's knobs, whatever the op's spec module accepts
    allow: dict[str, bool]
    op: str  # digest of the op's compile identity
    target: str  # digest of the target's config
    generator: Hashes  # farm files the compile ran
    verifier: Hashes  # farm files the driver's verification ran
    sources: Hashes  # kernels_src/ files the compile read
    lookups: dict[str, list[str]]  # lookup -> what it found
    toolchain: str  # digest of the toolchain pin


class Inputs(RequiredInputs, total=False):
    """The inputs, with those only some rows record (a separate class: `NotRequired` is not seen by TypedDict
    under postponed annotations)."""

    llvm_options: dict[str, Any]  # the kernel's per-compile LLVM options, when it sets any


# Inputs as read back from a manifest on disk: data, so every field is checked where it is used.
RecordedInputs = Mapping[str, object]


class Described(TypedDict):
    """What an object's own bytes say about it (farm/verify/rules.py `describe`)."""

    code_object: dict[str, object]  # target, e_flags, machine, linker, instruction classes
    kernels: list[dict[str, object]]  # one record per kernel, sorted by name


class Entry(Described):
    """One `objects[]` entry of manifest.json, as the farm writes it (canonical JSON sorts the keys)."""

    file: str  # <name>.hsaco in the same directory
    sha256: str
    size: int
    name: str
    group: str
    knobs: dict[str, Any]  # the row's knobs, whatever the op's spec module accepts
    allow: dict[str, bool]
    input_digest: str  # digest_of(inputs)
    inputs: Inputs


# Read back from disk, a manifest and its entries are data: parse checks only that there is an objects list of
# JSON objects with a `file`, `entry_problems` that each file is a name the farm gives; every other field is
# checked where it is used (a malformed one is named by `farm check` and rebuilt by `farm build`).
RecordedManifest = Mapping[str, object]
RecordedEntry = Mapping[str, object]


class Manifest(TypedDict):
    """manifest.json as the farm writes it."""

    schema: int
    op: str
    target: dict[str, Any]  # the target's config
    toolchain: dict[str, Any]  # the toolchain pin
    objects: list[Entry | RecordedEntry]  # sorted by file; entries of untouched rows as they were read


def directory(cfg: FarmConfig, op: str, target: str) -> Path:
    return cfg.outputs_dir / op / target


def object_entry(row_json: RowJson, file: str, sha256: str, size: int, inputs: Inputs,
                 described: Described) -> Entry:
    return {
        "file": file,
        "sha256": sha256,
        "size": size,
        "name": row_json["name"],
        "group": row_json["group"],
        "knobs": row_json["knobs"],
        "allow": row_json["allow"],
        "input_digest": digest_of(inputs),
        "inputs": inputs,
        "code_object": described["code_object"],
        "kernels": described["kernels"],
    }


def render(cfg: FarmConfig, op: str, target: str, entries: Mapping[str, Entry | RecordedEntry]) -> str:
    """The manifest's bytes. `entries` may hold recorded entries of rows this build did not touch: they are
    written back as they were read. Exactly canonical_json of the whole document; each entry's text is kept
    (`_entry_text`), since a build rewrites the manifest many times and most entries did not change."""
    doc: Manifest = {
        "schema": SCHEMA,
        "op": op,
        "target": cfg.targets[target].as_dict(),
        "toolchain": cfg.toolchain_pin,
        "objects": [],
    }
    if not entries:
        return canonical_json(doc)
    # The list's items sit two levels deep in the document (indent 2): each entry's lines move by 4 spaces.
    objects = "[\n    " + ",\n    ".join(_entry_text(entries[f]).replace("\n", "\n    ") for f in sorted(entries))
    return canonical_json(doc).replace('"objects": []', '"objects": ' + objects + "\n  ]", 1)


# id(entry) -> (entry, its canonical JSON): the entry is held, so its id is not reused while kept here.
_TEXTS: dict[int, tuple[object, str]] = {}
_TEXTS_KEPT = 20000


def _entry_text(entry: Entry | RecordedEntry) -> str:
    """An entry's canonical JSON (without the trailing newline). Entries are never changed once made: a new
    entry for a row is a new object."""
    kept = _TEXTS.get(id(entry))
    if kept is not None and kept[0] is entry:
        return kept[1]
    if len(_TEXTS) >= _TEXTS_KEPT:
        _TEXTS.clear()
    text = canonical_json(entry)[:-1]
    _TEXTS[id(entry)] = (entry, text)
    return text


class ManifestUnreadable(FarmError):
    pass


def parse(text: str | bytes, where: Path) -> dict[str, object]:
    """A manifest's structure; ManifestUnreadable when it is not a manifest at all."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("objects"), list):
            raise ValueError("no objects list")
        for entry in data["objects"]:
            if not isinstance(entry, dict) or "file" not in entry:
                raise ValueError("an object entry has no file")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestUnreadable(f"{where}: not a readable manifest ({exc})",
                                 "rebuild the directory: farm build (its objects will be rebuilt)") from None
    return data


def load(path: Path) -> dict[str, object] | None:
    """The parsed manifest at `path` (for comparing two trees), None when absent."""
    if not path.is_file():
        return None
    return parse(path.read_bytes(), path)


def _objects(data: RecordedManifest) -> list[RecordedEntry]:
    """The entries of a parsed manifest (`parse` made sure they are JSON objects)."""
    objects = data.get("objects")
    return [e for e in objects if isinstance(e, dict)] if isinstance(objects, list) else []


def entry_problems(data: RecordedManifest, where: Path) -> list[str]:
    """One line per entry whose `file` is not a name the farm gives an object (a path, `..`, not a
    string, not its own `name` + .hsaco, a duplicate). Such an entry is data the farm never acts on."""
    problems, seen = [], set()
    for i, entry in enumerate(_objects(data)):
        file = entry.get("file")
        problem = object_name_problem(file)
        if problem is None and file != f"{entry.get('name')}{OBJECT_SUFFIX}":
            problem = f"file name {file!r} is not the entry's own name {entry.get('name')!r} + {OBJECT_SUFFIX}"
        if problem is None and file in seen:
            problem = f"file name {file!r} is listed twice"
        if problem is not None:
            problems.append(f"{where}: objects[{i}]: {problem}")
        else:
            seen.add(file)
    return problems


def entries_of(data: RecordedManifest | None) -> dict[str, RecordedEntry]:
    """The entries keyed by file name, only those whose name is valid (see `entry_problems`)."""
    if data is None:
        return {}
    return {e["file"]: e for e in _objects(data) if isinstance(e.get("file"), str)
            and object_name_problem(e["file"]) is None and e["file"] == f"{e.get('name')}{OBJECT_SUFFIX}"}


@dataclass(frozen=True)
class Listing:
    """A directory's manifest as read: its data (None when absent), the valid entries, and the bad ones."""

    data: dict[str, object] | None
    text: bytes | None
    entries: dict[str, RecordedEntry]
    bad: list[str]


def read(out: OutputDir) -> Listing:
    """Read `manifest.json` of an opened directory (never through a symlink); ManifestUnreadable when it
    is there but is not a manifest."""
    where = out.path / MANIFEST
    kind = out.kind(MANIFEST)
    if kind is None:
        return Listing(None, None, {}, [])
    text = out.read_bytes(MANIFEST)
    if text is None:
        raise ManifestUnreadable(f"{where}: a {kind}, not a regular file",
                                 f"remove {where}; `farm build` rebuilds the directory")
    data = parse(text, where)
    return Listing(data, text, entries_of(data), entry_problems(data, where))


def render_source_md(cfg: FarmConfig, op: str, target: str, entries: Mapping[str, Entry | RecordedEntry]) -> str:
    """Provenance of a directory: which sources, which toolchain, how to rebuild it."""
    sources: dict[str, str] = {}
    for entry in entries.values():
        sources.update(_recorded_sources(entry))
    family = cfg.ops[op].family if op in cfg.ops else op
    pin = cfg.toolchain_pin
    lines = [
        f"# {op} for {target}: provenance",
        "",
        f"{len(entries)} code objects, built by the kernel farm from this project's sources.",
        f"Kernel family notes (origin, verification): `kernels_src/{family}/SOURCE.md`.",
        "",
        "## Kernel sources read by the compiles (SHA256)",
        "",
        *[f"- `kernels_src/{rel}` {sha}" for rel, sha in sorted(sources.items())],
        "",
        *_vendored_section(cfg, sources),
        "## Toolchain",
        "",
        f"- flydsl {pin.get('flydsl')}, Python {pin.get('python')}",
        f"- linker: {pin.get('linker', {}).get('version')} from {pin.get('linker', {}).get('package')}"
        f" (sha256 {pin.get('linker', {}).get('sha256')})",
        "",
        "## Rebuild and verify",
        "",
        "```",
        f"farm build ops=[{op}] targets=[{target}]",
        f"farm check ops=[{op}] targets=[{target}]",
        "```",
        "",
        "These objects were compiled and inspected (target, e_flags, symbols, registers, LDS, scratch),",
        "never run: the farm has no GPU.",
        "",
    ]
    return "\n".join(lines)


def _recorded_sources(entry: Entry | RecordedEntry) -> dict[str, str]:
    """An entry's `inputs.sources`; {} when a recorded entry has none or a malformed one (`farm check` names it)."""
    inputs = entry.get("inputs")
    sources = inputs.get("sources") if isinstance(inputs, dict) else None
    return sources if isinstance(sources, dict) else {}


def _vendored_section(cfg: FarmConfig, sources: dict[str, str]) -> list[str]:
    """The recorded sources that were vendored from upstream projects (none: no section, same bytes as before)."""
    vendored = vendored_sources(cfg.kernels_dir, sources)
    if not vendored:
        return []
    return [
        "## Vendored sources (kernels_src/VENDOR.lock.json)",
        "",
        *[f"- `kernels_src/{v.file}`: {v.upstream} `{v.path}` at commit {v.commit} ({v.url}, "
          f"{v.license}; local modifications: {'; '.join(v.modifications) or 'none'})"
          for v in vendored],
        "",
    ]


def write_directory(cfg: FarmConfig, out: OutputDir, op: str, target: str,
                    entries: Mapping[str, Entry | RecordedEntry]) -> None:
    """Write manifest.json then SOURCE.md, each atomically, inside the opened directory."""
    out.write_atomic(MANIFEST, render(cfg, op, target, entries).encode())
    out.write_atomic(PROVENANCE, render_source_md(cfg, op, target, entries).encode())
