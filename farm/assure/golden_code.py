"""The farm code the golden digests were made with: `<outputs_dir>.code.sha256`, written by `farm golden`.

A manifest records the SHA256 of every farm file that made or verified its objects (`inputs.generator`,
`inputs.verifier`). Editing one of those files changes the manifests a build writes, so `outputs.sha256`
stops matching them even when every object's bytes stay the same, and only a full rebuild would show it.
This file lists those farm files with the hashes the recorded manifests hold, in `sha256sum` format with
paths relative to the project root: `sha256sum -c outputs.code.sha256` (or the test suite) says in a second
whether the golden digests were made with the farm code checked out.
"""

from __future__ import annotations

from pathlib import Path

from farm.assure.golden import LINE, SHA256_HEX
from farm.core.canonical import sha256_file
from farm.core.errors import FarmError
from farm.plan.digest import farm_path_ok
from farm.store import manifest
from farm.store.outtree import MANIFEST
from farm.table.config import FarmConfig

PACKAGE = "farm"  # recorded names are relative to the farm package; the file's paths to the project root
FIX = ("rebuild every row from nothing (`rm -rf outputs && farm build cache.restore=false`), then `farm golden`, "
       "and commit outputs.sha256, outputs.code.sha256 and outputs.dvc")


def code_path(cfg: FarmConfig) -> Path:
    out = cfg.outputs_dir.absolute()
    return out.parent / f"{out.name}.code.sha256"


def recorded_code(cfg: FarmConfig, dirs: list[tuple[str, str]]) -> dict[str, str]:
    """Every farm file the manifests of `dirs` record as generator or verifier code, with its recorded hash.
    The tree was checked clean first (`farm golden`); one file recorded with two hashes is refused all the
    same (the manifests would come from builds of different code)."""
    found: dict[str, str] = {}
    for op, target in dirs:
        data = manifest.load(cfg.outputs_dir / op / target / MANIFEST)
        for entry in manifest.entries_of(data).values():
            inputs = entry.get("inputs")
            for kind in ("generator", "verifier"):
                hashes = inputs.get(kind) if isinstance(inputs, dict) else None
                for rel, sha in (hashes.items() if isinstance(hashes, dict) else ()):
                    if not farm_path_ok(rel) or not isinstance(sha, str) or not SHA256_HEX.fullmatch(sha):
                        raise FarmError(f"{op}/{target}/{MANIFEST}: {kind} record {rel!r} is not a farm file's "
                                        "SHA256", FIX)
                    if found.setdefault(rel, sha) != sha:
                        raise FarmError(f"farm/{rel} is recorded with two hashes across the manifests", FIX)
    return found


def render(code: dict[str, str]) -> str:
    return "".join(f"{sha}  {PACKAGE}/{rel}\n" for rel, sha in sorted(code.items()))


def load_code(path: Path) -> dict[str, str]:
    """The recorded farm files of `path` ({} when there is none), by name relative to the farm package, as
    `recorded_code` gives them; a line that is not one is an error."""
    if not path.is_file():
        return {}
    found: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = LINE.match(line)
        rel = match["path"].removeprefix(f"{PACKAGE}/") if match else None
        if not match or rel is None or rel == match["path"] or not farm_path_ok(rel) or rel in found:
            raise FarmError(f"{path}:{lineno}: not a `sha256sum` line for a farm file: {line[:120]!r}", FIX)
        found[rel] = match["sha"]
    return found


def merge(kept: dict[str, str], new: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The farm files recorded by golden lines that are kept (`kept`) and by the manifests recorded now
    (`new`), and the files the two record with different hashes (then no one file can say both)."""
    clashes = sorted(f"{PACKAGE}/{rel}" for rel in kept.keys() & new.keys() if kept[rel] != new[rel])
    return {**kept, **new}, clashes


def stale(path: Path, project: Path) -> list[str]:
    """One line per farm file listed in `path` whose checked-out bytes differ from the recorded hash (or
    that is gone, or a line that is not one); the file is data: each name is checked before it is read."""
    problems: list[str] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = LINE.match(line)
        rel = match["path"].removeprefix(f"{PACKAGE}/") if match else None
        if not match or rel == match["path"] or not farm_path_ok(rel):
            problems.append(f"{path.name}:{lineno}: not a `sha256sum` line for a farm file: {line[:120]!r}")
            continue
        file = project / PACKAGE / rel
        if file.is_symlink() or not file.is_file():
            problems.append(f"{match['path']}: recorded by the golden digests, gone from the checkout")
        elif sha256_file(file) != match["sha"]:
            problems.append(f"{match['path']}: changed since the golden digests were recorded")
    return problems
