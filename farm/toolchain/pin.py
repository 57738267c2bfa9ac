"""The toolchain pin: what is installed, whether it matches conf/toolchain/, and the linker shim.

FlyDSL's ROCDL serializer runs `$ROCM_PATH/llvm/bin/ld.lld`. The pinned linker is the LLD inside
the `ziglang` wheel (pin `linker.package`), or any ld.lld binary (pin `linker.path`, e.g. Debian's
lld-19 for a second, test toolchain); a two-line shim at that path makes FlyDSL use it. Its identity
ends up in every object's .comment section, so its version and binary hash are part of the pin.

The Python distributions that decide an object's bytes (CONTENT_DISTRIBUTIONS) are identified by
content, not by version: the pin's `content` block holds, per distribution, a SHA256 over every
installed file's path and bytes as they are on disk (FlyDSL's bundled MLIR/LLVM libraries included),
and names each file whose bytes differ from the distribution's RECORD (an in-place edit does not
update RECORD, so RECORD is only the reference that names the edited file; the bytes are hashed).
"""

from __future__ import annotations

import binascii
import csv
import errno
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from farm.core.canonical import digest_of
from farm.core.errors import FarmError
from farm.core.private import private_dir, read_private_text, write_private_text

LINKER_PACKAGE = "ziglang"
# The Python distributions whose files decide an object's bytes, pinned by content. FlyDSL is the
# compiler (its Python, MLIR and LLVM); numpy converts kernel constants while FlyDSL traces, and torch
# describes the trace tensors (dtype, shape, strides): README "The toolchain pin" has the measurement.
CONTENT_DISTRIBUTIONS = ("flydsl", "numpy", "torch")
# What a compile worker's bytes depend on; the pin's `disassembler` only verifies, on the driver.
COMPILE_KEYS = ("flydsl", "python", "content", "linker")
DEFAULT_DISASSEMBLER = {"path": "/usr/bin/llvm-objdump-22"}
LOCK_FILE = "requirements.lock"


def compile_part(pin: dict[str, Any]) -> dict[str, Any]:
    """The part of a pin a compile worker must match."""
    return {k: v for k, v in pin.items() if k in COMPILE_KEYS}


def linker_binary(linker: dict[str, Any] | None = None) -> Path:
    """The binary the pin's linker entry names (the ziglang wheel's zig unless `path` is given)."""
    if linker and linker.get("path"):
        path = Path(str(linker["path"]))
        if not os.access(path, os.X_OK):
            raise FarmError(f"linker missing: {path} (pinned linker.path) is not an executable",
                            "install it (e.g. apt-get install lld-19) or pick another toolchain")
        return path
    spec = importlib.util.find_spec(LINKER_PACKAGE)
    if spec is None or spec.origin is None:
        raise FarmError("linker missing: the pinned LLD comes from the Python package 'ziglang', "
                        "which is not installed", "run `bash scripts/setup.sh` (or pip install -e .)")
    zig = Path(spec.origin).parent / "zig"
    if not os.access(zig, os.X_OK):
        raise FarmError(f"linker missing: {zig} is not an executable", "reinstall: pip install --force-reinstall "
                        f"{LINKER_PACKAGE}=={_dist_version(LINKER_PACKAGE)}")
    return zig


def _dist_version(name: str, search_path: list[str] | None = None) -> str | None:
    dist = _distribution(name, search_path)
    return None if dist is None else dist.version


def _distribution(name: str, search_path: list[str] | None = None) -> importlib.metadata.Distribution | None:
    """The distribution `name` as this interpreter finds it (first on sys.path), or on `search_path`."""
    return next(iter(importlib.metadata.distributions(name=name, path=search_path or sys.path)), None)


def linker_command(linker: dict[str, Any] | None = None) -> list[str]:
    binary = linker_binary(linker)
    return [str(binary)] if linker and linker.get("path") else [str(binary), "ld.lld"]


def _linker_version(command: list[str]) -> str:
    shown = " ".join(command)
    try:
        out = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FarmError(f"linker {shown} does not run ({exc})", "reinstall the pinned linker") from None
    first = (out.stdout or out.stderr).strip().splitlines()[:1]
    if out.returncode != 0 or not first:
        raise FarmError(f"linker {shown} --version failed: {out.stderr.strip()}", "reinstall the pinned linker")
    # "LLD 22.1.8 (compatible with GNU linkers)" -> "LLD 22.1.8", the string written to .comment.
    return first[0].split(" (")[0]


