"""Input digests: what a row's object depends on, recorded so a change can be named.

A row's recorded inputs (manifest entry `inputs`):
- knobs, allow, op, target, toolchain: the row and the config it was built with;
- sources {rel: SHA256}: every file under kernels_src/ the compile opened or imported;
- lookups {lookup: [found]}: every lookup the compile made under kernels_src/ whose outcome depends on
  which files exist (farm/plan/sources.py `lookup_state`): each module the import system looked for in a
  directory there (hits and misses), each directory other code listed, each absent file it tried to open;
- generator {farm rel path: SHA256}: the farm code that made the bytes, as recorded by the compile (every
  farm module the compile process loaded, and the code that prepared it: farm/worker/isolate.py);
- verifier {farm rel path: SHA256}: every farm file that can run while the driver verifies the object and
  derives the facts recorded about it: the static closure of farm/verify/accept.py `accept` and `disassemble`
  (farm/plan/code_closure.py: farm/verify/, farm/elf/, the disassembler and toolchain modules, and
  everything those import), cut at the boundary packages (farm.table, farm.plan with this module, farm.store
  and the others code_closure.py names), whose outputs are recorded as values (knobs, allow, op, target,
  toolchain). Derived from the code, so every build (a compile, a restore, a re-verify) records the same
  set for a row. A change there (a docstring edit too: files are compared by hash) re-verifies the existing
  object without compiling it; a change to a boundary package changes no record.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from farm.contract import FARM_DIR, CompileResult, farm_rel
from farm.core.canonical import digest_of, sha256_file
from farm.core.errors import FarmError
from farm.plan.sources import Tree, lookup_state, path_ok
from farm.store.manifest import Hashes, Inputs, RecordedInputs
from farm.table.config import FarmConfig
from farm.table.rows import Row

# Keys of a row's inputs that only the driver's verification decides (no compile needed when they change).
VERIFY_KEYS = ("verifier",)



def generator_digest() -> str:
    """The identity of this farm checkout's code (every module): a standing cluster started from other
    code is not used. What each row depends on is recorded per file instead (`inputs_of`)."""
    files = sorted(p for p in FARM_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    return digest_of({p.relative_to(FARM_DIR).as_posix(): sha256_file(p) for p in files})


def _farm_path_check(rel: object) -> bool:
    return path_ok(rel) and str(rel).endswith(".py")


def farm_hashes(rels: object) -> Hashes:
    """Current SHA256 of each recorded farm file (None when it is gone or its name is not a farm file).
    `rels` is recorded data: anything but a dict of names gives {}."""
    out: Hashes = {}
    for rel in sorted(rels) if isinstance(rels, dict) else []:
        out[rel] = _code_hash(rel) if farm_path_ok(rel) else None
    return out


def farm_path_ok(rel: object) -> bool:
    """A recorded farm file name: a plain relative path to a .py file inside the farm package. Decided once
    per name: every accepted row asks about the same names."""
    if type(rel) is not str:
        return _farm_path_check(rel)
    known = _NAMES_OK.get(rel)
    if known is None:
        known = _farm_path_check(rel)
        if len(_NAMES_OK) < 100_000:  # recorded data cannot grow it without bound
            _NAMES_OK[rel] = known
    return known


_NAMES_OK: dict[str, bool] = {}


class CodeRecorder:
    """While active, records the files whose functions run on this thread (sys.setprofile); `files()` gives
    the farm files among them with their SHA256. What one run took, not what can run: the verifier record
    uses the static closure instead (farm/plan/code_closure.py); tests profile an acceptance with this to
    check that the closure holds every file it ran."""

    def __init__(self) -> None:
        self.filenames: set[str] = set()
        self.previous: Any = None

    def __enter__(self) -> CodeRecorder:
        self.previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self.previous)

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.filenames.add(frame.f_code.co_filename)
        # A profiler that was already running keeps working; a C one (cProfile) is not callable from here
        # and pauses while this records.
        if callable(self.previous):
            self.previous(frame, event, arg)

    def farm_files(self) -> set[str]:
        """The recorded files that are farm code, relative to farm/."""
        return {rel for rel in map(_farm_rel, self.filenames) if rel is not None}

    def files(self) -> dict[str, str]:
        return code_hashes(frozenset(self.farm_files()))


def code_hashes(rels: frozenset[str]) -> dict[str, str]:
    """{rel: SHA256} of farm code files recorded as a row's verifier; one removed while the build runs
    cannot be recorded, so nothing is accepted. Every accepted row asks for the same set: its result is
    kept and given again while no file's stat changed (one os.stat per file, no path arithmetic)."""
    stamps = tuple(_stamp(rel) for rel in sorted(rels))
    kept = _SETS.get(rels)
    if kept is not None and kept[0] == stamps:
        return dict(kept[1])
    out = {}
    for rel in sorted(rels):
        sha = _code_hash(rel)
        if sha is None:
            raise FarmError(f"farm/{rel} decides verification and is no longer a file",
                            "restore it (or finish the edit), then run `farm build` again")
        out[rel] = sha
    _SETS[rels] = (stamps, out)
    return dict(out)


