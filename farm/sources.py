"""The kernel sources a build ships to its workers, as bytes (no shared disk needed)."""

from __future__ import annotations

from pathlib import Path


def collect(kernels_dir: Path) -> dict[str, bytes]:
    """Every file under kernels_src/ except caches and hidden files, keyed by relative path."""
    out: dict[str, bytes] = {}
    for path in sorted(kernels_dir.rglob("*")):
        rel = path.relative_to(kernels_dir)
        if path.is_file() and "__pycache__" not in rel.parts and not any(p.startswith(".") for p in rel.parts):
            out[rel.as_posix()] = path.read_bytes()
    return out
