"""Executor settings read before Ray is imported (a bad value is named before anything starts)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from farm.core.errors import FarmError

# How long the driver lets finished results gather before verifying them as one batch: each batch costs
# one disassembler process (~35 ms to start) and one manifest flush. With two slots per actor the actors
# keep compiling meanwhile. Measured on 90 RMSNorm rows (2 cores, standing cluster, alternating rounds):
# 0.1 s gave 24.6 / 23.8 / 23.6 s, driver 9.6-9.9 ms and disassembler 37-40 ms CPU per row; 1.0 s gave
# 23.8 / 21.0 / 22.9 s, 7.1-7.8 ms and 12-14 ms; 2.0 s was no faster than 1.0 s. A result waits at most
# this long before it reaches the manifests (what a resumed build counts as done).
BATCH_GATHER_S = 1.0
# Overrides it for one command, in seconds (0: every result is verified on its own, as soon as it comes).
GATHER_ENV = "FARM_BATCH_GATHER_S"
# Rows in one Ray call at most (farm/execute/dispatch.py sends rows in parcels). Each call costs the driver (or
# the daemon relaying for it) ~0.7-2 ms of CPU on the 2-core machine and the actor a few ms around its
# compiles; four rows share that. More would make a lost actor cost more work and results come back later,
# for little: the cost per row is already a quarter. A call can take this many rows' time limits.
MAX_PARCEL = 4
# The standing cluster's daemon sends a relayed build a heartbeat this often, from a thread of its own
# (farm/execute/relay_server.py): it comes while the rows compile, however long one takes, since the compiles
# run in the actors' processes, not in the daemon.
HEARTBEAT_S = 2.0
# A relayed build that hears nothing from the daemon this long, not even a heartbeat, takes it for hung (a
# stopped or wedged process) and compiles its rows left on a private cluster (farm/execute/choice.py).
HEARTBEAT_TIMEOUT_S = 30.0
# Overrides it for one command, in seconds: at least a few heartbeats, at most an hour.
HEARTBEAT_ENV = "FARM_HEARTBEAT_TIMEOUT_S"
HEARTBEAT_TIMEOUT_MIN_S = 5.0
HEARTBEAT_TIMEOUT_MAX_S = 3600.0


def batch_gather_s() -> float:
    """BATCH_GATHER_S, or FARM_BATCH_GATHER_S when that is set: a number of seconds from 0 to 60."""
    raw = os.environ.get(GATHER_ENV, "").strip()
    if not raw:
        return BATCH_GATHER_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 60:  # NaN fails this too
        raise FarmError(f"{GATHER_ENV}={raw!r} is not a number of seconds from 0 to 60",
                        f"unset it (the default is {BATCH_GATHER_S:g} s) or set e.g. {GATHER_ENV}=0.5")
    return value


def heartbeat_timeout_s() -> float:
    """HEARTBEAT_TIMEOUT_S, or FARM_HEARTBEAT_TIMEOUT_S when that is set: a number of seconds from 5 to 3600."""
    raw = os.environ.get(HEARTBEAT_ENV, "").strip()
    if not raw:
        return HEARTBEAT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not HEARTBEAT_TIMEOUT_MIN_S <= value <= HEARTBEAT_TIMEOUT_MAX_S:  # NaN fails this too
        raise FarmError(f"{HEARTBEAT_ENV}={raw!r} is not a number of seconds from {HEARTBEAT_TIMEOUT_MIN_S:g} to "
                        f"{HEARTBEAT_TIMEOUT_MAX_S:g}",
                        f"unset it (the default is {HEARTBEAT_TIMEOUT_S:g} s) or set e.g. {HEARTBEAT_ENV}=60")
    return value


def num_cpus(executor_cfg: Mapping[str, Any]) -> int | None:
    """executor.num_cpus as a positive int (None: not set, use every CPU); anything else is the user's
    to fix, before Ray starts (Ray's own error would blame the address)."""
    value = executor_cfg.get("num_cpus")
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value).strip()) < 1:
        raise FarmError(f"executor.num_cpus={value!r} is not a positive whole number",
                        "set executor.num_cpus=N with N >= 1, or leave it out to use every CPU")
    return int(str(value).strip())
