"""A local Ray cluster of the farm's own: its size, its private temp directory, loopback only."""

from __future__ import annotations

import logging
from typing import Any

import ray

from farm.core.errors import FarmError
from farm.execute import ray_compat
from farm.execute.settings import num_cpus
from farm.worker.environment import short_private_dir

log = logging.getLogger(__name__)

__all__ = ["num_cpus", "ray_temp_dir", "require_loopback", "start"]  # num_cpus: read before Ray, re-exported

# Ray puts its sockets at <temp dir>/session_<date>_<micro>_<pid>/sockets/plasma_store, ~65 bytes below
# its temp dir, and a Unix socket path holds at most ~107: a longer private temp dir is moved to /tmp.
RAY_TEMP_DIR_MAX = 40
# Ray's own chatter stays out of the farm's output: its errors reach the farm as exceptions.
QUIET = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}


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
