"""farm build: plan, compile what must build on Ray, verify, write atomically, record."""

from __future__ import annotations

import logging
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

from farm.contract import CompileRequest, CompileResult, PhaseJson, TargetFacts
from farm.core.canonical import sha256_bytes
from farm.core.errors import FarmError
from farm.core.private import private_dir
from farm.execute import autostart
from farm.observe import driver_cost
from farm.observe.driver_cost import DriverCost
from farm.observe.progress import BuildProgress, worker_slots
from farm.observe.report import BuildReport, Conditions, ReportRow, origin_fields, write_build_report
from farm.plan.decide import REVERIFY, Decision, decide, summary_line
from farm.plan.digest import CompileRecord, one_look
from farm.plan.record_memo import RecordMemo, memo_key, record_digest
from farm.plan.sources import Tree, collect
from farm.restore.stage import Checks, Outcome, restore
from farm.store import manifest
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.store.manifest import Entry, RecordedEntry
from farm.store.outtree import TEMPORARY, OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain.beside import PinCheck
from farm.toolchain.compare import require_pin
from farm.toolchain.installed import compile_part, installed
from farm.verify.accept import accept, disassemble, elf_of, verifier_files

STDERR_TAIL_LINES = 40
# How often, at most, a build writes its manifests while results arrive (and once more at its end). Each
# flush syncs the file system and renders every touched directory's whole manifest (~5 ms of driver CPU on a
# 2-core machine): once a second that was ~1.4 ms of the driver's ~3.4 ms per row in a full build, whose
# batches hold ~4 rows. A kill loses at most this much recorded work (those rows compile again).
FLUSH_EVERY_S = 5.0


log = logging.getLogger(__name__)

def compile_request(cfg: FarmConfig, row: Row) -> CompileRequest:
    """What a worker needs to compile `row` (farm/contract.py): no path of this disk."""
    target = cfg.targets[row.target]
    return CompileRequest(key=row.key, generator=cfg.ops[row.op].generator, knobs=dict(row.knobs),
                          target=TargetFacts(target.name, target.python_arch, target.mlir_chipset),
                          linker=cfg.toolchain_pin.get("linker"), pin=compile_part(cfg.toolchain_pin))


