"""Ray token authentication for `executor=cluster`: find the token where Ray keeps it (or where
executor.auth_token_path says), use it without the user exporting anything, and turn a refused or
missing token into one error that names it.

Ray (2.60) looks for a token in RAY_AUTH_TOKEN, then the file RAY_AUTH_TOKEN_PATH names, then
~/.ray/auth_token; but it sends one only when RAY_AUTH_MODE=token, and a driver given an explicit
address never turns that on by itself. A cluster started by `ray start --head` on a machine that holds
~/.ray/auth_token requires the token, so such a driver is refused (InvalidAuthToken, visible only in
Ray's log lines) and ray.init gives up after ~20 s blaming the address. The farm asks the cluster's GCS
first (without a token, then with the one it found) and turns token mode on only when the cluster
requires it. Before that it checks that a Ray GCS could be at the address at all (`reachable`: something
listens and speaks HTTP/2, as gRPC does), and an address where no GCS answers is one error too: ray.init
would retry at it for good, printing Ray's warnings.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from farm.core.errors import FarmError
from farm.execute import ray_compat

log = logging.getLogger(__name__)

MODE_ENV = ray_compat.AUTH_MODE_ENV
TOKEN_ENV = "RAY_AUTH_TOKEN"
PATH_ENV = "RAY_AUTH_TOKEN_PATH"
CONNECT_TIMEOUT_S = 5.0  # a reachability probe of the cluster's GCS port before ray.init's long retries
FIX_TOKEN = ("copy the cluster's token (`ray get-auth-token` on its head) into ~/.ray/auth_token "
             "(chmod 600), or set executor.auth_token_path=FILE")

Saved = dict[str, str | None]  # environment variables as they were before the build set them


@dataclass(frozen=True)
class Token:
    """Where this build's token comes from (for messages), and the file holding it, when it is a file."""

    source: str
    path: Path | None


def default_path() -> Path:
    return Path.home() / ".ray" / "auth_token"


def find(configured: str | None) -> Token | None:
    """The token this build sends: executor.auth_token_path first, then Ray's own places in its order."""
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file() or not path.read_text().strip():
            raise FarmError(f"executor.auth_token_path={configured}: no such file, or it is empty",
                            "point executor.auth_token_path at the file holding the cluster's token")
        return Token(f"executor.auth_token_path={configured}", path)
    if os.environ.get(TOKEN_ENV):
        return Token(f"the {TOKEN_ENV} environment variable", None)
    if os.environ.get(PATH_ENV):
        path = Path(os.environ[PATH_ENV])
        return Token(f"{PATH_ENV}={path}", path)
    path = default_path()
    return Token(str(path), path) if path.is_file() else None


def prepare(address: str, configured: str | None) -> Saved:
    """Before ray.init(address): set this process's Ray up to send the cluster's token exactly when the
    cluster requires one, or raise one FarmError naming the problem. Returns what to restore.

    Why not always send a token found: a driver in token mode also requires tokens on its own RPC
    server, so the workers of a cluster without authentication could not reach it (actors die).
    An explicit RAY_AUTH_MODE stays the user's; ray:// and `auto` addresses are left to Ray."""
    token = find(configured)
    saved = save()
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return saved
    reachable(address, host, int(port))
    if MODE_ENV not in os.environ:
        os.environ[MODE_ENV] = "disabled"  # first ask without a token: does the cluster require one?
        ray_compat.reload_auth_config()
        first = ray_compat.ask_gcs(address)
        if first.failed is not None:
            restore(saved)
            raise not_a_gcs(address, first.failed)
        if first.refused is None:
            restore(saved)
            return saved
        if token is None:
            restore(saved)
            raise refused(address, None, first.refused)
        os.environ[MODE_ENV] = "token"
    if configured and token is not None and token.path is not None:  # the config key wins over Ray's places
        os.environ.pop(TOKEN_ENV, None)
        os.environ[PATH_ENV] = str(token.path)
    ray_compat.reload_auth_config()
    answer = ray_compat.ask_gcs(address)
    if answer.failed is not None:
        restore(saved)
        raise not_a_gcs(address, answer.failed)
    if answer.refused is not None:
        restore(saved)
        raise refused(address, token, answer.refused)
    if token is not None and token.path is not None and os.environ.get(MODE_ENV) == "token":
        warn_if_readable(token.path)
    return saved


