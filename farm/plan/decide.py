"""Which selected rows are up to date, and why each other one must build."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from farm.core.canonical import sha256_bytes
from farm.plan.digest import CompileRecord, farm_hashes, input_changes, inputs_of
from farm.plan.identity import Claim, entry_problem, record_problems
from farm.plan.record_memo import RecordMemo
from farm.plan.sources import Tree, shipped_names
from farm.store import manifest
from farm.store.manifest import Hashes, Inputs, RecordedEntry
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row

UP_TO_DATE = "up-to-date"
# Only the farm's verification code changed: the existing object is verified again and its entry
# re-recorded, without compiling (farm/build.py `reverify`).
REVERIFY = "reverify"
REVERIFY_NOTE = "re-verifying without compiling"


@dataclass(frozen=True)
class Decision:
    row: Row
    status: str  # up-to-date | new | missing | tampered | inputs-changed | reverify
    reason: str

    @property
    def builds(self) -> bool:
        """It needs work: a compile, or (status reverify) a new verification of the object on disk."""
        return self.status != UP_TO_DATE

    @property
    def compiles(self) -> bool:
        return self.builds and self.status != REVERIFY


@dataclass(frozen=True)
class DirectoryState:
    """What one outputs/<op>/<target>/ holds, read safely: the manifest's valid entries, the SHA256 and size of
    each regular file there, and why the whole directory must rebuild (an unreadable or hostile manifest)."""

    entries: dict[str, RecordedEntry]  # read from disk: data, each field checked where it is used
    sha256: dict[str, str]
    kinds: dict[str, str]
    broken: str | None
    sizes: dict[str, int]


def read_directory(cfg: FarmConfig, op: str, target: str) -> DirectoryState:
    with OutputDir(cfg.outputs_dir, op, target) as out:
        try:
            listing = manifest.read(out)
        except manifest.ManifestUnreadable as exc:
            return DirectoryState({}, {}, {}, exc.what, {})
        kinds = {name: out.kind(name) or "absent" for name in listing.entries}
        hashes, sizes = {}, {}
        for name in listing.entries:
            data = out.read_bytes(name)
            if data is not None:
                hashes[name], sizes[name] = sha256_bytes(data), len(data)
    broken = None
    if listing.bad:
        more = f" (and {len(listing.bad) - 1} more)" if len(listing.bad) > 1 else ""
        broken = f"manifest has an entry the farm would never write: {listing.bad[0]}{more}"
    return DirectoryState(listing.entries, hashes, kinds, broken, sizes)


class CurrentInputs:
    """What rows' recorded inputs are today, for one planning pass. Rows of an op record the same files
    (sources, farm code) and lookups, so each distinct set of recorded names is evaluated once per pass,
    not once per row: the answer depends only on the names (`CompileRecord.current`, `farm_hashes` read
    no recorded hash), so every row is still compared with every file as it is on disk now."""

    def __init__(self, cfg: FarmConfig, tree: Tree) -> None:
        self.cfg = cfg
        self.tree = tree
        self._known: dict[tuple[tuple[str, ...], ...], tuple[CompileRecord, Hashes]] = {}

    def of(self, row: Row, recorded: dict) -> Inputs:
        key = tuple(_names(recorded.get(field)) for field in ("sources", "lookups", "generator", "verifier"))
        if key not in self._known:
            self._known[key] = (CompileRecord.current(self.cfg.kernels_dir, self.tree, recorded),
                                farm_hashes(recorded.get("verifier")))
        compiled, verifier = self._known[key]
        # A row's LLVM options are its own recorded value (rows sharing files may differ in them).
        options = recorded.get("llvm_options")
        compiled = replace(compiled, llvm_options=options if isinstance(options, dict) else {})
        return inputs_of(self.cfg, row, compiled, verifier)


def _names(field: object) -> tuple[str, ...]:
    """The names a recorded field lists (its keys); anything but a JSON object lists none, as there."""
    return tuple(sorted(str(k) for k in field)) if isinstance(field, dict) else ()


def decide(cfg: FarmConfig, rows: list[Row]) -> list[Decision]:
    """Each row's decision. A row is up to date only when its object is the one its entry describes (what
    `farm check` verifies of it: bytes, size, row fields, its record) and its inputs did not change."""
    tree = Tree.of(shipped_names(cfg.kernels_dir))  # what a build would ship now: the lookups' answers
    current = CurrentInputs(cfg, tree)
    decisions = []
    cache: dict[tuple[str, str], DirectoryState] = {}
    claims: dict[tuple[str, str], list[Claim]] = {}  # rows that need no compile, if their objects are theirs
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
        elif problem := entry_problem(row, entry, state.sizes.get(row.file_name)):
            decisions.append(Decision(row, "tampered", problem))
        else:
            decision = _by_inputs(row, entry.get("inputs"), current)
            decisions.append(decision)
            if not decision.compiles:
                claims.setdefault(key, []).append(Claim(row, entry, reverify=decision.status == REVERIFY))
    replaced = _replaced_objects(cfg, claims)
    return [Decision(d.row, "tampered", replaced[d.row.key]) if d.row.key in replaced else d for d in decisions]


def _replaced_objects(cfg: FarmConfig, claims: dict[tuple[str, str], list[Claim]]) -> dict[str, str]:
    """{row key: why its object is not the one its entry describes}, over every directory's claims."""
    if not claims:
        return {}
    memo = RecordMemo(cfg.outputs_dir)
    found: dict[str, str] = {}
    for (op, target), dir_claims in sorted(claims.items()):
        with OutputDir(cfg.outputs_dir, op, target) as out:
            problems = record_problems(cfg, out, dir_claims, memo)
        found |= {c.row.key: problems[c.row.file_name] for c in dir_claims if c.row.file_name in problems}
    memo.save()
    return found


def decide_cached(cfg: FarmConfig, row: Row, entry: RecordedEntry, tree: Tree,
                  current: CurrentInputs | None = None) -> Decision:
    """What `decide` would say of a manifest entry found elsewhere (the DVC cache, farm/restore/) were it on
    disk with its intact object: the same input comparison, so an entry stale on disk is stale there too.
    `current`, shared by the calls of one pass, evaluates each set of recorded files once."""
    return _by_inputs(row, entry.get("inputs"), current or CurrentInputs(cfg, tree))


def _by_inputs(row: Row, recorded: object, current: CurrentInputs) -> Decision:
    """Up to date, re-verify (only verification code changed) or inputs-changed, with every change named."""
    recorded = recorded if isinstance(recorded, dict) else {}
    changes = input_changes(recorded, current.of(row, recorded))
    reason = "; ".join(c.reason for c in changes)
    if not changes:
        return Decision(row, UP_TO_DATE, "")
    if all(c.verify_only for c in changes):
        return Decision(row, REVERIFY, f"{reason}: {REVERIFY_NOTE}")
    return Decision(row, "inputs-changed", reason)


def summary_line(decisions: list[Decision]) -> str:
    counts = Counter(d.status for d in decisions)
    up = counts.get(UP_TO_DATE, 0)
    again = f" reverify={counts[REVERIFY]}" if counts.get(REVERIFY) else ""
    return f"rows={len(decisions)} up_to_date={up} to_build={len(decisions) - up}{again}"