class DirectoryWriter:
    """Holds each touched directory (opened safely, see farm/store/outtree.py) and its manifest entries; writes
    the objects, then manifest and SOURCE.md. The caller holds the output tree's lock (farm/store/lock.py).

    An object keeps a temporary name until the manifest that records it has been written in full: a flush
    first writes every manifest and SOURCE.md it changes as temporaries (the writes a full disk refuses),
    and only then renames the objects, then the manifests, into place. A flush that fails leaves the
    directories as the last good flush left them; its objects' temporaries are removed."""

    def __init__(self, cfg: FarmConfig, ready: Callable[[], None] = lambda: None) -> None:
        self.cfg = cfg
        # Waits for the build's toolchain check (farm/toolchain/beside.py), raising when it failed: called
        # before the first directory is opened, so nothing is created, deleted or written before it passed.
        self.ready = ready
        self.dirs: dict[tuple[str, str], OutputDir] = {}
        # Per directory, by file: the entries read from its manifest (recorded data), and the new ones.
        self.entries: dict[tuple[str, str], dict[str, Entry | RecordedEntry]] = {}
        self.unwritten: set[tuple[str, str]] = set()
        self.flushed = time.monotonic()
        self.awaiting: list[PhaseJson] = []  # write phases of rows whose entries the next flush writes
        # Per directory: objects written as temporaries, made durable and renamed into place by the next flush.
        self.staged: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self.published = 0  # objects of this build renamed into place with their manifest entries
        # What the objects written say of themselves, remembered for `farm plan` (farm/plan/record_memo.py).
        self.memo = RecordMemo(cfg.outputs_dir)

    def __enter__(self) -> DirectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        for key, staged in self.staged.items():  # never flushed (the build failed): nothing refers to them
            for tmp, _ in staged:
                self.dirs[key].discard(tmp)
        for out in self.dirs.values():
            out.close()
        self.memo.save()

    def open(self, op: str, target: str) -> OutputDir:
        """The directory, opened for writing (made when absent), its dead writers' temporaries removed."""
        return self._dir(op, target)

    def _dir(self, op: str, target: str) -> OutputDir:
        key = (op, target)
        if key not in self.dirs:
            self.ready()
            out = OutputDir(self.cfg.outputs_dir, op, target, create=True)
            self.dirs[key] = out
            for name in out.remove_dead_temporaries():
                log.info("removed %s/%s/%s: a temporary of a farm write that never finished", op, target, name)
            try:
                # Entries with a name the farm would never write are dropped here (their rows were planned
                # as tampered and rebuild); they never reach a file-system call.
                self.entries[key] = dict(manifest.read(out).entries)
            except manifest.ManifestUnreadable:
                self.entries[key] = {}  # its rows were planned as tampered and rebuild
        return self.dirs[key]

    def rewrite(self, op: str, target: str) -> None:
        """Have the next flush write the directory's manifest.json and SOURCE.md, whatever its entries."""
        self._dir(op, target)
        self.unwritten.add((op, target))

    def _entries(self, op: str, target: str) -> dict[str, Entry | RecordedEntry]:
        self._dir(op, target)
        return self.entries[(op, target)]

    def write_object(self, row: Row, elf: bytes, entry: Entry) -> PhaseJson:
        """Write the object as a temporary now; the next `flush` makes it durable, renames it into place,
        then writes its manifest entry. A kill before that leaves a temporary of a dead writer (removed by the
        next build) and the row unrecorded, so it is built again. Returns the row's write phase; the next
        flush adds the row's share of its time."""
        start = time.time()
        tmp = self._dir(row.op, row.target).stage(row.file_name, elf)
        self.staged.setdefault((row.op, row.target), []).append((tmp, row.file_name))
        self._entries(row.op, row.target)[row.file_name] = entry
        self.unwritten.add((row.op, row.target))
        self._remember(entry)
        return self._awaiting_flush(start)

    def _remember(self, entry: Entry) -> None:
        """The record the entry holds was derived from its object's bytes just now (acceptance)."""
        self.memo.remember(memo_key(entry["sha256"], entry["inputs"]), record_digest(entry))

    def _awaiting_flush(self, start: float) -> PhaseJson:
        phase = PhaseJson(name="write", start_unix=start, seconds=time.time() - start)
        self.awaiting.append(phase)
        return phase

    def recorded(self, row: Row) -> tuple[Entry | RecordedEntry | None, bytes | None]:
        """The row's current manifest entry and object bytes (read through the directory handle)."""
        entry = self._entries(row.op, row.target).get(row.file_name)
        return entry, self._dir(row.op, row.target).read_bytes(row.file_name)

    def record(self, row: Row, entry: Entry) -> PhaseJson:
        """A new entry for the object already on disk (a re-verify): the object's bytes are not rewritten.
        Returns the row's write phase (its share of the next flush)."""
        start = time.time()
        self._entries(row.op, row.target)[row.file_name] = entry
        self.unwritten.add((row.op, row.target))
        self._remember(entry)
        return self._awaiting_flush(start)

    def flush(self) -> None:
        """Write the manifests with new entries: once per batch of results, not per object (rewriting a
        large manifest for every object of a fast build cost the driver more than its verification)."""
        start = time.time()
        documents = []  # (directory, temporary, name): each changed manifest.json and SOURCE.md, staged
        try:
            for key in sorted(self.unwritten):
                out, entries = self.dirs[key], self.entries[key]
                for name, text in ((manifest.MANIFEST, manifest.render(self.cfg, *key, entries)),
                                   (manifest.PROVENANCE, manifest.render_source_md(self.cfg, *key, entries))):
                    documents.append((key, out.stage(name, text.encode()), name))
            self._publish_staged(documents)
        except BaseException:
            for key, tmp, _ in documents:  # those not renamed yet; the objects' go when the writer closes
                self.dirs[key].discard(tmp)
            raise
        self.unwritten.clear()
        self.flushed = time.monotonic()
        for phase in self.awaiting:  # the rows whose entries this flush wrote share its time
            phase["seconds"] += (time.time() - start) / len(self.awaiting)
        self.awaiting.clear()

    def _publish_staged(self, documents: list[tuple[tuple[str, str], str, str]]) -> None:
        """The flush's durable point. Every byte it writes is already in a temporary: the staged objects and
        `documents` (the manifests and SOURCE.md files) are made durable (one syncfs per file system, not an
        fsync per object), then the objects are renamed into place, each directory fsynced so the renames
        are durable too, and only then the manifests. So an entry on disk always names an object whose bytes
        are on disk, an object's name never shows bytes that a crash could lose, and a write the disk
        refuses (it fails before any rename) leaves no object under its name that no manifest records."""
        files: dict[tuple[str, str], list[str]] = {}
        for key, staged in self.staged.items():
            files.setdefault(key, []).extend(tmp for tmp, _ in staged)
        for key, tmp, _ in documents:
            files.setdefault(key, []).append(tmp)
        synced: set[int] = set()
        for key, tmps in sorted(files.items()):
            out = self.dirs[key]
            if out.device not in synced and out.sync_filesystem(tmps):
                synced.add(out.device)
        for key, staged in sorted(self.staged.items()):
            out = self.dirs[key]
            while staged:
                tmp, name = staged[0]
                out.publish(tmp, name)
                staged.pop(0)
                self.published += 1
            out.sync_entries()
        self.staged.clear()
        while documents:  # manifest.json before SOURCE.md, as manifest.write_directory writes them
            key, tmp, name = documents[0]
            self.dirs[key].publish(tmp, name)
            documents.pop(0)
        for key in sorted(files):
            self.dirs[key].sync_entries()

    def flush_due(self) -> None:
        """`flush` when the last one is FLUSH_EVERY_S old: each flush renders the whole manifest, so one per
        small batch made a build's manifest cost grow with the square of its rows. A kill in between loses
        at most that much recorded work (those objects rebuild)."""
        if time.monotonic() - self.flushed >= FLUSH_EVERY_S:
            self.flush()

    def prune(self, op: str, target: str, keep: set[str]) -> list[str]:
        """Remove the objects and entries of rows that no longer exist (a row deleted from conf/). Only
        objects this directory's manifest recorded are deleted; a file the farm cannot show it wrote is
        left alone (`farm check` names it)."""
        with OutputDir(self.cfg.outputs_dir, op, target) as probe:
            if not probe.exists:
                return []
            if (op, target) not in self.dirs:  # a look that changes nothing first: most builds prune nothing
                try:
                    if all(f in keep for f in manifest.read(probe).entries):
                        return []
                except manifest.ManifestUnreadable:
                    return []  # its rows were planned as tampered and rebuild; nothing recorded to prune
        out = self._dir(op, target)
        entries = self.entries[(op, target)]
        gone = sorted(f for f in entries if f not in keep)
        for file in gone:
            out.remove_object(file)
            entries.pop(file, None)
        if gone:
            manifest.write_directory(self.cfg, out, op, target, entries)
        return gone


