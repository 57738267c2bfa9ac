"""Which selected rows are up to date, and why each other one must build."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from . import manifest
from .canonical import sha256_bytes
from .config import FarmConfig
from .digest import changed_inputs, generator_digest, inputs_of, source_hashes
from .outtree import OutputDir
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


@dataclass(frozen=True)
class DirectoryState:
    """What one outputs/<op>/<target>/ holds, read safely: the manifest's valid entries, the SHA256 of each
    regular file there, and why the whole directory must rebuild (an unreadable or hostile manifest)."""

    entries: dict[str, dict[str, Any]]
    sha256: dict[str, str]
    kinds: dict[str, str]
    broken: str | None


def read_directory(cfg: FarmConfig, op: str, target: str) -> DirectoryState:
    with OutputDir(cfg.outputs_dir, op, target) as out:
        try:
            listing = manifest.read(out)
        except manifest.ManifestUnreadable as exc:
            return DirectoryState({}, {}, {}, exc.what)
        kinds = {name: out.kind(name) or "absent" for name in listing.entries}
        hashes = {}
        for name in listing.entries:
            data = out.read_bytes(name)
            if data is not None:
                hashes[name] = sha256_bytes(data)
    broken = None
    if listing.bad:
        more = f" (and {len(listing.bad) - 1} more)" if len(listing.bad) > 1 else ""
        broken = f"manifest has an entry the farm would never write: {listing.bad[0]}{more}"
    return DirectoryState(listing.entries, hashes, kinds, broken)


def decide(cfg: FarmConfig, rows: list[Row]) -> list[Decision]:
    generator = generator_digest()
    decisions = []
    cache: dict[tuple[str, str], DirectoryState] = {}
    for row in rows:
        key = (row.op, row.target)
        if key not in cache:  # one manifest read per directory, not per row
            cache[key] = read_directory(cfg, row.op, row.target)
        state = cache[key]
        entry = state.entries.get(row.file_name)
        kind = state.kinds.get(row.file_name)
        if state.broken:
            decisions.append(Decision(row, "tampered", state.broken))
        elif entry is None:
            there = (manifest.directory(cfg, row.op, row.target) / row.file_name).exists()
            decisions.append(Decision(row, "new", "no manifest entry" + (" (an unrecorded file is there)"
                                                                         if there else "")))
        elif kind != "file":
            what = "is not on disk" if kind == "absent" else f"is a {kind}, not a regular file"
            decisions.append(Decision(row, "missing", f"{row.file_name} {what}"))
        elif state.sha256.get(row.file_name) != entry.get("sha256"):
            decisions.append(Decision(row, "tampered", f"{row.file_name} SHA256 differs from its manifest entry"))
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