# --------------------------------------------------------------------------------------------------
# Hashing files, remembered per file identity.


def _identity(path: str | Path, st: os.stat_result) -> str:
    return f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _hash_open_file(path: str | Path) -> tuple[str, str | None]:
    """(SHA256 of the bytes, the identity they belong to), the identity None when the file changed while
    it was read (then the digest is used once, never remembered)."""
    # Non-blocking open, then only a regular file is read: a FIFO or device planted there never hangs us.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
        before = os.fstat(f.fileno())
        if not stat.S_ISREG(before.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        after = os.fstat(f.fileno())
    same = _identity(path, before) == _identity(path, after)
    return digest, _identity(path, before) if same else None


class FileHashes:
    """SHA256 of files, remembered per file identity (path, device, inode, size, mtime_ns, ctime_ns) in one
    JSON file of a private per-user directory (farm/core/private.py: nobody else can plant an entry).

    Every write and every timestamp reset moves the inode's ctime, which no user can set back, so a file
    changed in place has a new identity and is hashed again: an entry is used only on an exact identity
    match. Saving keeps only the entries this run used, so stale identities do not pile up. An unreadable
    cache is recomputed; one that cannot be written only costs time."""

    def __init__(self, cache_file: Path | None) -> None:
        self.cache_file = cache_file
        self.known = self._load()
        self.used: dict[str, str] = {}

    def _load(self) -> dict[str, str]:
        if self.cache_file is None:
            return {}
        try:
            data = json.loads(read_private_text(self.cache_file) or "{}")
        except ValueError:
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and len(v) == 64}

    def sha256(self, path: str | Path, fresh: bool = False) -> str:
        """The file's SHA256; `fresh` reads the bytes even when the identity is remembered."""
        key = _identity(path, os.stat(path))
        if not fresh and key in self.known:
            self.used[key] = self.known[key]
            return self.known[key]
        digest, identity = _hash_open_file(path)
        if identity is not None:
            self.used[identity] = digest
        return digest

    def save(self) -> None:
        if self.cache_file is None or self.used == self.known:
            return
        try:
            write_private_text(self.cache_file, json.dumps(self.used, sort_keys=True))
        except OSError:
            pass  # a cache we cannot write only costs time


def _cached_sha256(path: Path, cache_dir: Path | None) -> str:
    """The linker's SHA256 (hashing the 180 MB zig binary takes ~0.6 s), remembered per file identity."""
    hashes = FileHashes(cache_dir / "linker-sha256.json" if cache_dir is not None else None)
    digest = hashes.sha256(path)
    hashes.save()
    return digest


# --------------------------------------------------------------------------------------------------
# Python distributions identified by content.


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

    def as_pin(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"version": self.version, "files": self.files, "sha256": self.sha256}
        for key, files in (("edited", self.edited), ("added", self.added)):
            if files:
                entry[key] = dict(sorted(files.items()))
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


def distribution_content(name: str, cache_dir: Path | None = None,
                         search_path: list[str] | None = None) -> Content:
    """The content of the installed distribution `name` (the one this interpreter imports, or the first on
    `search_path`): every counted file hashed from its bytes (remembered per file identity in `cache_dir`),
    and the files whose bytes differ from RECORD, or that RECORD does not list, named."""
    dist = _distribution(name, search_path)
    if dist is None:
        return Content(None, 0, "not installed")
    recorded = _recorded(dist)
    if recorded is None:
        return Content(dist.version, 0, "unverifiable: the distribution has no RECORD")
    site = str(dist.locate_file(""))
    cache = None
    if cache_dir is not None:  # one cache per distribution and site directory, so two installs never evict each other
        cache = cache_dir / f"content-{name}-{hashlib.sha256(site.encode()).hexdigest()[:16]}.json"
    hashes = FileHashes(cache)
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


