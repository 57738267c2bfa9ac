"""Python distributions identified by content: the pin's `content` block.

The distributions that decide an object's bytes (CONTENT_DISTRIBUTIONS) are identified by content, not by
version: per distribution, a SHA256 over every installed file's path and bytes as they are on disk
(FlyDSL's bundled MLIR/LLVM libraries included), and the name of each file whose bytes differ from the
distribution's RECORD (an in-place edit does not update RECORD, so RECORD is only the reference that
names the edited file; the bytes are hashed).
"""

from __future__ import annotations

import binascii
import csv
import hashlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from farm.core.canonical import digest_of
from farm.toolchain.filehash import FileHashes
from farm.toolchain.shapes import DistributionPin

# The Python distributions whose files decide an object's bytes, pinned by content. FlyDSL is the
# compiler (its Python, MLIR and LLVM); numpy converts kernel constants while FlyDSL traces, and torch
# describes the trace tensors (dtype, shape, strides): docs/toolchain.md has the measurement.
CONTENT_DISTRIBUTIONS = ("flydsl", "numpy", "torch")


def distribution(name: str, search_path: list[str] | None = None) -> importlib.metadata.Distribution | None:
    """The distribution `name` as this interpreter finds it (first on sys.path), or on `search_path`."""
    return next(iter(importlib.metadata.distributions(name=name, path=search_path or sys.path)), None)


def dist_version(name: str, search_path: list[str] | None = None) -> str | None:
    dist = distribution(name, search_path)
    return None if dist is None else dist.version


@dataclass(frozen=True)
class Content:
    """One installed distribution, by the bytes of its files on disk."""

    version: str | None
    files: int
    sha256: str  # over {path: SHA256 of its bytes} of every file counted; or why there is none
    # Recorded files whose bytes differ from RECORD (path -> SHA256 on disk, or "missing"/"unreadable").
    edited: dict[str, str] = field(default_factory=dict)
    # Files in the distribution's directories that its RECORD does not list (path -> SHA256).
    added: dict[str, str] = field(default_factory=dict)

    def as_pin(self) -> DistributionPin:
        entry = DistributionPin(version=self.version, files=self.files, sha256=self.sha256)
        if self.edited:
            entry["edited"] = dict(sorted(self.edited.items()))
        if self.added:
            entry["added"] = dict(sorted(self.added.items()))
        return entry


def _counted(rel: str) -> bool:
    """Files that make a distribution's code: a plain relative path inside site-packages (RECORD is data:
    an absolute path, or one with `..`, is never followed), not its metadata (the version is pinned apart;
    INSTALLER and direct_url.json name how it was installed), not bytecode (rebuilt from the sources,
    stamped with their mtime), not scripts outside site-packages (they name the venv's interpreter)."""
    parts = rel.split("/")
    return (not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)
            and not parts[0].endswith(".dist-info") and "__pycache__" not in parts and not rel.endswith(".pyc"))


_B64_TO_STANDARD = str.maketrans("-_", "+/")


def _hex(record_hash: str) -> str | None:
    """RECORD's `sha256=<urlsafe base64, unpadded>` as hex; None for no hash or another algorithm."""
    algorithm, _, value = record_hash.partition("=")
    if algorithm != "sha256" or not value:
        return None
    try:
        return binascii.a2b_base64(value.translate(_B64_TO_STANDARD) + "=" * (-len(value) % 4)).hex()
    except binascii.Error:
        return None


def _recorded(dist: importlib.metadata.Distribution) -> dict[str, str | None] | None:
    """RECORD as {path: SHA256 hex or None}, only the counted files; None when there is no RECORD.
    (Read as CSV text: Distribution.files builds a path object per entry, ~0.7 s for torch's 14,600.)"""
    text = dist.read_text("RECORD")
    if text is None:
        return None
    return {row[0]: _hex(row[1]) if len(row) > 1 else None
            for row in csv.reader(text.splitlines()) if row and _counted(row[0])}


def _unrecorded(site: str, recorded: dict[str, str | None]) -> list[str]:
    """Files in the distribution's top-level directories that RECORD does not list (a file dropped into
    flydsl/ is imported all the same). Symlinked directories are not followed; bytecode is skipped."""
    tops = sorted({rel.split("/", 1)[0] for rel in recorded if "/" in rel})
    extra: list[str] = []
    for top in tops:
        base = os.path.join(site, top)
        if os.path.islink(base) or not os.path.isdir(base):
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            prefix = os.path.relpath(dirpath, site).replace(os.sep, "/")
            for name in sorted(filenames):
                rel = f"{prefix}/{name}"
                if rel not in recorded and _counted(rel):
                    extra.append(rel)
    return extra


def _file_digest(hashes: FileHashes, path: str, want: str | None) -> str:
    """The file's SHA256 on disk; a remembered digest that disagrees with RECORD is never trusted alone:
    the bytes are read again before the file is called edited."""
    digest = hashes.sha256(path)
    return hashes.sha256(path, fresh=True) if want is not None and digest != want else digest


def _readable_digest(hashes: FileHashes, path: str, want: str | None) -> str:
    """The file's SHA256, or why there is none ("missing", "unreadable (...)")."""
    try:
        return _file_digest(hashes, path, want)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _cache_file(cache_dir: Path | None, name: str, site: str) -> Path | None:
    """One cache per distribution and site directory, so two installs never evict each other."""
    if cache_dir is None:
        return None
    return cache_dir / f"content-{name}-{hashlib.sha256(site.encode()).hexdigest()[:16]}.json"


def distribution_content(name: str, cache_dir: Path | None = None,
                         search_path: list[str] | None = None) -> Content:
    """The content of the installed distribution `name` (the one this interpreter imports, or the first on
    `search_path`): every counted file hashed from its bytes (remembered per file identity in `cache_dir`),
    and the files whose bytes differ from RECORD, or that RECORD does not list, named."""
    dist = distribution(name, search_path)
    if dist is None:
        return Content(None, 0, "not installed")
    recorded = _recorded(dist)
    if recorded is None:
        return Content(dist.version, 0, "unverifiable: the distribution has no RECORD")
    site = str(dist.locate_file(""))
    hashes = FileHashes(_cache_file(cache_dir, name, site))
    on_disk: dict[str, str] = {}
    edited: dict[str, str] = {}
    for rel, want in sorted(recorded.items()):
        digest = _readable_digest(hashes, os.path.join(site, rel), want)
        if len(digest) == 64:
            on_disk[rel] = digest
        if want is not None and digest != want:
            edited[rel] = digest
    added = {rel: _readable_digest(hashes, os.path.join(site, rel), None) for rel in _unrecorded(site, recorded)}
    on_disk.update({rel: digest for rel, digest in added.items() if len(digest) == 64})
    hashes.save()
    return Content(dist.version, len(on_disk), digest_of(on_disk), edited, added)


def contents(cache_dir: Path | None = None, search_path: list[str] | None = None) -> dict[str, DistributionPin]:
    """The pin's `content` block for what is installed."""
    return {name: distribution_content(name, cache_dir, search_path).as_pin() for name in CONTENT_DISTRIBUTIONS}


def damaged(cache_dir: Path | None = None) -> dict[str, Content]:
    """The content distributions with a file that is edited, missing or added (setup.sh reinstalls them)."""
    found = {name: distribution_content(name, cache_dir) for name in CONTENT_DISTRIBUTIONS}
    return {name: c for name, c in found.items() if c.edited or c.added or c.version is None}
