"""The restore stage: before compiling, fetch each row whose published object is still current from the DVC
cache or remote (like a remote build cache), verify it exactly as a worker's result is verified, and write it
with its manifest entry. Whatever is not restored compiles as before."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from farm.contract import CompileResult
from farm.core.canonical import sha256_bytes
from farm.core.errors import FarmError
from farm.plan.decide import REVERIFY, UP_TO_DATE, Decision, decide_cached
from farm.plan.digest import CodeRecorder, CompileRecord
from farm.plan.sources import Tree, shipped_names
from farm.restore.view import CacheView, Unreachable, pointer_of
from farm.store import manifest
from farm.store.manifest import Entry, RecordedEntry
from farm.store.outtree import MANIFEST
from farm.store.progress import BuildProgress
from farm.store.report import ReportRow
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain.installed import compile_part

log = logging.getLogger(__name__)

NODE = "DVC cache"  # a restored object's "node": where its bytes came from
Counts = dict[str, dict[str, int]] | str


class Writer(Protocol):
    """What the restore needs of the build's writer (farm/build.py `DirectoryWriter`)."""

    def write_object(self, row: Row, elf: bytes, entry: Entry) -> None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class Checks:
    """The build's own acceptance, handed down (build sits above this stage): `disassemble` and `accept` of
    farm/build.py, so a restored object passes exactly the checks a freshly compiled one does."""

    disassemble: Callable[[FarmConfig, list[tuple[Row, CompileResult]]], dict[str, Counts]]
    accept: Callable[[FarmConfig, Row, CompileResult, CompileRecord, Counts, frozenset[str]],
                     tuple[Entry | None, str | None]]


@dataclass
class Outcome:
    """What the stage did: rows restored, rows left to compile, whether a published tree was consulted."""

    restored: int = 0
    compile: list[Decision] = field(default_factory=list)
    consulted: bool = False


def restore_on(cfg: FarmConfig) -> bool:
    """cache.restore (conf/config.yaml): true by default."""
    value = (cfg.extra.get("cache") or {}).get("restore", True)
    if not isinstance(value, bool):
        raise FarmError(f"cache.restore={value!r} is not true or false", "e.g. cache.restore=false")
    return value


def restore(cfg: FarmConfig, todo: list[Decision], writer: Writer, report_rows: list[ReportRow],
            checks: Checks) -> Outcome:
    """Restore what the published tree holds of `todo` (rows that would compile); returns the rest."""
    pointer = pointer_of(cfg) if todo and restore_on(cfg) else None
    if pointer is None:
        return Outcome(compile=list(todo))
    try:
        view = CacheView(cfg, pointer)
    except Unreachable as exc:
        log.warning("restore: %s; compiling every row", exc.what)
        return Outcome(compile=list(todo))
    outcome = Outcome(consulted=True)
    tree = Tree.of(shipped_names(cfg.kernels_dir))  # what `decide` judges lookups against
    by_dir: dict[tuple[str, str], list[Decision]] = {}
    for d in todo:
        by_dir.setdefault((d.row.op, d.row.target), []).append(d)
    with BuildProgress([d.row.key for d in todo], 1, sys.stderr, phase="restoring") as progress:
        for (op, target), decisions in by_dir.items():
            try:
                fetched, left = _fetch(cfg, view, op, target, decisions, tree)
            except Unreachable as exc:
                log.warning("restore: %s; compiling %s/%s/ instead", exc.what, op, target)
                fetched, left = [], decisions
            restored = _accept(cfg, fetched, writer, report_rows, checks)
            outcome.restored += len(restored)
            outcome.compile += left + [d for d, _, _ in fetched if d.row.key not in restored]
            progress.update(len(decisions), restored=len(restored))
    log.info("restored %d of %d rows from %s (%s); compiling %d", outcome.restored, len(todo), pointer.path.name,
             view.remote.describe(), len(outcome.compile))
    return outcome


def _fetch(cfg: FarmConfig, view: CacheView, op: str, target: str, decisions: list[Decision],
           tree: Tree) -> tuple[list[tuple[Decision, RecordedEntry, bytes]], list[Decision]]:
    """The published objects of one directory whose entries are current and whose bytes are intact, and the
    rows that must compile instead."""
    listing = view.listing(op, target)
    entries = _cached_entries(view, op, target, listing)
    fetched, left = [], []
    for d in decisions:
        entry = entries.get(d.row.file_name)
        # Current means what up to date means on disk; only-verification-changed is re-verified below anyway.
        if entry is None or decide_cached(cfg, d.row, entry, tree).status not in (UP_TO_DATE, REVERIFY):
            left.append(d)
            continue
        md5 = listing.get(d.row.file_name)
        data = view.read(op, target, d.row.file_name, md5) if md5 else "the pointer lists no such file"
        if isinstance(data, bytes) and sha256_bytes(data) != entry.get("sha256"):
            data = "its SHA256 is not the one its cached manifest entry records"
        if isinstance(data, str):
            log.warning("REFUSED cached %s/%s/%s/%s: %s; compiling it", view.pointer.tree, op, target,
                        d.row.file_name, data)
            left.append(d)
        else:
            fetched.append((d, entry, data))
    return fetched, left


def _cached_entries(view: CacheView, op: str, target: str, listing: dict[str, str]) -> dict[str, RecordedEntry]:
    """The valid entries of the published manifest.json of one directory ({} when there is none usable)."""
    md5 = listing.get(MANIFEST)
    if md5 is None:
        return {}
    where = f"{view.pointer.tree}/{op}/{target}/{MANIFEST}"
    text = view.read(op, target, MANIFEST, md5)
    if isinstance(text, str):
        log.warning("REFUSED cached %s: %s; compiling its rows", where, text)
        return {}
    try:
        return manifest.entries_of(manifest.parse(text, view.pointer.path.parent / where))
    except manifest.ManifestUnreadable as exc:
        log.warning("REFUSED cached %s", exc.what)
        return {}


def _accept(cfg: FarmConfig, fetched: list[tuple[Decision, RecordedEntry, bytes]], writer: Writer,
            report_rows: list[ReportRow], checks: Checks) -> set[str]:
    """Verify and write the fetched objects the way the build verifies a worker's results (farm/build.py
    `_collect`, `reverify`); returns the keys written."""
    pin = compile_part(cfg.toolchain_pin)
    results = [(d.row, CompileRecord.of_entry(_inputs(entry)),
                CompileResult(key=d.row.key, ok=True, elf=data, node=NODE, toolchain=pin))
               for d, entry, data in fetched]
    pairs = [(row, result) for row, _, result in results]
    # Only the build's own functions run while recording: the verifier files recorded must be those a
    # compiled row records, or a restored manifest would differ from a compiled one.
    with CodeRecorder() as code:
        counts = checks.disassemble(cfg, pairs)
    written = set()
    for row, compiled, result in results:
        entry, refused = checks.accept(cfg, row, result, compiled, counts.get(row.key, "it was not disassembled"),
                                       frozenset(code.filenames))
        if entry is None or result.elf is None:
            log.warning("REFUSED cached %s: %s; compiling it", row.key, refused)
            continue
        writer.write_object(row, result.elf, entry)
        written.add(row.key)
        report_rows.append({"key": row.key, "ok": True, "node": NODE, "restored": True, "written": True,
                            "refused": None})
    writer.flush()
    return written


def _inputs(entry: RecordedEntry) -> dict[str, object]:
    inputs = entry.get("inputs")
    return inputs if isinstance(inputs, dict) else {}