_SETS: dict[frozenset[str], tuple[tuple[object, ...], dict[str, str]]] = {}


@functools.cache
def _farm_rel(filename: str) -> str | None:
    """contract.farm_rel, once per code file name (it resolves symlinks; every accepted row asks)."""
    return farm_rel(filename)


# rel -> ((mtime_ns, size, inode), SHA256): a file is hashed again only when it changed on disk.
_HASHED: dict[str, tuple[tuple[int, int, int], str]] = {}


def _code_hash(rel: str) -> str | None:
    """SHA256 of a farm file (None when it is not a regular file), read again only when its stat changed:
    every accepted row asks, for its generator and its verifier files."""
    stamp = _stamp(rel)
    if stamp is None:
        return None
    known = _HASHED.get(rel)
    if known is None or known[0] != stamp:
        known = (stamp, hashlib.sha256((FARM_DIR / rel).read_bytes()).hexdigest())
        _HASHED[rel] = known
    return known[1]


def _stamp(rel: str) -> tuple[int, int, int] | None:
    """(mtime_ns, size, inode) of a farm file; None when it is not a regular file. Inside `one_look`, each
    file is looked at once."""
    if _LOOKED is not None:
        if rel not in _LOOKED:
            _LOOKED[rel] = _stat(rel)
        return _LOOKED[rel]
    return _stat(rel)


def _stat(rel: str) -> tuple[int, int, int] | None:
    path = _PATHS.get(rel)
    if path is None:
        path = _PATHS[rel] = str(FARM_DIR / rel)
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino) if stat.S_ISREG(st.st_mode) else None


_PATHS: dict[str, str] = {}  # rel -> its absolute path as a string (joining Paths per call cost more than stat)
_LOOKED: dict[str, tuple[int, int, int] | None] | None = None  # inside `one_look`: rel -> its stamp


@contextmanager
def one_look() -> Iterator[None]:
    """Within this block each farm file is stat'ed once: the driver accepts a batch of results at one moment,
    and every row asks about the same ~80 generator and verifier files (a stat each per row cost ~0.2 ms)."""
    global _LOOKED
    outer = _LOOKED
    _LOOKED = {} if outer is None else outer
    try:
        yield
    finally:
        _LOOKED = outer


def source_hashes(kernels_dir: Path, rels: Mapping[str, object]) -> Hashes:
    """Current SHA256 of each recorded source file (None when it no longer exists)."""
    out: Hashes = {}
    for rel in sorted(rels):
        # A recorded name is data: one that is not a plain relative path inside kernels_src/ is never opened.
        path = kernels_dir / rel if source_path_ok(rel) else None
        out[rel] = sha256_file(path) if path is not None and path.is_file() else None
    return out


source_path_ok = path_ok


@dataclass(frozen=True)
class CompileRecord:
    """What the compile of a row consulted and ran (the compile-side part of its inputs)."""

    # From a worker's result these are its own record; from a manifest entry, recorded data (checked where used).
    sources: Hashes
    lookups: dict[str, list[str]]
    generator: Hashes
    # The kernel's per-compile LLVM options, as its compile set them: decided by its sources and knobs (both
    # recorded), recorded too so that the entry says how the object was made; most rows have none.
    llvm_options: dict[str, object] = field(default_factory=dict)

    @classmethod
    def of_result(cls, result: CompileResult, tree: Tree) -> CompileRecord:
        """From a worker's result; its lookups are evaluated against the files that build shipped."""
        lookups = {key: lookup_state(tree, key) for key in result.lookups if isinstance(key, str)}
        return cls(dict(result.sources), lookups, dict(result.generator), dict(result.llvm_options))

    @classmethod
    def of_entry(cls, inputs: RecordedInputs) -> CompileRecord:
        """As recorded in a manifest entry (a re-verify keeps it); a field that is not a JSON object is {}."""
        sources, lookups, generator, options = (_object(inputs.get(key))
                                                for key in ("sources", "lookups", "generator", "llvm_options"))
        # Recorded data: `decide` re-derived these before a re-verify, and `build` re-checks the generator.
        return cls(sources, lookups, generator, options)  # type: ignore[arg-type]

    @classmethod
    def current(cls, kernels_dir: Path, tree: Tree, inputs: RecordedInputs) -> CompileRecord:
        """The recorded files and lookups, evaluated against kernels_src/ and the farm code as they are now."""
        recorded = cls.of_entry(inputs)
        # The options are what the recorded sources and knobs decide: they change only with one of those.
        return cls(source_hashes(kernels_dir, recorded.sources),
                   {key: lookup_state(tree, key) for key in sorted(recorded.lookups)},
                   farm_hashes(recorded.generator), recorded.llvm_options)