def contents(cache_dir: Path | None = None, search_path: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The pin's `content` block for what is installed."""
    return {name: distribution_content(name, cache_dir, search_path).as_pin() for name in CONTENT_DISTRIBUTIONS}


def installed(cache_dir: Path | None = None, linker: dict[str, Any] | None = None,
              disassembler: dict[str, Any] | None = None, search_path: list[str] | None = None) -> dict[str, Any]:
    """The toolchain of this process's environment, in the shape of the pin, for the pin's kind of
    linker (`linker`: the pin's linker entry; None means the ziglang package) and, when given, the
    pin's disassembler entry (the driver verifies with it; workers only compile). `search_path` looks
    for the Python distributions there instead of on sys.path (tests check a copy with it)."""
    binary = linker_binary(linker)
    found: dict[str, Any] = {
        "version": _linker_version(linker_command(linker)),
        "sha256": _cached_sha256(binary, cache_dir),
    }
    if linker and linker.get("path"):
        found["path"] = str(linker["path"])
    else:
        found["package"] = f"{LINKER_PACKAGE}=={_dist_version(LINKER_PACKAGE)}"
    toolchain = {
        "flydsl": _dist_version("flydsl", search_path),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "content": contents(cache_dir, search_path),
        "linker": found,
    }
    if disassembler is not None:
        # Imported here, not at the top: compile processes load this module, and every farm file they load
        # is a recorded compile input; the disassembler only verifies, it must not make objects rebuild.
        from farm.toolchain.disasm import installed as disassembler_installed

        toolchain["disassembler"] = disassembler_installed(disassembler)
    return toolchain


# --------------------------------------------------------------------------------------------------
# Comparing with the pin.


def differences(pin: dict[str, Any], found: dict[str, Any], prefix: str = "") -> list[str]:
    """Human lines naming each field where `found` differs from `pin` (for `content`: each file)."""
    lines = []
    for key in sorted(set(pin) | set(found)):
        want, have = pin.get(key), found.get(key)
        if not prefix and key == "content":
            lines += _content_differences(want, have)
        elif isinstance(want, dict) and isinstance(have, dict):
            lines += differences(want, have, f"{prefix}{key}.")
        elif str(want) != str(have):
            lines.append(f"{prefix}{key}: pinned {want!r}, found {have!r}")
    return lines


def _content_differences(pin: Any, found: Any) -> list[str]:
    if not isinstance(pin, dict):
        return ["content: the pin has no content digests (it predates them), found "
                + ", ".join(f"{n} {(found or {}).get(n, {}).get('version')}" for n in sorted(found or {}))]
    if not isinstance(found, dict):
        return [f"content: pinned {sorted(pin)}, found none"]
    lines: list[str] = []
    for name in sorted(set(pin) | set(found)):
        lines += _distribution_differences(name, pin.get(name), found.get(name))
    return lines


def _distribution_differences(name: str, want: Any, have: Any) -> list[str]:
    if not isinstance(want, dict) or not isinstance(have, dict):
        return [] if want == have else [f"content.{name}: pinned {want!r}, found {have!r}"]
    lines = _file_differences(name, want, have)
    if lines:  # the named files are the reason; the overall digest differs with them
        return lines
    return [f"content.{name}.{key}: pinned {want.get(key)!r}, found {have.get(key)!r}"
            for key in sorted(set(want) | set(have)) if str(want.get(key)) != str(have.get(key))]


def _file_differences(name: str, want: dict[str, Any], have: dict[str, Any]) -> list[str]:
    """One line per file that is edited, added or missing here and not the same way in the pin."""
    lines = []
    for key in ("edited", "added"):
        pinned, here = want.get(key) or {}, have.get(key) or {}
        for rel in sorted(set(pinned) | set(here)):
            if str(pinned.get(rel)) == str(here.get(rel)):
                continue
            if rel not in here:
                why = "the pin recorded another copy of it; this one is as installed"
            elif here[rel] == "missing" or here[rel].startswith("unreadable"):
                why = f"{here[rel]} here"
            elif key == "edited":
                why = "edited in place: its bytes are not the ones the distribution's RECORD lists"
            else:
                why = "not part of the installed distribution: its RECORD does not list it"
            lines.append(f"{name} file {rel} differs from the pin ({why})")
    return lines


def _fix(pin: dict[str, Any], diff: list[str]) -> str:
    """Reinstalling is the fix for content that moved (pip keeps an edited distribution as 'already
    satisfied', so it must be forced); moving the pin is the other way."""
    moved = [n for n in sorted(pin.get("content") or {}) if any(d.startswith((f"{n} file ", f"content.{n}"))
                                                                  for d in diff)]
    if not moved:
        return ("install the pinned toolchain (bash scripts/setup.sh), or move the pin on purpose with "
                "`farm pin` (every object will rebuild; see REGEN.md)")
    named = ", ".join(f"{n}=={(pin['content'][n] or {}).get('version')}" for n in moved)
    return (f"reinstall {named} (bash scripts/setup.sh reinstalls a distribution whose files differ from its "
            f"RECORD, from {LOCK_FILE}) or `farm pin` (moves the pin on purpose; every object will rebuild)")


def require_pin(pin: dict[str, Any], found: dict[str, Any], where: str = "this machine") -> None:
    diff = differences(pin, found)
    if diff:
        raise FarmError(
            f"toolchain on {where} differs from the pin (conf/toolchain/pinned.yaml):\n    " + "\n    ".join(diff),
            _fix(pin, diff))


def write_linker_shim(rocm_dir: Path, linker: dict[str, Any] | None = None) -> Path:
    """Create `<rocm_dir>/llvm/bin/ld.lld` that runs the pinned LLD; returns `rocm_dir` for ROCM_PATH."""
    shim = rocm_dir / "llvm" / "bin" / "ld.lld"
    shim.parent.mkdir(parents=True, exist_ok=True)
    text = "#!/bin/sh\nexec " + " ".join(f'"{part}"' for part in linker_command(linker)) + ' "$@"\n'
    if not shim.is_file() or shim.read_text() != text:
        tmp = shim.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(shim)
    return rocm_dir


# --------------------------------------------------------------------------------------------------
# Writing the pin.

PIN_HEADER = """\
# The toolchain pin. Every object's bytes depend on these; every manifest records them and
# `farm build` refuses to build when the installed toolchain differs.
# Move the pin with `farm pin` (see REGEN.md): it rewrites this file from what is installed.
# content: per Python distribution that decides the bytes, a SHA256 over every installed file's path and
# bytes on disk (bytecode, metadata and scripts outside site-packages excluded), its file count, and any
# file whose bytes differ from the distribution's RECORD (edited) or that RECORD does not list (added).
"""
DISASSEMBLER_HEADER = "# Verification only (instruction classes in the manifest); it never touches an object's bytes.\n"


def _dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=False)


