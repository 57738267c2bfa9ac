"""Which selected rows are up to date, and why each other one must build."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from . import manifest
from .canonical import sha256_file
from .config import FarmConfig
from .digest import changed_inputs, generator_digest, inputs_of, source_hashes
from .rows import Row

UP_TO_DATE = "up-to-date"


@dataclass(frozen=True)
class Decision:
    row: Row
    status: str  # up-to-date | new | missing | tampered | inputs-changed
    reason: str

    @property
    def builds(self) -> bool:
        return self.status != UP_TO_DATE


def _load_entries(cfg: FarmConfig, op: str, target: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    try:
        data = manifest.load(manifest.directory(cfg, op, target) / "manifest.json")
    except manifest.ManifestUnreadable as exc:
        return {}, exc.what
    return manifest.entries_of(data), None


def decide(cfg: FarmConfig, rows: list[Row]) -> list[Decision]:
    generator = generator_digest()
    decisions = []
    cache: dict[tuple[str, str], tuple[dict[str, dict[str, Any]], str | None]] = {}
    for row in rows:
        key = (row.op, row.target)
        if key not in cache:  # one manifest read per directory, not per row
            cache[key] = _load_entries(cfg, row.op, row.target)
        entries, unreadable = cache[key]
        entry = entries.get(row.file_name)
        path = manifest.directory(cfg, row.op, row.target) / row.file_name
        if unreadable:
            decisions.append(Decision(row, "tampered", unreadable))
        elif entry is None:
            decisions.append(Decision(row, "new", "no manifest entry" + (" (an unrecorded file is there)"
                                                                         if path.exists() else "")))
        elif not path.is_file():
            decisions.append(Decision(row, "missing", f"{path.name} is not on disk"))
        elif sha256_file(path) != entry.get("sha256"):
            decisions.append(Decision(row, "tampered", f"{path.name} SHA256 differs from its manifest entry"))
        else:
            recorded = entry.get("inputs", {})
            current = inputs_of(cfg, row, source_hashes(cfg.kernels_dir, recorded.get("sources", {})), generator)
            reasons = changed_inputs(recorded, current)
            if reasons:
                decisions.append(Decision(row, "inputs-changed", "; ".join(reasons)))
            else:
                decisions.append(Decision(row, UP_TO_DATE, ""))
    return decisions


def summary_line(decisions: list[Decision]) -> str:
    counts = Counter(d.status for d in decisions)
    up = counts.get(UP_TO_DATE, 0)
    return f"rows={len(decisions)} up_to_date={up} to_build={len(decisions) - up}"