def save() -> Saved:
    """The token variables as they are now, for `restore`."""
    return {name: os.environ.get(name) for name in (MODE_ENV, TOKEN_ENV, PATH_ENV)}


def restore(saved: Saved) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    ray_compat.reload_auth_config()


def warn_if_readable(path: Path) -> None:
    """A token others can read lets them run code on the cluster: say so (the file is the user's)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the Ray auth token %s is readable by other users (mode %o); chmod 600 %s",
                    path, stat.S_IMODE(mode), path)


def reachable(address: str, host: str, port: int) -> None:
    """A Ray GCS could be at the address: something listens there and speaks HTTP/2, as gRPC does. Else
    ray.init would retry (for good, at a port that is not Ray's), printing Ray's warnings all the while."""
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise FarmError(f"nothing answers at executor.address={address} ({exc})",
                        "start the cluster's head there (ray start --head --port=PORT), "
                        "or fix executor.address") from None
    with sock:
        try:
            sock.sendall(HTTP2_PREFACE + EMPTY_SETTINGS)
            answer: bytes | None = _first_bytes(sock, len(EMPTY_SETTINGS))
        except TimeoutError:
            answer = None
        except OSError:
            answer = b""  # it hung up on the preface
    if answer is not None and len(answer) == len(EMPTY_SETTINGS) and answer[3] == SETTINGS_FRAME:
        return
    said = (f"it said nothing within {CONNECT_TIMEOUT_S:g} s" if answer is None
            else f"it answered {answer[:16]!r}" if answer else "it hung up")
    raise FarmError(f"executor.address={address} is not a Ray cluster's GCS port: it does not speak gRPC ({said})",
                    FIX_ADDRESS)


FIX_ADDRESS = ("use the address `ray start --head` printed on the head (HOST:6379 unless --port chose another; "
               "`ray status` there shows it)")


def not_a_gcs(address: str, failed: str) -> FarmError:
    """The error for a gRPC server at the address that does not answer as Ray's GCS (Ray's words in parentheses)."""
    return FarmError(f"executor.address={address} does not answer as a Ray cluster's GCS (Ray: {failed})",
                     FIX_ADDRESS)


# A gRPC server, Ray's GCS among them, speaks HTTP/2: to the client's connection preface it answers with a
# SETTINGS frame first (RFC 9113, section 3.4). The client sends its own, empty, SETTINGS frame with it.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # length 0, type 4 (SETTINGS), no flags, stream 0
SETTINGS_FRAME = 4


def _first_bytes(sock: socket.socket, count: int) -> bytes:
    """Up to `count` bytes of the peer's answer (fewer when it hangs up first)."""
    got = b""
    while len(got) < count:
        chunk = sock.recv(count - len(got))
        if not chunk:
            break
        got += chunk
    return got


def refused(address: str, token: Token | None, refusal: str) -> FarmError:
    """The error for a cluster that refuses what this process sends (Ray's words in parentheses)."""
    if os.environ.get(MODE_ENV, "").lower() == "disabled":
        return FarmError(f"the Ray cluster at {address} requires an auth token, and RAY_AUTH_MODE=disabled in "
                         f"this environment keeps Ray from sending one (Ray: {refusal})",
                         f"unset RAY_AUTH_MODE; then {FIX_TOKEN}")
    if token is None:
        return FarmError(f"the Ray cluster at {address} requires an auth token, and none was found "
                         f"({TOKEN_ENV} and {PATH_ENV} unset, no {default_path()}; Ray: {refusal})", FIX_TOKEN)
    return FarmError(f"the Ray cluster at {address} refused the auth token from {token.source} (Ray: {refusal})",
                     f"use that cluster's own token: {FIX_TOKEN}")
