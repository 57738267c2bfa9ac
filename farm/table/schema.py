"""The config's schema: every key a conf/ file or an override may set, declared once with its type.

The settings that stay mappings at run time (executor, remote, toolchain pin, audit) are TypedDicts, so
their readers keep `.get` and the pin keeps its exact digest; op and target files are declared here too.
`unknown_key` walks composed data against these declarations: a misspelled key anywhere is found with
its full path. (OmegaConf's own structured merge is not used for this: it turns `yes` into true and
drops list positions from its error keys, so a typo in groups[3] could not be named where it is.)
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any, TypedDict, Union

from farm.toolchain.shapes import ToolchainPin  # the pin's shape is the toolchain's own

# --------------------------------------------------------------------------------------------------
# conf/target/<name>.yaml and conf/op/<name>.yaml


class TargetFile(TypedDict):
    name: str
    family: str
    elf_machine: int
    generic_version: int
    members: list[str]
    wave_size: int
    mlir_chipset: str
    python_arch: str
    lds_bytes: int


class AllowFile(TypedDict, total=False):
    """Resource rules: each true allows it in the objects (default: none allowed)."""

    scratch: bool
    vgpr_spill: bool
    sgpr_spill: bool


class GroupFile(TypedDict, total=False):
    name: str
    name_format: str
    axes: dict[str, list[Any]]  # axis name -> its values (any names: the spec module judges them)
    allow: AllowFile
    targets: list[str]  # a subset of the op's targets
    symbols: list[str]  # this group's kernels, when they differ from the op's


class TuningFile(TypedDict, total=False):
    match: dict[str, Any]
    targets: list[str]
    set: dict[str, Any]


class OpFile(TypedDict, total=False):
    name: str
    family: str
    generator: str
    spec: str
    symbols: list[str]
    targets: list[str]
    groups: list[GroupFile]
    allow: AllowFile
    name_format: str
    tuning: list[TuningFile]
    require_instructions: list[str]


# --------------------------------------------------------------------------------------------------
# conf/config.yaml and its groups (conf/executor/, conf/remote/, conf/toolchain/)


EXECUTOR_KINDS = ("local", "cluster")  # executor.kind
REMOTE_KINDS = ("local", "s3")  # remote.kind


class ExecutorSettings(TypedDict, total=False):
    kind: str  # local (a private Ray cluster) or cluster (an existing one)
    address: str | None
    num_cpus: int | None
    max_retries: int
    standing: bool
    standing_idle_minutes: float
    auto_start: bool  # executor=local: a build with no standing cluster up starts one (off when CI=true)
    standing_root: str | None  # executor=local: the project whose standing cluster to use (None: this one)
    warm: bool
    auth_token_path: str | None  # executor=cluster: the cluster's Ray auth token (default: Ray's own places)


class RemoteSettings(TypedDict, total=False):
    kind: str
    name: str
    url: str
    endpointurl: str | None
    region: str | None
    allow_anonymous_reads: bool
    verify: bool


class AuditVary(TypedDict, total=False):
    cwd: bool
    tmpdir: bool
    home: bool
    locale: bool
    timezone: bool
    umask: bool
    hash_seed: bool
    env_noise: bool
    row_order: bool
    workers: bool


class AuditSettings(TypedDict, total=False):
    sample: int | None
    vary: AuditVary


class CacheSettings(TypedDict, total=False):
    # farm build fetches rows whose published objects (outputs.dvc) are current from the DVC cache or
    # remote instead of compiling them; false compiles every row (the audit and CI's build from nothing).
    restore: bool


class ConfigFile(TypedDict, total=False):
    """The composed top level: conf/config.yaml plus the chosen file of each group."""

    toolchain: ToolchainPin
    executor: ExecutorSettings
    remote: RemoteSettings
    ops: list[str]
    targets: list[str]
    dtypes: list[str]
    names: list[str]
    outputs_dir: str
    instances_dir: str
    kernels_dir: str
    report_dir: str
    report_keep: int
    compile_timeout_s: float
    lock_wait_s: float | None
    row_order: str
    audit: AuditSettings
    cache: CacheSettings


# The config groups: a file under conf/<group>/ chosen by name (e.g. executor=cluster).
CONFIG_GROUPS = ("executor", "remote", "toolchain")


# --------------------------------------------------------------------------------------------------
# Walking data against the schema.


@dataclass(frozen=True)
class UnknownKey:
    """A key the schema does not declare: where it is, and what is accepted there."""

    path: str  # dotted, with list positions: groups[1].tagets
    parent: str  # the path of the mapping that holds it ('' at the top)
    key: str
    accepted: tuple[str, ...]

    @property
    def nearest(self) -> str | None:
        near = difflib.get_close_matches(self.key, self.accepted, n=1)
        return near[0] if near else None


def fields_of(schema: Any) -> dict[str, Any] | None:
    """The declared keys of a TypedDict (name -> type), or None for anything else."""
    schema = strip_optional(schema)
    if isinstance(schema, type) and typing.is_typeddict(schema):
        return typing.get_type_hints(schema)
    return None


def child_schema(schema: Any, key: str) -> tuple[bool, Any]:
    """(is `key` accepted, the schema of its value) under `schema`; Any accepts every key."""
    schema = strip_optional(schema)
    fields = fields_of(schema)
    if fields is not None:
        return (key in fields, fields.get(key, Any))
    if typing.get_origin(schema) is dict:
        return True, typing.get_args(schema)[1]
    if typing.get_origin(schema) is list and key.isdigit():
        return True, typing.get_args(schema)[0]
    return True, Any


def unknown_key(value: Any, schema: Any, path: str = "") -> UnknownKey | None:
    """The first key in `value` that `schema` does not declare (depth first, in the data's order)."""
    schema = strip_optional(schema)
    fields = fields_of(schema)
    if isinstance(value, dict):
        for key, item in value.items():
            key = str(key)
            known, sub = child_schema(schema, key)
            here = f"{path}.{key}" if path else key
            if not known:
                return UnknownKey(here, path, key, tuple(fields or ()))
            found = unknown_key(item, sub, here)
            if found:
                return found
    elif isinstance(value, list) and typing.get_origin(schema) is list:
        for i, item in enumerate(value):
            found = unknown_key(item, typing.get_args(schema)[0], f"{path}[{i}]")
            if found:
                return found
    return None


def strip_optional(schema: Any) -> Any:
    """X for `X | None` (and Optional[X]); anything else unchanged."""
    if typing.get_origin(schema) in (Union, types.UnionType):
        args = [a for a in typing.get_args(schema) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return schema
