"""The restore stage: before compiling, fetch each row whose published object is still current from the DVC
cache or remote (like a remote build cache), verify it exactly as a worker's result is verified, and write it
with its manifest entry. Whatever is not restored compiles as before."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Protocol

from farm.core.canonical import sha256_bytes
from farm.core.errors import FarmError
from farm.core.words import count
from farm.observe.progress import BuildProgress
from farm.observe.report import ReportRow
from farm.plan.decide import REVERIFY, UP_TO_DATE, CurrentInputs, Decision, decide_cached
from farm.plan.sources import Tree, shipped_names
from farm.restore.published import PublishedNames
from farm.restore.verifying import NODE, Checks, Verdict, Verifiers
from farm.restore.view import CacheView, NothingPublished, Unreachable, pointer_of
from farm.store import manifest
from farm.store.manifest import Entry, RecordedEntry, RecordedInputs
from farm.store.outtree import MANIFEST
from farm.table.config import FarmConfig
from farm.table.rows import Row

log = logging.getLogger(__name__)

CHUNK = 48  # objects per verification task: one disassembler run each, several tasks per directory


class Writer(Protocol):
    """What the restore needs of the build's writer (farm/build.py `DirectoryWriter`)."""

    def write_object(self, row: Row, elf: bytes, entry: Entry) -> None: ...

    def flush(self) -> None: ...


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
            checks: Checks, will_compile: Callable[[], None] = lambda: None) -> Outcome:
    """Restore what the published tree holds of `todo` (rows that would compile); returns the rest.
    `will_compile` is called when a directory's fetch leaves a row to compile while others are still to be
    fetched (the build starts its compilers then); the caller calls it for whatever the returned outcome
    leaves to compile."""
    pointer = pointer_of(cfg) if todo and restore_on(cfg) else None
    if pointer is None:
        return Outcome(compile=list(todo))
    published = PublishedNames(pointer.path)
    if published.holds_none_of(todo):  # e.g. a width added since: DVC need not be opened (~1 s) to know
        log.info("restored 0 of %d rows: the tree %s points to has none of them (its file list, as an earlier "
                 "build read it); compiling %d", len(todo), pointer.path.name, len(todo))
        return Outcome(compile=list(todo), consulted=True)
    with Verifiers(cfg, checks) as verifiers:  # forked first: no DVC or progress thread exists yet
        try:
            view = CacheView(cfg, pointer)
        except Unreachable as exc:  # nothing published to this remote yet is the normal state of a new clone
            log.log(logging.INFO if isinstance(exc, NothingPublished) else logging.WARNING,
                    "restore: %s; compiling %s", exc.what, count(len(todo), "row"))
            return Outcome(compile=list(todo))
        with BuildProgress([d.row.key for d in todo], 1, sys.stderr, phase="restoring") as progress:
            outcome = _restore_all(cfg, view, todo, verifiers, _Sink(writer, report_rows, progress), published,
                                   will_compile)
    published.save()
    log.info("restored %d of %d rows from %s (%s); compiling %d", outcome.restored, len(todo), pointer.path.name,
             view.remote.describe(), len(outcome.compile))
    return outcome


@dataclass
class _Sink:
    """Where verdicts go: objects and entries to the build's writer, rows to the report, counts to progress."""

    writer: Writer
    report_rows: list[ReportRow]
    progress: BuildProgress

    def take(self, outcome: Outcome, batch: list[tuple[Decision, bytes]], verdicts: list[Verdict]) -> None:
        by_key = {key: (entry, refused) for key, entry, refused in verdicts}
        restored = 0
        for d, data in batch:
            entry, refused = by_key.get(d.row.key, (None, "it was not verified"))
            if entry is None:
                log.warning("REFUSED cached %s: %s; compiling it", d.row.key, refused)
                outcome.compile.append(d)
                continue
            self.writer.write_object(d.row, data, entry)
            self.report_rows.append({"key": d.row.key, "ok": True, "node": NODE, "restored": True, "written": True,
                                     "refused": None})
            restored += 1
        self.writer.flush()
        outcome.restored += restored
        self.progress.update(len(batch), restored=restored)


def _restore_all(cfg: FarmConfig, view: CacheView, todo: list[Decision], verifiers: Verifiers,
                 sink: _Sink, published: PublishedNames, will_compile: Callable[[], None]) -> Outcome:
    """Fetch directory by directory in the driver while the workers verify what was fetched before."""
    outcome = Outcome(consulted=True)
    # What `decide` judges lookups against, and today's inputs shared by every row of this pass.
    current = CurrentInputs(cfg, Tree.of(shipped_names(cfg.kernels_dir)))
    by_dir: dict[tuple[str, str], list[Decision]] = {}
    for d in todo:
        by_dir.setdefault((d.row.op, d.row.target), []).append(d)
    pending: list[tuple[list[tuple[Decision, bytes]], Future[list[Verdict]]]] = []
    for (op, target), decisions in by_dir.items():
        try:
            fetched, left = _fetch(cfg, view, op, target, decisions, current, published)
        except Unreachable as exc:
            log.warning("restore: %s; compiling %s/%s/ instead", exc.what, op, target)
            fetched, left = [], decisions
        outcome.compile += left
        if left:
            will_compile()
        sink.progress.update(len(left))
        for i in range(0, len(fetched), CHUNK):
            chunk = fetched[i:i + CHUNK]
            task = [(d.row, _inputs(entry), data) for d, entry, data in chunk]
            pending.append(([(d, data) for d, _, data in chunk], verifiers.submit(task)))
        while pending and pending[0][1].done():  # write what is verified while fetching the rest
            _drain(outcome, sink, *pending.pop(0))
    for batch, future in pending:
        _drain(outcome, sink, batch, future)
    return outcome


def _drain(outcome: Outcome, sink: _Sink, batch: list[tuple[Decision, bytes]],
           future: Future[list[Verdict]]) -> None:
    try:
        verdicts = future.result()
    except (BrokenProcessPool, OSError) as exc:  # a worker died: its rows compile instead
        log.warning("restore: verifying %d rows failed (%s); compiling them", len(batch), exc)
        verdicts = []
    sink.take(outcome, batch, verdicts)


def _fetch(cfg: FarmConfig, view: CacheView, op: str, target: str, decisions: list[Decision],
           current: CurrentInputs, published: PublishedNames,
           ) -> tuple[list[tuple[Decision, RecordedEntry, bytes]], list[Decision]]:
    """The published objects of one directory whose entries are current and whose bytes are intact, and the
    rows that must compile instead. The directory's file names are remembered for the next build."""
    listing = view.listing(op, target)
    published.remember(op, target, listing)
    entries = _cached_entries(view, op, target, listing)
    fetched, left = [], []
    for d in decisions:
        entry = entries.get(d.row.file_name)
        # Current means what up to date means on disk; only-verification-changed is re-verified below anyway.
        status = decide_cached(cfg, d.row, entry, current.tree, current).status if entry is not None else None
        if status not in (UP_TO_DATE, REVERIFY):
            left.append(d)
            continue
        assert entry is not None  # a row without an entry has no status
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


def _inputs(entry: RecordedEntry) -> RecordedInputs:
    inputs = entry.get("inputs")
    return inputs if isinstance(inputs, dict) else {}
