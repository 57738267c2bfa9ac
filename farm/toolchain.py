"""The toolchain pin: what is installed, whether it matches conf/toolchain/, and the linker shim.

FlyDSL's ROCDL serializer runs `$ROCM_PATH/llvm/bin/ld.lld`. The pinned linker is the LLD inside
the `ziglang` wheel (pin `linker.package`), or any ld.lld binary (pin `linker.path`, e.g. Debian's
lld-19 for a second, test toolchain); a two-line shim at that path makes FlyDSL use it. Its identity
ends up in every object's .comment section, so its version and binary hash are part of the pin.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .canonical import sha256_file
from .errors import FarmError
from .private import read_private_text, write_private_text

LINKER_PACKAGE = "ziglang"
# What a compile worker's bytes depend on; the pin's `disassembler` only verifies, on the driver.
COMPILE_KEYS = ("flydsl", "python", "linker")
DEFAULT_DISASSEMBLER = {"path": "/usr/bin/llvm-objdump-22"}


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


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


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


def _cached_sha256(path: Path, cache_dir: Path | None) -> str:
    """Hashing the 180 MB linker takes ~0.6 s; remember it per file identity.

    The key includes the inode's change time (ctime), which every write and every timestamp reset
    moves and no user can set back, so a binary changed in place with its mtime restored is hashed
    again. The cache lives in a private per-user directory (farm/private.py), so nobody else can
    plant an entry; an entry that cannot be read is simply recomputed."""
    st = path.stat()
    key = f"{path.resolve()}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    cache_file = cache_dir / "linker-sha256.json" if cache_dir is not None else None
    if cache_file is not None:
        try:
            cached = json.loads(read_private_text(cache_file) or "{}")
        except ValueError:
            cached = {}
        if isinstance(cached, dict) and isinstance(cached.get(key), str):
            return cached[key]
    digest = sha256_file(path)
    if cache_file is not None:
        try:
            write_private_text(cache_file, json.dumps({key: digest}))
        except OSError:
            pass  # a cache we cannot write only costs time
    return digest


def installed(cache_dir: Path | None = None, linker: dict[str, Any] | None = None,
              disassembler: dict[str, Any] | None = None) -> dict[str, Any]:
    """The toolchain of this process's environment, in the shape of the pin, for the pin's kind of
    linker (`linker`: the pin's linker entry; None means the ziglang package) and, when given, the
    pin's disassembler entry (the driver verifies with it; workers only compile)."""
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
        "flydsl": _dist_version("flydsl"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "linker": found,
    }
    if disassembler is not None:
        from .disasm import installed as disassembler_installed

        toolchain["disassembler"] = disassembler_installed(disassembler)
    return toolchain


def differences(pin: dict[str, Any], found: dict[str, Any], prefix: str = "") -> list[str]:
    """Human lines naming each field where `found` differs from `pin`."""
    lines = []
    for key in sorted(set(pin) | set(found)):
        want, have = pin.get(key), found.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            lines += differences(want, have, f"{prefix}{key}.")
        elif str(want) != str(have):
            lines.append(f"{prefix}{key}: pinned {want!r}, found {have!r}")
    return lines


def require_pin(pin: dict[str, Any], found: dict[str, Any], where: str = "this machine") -> None:
    diff = differences(pin, found)
    if diff:
        raise FarmError(
            f"toolchain on {where} differs from the pin (conf/toolchain/pinned.yaml):\n    " + "\n    ".join(diff),
            "install the pinned toolchain (bash scripts/setup.sh), or move the pin on purpose with "
            "`farm pin` (every object will rebuild; see REGEN.md)")


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


def pin_text(found: dict[str, Any]) -> str:
    """conf/toolchain/pinned.yaml for `found` (used by `farm pin`)."""
    link = found["linker"]
    where = f"  path: {link['path']}\n" if "path" in link else f"  package: {link['package']}\n"
    return (
        "# The toolchain pin. Every object's bytes depend on these; every manifest records them and\n"
        "# `farm build` refuses to build when the installed toolchain differs.\n"
        "# Move the pin with `farm pin` (see REGEN.md): it rewrites this file from what is installed.\n"
        f"flydsl: {found['flydsl']}\n"
        f"python: '{found['python']}'\n"
        "linker:\n"
        f"{where}"
        f"  version: {link['version']}\n"
        f"  sha256: {link['sha256']}\n"
        + _disassembler_text(found.get("disassembler"))
    )


def _disassembler_text(entry: dict[str, Any] | None) -> str:
    if not entry:
        return ""
    return ("# Verification only (instruction classes in the manifest); it never touches an object's bytes.\n"
            f"disassembler:\n  path: {entry['path']}\n  version: {entry['version']}\n")