def _collect(cfg: FarmConfig, pool: Any, rows: dict[str, Row], tree: Tree, writer: DirectoryWriter,
             report_rows: list[ReportRow], failures: list[tuple[Row, str, str]], bar: Any,
             heartbeat: Callable[[], None], gather_s: float) -> int:
    """Take results as they arrive, a batch at a time (what finishes within `gather_s` of a batch's first
    result), and verify and write each batch on the verify thread (`VerifyThread`); returns the number
    written. `tree` is the kernel sources this build shipped: the compiles' lookups are answered from it."""
    written = _BatchWriter(cfg, pool, rows, tree, writer, report_rows, failures, bar)
    batches = iter(pool.completed_batches(gather_s))
    # Left in this order: the verify thread finishes what is queued, with the disassemblies it waits for. It
    # first derives the verifier record (~0.1 s of source parsing, once per process) while the first rows
    # compile, instead of before they are sent.
    with (EarlyDisassembly(cfg, rows) as early, VerifyThread(written.take, prepare=verifier_files) as verifying):
        while True:
            # Waiting costs no CPU; taking results (get, deserialize) does.
            with driver_cost.phase("ray", "ray results"):
                batch = next(batches, None)
            if batch is None:
                break
            verifying.put(batch, time.time(), early.start(batch))
            heartbeat()
    return written.built


