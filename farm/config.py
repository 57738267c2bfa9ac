"""Load the Hydra config (conf/ plus command-line overrides) into typed, validated objects."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FarmError

SAFE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass(frozen=True)
class Target:
    """One compile target: what the object must say it is, and how to lower for it."""

    name: str
    family: str
    elf_machine: int
    generic_version: int
    members: tuple[str, ...]
    wave_size: int
    mlir_chipset: str
    python_arch: str
    lds_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "elf_machine": self.elf_machine,
            "generic_version": self.generic_version,
            "members": list(self.members),
            "wave_size": self.wave_size,
            "mlir_chipset": self.mlir_chipset,
            "python_arch": self.python_arch,
            "lds_bytes": self.lds_bytes,
        }


@dataclass(frozen=True)
class Group:
    name: str
    axes: dict[str, list[Any]]
    name_format: str
    allow: dict[str, bool]
    targets: tuple[str, ...]  # the op's targets this group is built for


@dataclass(frozen=True)
class Tuning:
    """Knob settings for the rows that match, without renaming them (e.g. one row's block size)."""

    match: dict[str, Any]
    targets: tuple[str, ...]
    set: dict[str, Any]


@dataclass(frozen=True)
class Op:
    """One kernel family as the config declares it."""

    name: str
    family: str
    generator: str
    spec: str
    symbols: tuple[str, ...]
    targets: tuple[str, ...]
    groups: tuple[Group, ...]
    tuning: tuple[Tuning, ...] = ()
    require_instructions: tuple[str, ...] = ()  # instruction classes (farm.disasm) every object must contain

    def compile_identity(self) -> dict[str, Any]:
        """The op-level fields that decide an object's bytes or its acceptance (part of every input digest)."""
        return {"name": self.name, "family": self.family, "generator": self.generator,
                "symbols": list(self.symbols), "require_instructions": list(self.require_instructions)}


@dataclass(frozen=True)
class FarmConfig:
    root: Path
    targets: dict[str, Target]
    ops: dict[str, Op]
    toolchain_pin: dict[str, Any]
    executor: dict[str, Any]
    selected_ops: tuple[str, ...]
    selected_targets: tuple[str, ...]
    selected_dtypes: tuple[str, ...]
    selected_names: tuple[str, ...]
    outputs_dir: Path
    instances_dir: Path
    kernels_dir: Path
    report_dir: Path
    compile_timeout_s: float
    extra: dict[str, Any] = field(default_factory=dict)


def find_project_root(start: Path | None = None) -> Path:
    """The project is the nearest directory holding conf/config.yaml (or $FARM_PROJECT)."""
    env = os.environ.get("FARM_PROJECT")
    if env:
        root = Path(env).resolve()
        if not (root / "conf" / "config.yaml").is_file():
            raise FarmError(f"FARM_PROJECT={env} has no conf/config.yaml",
                            "point FARM_PROJECT at a farm checkout, or unset it")
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "conf" / "config.yaml").is_file():
            return candidate
    raise FarmError(f"no farm project found at or above {here} (no conf/config.yaml)",
                    "run farm inside a checkout of the farm, or set FARM_PROJECT")


def compose(root: Path, overrides: list[str]) -> Any:
    """Compose conf/config.yaml with `overrides`; turn Hydra's errors into one clear line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    for text in overrides:
        if "=" not in text:
            raise FarmError(f"malformed override {text!r}: overrides look like key=value",
                            "e.g. targets=[gfx942] ops=[rmsnorm] outputs_dir=/tmp/out")
    try:
        with initialize_config_dir(config_dir=str(root / "conf"), version_base=None):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except OverrideParseException as exc:
        raise FarmError(f"malformed override: {exc}",
                        "overrides look like key=value, lists like targets=[gfx942,gfx950]") from None
    except (ConfigCompositionException, MissingConfigException, OmegaConfBaseException) as exc:
        raise FarmError(_explain_composition_error(root, exc, overrides), None) from None
    return cfg


def _explain_composition_error(root: Path, exc: Exception, overrides: list[str]) -> str:
    message = str(exc).splitlines()[0]
    cause = exc.__cause__ or exc
    match = re.search(r"Could not override '([^']+)'", message) or re.search(
        r"Key '([^']+)' is not in struct", str(cause))
    if match:
        key = match.group(1)
        parent, _, leaf = key.rpartition(".")
        known = _known_keys(root, parent)
        near = difflib.get_close_matches(leaf, known, n=1)
        hint = f"; did you mean '{parent + '.' if parent else ''}{near[0]}'?" if near else ""
        return (f"unknown option '{key}' in overrides{hint}\n"
                f"  accepted{' under ' + parent if parent else ''}: {', '.join(sorted(known))}")
    return f"config error: {message}"


def _known_keys(root: Path, parent: str) -> list[str]:
    """The keys a (dotted) parent node of the composed default config accepts."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(root / "conf"), version_base=None):
        node = hydra_compose(config_name="config")
    for part in [p for p in parent.split(".") if p]:
        node = node.get(part) if OmegaConf.is_dict(node) else None
        if node is None:
            return []
    return [str(k) for k in node.keys()] if OmegaConf.is_dict(node) else []