def _object(value: object) -> dict[str, object]:
    """A recorded field that should be a JSON object; {} when it is anything else."""
    return value if isinstance(value, dict) else {}


def inputs_of(cfg: FarmConfig, row: Row, compiled: CompileRecord, verifier: Hashes) -> Inputs:
    """The recorded inputs of a row: knobs, op and target identity, farm code, sources, lookups, toolchain,
    and the kernel's LLVM options when it set any (absent otherwise: rows without keep their bytes)."""
    inputs: Inputs = {
        "knobs": row.knobs,
        "allow": row.allow,
        "op": digest_of(cfg.ops[row.op].compile_identity()),
        "target": digest_of(cfg.targets[row.target].as_dict()),
        "generator": dict(sorted(compiled.generator.items())),
        "verifier": dict(sorted(verifier.items())),
        "sources": dict(sorted(compiled.sources.items())),
        "lookups": dict(sorted(compiled.lookups.items())),
        "toolchain": digest_of(cfg.toolchain_pin),
    }
    if compiled.llvm_options:
        inputs["llvm_options"] = dict(sorted(compiled.llvm_options.items()))
    return inputs


def current_inputs(cfg: FarmConfig, row: Row, tree: Tree, recorded: RecordedInputs) -> Inputs:
    """What the row's recorded inputs are today (same files, same lookups, today's contents)."""
    return inputs_of(cfg, row, CompileRecord.current(cfg.kernels_dir, tree, recorded),
                     farm_hashes(recorded.get("verifier")))


@dataclass(frozen=True)
class InputChange:
    key: str  # the inputs key that differs
    reason: str  # names the exact file or lookup when there is one

    @property
    def verify_only(self) -> bool:
        return self.key in VERIFY_KEYS


def input_changes(recorded: RecordedInputs, current: Inputs | RecordedInputs) -> list[InputChange]:
    """Everything that differs between two input records, most specific first."""
    changes = _file_changes(recorded, current, "sources", "source kernels_src/")
    changes += _lookup_changes(recorded.get("lookups"), current.get("lookups"))
    changes += _file_changes(recorded, current, "generator", "farm generator code farm/")
    changes += _file_changes(recorded, current, "verifier", "farm verification code farm/")
    labels = {"knobs": "row knobs", "allow": "resource rules", "op": "op config", "target": "target config",
              "generator": "farm generator code", "verifier": "farm verification code", "lookups": "lookups",
              "toolchain": "toolchain pin", "llvm_options": "the kernel's LLVM options"}
    named = {c.key for c in changes}
    for key, label in labels.items():
        if key not in named and recorded.get(key) != current.get(key):
            changes.append(InputChange(key, f"{label} changed"))
    return changes


def _file_changes(recorded: RecordedInputs, current: Inputs | RecordedInputs, key: str,
                  label: str) -> list[InputChange]:
    was, now = recorded.get(key), current.get(key)
    if not isinstance(was, dict) or not isinstance(now, dict):
        return []
    return [InputChange(key, f"{label}{rel} {'removed' if now.get(rel) is None else 'changed'}")
            for rel in sorted(set(was) | set(now)) if was.get(rel) != now.get(rel)]


def _lookup_changes(was: object, now: object) -> list[InputChange]:
    """One change per lookup whose outcome differs, naming each path created or removed there."""
    if not isinstance(was, dict) or not isinstance(now, dict):
        return []
    changes = []
    for key in sorted(set(was) | set(now)):
        before = was.get(key) if isinstance(was.get(key), list) else []
        after = now.get(key) if isinstance(now.get(key), list) else []
        if before == after:
            continue
        paths = [f"kernels_src/{p} created" for p in sorted(set(map(str, after)) - set(map(str, before)))]
        paths += [f"kernels_src/{p} removed" for p in sorted(set(map(str, before)) - set(map(str, after)))]
        changes.append(InputChange("lookups", f"{', '.join(paths) or 'lookup result changed'} ({key!r})"))
    return changes