# How many disassembler processes the driver runs at once (one per target of a batch, batches side by side).
DISASSEMBLY_THREADS = max(2, min(8, os.cpu_count() or 2))

Counts = dict[str, dict | str]  # per row key, its disassembly counts or why it has none (farm.verify.accept)


class EarlyDisassembly:
    """Disassembly started as soon as the main thread takes a batch, on threads of its own: the disassembler
    is a process per target, so several run side by side while the verify thread accepts and writes the
    batches before. `start` returns the call that waits for a batch's counts."""

    def __init__(self, cfg: FarmConfig, rows: dict[str, Row]) -> None:
        self.cfg, self.rows = cfg, rows
        self.pool = ThreadPoolExecutor(DISASSEMBLY_THREADS, thread_name_prefix="farm-disassemble")

    def __enter__(self) -> EarlyDisassembly:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True)

    def start(self, batch: list[CompileResult]) -> Callable[[], Counts]:
        by_target: dict[str, list[tuple[Row, CompileResult]]] = {}
        for result in batch:
            row = self.rows[result.key]
            by_target.setdefault(row.target, []).append((row, result))
        running = [self.pool.submit(self._disassemble, pairs) for pairs in by_target.values()]

        def counts() -> Counts:
            found: Counts = {}
            for future in running:
                found.update(future.result())
            return found
        return counts

    def _disassemble(self, pairs: list[tuple[Row, CompileResult]]) -> Counts:
        with driver_cost.helper_thread("verify"):  # its parse of the listings is the driver's verification work
            return disassemble(self.cfg, pairs)


class VerifyThread:
    """The driver's verification and writing, on a thread of its own. The main thread only takes results
    (and with them hands the workers their next rows) and queues each batch here, so a batch's disassembly,
    acceptance and writes never hold up the rows behind it: done on the main thread, with many workers,
    they left workers idle while it waited for the disassembler. One thread: batches are verified in the
    order they came, and the writer is used by one thread at a time.

    An error on this thread ends the build: the next `put` (or the end) raises it on the main thread. When
    the main thread ends with an error, the batches already queued are still verified and written before
    it leaves (they are finished compiles; the build's last flush records them)."""

    def __init__(self, handle: Callable[..., None], prepare: Callable[[], object] | None = None) -> None:
        self._handle = handle
        self._prepare = prepare  # the build's one-time work, before the first batch (its CPU is not a row's)
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()  # `handle`'s arguments
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="farm-verify", daemon=True)

    def __enter__(self) -> VerifyThread:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None and kind is None:
            raise self._error

    def put(self, *item: Any) -> None:
        """Queue `handle(*item)` (a batch, when it was taken, ...); raises the verify thread's error, if it had one."""
        if self._error is not None:
            raise self._error
        self._queue.put(item)

    def _run(self) -> None:
        with driver_cost.helper_thread():
            if self._prepare is not None:
                with driver_cost.one_time():
                    try:
                        self._prepare()
                    except BaseException as exc:  # noqa: BLE001  (re-raised on the main thread)
                        self._error = exc
            while (item := self._queue.get()) is not None:
                if self._error is None:  # after an error, the rest of the queue is only emptied
                    try:
                        self._handle(*item)
                    except BaseException as exc:  # noqa: BLE001  (re-raised on the main thread)
                        self._error = exc


