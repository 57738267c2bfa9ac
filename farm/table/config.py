"""Load the Hydra config (conf/ plus command-line overrides) into typed, validated objects."""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.core.errors import FarmError

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
    require_instructions: tuple[str, ...] = ()  # instruction classes (farm.toolchain.disasm) every object must contain

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
        key, eq, _ = text.partition("=")
        if not eq or not key.lstrip("+~").strip():
            raise FarmError(f"malformed override {text!r}: overrides look like key=value, with a key",
                            "e.g. targets=[gfx942] ops=[rmsnorm] outputs_dir=/tmp/out")
    try:
        with initialize_config_dir(config_dir=str(root / "conf"), version_base=None):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except OverrideParseException as exc:
        raise FarmError(f"malformed override: {exc}",
                        "overrides look like key=value, lists like targets=[gfx942,gfx950]") from None
    except (ConfigCompositionException, MissingConfigException, OmegaConfBaseException) as exc:
        raise FarmError(_explain_composition_error(root, exc, overrides), None) from None
    except ValueError as exc:  # Hydra's own check, e.g. `executor=1` (a config group given a number)
        groups = [o for o in overrides if (root / "conf" / o.partition("=")[0].lstrip("+~")).is_dir()]
        raise FarmError(f"config error{' in ' + ' '.join(groups) if groups else ''}: {exc}",
                        "a config group takes the name of a file under conf/<group>/, e.g. executor=cluster") from None
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
    """Compose and validate: unknown targets, ops, bad values or malformed tables fail here, before any compile."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(compose(root, overrides), resolve=True)
    assert isinstance(raw, dict)
    targets = {name: _target(name, spec) for name, spec in _mapping("target_table", raw.get("target_table")).items()}
    ops = {name: _op(name, spec, targets) for name, spec in _mapping("op_table", raw.get("op_table")).items()}

    selected_ops = _selection("ops", raw.get("ops"), sorted(ops))
    selected_targets = _selection("targets", raw.get("targets"), sorted(targets))
    dtypes = _name_list("dtypes", raw.get("dtypes"), "e.g. dtypes=[bf16,f16]")
    names = _name_list("names", raw.get("names"), "e.g. names=[rmsnorm_bf16_infer_n4096]")
    if raw.get("row_order") not in ("sorted", "reversed"):
        raise FarmError(f"row_order={raw.get('row_order')!r}; accepted: sorted, reversed", "e.g. row_order=reversed")
    paths = {key: _path(root, key, raw.get(key)) for key in PATH_KEYS}
    _require_safe_outputs(root, paths)
    raw["audit"] = _audit_settings(raw.get("audit"))
    executor = _executor_settings(_mapping("executor", raw.get("executor")))

    return FarmConfig(
        root=root,
        targets=targets,
        ops=ops,
        toolchain_pin=_mapping("toolchain", raw.get("toolchain")),
        executor=executor,
        selected_ops=selected_ops,
        selected_targets=selected_targets,
        selected_dtypes=tuple(dtypes),
        selected_names=tuple(names),
        outputs_dir=paths["outputs_dir"],
        instances_dir=paths["instances_dir"],
        kernels_dir=paths["kernels_dir"],
        report_dir=paths["report_dir"],
        compile_timeout_s=_positive_number("compile_timeout_s", raw.get("compile_timeout_s"),
                                           "e.g. compile_timeout_s=900 (seconds per row)"),
        extra={k: v for k, v in raw.items() if k not in {
            "target_table", "op_table", "toolchain", "executor", "ops", "targets", "dtypes", "names",
            "outputs_dir", "instances_dir", "kernels_dir", "report_dir", "compile_timeout_s"}},
    )


# --------------------------------------------------------------------------------------------------
# Values: each checked for its type and range, so a typo fails here and not mid-build (or silently).

PATH_KEYS = ("outputs_dir", "instances_dir", "kernels_dir", "report_dir")


def _mapping(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FarmError(f"{key} must be a mapping, got {value!r}", f"drop the override that replaced {key}")
    return value


def _path(root: Path, key: str, value: Any) -> Path:
    """A directory option: a non-empty path (relative to the project root). An empty value would be the
    root itself and `null` a folder named None, so both are refused."""
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        shown = "null" if value is None else "empty" if not str(value).strip() else repr(value)
        raise FarmError(f"{key} is {shown}, not a directory path",
                        f"give a directory (relative to the project root, or absolute), or drop the {key}= "
                        "override for the default in conf/config.yaml")
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else (root / path)


def _require_safe_outputs(root: Path, paths: dict[str, Path]) -> None:
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_number(key: str, value: Any, example: str) -> float:
    ok = (isinstance(value, int | float) and not isinstance(value, bool)
          and math.isfinite(value) and value > 0)
    if not ok:
        raise FarmError(f"{key}={value!r} is not a positive number", example)
    return float(value)


def _audit_settings(value: Any) -> dict[str, Any]:
    """audit.sample: null or a positive row count; audit.vary.<name>: true or false, known names only."""
    audit = _mapping("audit", value)
    sample = audit.get("sample")
    if sample is not None and not (_is_int(sample) and sample > 0):
        raise FarmError(f"audit.sample={sample!r} is not a positive whole number of rows",
                        "e.g. audit.sample=40, or audit.sample=null to audit every selected row")
    vary = _mapping("audit.vary", audit.get("vary") or {})
    for name, flag in vary.items():
        if name not in AUDIT_VARIATIONS:
            near = difflib.get_close_matches(str(name), AUDIT_VARIATIONS, n=1)
            raise FarmError(f"unknown audit variation audit.vary.{name}"
                            + (f"; did you mean 'audit.vary.{near[0]}'?" if near else ""),
                            f"accepted: {', '.join(AUDIT_VARIATIONS)}")
        if not isinstance(flag, bool):
            raise FarmError(f"audit.vary.{name}={flag!r} is not true or false", f"e.g. audit.vary.{name}=false")
    return audit


# The audit's variations (farm/assure/audit.py VARIATIONS; kept here so that config loading stays light).
AUDIT_VARIATIONS = ("cwd", "tmpdir", "home", "locale", "timezone", "umask", "hash_seed", "env_noise", "row_order",
                    "workers")


def _executor_settings(executor: dict[str, Any]) -> dict[str, Any]:
    """num_cpus: null or a positive count; max_retries: 0 or more; standing_idle_minutes: positive;
    warm and standing: booleans. Checked only where the chosen executor config has the key."""
    num_cpus = executor.get("num_cpus")
    if num_cpus is not None and not (_is_int(num_cpus) and num_cpus > 0):
        raise FarmError(f"executor.num_cpus={num_cpus!r} is not a positive whole number",
                        "e.g. executor.num_cpus=2, or executor.num_cpus=null for every core")
    retries = executor.get("max_retries", 0)
    if not (_is_int(retries) and retries >= 0):
        raise FarmError(f"executor.max_retries={retries!r} is not a whole number of 0 or more",
                        "e.g. executor.max_retries=2")
    if "standing_idle_minutes" in executor:
        _positive_number("executor.standing_idle_minutes", executor["standing_idle_minutes"],
                         "e.g. executor.standing_idle_minutes=30")
    for key in ("warm", "standing"):
        if key in executor and not isinstance(executor[key], bool):
            raise FarmError(f"executor.{key}={executor[key]!r} is not true or false", f"e.g. executor.{key}=false")
    return executor


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
    spec = _mapping(f"target_table.{name}", spec)
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
    spec = _mapping(f"op_table.{name}", spec)
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
        _known_group_keys(gwhere, g)
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


_GROUP_KEYS = ("name", "name_format", "axes", "allow", "targets")


def _known_group_keys(where: str, group: dict[str, Any]) -> None:
    """A misspelt key (`tagets:`) would otherwise be ignored and the group built for every target."""
    for key in group:
        if key not in _GROUP_KEYS:
            near = difflib.get_close_matches(str(key), _GROUP_KEYS, n=1)
            raise FarmError(f"{where}: unknown key {key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""),
                            f"a group takes {', '.join(_GROUP_KEYS)}")


def _instruction_classes(where: str, value: Any) -> tuple[str, ...]:
    from farm.toolchain.disasm import CLASS_NAMES

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
