"""Every use of a Ray private API in the farm, in one place (ray==2.60).

Each function says why the farm needs it and which public API would replace it. Everything else in
farm/execute uses Ray's public face: ray.init's public parameters, actors, ray.util.ActorPool,
ray.wait, ray.get_runtime_context(), ray.nodes(). Nothing here changes what a compile produces.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray._private import ray_constants
from ray._raylet import AuthenticationTokenLoader, Config
from ray.exceptions import AuthenticationError

AUTH_MODE_ENV = "RAY_AUTH_MODE"  # token (the default for a new local cluster) or disabled


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
    write_missing_token_privately()
    # address="local" always starts a private cluster, never joins a stale one.
    ray.init(address="local", num_cpus=num_cpus, _node_ip_address="127.0.0.1", _temp_dir=temp_dir, **public)


def write_missing_token_privately() -> None:
    """Before ray.init starts a local cluster: when Ray would make up a token (token mode on by default,
    none found), write it where Ray would, ~/.ray/auth_token, but readable by this user only.

    Why: Ray writes it with a plain open() under the caller's umask (0644 under the usual 022), and the
    token lets anyone who holds it run code in every cluster that uses it. Ray then finds this one.
    Public replacement: none (`ray get-auth-token --generate` writes 0644 too).
    """
    if os.environ.get(AUTH_MODE_ENV, "").lower() == "disabled" or has_auth_token():
        return
    path = Path.home() / ".ray" / "auth_token"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another build wrote it meanwhile: Ray uses that one
        reload_auth_config()
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    reload_auth_config()


def reload_auth_config() -> None:
    """Make an imported Ray re-read RAY_AUTH_MODE / RAY_AUTH_TOKEN_PATH (the standing cluster's token).

    Why: Ray reads its system config from the environment when it is imported, and its token loader
    keeps the first token it read; a build that decides to use (or stop using) a token after that needs
    both read again. Public replacement: none in ray==2.60 (Ray's own token setup calls these same two).
    """
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def has_auth_token() -> bool:
    """Does Ray find a token where it looks (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token),
    whatever RAY_AUTH_MODE says? A RAY_AUTH_TOKEN_PATH naming no readable file counts as none.

    Why: ray.init starting a local cluster writes a new token to ~/.ray/auth_token when it finds none,
    readable by every local user (plain open() under the usual umask 022); the farm writes it first,
    mode 0600. Public replacement: none (`ray get-auth-token` is the CLI's form, and it too writes 0644).
    """
    loader = AuthenticationTokenLoader.instance()
    loader.reset_cache()
    try:
        return bool(loader.has_token(ignore_auth_mode=True))
    except AuthenticationError:
        return False


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 goes to /dev/null for a moment (native code writes there, not to sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """File descriptor 2 goes to a private temp file for a moment; the list yielded holds what was written
    there once the block ends (native code writes there, not to sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    written: list[str] = []
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield written
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            written.append(sink.read().decode(errors="replace"))


# The start of a line of Ray's native log: [2026-12-04 18:15:02,365 W 10852 10852] rpc_client.h:153: ...
_RAY_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z] \d+ \d+\] (?:[\w.]+:\d+: )?")


def split_ray_log(text: str) -> tuple[list[str], str]:
    """The messages of Ray's native log lines in `text` (their prefix cut), and the rest of it as it was."""
    ray_said, rest = [], []
    for line in text.splitlines(keepends=True):
        found = _RAY_LOG_LINE.match(line)
        if found:
            ray_said.append(line[found.end():].strip())
        else:
            rest.append(line)
    return ray_said, "".join(rest)


@dataclass(frozen=True)
class GcsAnswer:
    """How the GCS at an address met this process's client: `refused`, Ray's words when it refused the token;
    `failed`, Ray's words when nothing there answered as a GCS at all (both None: it answered)."""

    refused: str | None = None
    failed: str | None = None


def ask_gcs(address: str) -> GcsAnswer:
    """Connect a GCS client to `address` (HOST:PORT) once, bounded by Ray's own connect timeout (30 s).

    Why: ray.init against a cluster that refuses the token retries for ~20 s and then blames the address
    (ConnectionError "Failed to connect"); against a port that is not a GCS it retries for good, logging
    warnings all the while. Ray's GCS client asks for the cluster id first and fails at once with
    InvalidAuthToken, or after its timeout with its own words. Public replacement: none.
    """
    from ray._raylet import GcsClient

    try:
        with quiet_stderr():  # Ray's C++ client logs each failed try as a warning line: the caller says it once
            GcsClient(address=address)
    except AuthenticationError as exc:
        text = str(getattr(exc, "message", "") or exc)
        return GcsAnswer(refused=text.strip().splitlines()[0]) if "InvalidAuthToken" in text else GcsAnswer()
    except Exception as exc:  # noqa: BLE001 (whatever it is, no GCS answered there)
        text = str(exc).strip()
        return GcsAnswer(failed=text.splitlines()[0] if text else type(exc).__name__)
    return GcsAnswer()