class _BatchWriter:
    """What the verify thread does with one batch: verify it, write what passes, report every row."""

    def __init__(self, cfg: FarmConfig, pool: Any, rows: dict[str, Row], tree: Tree, writer: DirectoryWriter,
                 report_rows: list[ReportRow], failures: list[tuple[Row, str, str]], bar: Any) -> None:
        self.cfg, self.pool, self.rows, self.tree, self.writer = cfg, pool, rows, tree, writer
        self.report_rows, self.failures, self.bar = report_rows, failures, bar
        self.built = 0

    def take(self, batch: list[CompileResult], held: float, disassembly: Callable[[], Counts] | None = None) -> None:
        """`batch`, taken at `held`; `disassembly` waits for its counts (None: disassemble it here)."""
        self.writer.ready()  # results are verified with the pinned disassembler, once the toolchain check passed
        checked = _verify_batch(self.cfg, self.rows, self.tree, batch, disassembly)
        for result, (entry, refused, phases) in zip(batch, checked, strict=True):
            row = self.rows[result.key]
            if entry is not None:
                with driver_cost.phase("write"):
                    phases.append(self.writer.write_object(row, elf_of(result), entry))
                self.built += 1
            else:
                self.failures.append((row, refused or "", result.stderr))
                self.bar.write(f"FAILED {row.key}: {refused}")
            taken = self.pool.taken_unix(result.key) or held
            driver = _ray_return(result, self.pool.returned_unix(result.key), taken) + phases
            self.report_rows.append(_report_row(result, entry is not None, refused, driver))
            self.bar.update(1)
        driver_cost.rows_done(len(batch))
        with driver_cost.phase("write", "flush"):
            self.writer.flush_due()


def _verify_batch(cfg: FarmConfig, rows: dict[str, Row], tree: Tree | dict[str, CompileRecord],
                  batch: list[CompileResult], disassembly: Callable[[], Counts] | None = None,
                  ) -> list[tuple[Entry | None, str | None, list[PhaseJson]]]:
    """Disassemble the batch (one run per target; with `disassembly`, wait for the one started when the batch
    was taken) and accept each result: (entry, refusal, [its verify phase]) per result. What each compile
    consulted comes from its result, its lookups answered from `tree` (the sources the build shipped), or,
    re-verifying, from the records given per key. A row's verify phase is its share of the disassembly (or of
    the wait for it) plus its own acceptance."""
    with driver_cost.phase("verify", "disassemble"):
        began = time.time()
        counts = disassembly() if disassembly else disassemble(cfg, [(rows[r.key], r) for r in batch])
        share = (time.time() - began) / len(batch)
    out = []
    # The batch is accepted at one moment: each farm file's stat is taken once for all its rows.
    with driver_cost.phase("verify", "accept"), one_look():
        for result in batch:
            row = rows[result.key]
            start = time.time()
            compiled = tree[row.key] if isinstance(tree, dict) else CompileRecord.of_result(result, tree)
            entry, refused = accept(cfg, row, result, compiled, counts.get(row.key, "it was not disassembled"))
            out.append((entry, refused, [PhaseJson(name="verify", start_unix=began,
                                                   seconds=share + time.time() - start)]))
    return out


def _ray_return(result: CompileResult, returned: float | None, taken: float) -> list[PhaseJson]:
    """From the worker's end of the row until the driver took its result from Ray: `parcel_wait` while the
    later rows of its call compiled (`returned`: when the call ended on the worker), then `ray_return` (the
    rest of its batch's gather, until the batch's verification starts, is no phase of the row: it only waits)."""
    if result.finished_unix is None:
        return []
    phases = []
    start = result.finished_unix
    if returned is not None and returned > start:
        phases.append(PhaseJson(name="parcel_wait", start_unix=start, seconds=returned - start))
        start = returned
    return phases + [PhaseJson(name="ray_return", start_unix=start, seconds=max(taken - start, 0.0))]


def _report_row(result: CompileResult, written: bool, refused: str | None, driver: list[PhaseJson]) -> ReportRow:
    """A compiled row of the build report: the fields of the result the report keeps, and what became of it.
    Its phases are the worker's, then the driver's (`driver`: [parcel_wait,] ray_return, verify, write)."""
    row = result.report_fields()
    return cast(ReportRow, row | {"phases": list(row.get("phases") or []) + driver, "written": written,
                                  "refused": refused})


def reverify(cfg: FarmConfig, todo: list[Decision], writer: DirectoryWriter, report_rows: list[ReportRow],
             failures: list[tuple[Row, str, str]]) -> int:
    """Verify the objects on disk again under today's verification code and record their new entries, without
    compiling: only that code changed since they were built (plan status reverify). Returns how many passed."""
    if todo:
        verifier_files()  # derived once per process: the build's cost, not a row's
    with driver_cost.window():
        return _reverify(cfg, todo, writer, report_rows, failures)


