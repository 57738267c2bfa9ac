"""Fetched objects verified with the build's own acceptance, in a few forked processes: disassembly and the
checks cost tens of milliseconds per object, so one process alone could not restore the full table in a
minute. The driver keeps every write (farm/build.py `DirectoryWriter`); workers only judge."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

from farm.contract import CompileResult
from farm.plan.digest import CodeRecorder, CompileRecord
from farm.store.manifest import Entry, RecordedInputs
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain.installed import compile_part

NODE = "DVC cache"  # a restored object's "node": where its bytes came from
Counts = dict[str, dict[str, int]] | str
MAX_WORKERS = 4

Fetched = tuple[Row, RecordedInputs, bytes]  # a row, its cached entry's inputs, its object's bytes
Verdict = tuple[str, Entry | None, str | None]  # row key, its new manifest entry or None, why refused


@dataclass(frozen=True)
class Checks:
    """The build's own acceptance, handed down (farm.verify.accept sits above this stage): `disassemble` and `accept` of
    farm/verify/accept.py, so a restored object passes exactly the checks a freshly compiled one does."""

    disassemble: Callable[[FarmConfig, list[tuple[Row, CompileResult]]], dict[str, Counts]]
    accept: Callable[[FarmConfig, Row, CompileResult, CompileRecord, Counts, frozenset[str]],
                     tuple[Entry | None, str | None]]


def verify(cfg: FarmConfig, checks: Checks, batch: list[Fetched]) -> list[Verdict]:
    """Verify fetched objects the way the build verifies a worker's results (farm/build.py `_collect`,
    `reverify`): one disassembly for the batch, then `accept` per object with its cached compile record."""
    pin = compile_part(cfg.toolchain_pin)
    results = [(row, CompileRecord.of_entry(inputs), CompileResult(key=row.key, ok=True, elf=data, node=NODE,
                                                                   toolchain=pin)) for row, inputs, data in batch]
    pairs = [(row, result) for row, _, result in results]
    # Only the build's own functions run while recording: the verifier files recorded must be those a
    # compiled row records, or a restored manifest would differ from a compiled one.
    with CodeRecorder() as code:
        counts = checks.disassemble(cfg, pairs)
    ran = frozenset(code.filenames)
    verdicts: list[Verdict] = []
    for row, compiled, result in results:
        entry, refused = checks.accept(cfg, row, result, compiled, counts.get(row.key, "it was not disassembled"),
                                       ran)
        verdicts.append((row.key, entry, refused))
    return verdicts


_worker: tuple[FarmConfig, Checks] | None = None  # set once in each forked worker


def _adopt(cfg: FarmConfig, checks: Checks) -> None:
    global _worker
    _worker = (cfg, checks)


def _verify_here(batch: list[Fetched]) -> list[Verdict]:
    assert _worker is not None  # set by the pool's initializer
    return verify(*_worker, batch)


def _ready() -> int:
    return os.getpid()


class Verifiers:
    """Forked worker processes that run `verify`; a context manager that ends them. Forked (not spawned):
    they inherit the loaded config and code, and the `farm` entry point is not re-run. They are forked at
    once, before the driver starts any thread (DVC's, the progress line's)."""

    def __init__(self, cfg: FarmConfig, checks: Checks, workers: int | None = None) -> None:
        n = workers or min(MAX_WORKERS, os.cpu_count() or 1)
        self.pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"),
                                        initializer=_adopt, initargs=(cfg, checks))
        self.pool.submit(_ready).result()  # Python forks every worker of a fork pool on the first submit

    def __enter__(self) -> Verifiers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, batch: list[Fetched]) -> Future[list[Verdict]]:
        return self.pool.submit(_verify_here, batch)
