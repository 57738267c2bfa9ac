"""farm build and farm pin: make the objects, move the toolchain pin."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from farm.build import build_selection
from farm.cli.parser import Invocation
from farm.cli.selection import load, selected_rows
from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError
from farm.core.private import private_dir
from farm.execute.settings import batch_gather_s
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.store.preflight import require_writable, require_writable_dir
from farm.toolchain.compare import differences
from farm.toolchain.installed import installed
from farm.toolchain.pin_file import DEFAULT_DISASSEMBLER, pin_text

log = logging.getLogger(__name__)


def cmd_build(inv: Invocation) -> int:
    cfg = load(inv.words)
    require_writable(cfg)  # before any compile: a read-only outputs_dir used to fail after all of them
    batch_gather_s()  # a bad FARM_BATCH_GATHER_S is named before any work
    rows, every = selected_rows(cfg)
    failed = build_selection(cfg, rows, every)
    return 1 if failed else 0


def cmd_pin(inv: Invocation) -> int:
    cfg = load(inv.words)
    pin = cfg.toolchain_pin
    found = installed(private_dir("toolchain-cache"), pin.get("linker"),
                      pin.get("disassembler") or DEFAULT_DISASSEMBLER)
    diff = differences(cfg.toolchain_pin, found)
    if not diff:
        print("the pin already matches the installed toolchain")
        return 0
    path = cfg.root / "conf" / "toolchain" / "pinned.yaml"
    _require_pin_writable(path)
    # Under the output tree's lock: a build running now must not record a pin that moves under it.
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        write_text_atomic(path, pin_text(found))
    print(f"moved the pin in {path}:\n  " + "\n  ".join(diff))
    log.info("objects built under the old pin are now out of date: `farm plan` lists them, `farm build` rebuilds "
             "them; then commit conf/toolchain/ and publish (farm push)")
    return 0


def _require_pin_writable(pin: Path) -> None:
    """conf/toolchain/ must take the new pin file, written by replacing it (a symlink would be lost)."""
    if os.path.islink(pin):
        raise FarmError(f"{pin} is a symlink (to {os.readlink(pin)}): moving the pin would replace the link",
                        f"replace {pin} with the file it points to, then run `farm pin` again")
    require_writable_dir(pin.parent, "the toolchain pin's directory")
