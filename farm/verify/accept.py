"""Acceptance of one compiled object: the checks a worker's result must pass before the farm records it, and
the manifest entry it then gets. A fresh compile, an object restored from the DVC cache and a re-verified
object all pass through `accept`; its code (with `disassemble`) is what a manifest records as a row's
verifier (`verifier_files`), so it lives apart from the build loop: editing how the build schedules,
batches or reports rows does not make every recorded object's verifier stale.

The record stops at the boundary packages (farm/plan/code_closure.py): the config and rows (farm.table), the
input digests and this record itself (farm.plan), the manifest entry's shape (farm.store). The checks get
from the config only values the row's inputs record (`rules_of`), so what those packages decide is in the
record as values, and refactoring them changes no manifest."""

from __future__ import annotations

import functools

from farm.contract import CompileResult
from farm.core.canonical import sha256_bytes
from farm.elf.code_object import CodeObject, NotACodeObject, read_code_object
from farm.plan.code_closure import files_of
from farm.plan.digest import CompileRecord, code_hashes, farm_hashes, farm_path_ok, inputs_of
from farm.store import manifest
from farm.store.manifest import Entry
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain import disasm
from farm.toolchain.compare import differences
from farm.toolchain.installed import compile_part
from farm.verify.rules import Rules, describe, problems


def accept(cfg: FarmConfig, row: Row, result: CompileResult, compiled: CompileRecord,
           functions: dict[str, dict[str, int]] | str,
           ran: frozenset[str] = frozenset()) -> tuple[Entry | None, str | None]:
    """Check a worker's result; returns (manifest entry, None) or (None, reason it is refused).
    `compiled` is what the compile consulted and ran; `functions` is the object's disassembly counts
    (`disassemble`), or why it could not be read. The entry records as verification code every farm file
    that can run in this acceptance and the disassembly (`verifier_files`), the same set in every build;
    `ran` (files a caller profiled) is not needed for that and is ignored."""
    checked = _refusal(cfg, row, result, compiled, functions)
    if isinstance(checked, str):
        return None, checked
    assert not isinstance(functions, str)  # _refusal refuses those
    return _entry(cfg, row, elf_of(result), checked, compiled, functions, code_hashes(verifier_files())), None


@functools.cache
def verifier_files() -> frozenset[str]:
    """The farm files recorded as a row's verifier: everything that can run when `accept` and `disassemble`
    run (farm/plan/code_closure.py: their own code, what they name, the modules of their parameters' types,
    and those modules' import closure). Derived from the code, once per process."""
    return files_of([accept, disassemble])


def rules_of(cfg: FarmConfig, row: Row) -> Rules:
    """What `row`'s object must be, from exactly the values its inputs record: the op's compile identity and
    the target's fields (their digests: inputs `op` and `target`), the row's resource rules (`allow`) and the
    toolchain pin's linker version (input `toolchain`)."""
    linker = cfg.toolchain_pin.get("linker") or {}
    return Rules.of(cfg.ops[row.op].compile_identity(), cfg.targets[row.target].as_dict(), row.group, row.allow,
                    linker.get("version"))


def elf_of(result: CompileResult) -> bytes:
    assert result.elf is not None  # accepted results have an object (_refusal)
    return result.elf


def _refusal(cfg: FarmConfig, row: Row, result: CompileResult, compiled: CompileRecord,
             functions: dict[str, dict[str, int]] | str) -> CodeObject | str:
    """Why the result is not accepted, or the parsed object when it is."""
    if not result.ok or result.elf is None:
        return result.error or "compile failed"
    diff = differences(compile_part(cfg.toolchain_pin), result.toolchain or {})
    if diff:
        return f"worker on node {result.node} has a different toolchain: {'; '.join(diff)}"
    stale = _generator_mismatch(compiled.generator)
    if stale:
        return f"worker on node {result.node} runs different farm generator code ({stale})"
    try:
        co = read_code_object(result.elf)
    except NotACodeObject as exc:
        return f"object is not a code object: {exc}"
    if isinstance(functions, str):
        return f"object cannot be disassembled: {functions}"
    found = problems(co, rules_of(cfg, row), functions)
    return "verification failed: " + "; ".join(found) if found else co


def _generator_mismatch(generator: dict[str, str | None]) -> str | None:
    """The first farm file the compile ran whose SHA256 is not this checkout's (or why the record is unusable)."""
    if not generator:
        return "it recorded no farm code"
    bad = sorted(str(rel) for rel in generator if not farm_path_ok(rel))
    if bad:
        return f"{bad[0]!r} is not a farm source file"
    mine = farm_hashes(generator)
    differ = [rel for rel in sorted(generator) if mine[rel] != generator[rel]]
    return f"farm/{differ[0]} differs from the driver's" if differ else None


def _entry(cfg: FarmConfig, row: Row, elf: bytes, co: CodeObject, compiled: CompileRecord,
           functions: dict[str, dict[str, int]], verifier: dict[str, str]) -> Entry:
    inputs = inputs_of(cfg, row, compiled, verifier)
    return manifest.object_entry(row.to_json(), row.file_name, sha256_bytes(elf), len(elf), inputs,
                                 describe(co, functions))


def disassemble(cfg: FarmConfig, results: list[tuple[Row, CompileResult]]) -> dict[str, dict | str]:
    """Disassembly counts of every object in `results`, one disassembler run per target."""
    by_target: dict[str, list[tuple[Row, bytes]]] = {}
    for row, result in results:
        if result.ok and isinstance(result.elf, bytes):
            by_target.setdefault(row.target, []).append((row, result.elf))
    counts: dict[str, dict | str] = {}
    for target, items in by_target.items():
        found = disasm.count_many(cfg.toolchain_pin.get("disassembler"), target, [elf for _, elf in items])
        counts.update((row.key, functions) for (row, _), functions in zip(items, found, strict=True))
    return counts
