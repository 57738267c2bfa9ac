"""Every use of a Ray private API in the farm, in one place (ray==2.60).

Each function says why the farm needs it and which public API would replace it. Everything else in
farm/execute uses Ray's public face: ray.init's public parameters, actors, ray.util.ActorPool,
ray.wait, ray.get_runtime_context(), ray.nodes(). Nothing here changes what a compile produces.
"""

from __future__ import annotations

import os
from typing import Any

import ray
from ray._private import ray_constants
from ray._raylet import Config


def keep_loopback_switch() -> None:
    """Make Ray's copy of its single-machine switch agree with the environment.

    Why: Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, when it is imported (farm/execute/__init__.py
    sets it first); a process that imported Ray before the farm (a test, a notebook) holds the old value,
    and its local cluster would advertise the machine's network address. Public replacement: none for
    ray.init; `ray start --node-ip-address=127.0.0.1` is the CLI's form of the same choice.
    """
    if os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR) == "0":
        ray_constants.ENABLE_RAY_CLUSTER = False


def init_local(num_cpus: int, temp_dir: str, **public: Any) -> None:
    """Start a private local cluster on loopback with its files below `temp_dir`.

    Why `_node_ip_address`: a local cluster must bind and advertise 127.0.0.1 only, whatever the
    machine's interfaces. Why `_temp_dir`: Ray makes its session directories world-writable, so they
    must sit below a directory only this user can enter, and short enough for Ray's Unix sockets.
    Public replacements: `ray start --node-ip-address` and `ray start --temp-dir` (the CLI, a separate
    process to manage); ray.init has no public parameter for either.
    """
    keep_loopback_switch()
    # address="local" always starts a private cluster, never joins a stale one.
    ray.init(address="local", num_cpus=num_cpus, _node_ip_address="127.0.0.1", _temp_dir=temp_dir, **public)


def reload_auth_config() -> None:
    """Make an imported Ray re-read RAY_AUTH_MODE / RAY_AUTH_TOKEN_PATH (the standing cluster's token).

    Why: Ray reads its system config from the environment when it is imported; a build that decides to
    use (or stop using) the standing cluster's token after that needs it read again. Public replacement:
    none in ray==2.60 (Ray's own token setup calls this same function).
    """
    Config.initialize("")
