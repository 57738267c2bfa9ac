"""What the farm derived from each object's bytes, remembered so `farm plan` need not disassemble it again.

An object's record (manifest fields `code_object` and `kernels`: target, registers, instruction classes...)
is a function of its bytes, the verification code and the toolchain; deriving it costs a disassembly
(~3.5 ms an object, ~5 s for the whole table). The memo maps (object SHA256, the verification code and
toolchain the manifest entry names) to the digest of the record derived under them. `farm build` adds what it
writes, `farm check` what it re-derives, `farm plan` what it had to disassemble. It lives in the user's
private directory (farm/core/private.py), one file per output tree; losing it costs time, never a verdict:
a record not found there is derived again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from farm.core.canonical import digest_of
from farm.core.private import private_dir, read_private_text, write_private_text

# The manifest fields derived from the object's bytes alone (farm/verify/rules.py `describe`).
DERIVED_FIELDS = ("code_object", "kernels")
# A memo never grows past this many records: beyond it, only those of the current command are kept.
MAX_RECORDS = 100_000


def record_digest(fields: Mapping[str, object]) -> str:
    """The digest of an entry's (or a fresh description's) derived fields."""
    return digest_of({key: fields.get(key) for key in DERIVED_FIELDS})


def memo_key(sha256: object, inputs: object) -> str:
    """The object's bytes, and the verification code and toolchain its entry says it was verified under."""
    recorded = inputs if isinstance(inputs, Mapping) else {}
    return digest_of({"object": sha256, "verifier": recorded.get("verifier"), "toolchain": recorded.get("toolchain")})


class RecordMemo:
    """One output tree's remembered records: `known(key)`, `remember(key, digest)`, then `save()`."""

    def __init__(self, outputs_dir: Path) -> None:
        self.path = private_dir("records") / f"{digest_of(str(outputs_dir.absolute()))[:32]}.json"
        self._records = self._load()
        self._new: dict[str, str] = {}

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(read_private_text(self.path) or "{}")
        except ValueError:
            return {}  # a damaged memo is an empty one: its records are derived again
        records = data.get("records") if isinstance(data, dict) else None
        if not isinstance(records, dict):
            return {}
        return {k: v for k, v in records.items() if isinstance(k, str) and isinstance(v, str)}

    def known(self, key: str) -> str | None:
        return self._new.get(key) or self._records.get(key)

    def remember(self, key: str, digest: str) -> None:
        if self.known(key) != digest:
            self._new[key] = digest

    def save(self) -> None:
        """Write the memo when this command derived something new (merged with what another wrote since)."""
        if not self._new:
            return
        records = {**self._load(), **self._new}
        if len(records) > MAX_RECORDS:
            records = dict(self._new)
        write_private_text(self.path, json.dumps({"records": records}, sort_keys=True, separators=(",", ":")))
        self._records, self._new = records, {}
