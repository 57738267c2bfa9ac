"""Input digests: what a row's object depends on, recorded so a change can be named."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from .canonical import digest_of, sha256_file
from .config import FarmConfig
from .rows import Row

# The farm code that turns a row into bytes: editing it rebuilds everything.
GENERATOR_FILES = (
    "compile/lowering.py", "compile/worker.py", "compile/zygote.py", "compile/isolate.py", "compile/binary_step.py",
    "compile/forking.py", "toolchain.py",
)


# The farm code that decides what the manifest says about those bytes, and whether they are accepted.
VERIFIER_FILES = ("verify.py", "elfinfo.py", "disasm.py")


def _files_digest(names: tuple[str, ...]) -> str:
    base = Path(__file__).resolve().parent
    return digest_of({name: sha256_file(base / name) for name in names})


def generator_digest() -> str:
    return _files_digest(GENERATOR_FILES)


@cache
def verifier_digest() -> str:
    return _files_digest(VERIFIER_FILES)


def source_hashes(kernels_dir: Path, rels: list[str] | dict[str, Any]) -> dict[str, str | None]:
    """Current SHA256 of each recorded source file (None when it no longer exists)."""
    out: dict[str, str | None] = {}
    for rel in sorted(rels):
        # A recorded name is data: one that is not a plain relative path inside kernels_src/ is never opened.
        path = kernels_dir / rel if source_path_ok(rel) else None
        out[rel] = sha256_file(path) if path is not None and path.is_file() else None
    return out


def source_path_ok(rel: object) -> bool:
    """A relative POSIX path of plain components under kernels_src/ (no '..', no absolute path)."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def inputs_of(cfg: FarmConfig, row: Row, sources: dict[str, Any], generator: str) -> dict[str, Any]:
    """The recorded inputs of a row: knobs, op and target identity, generator, sources, toolchain."""
    return {
        "knobs": row.knobs,
        "allow": row.allow,
        "op": digest_of(cfg.ops[row.op].compile_identity()),
        "target": digest_of(cfg.targets[row.target].as_dict()),
        "generator": generator,
        "verifier": verifier_digest(),
        "sources": dict(sorted(sources.items())),
        "toolchain": digest_of(cfg.toolchain_pin),
    }


def changed_inputs(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Name what differs between two input records, most specific first."""
    reasons = []
    for rel in sorted(set(recorded.get("sources", {})) | set(current.get("sources", {}))):
        was, now = recorded.get("sources", {}).get(rel), current.get("sources", {}).get(rel)
        if was != now:
            reasons.append(f"source kernels_src/{rel} {'removed' if now is None else 'changed'}")
    labels = {"knobs": "row knobs", "allow": "resource rules", "op": "op config", "target": "target config",
              "generator": "farm generator code", "verifier": "farm verification code",
              "toolchain": "toolchain pin"}
    for key, label in labels.items():
        if recorded.get(key) != current.get(key):
            reasons.append(f"{label} changed")
    return reasons