def pin_text(found: dict[str, Any]) -> str:
    """conf/toolchain/pinned.yaml for `found` (used by `farm pin`): the same `found` always gives the same
    text (fixed key order, sorted file names). The disassembler block comes last."""
    link = found["linker"]
    linker = {"path": link["path"]} if "path" in link else {"package": link["package"]}
    linker |= {"version": link["version"], "sha256": link["sha256"]}
    content = {name: _sorted_entry(entry) for name, entry in sorted((found.get("content") or {}).items())}
    text = PIN_HEADER + _dump({"flydsl": found["flydsl"], "python": str(found["python"]), "content": content,
                               "linker": linker})
    entry = found.get("disassembler")
    if entry:
        text += DISASSEMBLER_HEADER + _dump({"disassembler": {"path": entry["path"], "version": entry["version"]}})
    return text


def _sorted_entry(entry: dict[str, Any]) -> dict[str, Any]:
    order = ("version", "files", "sha256", "edited", "added")
    out = {key: entry[key] for key in order if key in entry}
    for key in ("edited", "added"):
        if key in out:
            out[key] = dict(sorted(out[key].items()))
    return out


# --------------------------------------------------------------------------------------------------
# `python -m farm.toolchain.pin`: scripts/setup.sh asks which pinned distributions differ from their RECORD.


def damaged(cache_dir: Path | None = None) -> dict[str, Content]:
    """The content distributions with a file that is edited, missing or added (setup.sh reinstalls them)."""
    found = {name: distribution_content(name, cache_dir) for name in CONTENT_DISTRIBUTIONS}
    return {name: c for name, c in found.items() if c.edited or c.added or c.version is None}


def main() -> int:

    bad = damaged(private_dir("toolchain-cache"))
    for name, content in sorted(bad.items()):
        files = sorted(content.edited) + sorted(content.added)
        print(f"{name} {content.version}: " + (", ".join(files[:5]) if files else "not installed")
              + (f" (+{len(files) - 5} more)" if len(files) > 5 else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
