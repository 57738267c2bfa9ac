"""Value checks the schema cannot express (ranges, paths, selections), each with one clear message, so a
typo fails at config load and not mid-build (or silently)."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from farm.core.errors import FarmError
from farm.table.model import MAX_NAME, SAFE_NAME
from farm.table.quoting import listed, shortened, shown
from farm.table.schema import (
    EXECUTOR_KINDS,
    REMOTE_KINDS,
    AuditSettings,
    AuditVary,
    CacheSettings,
    ExecutorSettings,
    RemoteSettings,
    fields_of,
)

PATH_KEYS = ("outputs_dir", "instances_dir", "kernels_dir", "report_dir")
# What the farm keeps below a configured directory (<op>/<target>/<object>.hsaco, reports, DVC's blobs):
# the directory's own path must leave this many bytes of PATH_MAX for them.
ROOM_BELOW = 512
# The longest name the farm writes beside outputs_dir (<name>.code.sha256; also .<name>.lock, <name>.dvc).
BESIDE_OUTPUTS = ".code.sha256"
# A per-row limit past which the timers that enforce it overflow (subprocess and Ray timeouts): a week.
MAX_COMPILE_TIMEOUT_S = 7 * 24 * 3600
# Where conf/config.yaml and conf/remote/local.yaml put the farm's other directories (named in fixes).
DEFAULTS = {"report_dir": ".farm/reports", "remote.url": ".farm/dvc-remote", "kernels_dir": "kernels_src",
            "instances_dir": "instances"}
UNSET = "???"  # OmegaConf's "no value yet" (conf/remote/s3.yaml url, conf/executor/cluster.yaml address)
# The audit's variations (farm/assure/audit.py VARIATIONS), declared once in the schema.
AUDIT_VARIATIONS: tuple[str, ...] = tuple(fields_of(AuditVary) or ())


def nearest(word: str, choices: Iterable[str]) -> str | None:
    near = difflib.get_close_matches(word, list(choices), n=1)
    return near[0] if near else None


def nearest_hint(near: str | None, text: str) -> str:
    """`text` filled with the nearest choice, or nothing when there is none."""
    return text.format(near) if near else ""


def mapping(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FarmError(f"{key} must be a mapping, got {shown(value)}", f"drop the override that replaced {key}")
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a finite float (not a bool, not NaN or infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def positive_number(key: str, value: Any, example: str) -> float:
    if not (is_number(value) and value > 0):
        raise FarmError(f"{key}={shown(value)} is not a positive number", example)
    return float(value)


def compile_timeout(value: Any) -> float:
    """compile_timeout_s: positive, and at most a week (beyond that the timers enforcing it overflow)."""
    example = "e.g. compile_timeout_s=900 (seconds per row)"
    seconds = positive_number("compile_timeout_s", value, example)
    if seconds > MAX_COMPILE_TIMEOUT_S:
        raise FarmError(f"compile_timeout_s={shown(value)} is more than a week ({MAX_COMPILE_TIMEOUT_S} s)", example)
    return seconds


def report_keep(value: Any) -> int:
    """report_keep: how many build reports each output tree keeps, 1 or more."""
    if not (is_int(value) and value >= 1):
        raise FarmError(f"report_keep={shown(value)} is not a whole number >= 1",
                        "e.g. report_keep=20 (the newest build reports kept per output tree)")
    return int(value)


def lock_wait_s(value: Any) -> float | None:
    """lock_wait_s: null (wait as long as it takes) or a finite number of seconds >= 0."""
    if value is None:
        return None
    if not (is_number(value) and value >= 0):
        raise FarmError(f"lock_wait_s={shown(value)} is not a number of seconds >= 0",
                        "lock_wait_s=0 refuses at once when another command holds the lock; null waits")
    return float(value)


def cache_settings(value: Any) -> CacheSettings:
    """cache.restore: true or false."""
    cache = mapping("cache", {} if value is None else value)
    if "restore" in cache and not isinstance(cache["restore"], bool):
        raise FarmError(f"cache.restore={shown(cache['restore'])} is not true or false", "e.g. cache.restore=false")
    return cache  # type: ignore[return-value]  # keys checked against the schema


def remote_settings(root: Path, value: Any) -> RemoteSettings:
    """remote.kind: one the farm speaks; the flags booleans; the other values text. A url that is not set yet
    (???) is left for the commands that use the remote to ask for; a set one is checked now."""
    remote = mapping("remote", value)
    kind = remote.get("kind")
    if kind not in REMOTE_KINDS:
        raise FarmError(f"remote.kind={shown(kind)} is not supported; accepted: {', '.join(REMOTE_KINDS)}",
                        "pick remote=local or remote=s3")
    for key in ("verify", "allow_anonymous_reads"):
        if key in remote and not isinstance(remote[key], bool):
            raise FarmError(f"remote.{key}={shown(remote[key])} is not true or false", f"e.g. remote.{key}=true")
    for key in ("name", "url", "endpointurl", "region"):
        if remote.get(key) is not None and not isinstance(remote[key], str):
            raise FarmError(f"remote.{key}={shown(remote[key])} is not text", f"quote it: remote.{key}='...'")
    url = remote.get("url")
    if isinstance(url, str) and url not in ("", UNSET):
        if kind == "s3" and (not url.startswith("s3://") or len(url) <= len("s3://")):
            raise FarmError(f"remote.url={shown(url)} is not an s3:// URL", "e.g. remote.url=s3://bucket/prefix")
        if kind == "local":
            require_short_path("remote.url", absolute(root, url), room=ROOM_BELOW)
    return remote  # type: ignore[return-value]  # keys checked against the schema


def absolute(root: Path, value: str) -> Path:
    """A configured path as the farm uses it: ~ expanded, relative ones under the project root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


