"""The pinned linker: which binary it is, what it says it is, and the shim that makes FlyDSL use it.

FlyDSL's ROCDL serializer runs `$ROCM_PATH/llvm/bin/ld.lld`. The pinned linker is the LLD inside the
`ziglang` wheel (pin `linker.package`), or any ld.lld binary (pin `linker.path`, e.g. Debian's lld-19 for a
second, test toolchain); a small shim at that path makes FlyDSL use it (and notes when each link starts
and ends). Its identity ends up in every object's .comment section, so its version and binary hash are
part of the pin.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

from farm.core.errors import FarmError
from farm.toolchain.distributions import dist_version
from farm.toolchain.filehash import cached_sha256
from farm.toolchain.shapes import LinkerPin

LINKER_PACKAGE = "ziglang"
# When set, the shim appends "START END" (Unix seconds) per link to this file: the row's `link` phase
# (farm/worker/phases.py). Bash's $EPOCHREALTIME reads the clock without starting a process.
LINK_TIMES_ENV = "FARM_LINK_TIMES"


def linker_binary(linker: LinkerPin | None = None) -> Path:
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
                        f"{LINKER_PACKAGE}=={dist_version(LINKER_PACKAGE)}")
    return zig


def linker_command(linker: LinkerPin | None = None) -> list[str]:
    binary = linker_binary(linker)
    return [str(binary)] if linker and linker.get("path") else [str(binary), "ld.lld"]


def linker_version(command: list[str]) -> str:
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


def installed_linker(linker: LinkerPin | None, cache_dir: Path | None) -> LinkerPin:
    """The installed linker of the pin's kind (`linker`: the pin's entry; None means the ziglang package)."""
    binary = linker_binary(linker)
    cache_file = cache_dir / "linker-sha256.json" if cache_dir is not None else None
    found = LinkerPin(version=linker_version(linker_command(linker)), sha256=cached_sha256(binary, cache_file))
    if linker and linker.get("path"):
        found["path"] = str(linker["path"])
    else:
        found["package"] = f"{LINKER_PACKAGE}=={dist_version(LINKER_PACKAGE)}"
    return found


def write_linker_shim(rocm_dir: Path, linker: LinkerPin | None = None) -> Path:
    """Create `<rocm_dir>/llvm/bin/ld.lld` that runs the pinned LLD; returns `rocm_dir` for ROCM_PATH."""
    shim = rocm_dir / "llvm" / "bin" / "ld.lld"
    shim.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(f'"{part}"' for part in linker_command(linker))
    text = (f'#!/bin/bash\nif [ -z "${LINK_TIMES_ENV}" ]; then exec {command} "$@"; fi\n'
            f'start=$EPOCHREALTIME\n{command} "$@"\ncode=$?\n'
            f'echo "$start $EPOCHREALTIME" >> "${LINK_TIMES_ENV}"\nexit $code\n')
    if not shim.is_file() or shim.read_text() != text:
        tmp = shim.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(shim)
    return rocm_dir