def _reverify(cfg: FarmConfig, todo: list[Decision], writer: DirectoryWriter, report_rows: list[ReportRow],
              failures: list[tuple[Row, str, str]]) -> int:
    results = []
    for d in todo:
        entry, elf = writer.recorded(d.row)
        ok = entry is not None and elf is not None and sha256_bytes(elf) == entry.get("sha256")
        inputs = entry.get("inputs") if entry is not None and isinstance(entry.get("inputs"), dict) else {}
        results.append((d.row, CompileRecord.of_entry(inputs), CompileResult(
            key=d.row.key, ok=ok, elf=elf if ok else None, node="driver (re-verify)",
            error=None if ok else "the object changed since it was planned; run farm build again",
            toolchain=compile_part(cfg.toolchain_pin))))
    if not results:
        return 0
    rows = {row.key: row for row, _, _ in results}
    records = {row.key: compiled for row, compiled, _ in results}
    passed = 0
    checked = _verify_batch(cfg, rows, records, [result for _, _, result in results])
    for (row, _, _), (entry, refused, phases) in zip(results, checked, strict=True):
        if entry is not None:
            with driver_cost.phase("write"):
                phases.append(writer.record(row, entry))
            passed += 1
        else:
            failures.append((row, f"re-verification failed: {refused}", ""))
            log.warning("FAILED %s: re-verification failed: %s", row.key, refused)
        report_rows.append({"key": row.key, "ok": entry is not None, "reverified": True, "written": False,
                            "refused": refused, "phases": phases})
    driver_cost.rows_done(len(results))
    with driver_cost.phase("write", "flush"):
        writer.flush()
    return passed


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def build_selection(cfg: FarmConfig, rows: list[Row], all_rows: list[Row]) -> int:
    """`farm build`: under the output tree's lock, plan the selected rows, check the pin, build what must
    build. Planning under the lock means a build that waited for another sees that one's results."""
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        decisions = decide(cfg, rows)
        log.info(summary_line(decisions))
        # The toolchain check runs beside the build's first steps; the build waits for it before it writes.
        pin_check = PinCheck(lambda: _require_installed(cfg)) if any(d.builds for d in decisions) else None
        # Warm by default, for builds that compile: the standing cluster starts once the build knows a row
        # compiles (here, or once the restore stage finds one the published tree does not give back), so a
        # build that is up to date, only re-verifies or restores every row leaves no daemon running.
        return build(cfg, decisions, all_rows, pin_check.wait if pin_check else lambda: None,
                     lambda: autostart.begin(cfg))


def _require_installed(cfg: FarmConfig) -> None:
    """FarmError naming each difference when the installed toolchain is not the pinned one."""
    pin = cfg.toolchain_pin
    require_pin(pin, installed(private_dir("toolchain-cache"), pin.get("linker"), pin.get("disassembler") or {}))