def from_cwd(value: str) -> Path:
    """A path given relative to the working directory (a token file, FARM_PROJECT), made absolute without
    touching the file system."""
    return Path(os.path.abspath(Path(value).expanduser()))


def require_short_path(key: str, path: Path, room: int = 0, suffix: str = "") -> None:
    """Before any file-system call on `path`: every component at most NAME_MAX bytes of the file system it is
    on (the last one with `suffix` added: a name the farm writes beside it), and the whole path, with `room`
    for what the farm keeps below it, under PATH_MAX. Else a later call fails with Errno 36 mid-command."""
    current = Path(path.anchor or ".")
    name_max, path_max = _limits(current)
    size = len(os.fsencode(str(path)))
    if size + room >= path_max:
        below = f", and the farm keeps files up to {room} bytes deeper below it" if room else ""
        raise FarmError(f"{key} is {size} bytes long ({shortened(str(path))}); a path on this system is at most "
                        f"{path_max - 1} bytes (PATH_MAX){below}",
                        f"choose a shorter {key}: at most {path_max - 1 - room} bytes")
    parts = path.parts[1:] if path.anchor else path.parts
    for i, part in enumerate(parts):
        size = len(os.fsencode(part))
        added = suffix if i == len(parts) - 1 and size <= name_max else ""
        if size + len(os.fsencode(added)) > name_max:
            beside = f" and the farm writes <that name>{added} beside it" if added else ""
            raise FarmError(f"{key}: the name {shown(part)} is {size} bytes{beside}; the file system at "
                            f"{shortened(str(current), 200)} takes names of at most {name_max} bytes (NAME_MAX)",
                            f"shorten that name in {key} to at most {name_max - len(os.fsencode(suffix))} bytes")
        current = current / part
        if os.path.isdir(current):  # safe now: every component so far fits; limits can change at a mount
            name_max = _limits(current)[0]


def _limits(directory: Path) -> tuple[int, int]:
    """(NAME_MAX, PATH_MAX) of the file system holding `directory` (POSIX defaults where it will not say)."""
    found = []
    for name, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            value = os.pathconf(directory, name)
        except (OSError, ValueError):
            value = -1
        found.append(value if value > 0 else default)
    return found[0], found[1]


def path_option(root: Path, key: str, value: Any) -> Path:
    """A directory option: a non-empty path (relative to the project root). An empty value would be the
    root itself and `null` a folder named None, so both are refused."""
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        what = "null" if value is None else "empty" if not str(value).strip() else shown(value)
        raise FarmError(f"{key} is {what}, not a directory path",
                        f"give a directory (relative to the project root, or absolute), or drop the {key}= "
                        "override for the default in conf/config.yaml")
    path = absolute(root, str(value))
    require_short_path(key, path, room=ROOM_BELOW, suffix=BESIDE_OUTPUTS if key == "outputs_dir" else "")
    return path


