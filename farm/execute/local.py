"""A local Ray cluster of the farm's own: its size, its private temp directory, loopback only."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import ray

from farm.core.errors import FarmError
from farm.execute import ray_compat
from farm.worker.environment import short_private_dir

log = logging.getLogger(__name__)

# Ray puts its sockets at <temp dir>/session_<date>_<micro>_<pid>/sockets/plasma_store, ~65 bytes below
# its temp dir, and a Unix socket path holds at most ~107: a longer private temp dir is moved to /tmp.
RAY_TEMP_DIR_MAX = 40
# Ray's own chatter stays out of the farm's output: its errors reach the farm as exceptions.
QUIET = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}


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


def ray_temp_dir() -> str:
    """Ray's temp dir for the farm's local clusters: a per-user private directory (Ray makes its
    session directories world-writable, so they must sit below a directory only this user can enter)."""
    return str(short_private_dir("ray", RAY_TEMP_DIR_MAX))


def start(cpus: int, **public: Any) -> None:
    """Start a private local cluster of `cpus` CPUs on loopback; refuse it if it came up elsewhere."""
    ray_compat.init_local(cpus, ray_temp_dir(), **QUIET, **public)
    require_loopback()


def require_loopback() -> None:
    """A local cluster must listen on loopback only (every node's NodeManagerAddress is 127.0.0.1)."""
    addresses = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]})
    if addresses != ["127.0.0.1"]:
        ray.shutdown()
        raise FarmError(f"the local Ray cluster came up on {addresses}, not loopback only",
                        "import farm.execute before ray, or set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0")