def load(root: Path, overrides: list[str]) -> FarmConfig:
    """Compose and validate: unknown targets, ops or malformed tables fail here, before any compile."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(compose(root, overrides), resolve=True)
    assert isinstance(raw, dict)
    targets = {name: _target(name, spec) for name, spec in raw["target_table"].items()}
    ops = {name: _op(name, spec, targets) for name, spec in raw["op_table"].items()}

    selected_ops = _selection("ops", raw.get("ops"), sorted(ops))
    selected_targets = _selection("targets", raw.get("targets"), sorted(targets))
    dtypes = _name_list("dtypes", raw.get("dtypes"), "e.g. dtypes=[bf16,f16]")
    names = _name_list("names", raw.get("names"), "e.g. names=[rmsnorm_bf16_infer_n4096]")
    if raw.get("row_order") not in ("sorted", "reversed"):
        raise FarmError(f"row_order={raw.get('row_order')!r}; accepted: sorted, reversed", "e.g. row_order=reversed")

    def path_of(key: str) -> Path:
        value = Path(str(raw[key])).expanduser()
        return value if value.is_absolute() else (root / value)

    return FarmConfig(
        root=root,
        targets=targets,
        ops=ops,
        toolchain_pin=raw["toolchain"],
        executor=raw["executor"],
        selected_ops=selected_ops,
        selected_targets=selected_targets,
        selected_dtypes=tuple(dtypes),
        selected_names=tuple(names),
        outputs_dir=path_of("outputs_dir"),
        instances_dir=path_of("instances_dir"),
        kernels_dir=path_of("kernels_dir"),
        report_dir=path_of("report_dir"),
        compile_timeout_s=float(raw["compile_timeout_s"]),
        extra={k: v for k, v in raw.items() if k not in {
            "target_table", "op_table", "toolchain", "executor", "ops", "targets", "dtypes", "names",
            "outputs_dir", "instances_dir", "kernels_dir", "report_dir", "compile_timeout_s"}},
    )


def _name_list(key: str, value: Any, example: str) -> list[str]:
    value = value or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{key} must be a list of names, got {value!r}", example)
    return value


def _selection(key: str, value: Any, accepted: list[str]) -> tuple[str, ...]:
    if value in (None, []):
        return tuple(accepted)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{key} must be a list of names, got {value!r}", f"e.g. {key}=[{accepted[0]}]")
    unknown = [v for v in value if v not in accepted]
    if unknown:
        raise FarmError(f"unknown {key[:-1]} {', '.join(repr(u) for u in unknown)}; "
                        f"accepted: {', '.join(accepted)}",
                        f"pick from the accepted {key}, or add a config under conf/")
    return tuple(dict.fromkeys(value))


def _require(where: str, spec: dict[str, Any], keys: list[str]) -> None:
    missing = [k for k in keys if k not in spec or spec[k] is None]
    if missing:
        raise FarmError(f"{where}: missing {', '.join(missing)}", f"add them to {where}")


def _target(name: str, spec: dict[str, Any]) -> Target:
    where = f"conf/target/{name}.yaml"
    _require(where, spec, ["name", "family", "elf_machine", "generic_version", "members", "wave_size",
                           "mlir_chipset", "python_arch", "lds_bytes"])
    if spec["name"] != name:
        raise FarmError(f"{where} says name: {spec['name']!r}", f"make it {name!r}")
    if spec["wave_size"] not in (32, 64):
        raise FarmError(f"{where}: wave_size {spec['wave_size']!r} is not 32 or 64", "fix the target file")
    return Target(
        name=name,
        family=str(spec["family"]),
        elf_machine=int(spec["elf_machine"]),
        generic_version=int(spec["generic_version"]),
        members=tuple(spec["members"]),
        wave_size=int(spec["wave_size"]),
        mlir_chipset=str(spec["mlir_chipset"]),
        python_arch=str(spec["python_arch"]),
        lds_bytes=int(spec["lds_bytes"]),
    )


_RESOURCE_RULES = ("scratch", "vgpr_spill", "sgpr_spill")


def _allow(where: str, spec: Any, base: dict[str, bool]) -> dict[str, bool]:
    allow = dict(base)
    for key, value in (spec or {}).items():
        if key not in _RESOURCE_RULES or not isinstance(value, bool):
            raise FarmError(f"{where}: allow.{key}={value!r} is not a resource rule",
                            f"allow takes {', '.join(_RESOURCE_RULES)} set to true or false")
        allow[key] = value
    return allow


_OP_KEYS = ("name", "family", "generator", "spec", "symbols", "targets", "groups", "allow", "name_format",
            "tuning", "require_instructions")


def _op(name: str, spec: dict[str, Any], targets: dict[str, Target]) -> Op:
    where = f"conf/op/{name}.yaml"
    _require(where, spec, ["name", "family", "generator", "spec", "symbols", "targets", "groups"])
    for key in spec:
        if key not in _OP_KEYS:
            near = difflib.get_close_matches(str(key), _OP_KEYS, n=1)
            raise FarmError(f"{where}: unknown key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""),
                            f"an op file takes {', '.join(_OP_KEYS)}")
    if spec["name"] != name:
        raise FarmError(f"{where} says name: {spec['name']!r}", f"make it {name!r}")
    unknown = [t for t in spec["targets"] if t not in targets]
    if unknown:
        raise FarmError(f"{where}: unknown target {', '.join(map(repr, unknown))}; "
                        f"accepted: {', '.join(sorted(targets))}", "add a conf/target/ file or fix the name")
    base_allow = _allow(where, spec.get("allow"), dict.fromkeys(_RESOURCE_RULES, False))
    groups = []
    for i, g in enumerate(spec["groups"]):
        gwhere = f"{where} groups[{i}]"
        if not isinstance(g, dict) or not isinstance(g.get("axes"), dict) or not g["axes"]:
            raise FarmError(f"{gwhere}: a group needs a non-empty 'axes' mapping", "see conf/op/rmsnorm.yaml")
        for axis, values in g["axes"].items():
            if not isinstance(values, list) or not values:
                raise FarmError(f"{gwhere}: axis {axis!r} must be a non-empty list, got {values!r}",
                                f"e.g. {axis}: [value1, value2]")
        fmt = g.get("name_format") or spec.get("name_format")
        if not fmt:
            raise FarmError(f"{gwhere}: no name_format (group or op level)", "add name_format: '...'")
        group_targets = tuple(g.get("targets") or spec["targets"])
        stray = [t for t in group_targets if t not in spec["targets"]]
        if stray:
            raise FarmError(f"{gwhere}: target(s) {stray} are not targets of op {name}",
                            f"a group's targets are a subset of the op's: {', '.join(spec['targets'])}")
        groups.append(Group(name=str(g.get("name", i)), axes=dict(g["axes"]), name_format=str(fmt),
                            allow=_allow(gwhere, g.get("allow"), base_allow), targets=group_targets))
    tuning = []
    for i, t in enumerate(spec.get("tuning") or []):
        twhere = f"{where} tuning[{i}]"
        if not isinstance(t, dict) or not isinstance(t.get("set"), dict) or not t["set"]:
            raise FarmError(f"{twhere}: a tuning entry needs a non-empty 'set' mapping",
                            "e.g. {match: {dtype: bf16, n: 16384}, set: {block: 512}}")
        extra = set(t) - {"match", "targets", "set"}
        if extra:
            raise FarmError(f"{twhere}: unknown key(s) {sorted(extra)}", "a tuning entry has match, targets, set")
        bad = [x for x in t.get("targets") or () if x not in spec["targets"]]
        if bad:
            raise FarmError(f"{twhere}: target(s) {bad} are not targets of op {name}",
                            f"accepted: {', '.join(spec['targets'])}")
        tuning.append(Tuning(match=dict(t.get("match") or {}), targets=tuple(t.get("targets") or ()),
                             set=dict(t["set"])))
    return Op(name=name, family=str(spec["family"]), generator=str(spec["generator"]),
              spec=str(spec["spec"]), symbols=tuple(spec["symbols"]), targets=tuple(spec["targets"]),
              groups=tuple(groups), tuning=tuple(tuning),
              require_instructions=_instruction_classes(where, spec.get("require_instructions")))


def _instruction_classes(where: str, value: Any) -> tuple[str, ...]:
    from .disasm import CLASS_NAMES

    value = value or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{where}: require_instructions must be a list of class names, got {value!r}",
                        f"e.g. require_instructions: [mfma]; classes: {', '.join(CLASS_NAMES)}")
    unknown = [v for v in value if v not in CLASS_NAMES]
    if unknown:
        hint = difflib.get_close_matches(unknown[0], CLASS_NAMES, n=1)
        raise FarmError(f"{where}: unknown instruction class {unknown[0]!r} in require_instructions"
                        + (f" (did you mean {hint[0]!r}?)" if hint else ""),
                        f"accepted classes: {', '.join(CLASS_NAMES)}")
    return tuple(value)