def require_safe_outputs(root: Path, paths: dict[str, Path]) -> None:
    """The farm deletes stray files in outputs_dir/<op>/<target>/: it must never point into the project's
    own inputs, at the project root, or at a directory holding (another) project."""
    out, project = paths["outputs_dir"].resolve(), root.resolve()
    inputs = {"conf": project / "conf", "kernels_dir": paths["kernels_dir"].resolve(),
              "instances_dir": paths["instances_dir"].resolve()}
    problem = ""
    if project.is_relative_to(out):
        problem = "is the project root" if out == project else f"contains the project root {project}"
    elif any(out.is_relative_to(p) for p in inputs.values()):
        problem = "is inside the project's inputs (" + ", ".join(
            f"{k}: {p}" for k, p in inputs.items() if out.is_relative_to(p)) + ")"
    elif (out / "conf").is_dir() or (out / "kernels_src").is_dir():
        problem = "holds conf/ or kernels_src/ (it looks like a project)"
    if problem:
        raise FarmError(f"outputs_dir {out} {problem}: the farm deletes stray files below outputs_dir, "
                        "so it will not write there",
                        "point outputs_dir at a directory of its own, e.g. outputs_dir=outputs (the default) "
                        "or outputs_dir=/tmp/farm-out")


def require_apart_from_outputs(outputs_dir: Path, others: dict[str, Path]) -> None:
    """The farm's other directories (report_dir, a local DVC remote, kernels_dir, instances_dir) and
    outputs_dir hold each other in neither direction, symlinks resolved: a report written inside the output
    tree is a file no row makes, which `farm status` and `farm push` name as a stray on every run (and
    `farm golden` refuses); and an output tree inside report_dir or the remote would mix objects with the
    files the farm writes and prunes there. (outputs_dir inside kernels_dir or instances_dir is refused by
    require_safe_outputs.)"""
    out = outputs_dir.resolve()
    for key, path in others.items():
        other = path.resolve()
        if other == out:
            where, why = "is the same directory as", "the output tree holds only objects and their records"
        elif other.is_relative_to(out):
            where, why = "is inside", ("the output tree holds only objects and their records: `farm status` and "
                                       "`farm push` would name every file there as a stray, on every run")
        elif out.is_relative_to(other) and key in ("report_dir", "remote.url"):
            where, why = "contains", f"the output tree would be mixed with the files the farm keeps in {key}"
        else:
            continue
        raise FarmError(f"{key} {_as_given(path, other)} {where} outputs_dir {_as_given(outputs_dir, out)}: {why}",
                        f"keep them apart: e.g. {key}={DEFAULTS[key]} (the default), or give outputs_dir= or "
                        f"{key}= another directory")


def _as_given(path: Path, resolved: Path) -> str:
    """The path as configured, with where it leads when a symlink or '..' moves it."""
    return str(path) if path == resolved else f"{path} (resolved: {resolved})"


def audit_settings(value: Any) -> AuditSettings:
    """audit.sample: null or a positive row count; audit.vary.<name>: true or false (names: the schema)."""
    audit = mapping("audit", value)
    sample = audit.get("sample")
    if sample is not None and not (is_int(sample) and sample > 0):
        raise FarmError(f"audit.sample={shown(sample)} is not a positive whole number of rows",
                        "e.g. audit.sample=40, or audit.sample=null to audit every selected row")
    vary = mapping("audit.vary", audit.get("vary") or {})
    for name, flag in vary.items():
        if not isinstance(flag, bool):
            raise FarmError(f"audit.vary.{name}={shown(flag)} is not true or false", f"e.g. audit.vary.{name}=false")
    return AuditSettings(**audit)  # type: ignore[typeddict-item]  # keys checked against the schema