def build(cfg: FarmConfig, decisions: list[Decision], all_rows: list[Row],
          toolchain_ready: Callable[[], None] = lambda: None, will_compile: Callable[[], None] = lambda: None,
          ) -> int:
    """Build every decision that needs it; returns the number of failed rows. The caller holds the lock.
    `toolchain_ready` returns once the installed toolchain is the pinned one and raises FarmError when it is
    not: nothing is written or deleted, and no compile result is taken, before it returned. `will_compile`
    is called (maybe more than once) as soon as the build knows a row will compile, before it compiles."""
    started = time.monotonic()
    report: BuildReport = {"started_utc": datetime.now(UTC).isoformat(timespec="microseconds"), "rows": [],
                              "pruned": [], "conditions": build_conditions(cfg), **origin_fields(cfg)}
    failures: list[tuple[Row, str, str]] = []
    built = reverified = 0
    cached = Outcome()
    cost = DriverCost()  # the driver's own CPU per row (farm/observe/driver_cost.py): the steps report to it
    writer = DirectoryWriter(cfg, toolchain_ready)
    try:
        with driver_cost.recording(cost), writer:
            report["pruned"] = _prune(cfg, writer, decisions, all_rows)
            _sweep(cfg, writer, decisions)
            reverified = reverify(cfg, [d for d in decisions if d.status == REVERIFY], writer, report["rows"],
                                  failures)
            # Rows whose published objects are current come back from the DVC cache instead (farm/restore/).
            cached = restore(cfg, [d for d in decisions if d.compiles], writer, report["rows"],
                             Checks(disassemble, accept), will_compile)
            if cached.compile:  # the restore stage returns at once when it cannot restore anything
                will_compile()
            built = _compile_and_write(cfg, cached.compile, writer, report, failures)
            # Last: the directories this build wrote are what the farm writes by now, and a build whose rows
            # compile does not wait here for its toolchain check (opening a directory does) before they start.
            _rewrite_documents(cfg, writer, decisions)
            toolchain_ready()  # a build that wrote nothing still says when the toolchain is not the pinned one
    except OSError as exc:  # disk full, a read-only directory: what the last good flush recorded stays
        where = f" ({exc.filename})" if exc.filename else ""
        report["error"] = f"{exc.strerror or exc}{where}"
        write_build_report(cfg, report)
        raise FarmError(f"writing {cfg.outputs_dir} failed: {exc.strerror or exc}{where}; {writer.published} objects "
                        "of this build were recorded before it (the rest were not kept)", "free disk space or fix "
                        "the permissions, then run `farm build` again: it resumes with what is missing") from None
    todo = sum(d.builds for d in decisions)
    elapsed = time.monotonic() - started
    report |= {"seconds": round(elapsed, 3), "built": built, "restored": cached.restored, "reverified": reverified,
               "failed": len(failures), "up_to_date": len(decisions) - todo, "driver": cost.report(),
               "driver_timeline": cost.spans, "driver_verify_timeline": cost.verify_spans}
    # A build that had nothing to do leaves no report: the reports stay a record of builds that did something.
    did_something = bool(todo or report["pruned"])
    report_path = write_build_report(cfg, report) if did_something else "none (nothing to do)"
    if cost.rows:
        log.info(cost.line())
    for row, reason, stderr in failures:
        log.error("\n--- %s failed: %s%s", row.key, reason, "\n" + _tail(stderr) if stderr.strip() else "")
    again = f", reverified {reverified}" if reverified else ""
    # The build's result line: a warning when rows failed, so `-q` still shows it then.
    log.log(logging.WARNING if failures else logging.INFO,
            f"\n{f'compiled {built}, restored {cached.restored}' if cached.consulted else f'built {built}'}"
            f"{again}, failed {len(failures)}, up to date {len(decisions) - todo} "
            f"in {elapsed:.1f} s; report: {report_path}")
    return len(failures)


def _sweep(cfg: FarmConfig, writer: DirectoryWriter, decisions: list[Decision]) -> None:
    """Open each selected directory holding a farm temporary, so that those of writers that are gone are
    removed (`farm check` names them): a look that changes nothing first, as most directories hold none."""
    for op, target in sorted({(d.row.op, d.row.target) for d in decisions}):
        with OutputDir(cfg.outputs_dir, op, target) as probe:
            if any(TEMPORARY.match(name) for name in probe.names()):
                writer.open(op, target)


def _rewrite_documents(cfg: FarmConfig, writer: DirectoryWriter, decisions: list[Decision]) -> None:
    """Rewrite each selected directory's manifest.json and SOURCE.md that are not what the farm writes for the
    entries they hold (edited by hand, a block that is not the config's, provenance gone stale: `farm check`
    names each). A directory whose manifest is missing, unreadable or names a file the farm never writes is
    left to its rows, which were planned to build."""
    stale = []
    for op, target in sorted({(d.row.op, d.row.target) for d in decisions}):
        with OutputDir(cfg.outputs_dir, op, target) as probe:
            try:
                listing = manifest.read(probe)
            except manifest.ManifestUnreadable:
                continue
            if listing.data is None or listing.bad:
                continue
            expected = manifest.render(cfg, op, target, listing.entries).encode()
            provenance = manifest.render_source_md(cfg, op, target, listing.entries).encode()
            if listing.text == expected and probe.read_bytes(manifest.PROVENANCE) == provenance:
                continue
        stale.append((op, target))
    for op, target in stale:
        writer.rewrite(op, target)
        log.info("rewriting %s/%s/%s and %s: not what the farm writes for the entries they hold", op, target,
                 manifest.MANIFEST, manifest.PROVENANCE)
    if stale:
        writer.flush()


