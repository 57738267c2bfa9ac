"""Is the object on disk the one its manifest entry describes? What `farm check` verifies of an object whose
bytes hash to its entry's SHA256, asked by `farm plan` so that what check calls wrong, build repairs.

A manifest entry is data: copy one object over another and rewrite the entry's sha256 and size, and only the
object's own record (what its bytes say: target, kernels, registers, instruction classes) shows it is not
the row's. That record costs a disassembly to derive, so it is looked up first in the record memo
(farm/plan/record_memo.py) by the object's SHA256 and the code and toolchain it was verified under; only an
object whose record is not found there is read and disassembled, as `farm check` does, and remembered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from farm.core.canonical import digest_of, sha256_bytes
from farm.core.errors import FarmError
from farm.elf.code_object import NotACodeObject, read_code_object
from farm.plan.record_memo import DERIVED_FIELDS, RecordMemo, memo_key, record_digest
from farm.store.manifest import RecordedEntry
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain import disasm
from farm.toolchain.listing import Functions
from farm.verify.rules import describe

ROW_FIELDS = ("name", "group")
# Recorded twice in an entry, as the row's fields and among its inputs. A row retuned since it was built
# differs from both (an input change, decided by the inputs); an entry whose two copies disagree was edited.
INPUT_FIELDS = ("knobs", "allow")


def entry_problem(row: Row, entry: RecordedEntry, size: int | None) -> str | None:
    """What `farm check` finds wrong with an entry without reading its object's record: a size that is not
    the object's, a name or group that is not the row's, a field that is not what its inputs recorded, an
    input digest that is not its inputs'. None when none."""
    if size != entry.get("size"):
        return f"{row.file_name} size differs from its manifest entry"
    fields = row.to_json()
    for key in ROW_FIELDS:
        if entry.get(key) != fields[key]:
            return f"its manifest entry's '{key}' is not the row's in instances/ (manifest edited)"
    inputs = entry.get("inputs")
    recorded = inputs if isinstance(inputs, dict) else {}
    for key in INPUT_FIELDS:
        if entry.get(key) != recorded.get(key):
            return f"its manifest entry's '{key}' is not the one its inputs record (manifest edited)"
    if digest_of(entry.get("inputs", {})) != entry.get("input_digest"):
        return "its manifest entry's input_digest does not match its recorded inputs (manifest edited)"
    return None


@dataclass(frozen=True)
class Claim:
    """A row whose object's bytes hash to its entry's SHA256, and whose inputs need no compile."""

    row: Row
    entry: RecordedEntry
    # Only the verification code changed since it was built: a record derived today may rightly differ from
    # the entry's instruction classes, so without a remembered record only what the ELF says is compared.
    reverify: bool


def record_problems(cfg: FarmConfig, out: OutputDir, claims: list[Claim], memo: RecordMemo) -> dict[str, str]:
    """{file: why its object is not the one its entry describes} for the claims of one directory."""
    found: dict[str, str] = {}
    unknown = [c for c in claims if memo.known(memo_key(c.entry.get("sha256"), c.entry.get("inputs")))
               != record_digest(c.entry)]
    if not unknown:
        return found
    objects: dict[str, bytes] = {}
    for claim in unknown:
        data = out.read_bytes(claim.row.file_name)
        if data is None or sha256_bytes(data) != claim.entry.get("sha256"):
            found[claim.row.file_name] = f"{claim.row.file_name} changed while it was planned"
        else:
            objects[claim.row.file_name] = data
    full = [c.row.file_name for c in unknown if c.row.file_name in objects and not c.reverify]
    functions = _disassembled(cfg, out.path.name, {file: objects[file] for file in full})
    for claim in unknown:
        file = claim.row.file_name
        if file in objects:
            problem = _compare(claim, objects[file], functions.get(file), memo)
            if problem:
                found[file] = f"{file}: {problem}"
    return found


def _disassembled(cfg: FarmConfig, target: str, objects: dict[str, bytes]) -> dict[str, Functions | str]:
    """{file: its functions' instruction classes, or why they cannot be read}, one disassembler run for all;
    {} when the pinned disassembler cannot run here (then what the ELF says is compared; `farm plan` names
    the toolchain that differs from the pin, and `farm build` refuses to run with it)."""
    if not objects:
        return {}
    try:
        counts = disasm.count_many(cfg.toolchain_pin.get("disassembler"), target, list(objects.values()))
    except FarmError:
        return {}
    return dict(zip(objects, counts, strict=True))


def _compare(claim: Claim, data: bytes, functions: Functions | str | None, memo: RecordMemo) -> str | None:
    """Why the object's record is not its entry's; None when it is (and then the record is remembered)."""
    try:
        co = read_code_object(data)
    except NotACodeObject as exc:
        return str(exc)
    if isinstance(functions, str):  # the disassembler could not read it
        return functions
    entry = claim.entry
    if functions is not None:
        described = describe(co, functions)
        for key in DERIVED_FIELDS:
            if entry.get(key) != described[key]:
                return f"manifest '{key}' does not match the object (manifest edited or object replaced)"
        memo.remember(memo_key(entry.get("sha256"), entry.get("inputs")), record_digest(described))
        return None
    described = describe(co, {})  # no disassembly: the ELF's own facts, instruction classes left out
    for key in DERIVED_FIELDS:
        if _without_instructions(entry.get(key)) != _without_instructions(described[key]):
            return f"manifest '{key}' does not match the object (manifest edited or object replaced)"
    return None


def _without_instructions(record: object) -> object:
    """A code_object record or kernel list with its instruction classes taken out."""
    if isinstance(record, Mapping):
        return {k: v for k, v in record.items() if k != "instructions"}
    if isinstance(record, list):
        return [_without_instructions(r) for r in record]
    return record