def executor_settings(executor: dict[str, Any]) -> ExecutorSettings:
    """kind: local or cluster (a cluster with its address); num_cpus: null or a positive count; max_retries:
    0 or more; standing_idle_minutes: positive; warm, standing and auto_start: booleans; auth_token_path: null
    or a file path. Checked only where the chosen executor config has the key."""
    kind = executor.get("kind")
    if kind not in EXECUTOR_KINDS:
        raise FarmError(f"executor.kind={shown(kind)} is not supported; accepted: {', '.join(EXECUTOR_KINDS)}",
                        "use executor=local or executor=cluster executor.address=HOST:PORT")
    address = executor.get("address")
    if address is not None and not isinstance(address, str):
        raise FarmError(f"executor.address={shown(address)} is not text", "e.g. executor.address=ray://host:10001")
    if kind == "cluster" and address in (None, "", UNSET):
        raise FarmError("executor=cluster needs an address", "add executor.address=HOST:PORT (or ray://HOST:PORT)")
    token = executor.get("auth_token_path")
    if token is not None:
        if not isinstance(token, str) or not token.strip():
            raise FarmError(f"executor.auth_token_path={shown(token)} is not a file path",
                            "point it at the cluster's token file, or null for Ray's own places")
        require_short_path("executor.auth_token_path", from_cwd(token))
    num_cpus = executor.get("num_cpus")
    if num_cpus is not None and not (is_int(num_cpus) and num_cpus > 0):
        raise FarmError(f"executor.num_cpus={shown(num_cpus)} is not a positive whole number",
                        "e.g. executor.num_cpus=2, or executor.num_cpus=null for every core")
    retries = executor.get("max_retries", 0)
    if not (is_int(retries) and retries >= 0):
        raise FarmError(f"executor.max_retries={shown(retries)} is not a whole number of 0 or more",
                        "e.g. executor.max_retries=2")
    if "standing_idle_minutes" in executor:
        positive_number("executor.standing_idle_minutes", executor["standing_idle_minutes"],
                        "e.g. executor.standing_idle_minutes=30")
    for key in ("warm", "standing", "auto_start"):
        if key in executor and not isinstance(executor[key], bool):
            raise FarmError(f"executor.{key}={shown(executor[key])} is not true or false", f"e.g. executor.{key}=false")
    standing_root = executor.get("standing_root")
    if standing_root is not None and (not isinstance(standing_root, str) or not standing_root.strip()):
        raise FarmError(f"executor.standing_root={shown(standing_root)} is not a directory path",
                        "point it at the farm checkout whose standing cluster to share, or null for this project")
    return executor  # type: ignore[return-value]  # keys checked against the schema


def cluster_root(root: Path, executor: ExecutorSettings) -> Path:
    """The project whose standing cluster (its .farm/cluster/) this command uses, starts and stops:
    executor.standing_root, else this project. Another checkout's cluster serves this one's builds only while
    both run the same farm code (the build checks, as for its own); its rows carry their own sources and pin."""
    value = executor.get("standing_root")
    if value is None:
        return root
    path = absolute(root, value)
    require_short_path("executor.standing_root", path)
    path = path.resolve()
    if not (path / "conf" / "config.yaml").is_file():
        raise FarmError(f"executor.standing_root={value} is not a farm project (no conf/config.yaml in {path})",
                        "point it at the farm checkout whose standing cluster to share, or null for this project")
    return path


def name_list(key: str, value: Any, example: str) -> list[str]:
    value = value or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{key} must be a list of names, got {shown(value)}", example)
    return value


def selection(key: str, value: Any, accepted: list[str]) -> tuple[str, ...]:
    """ops=/targets=: empty means all; a name without a conf/<kind>/<name>.yaml is named with that file."""
    if value in (None, []):
        return tuple(accepted)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{key} must be a list of names, got {shown(value)}", f"e.g. {key}=[{accepted[0]}]")
    unknown = [v for v in value if v not in accepted]
    if unknown:
        kind = key[:-1]
        near = nearest(unknown[0], accepted)
        # A file to add is suggested only for a name a file can have (farm/table/tables.py discover).
        add = (f", or add conf/{kind}/{unknown[0]}.yaml" + (" (and its kernels_src/<family>/)" if kind == "op" else "")
               if SAFE_NAME.match(unknown[0]) and len(unknown[0]) <= MAX_NAME else "")
        raise FarmError(f"unknown {kind} {listed(unknown)}; accepted: {', '.join(accepted)}"
                        + nearest_hint(near, "; did you mean {!r}?"),
                        f"pick from the accepted {key}{add}")
    return tuple(dict.fromkeys(value))