def _prune(cfg: FarmConfig, writer: DirectoryWriter, decisions: list[Decision], all_rows: list[Row],
) -> list[str]:
    pruned = []
    for op, target in sorted({(d.row.op, d.row.target) for d in decisions}):
        keep = {r.file_name for r in all_rows if r.op == op and r.target == target}
        pruned += [f"{op}/{target}/{f}" for f in writer.prune(op, target, keep)]
    for line in pruned:
        log.info("removed %s: no row makes it any more", line)
    return pruned


def _compile_and_write(cfg: FarmConfig, todo: list[Decision], writer: DirectoryWriter, report: BuildReport,
                       failures: list[tuple[Row, str, str]]) -> int:
    """Compile `todo` on Ray and write what verifies; returns the number written."""
    if not todo:
        return 0
    # Imported here, after the check above: a build with nothing to compile needs none of it. Ray itself
    # (~0.7 s to import) comes only with a RayExecutor: a build relayed through the standing cluster's
    # daemon never imports it (farm/execute/relay.py).
    from farm.execute.choice import done, executor_for, for_build, mark_used
    from farm.execute.settings import batch_gather_s

    gather_s = batch_gather_s()  # a bad FARM_BATCH_GATHER_S is named before anything starts
    rows = {d.row.key: d.row for d in todo}
    standing = for_build(cfg)
    if standing is None:
        writer.ready()  # a private cluster takes seconds to start: a toolchain that is not the pinned one fails first
    sources = collect(cfg.kernels_dir)
    with executor_for(cfg.executor, cfg.compile_timeout_s, standing, len(todo)) as pool:
        pool.share_sources(sources)
        order = list(reversed(todo)) if cfg.extra.get("row_order") == "reversed" else todo
        # The driver's cost per row counts from here: starting the cluster is the build's, not a row's.
        with driver_cost.window():
            with driver_cost.phase("ray", "ray submit"):
                for d in order:
                    pool.submit(compile_request(cfg, d.row))
            # On stderr: a bar on a terminal, else a line every ~10 s (farm/observe/progress.py); the rows in
            # flight are estimated from the order the rows went to Ray.
            slots = worker_slots(cfg.executor, standing)
            with BuildProgress([d.row.key for d in order], slots, sys.stderr) as progress:
                try:
                    # A long build keeps the standing cluster's idle clock from running out under it.
                    heartbeat = (lambda: mark_used(cfg.cluster_root)) if standing else (lambda: None)
                    built = _collect(cfg, progress.watch(pool), rows, Tree.of(sources), writer, report["rows"],
                                     failures, progress, heartbeat, gather_s)
                finally:
                    with driver_cost.phase("write", "flush"):
                        writer.flush()
        driver_cost.daemon_cpu(pool.daemon_cpu_seconds)
    if standing:
        done(cfg.cluster_root)  # the idle clock starts when the build ends; it may be replaced now
    return built


def build_conditions(cfg: FarmConfig) -> Conditions:
    """The driver's conditions, for the report (an audit proves they did not matter)."""
    umask = os.umask(0)
    os.umask(umask)
    return {
        "cwd": os.getcwd(),
        "tmpdir": tempfile.gettempdir(),
        "home": os.environ.get("HOME"),
        "lang": os.environ.get("LC_ALL") or os.environ.get("LANG"),
        "tz": os.environ.get("TZ"),
        "umask": f"{umask:04o}",
        "hash_seed": os.environ.get("PYTHONHASHSEED"),
        "row_order": cfg.extra.get("row_order"),
        "workers": cfg.executor.get("num_cpus") or os.cpu_count(),
        "env_noise": sorted(k for k in ("FARM_AUDIT_NOISE", "ARCH", "FLYDSL_GPU_ARCH", "ROCM_PATH") if k in os.environ),
    }


