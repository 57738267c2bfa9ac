"""The target and op tables: every conf/target/*.yaml and conf/op/*.yaml, found by listing the folder
(a dropped-in file is a new target or op), each checked against its schema and validated."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from farm.core.errors import FarmError
from farm.table.model import MAX_NAME, SAFE_NAME, Group, Op, Target, Tuning
from farm.table.quoting import listed, shortened, shown
from farm.table.schema import OpFile, TargetFile, TuningFile, fields_of, unknown_key
from farm.table.values import mapping, nearest, nearest_hint
from farm.table.yaml_errors import undecodable, yaml_error
from farm.toolchain.listing import CLASS_NAMES

RESOURCE_RULES = ("scratch", "vgpr_spill", "sgpr_spill")


def discover(root: Path, kind: str) -> dict[str, Path]:
    """name -> file of every conf/<kind>/*.yaml; a file name that cannot be a name is refused."""
    found = {}
    for path in sorted((root / "conf" / kind).glob("*.yaml")):
        name = path.name[: -len(".yaml")]
        if not SAFE_NAME.match(name) or len(name) > MAX_NAME:
            raise FarmError(f"conf/{kind}/{path.name}: {name!r} is not a usable {kind} name "
                            "(lower case letters, digits, '_', '.', '-'; starting with a letter or digit)",
                            f"rename the file to such a name, e.g. conf/{kind}/my_{kind}.yaml")
        found[name] = path
    return found


def read_file(root: Path, path: Path) -> dict[str, Any]:
    """A conf/ file as plain data (YAML read the way Hydra reads it), or one error naming the file."""
    # Imported here: a command whose config comes from the cache (config_cache.py) never loads OmegaConf.
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    where = str(path.relative_to(root))
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except YAMLError as exc:  # not valid YAML: the file, line and column
        raise (yaml_error(root, exc, path) or FarmError(f"{where}: not valid YAML", "fix its syntax")) from None
    except UnicodeDecodeError:
        raise (undecodable(root, [path]) or FarmError(f"{where}: not UTF-8 text", "save it as UTF-8")) from None
    except (OSError, OmegaConfBaseException, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FarmError(f"{where}: cannot be read as YAML ({shortened(first, 300)})",
                        "fix the file's syntax") from None
    return mapping(where, data)


def check_keys(where: str, data: dict[str, Any], schema: Any) -> None:
    """One error for the first key `schema` does not declare, with the nearest accepted one."""
    bad = unknown_key(data, schema)
    if bad is None:
        return
    place = f"{where} {bad.parent}" if bad.parent else where
    raise FarmError(f"{place}: unknown key {shown(bad.key)}{nearest_hint(bad.nearest, ' (did you mean {!r}?)')}",
                    f"{bad.parent.rpartition('.')[2] or 'this file'} takes {', '.join(bad.accepted)}")


Tables = dict[str, dict[str, Any]]  # "conf/target/gfx942.yaml" -> that file's data (read_file)


def table_files(root: Path) -> dict[str, Path]:
    """Where each target and op file's data goes in Tables -> the file."""
    return {f"conf/{kind}/{name}.yaml": path
            for kind in ("target", "op") for name, path in discover(root, kind).items()}


def read_tables(root: Path) -> Tables:
    """Every target and op file as plain data, not yet checked."""
    return {where: read_file(root, path) for where, path in table_files(root).items()}


def load_targets(tables: Tables) -> dict[str, Target]:
    """The targets in `tables` (read_tables), each file checked."""
    return {name: _target(name, data) for name, data in _of_kind(tables, "target")}


def load_ops(targets: dict[str, Target], tables: Tables) -> dict[str, Op]:
    return {name: _op(name, data, targets) for name, data in _of_kind(tables, "op")}


def _of_kind(tables: Tables, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) of every `kind` file in `tables`, in file name order (as `discover` lists them)."""
    prefix, suffix = f"conf/{kind}/", ".yaml"
    return [(where[len(prefix):-len(suffix)], data) for where, data in sorted(tables.items())
            if where.startswith(prefix) and where.endswith(suffix)]


def _require(where: str, spec: Mapping[str, object], keys: list[str]) -> None:
    missing = [k for k in keys if k not in spec or spec[k] is None]
    if missing:
        raise FarmError(f"{where}: missing {', '.join(missing)}", f"add them to {where}")


def _target(name: str, spec: dict[str, Any]) -> Target:
    where = f"conf/target/{name}.yaml"
    check_keys(where, spec, TargetFile)
    _require(where, spec, list(fields_of(TargetFile) or ()))
    if spec["name"] != name:
        raise FarmError(f"{where} says name: {shown(spec['name'])}", f"make it {name!r}")
    if spec["wave_size"] not in (32, 64):
        raise FarmError(f"{where}: wave_size {shown(spec['wave_size'])} is not 32 or 64", "fix the target file")
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


def _op(name: str, data: dict[str, Any], targets: dict[str, Target]) -> Op:
    where = f"conf/op/{name}.yaml"
    spec = cast(OpFile, data)  # its keys are checked next; its values below
    check_keys(where, dict(spec), OpFile)
    _require(where, spec, ["name", "family", "generator", "spec", "symbols", "targets", "groups"])
    if spec["name"] != name:
        raise FarmError(f"{where} says name: {shown(spec['name'])}", f"make it {name!r}")
    unknown = [t for t in spec["targets"] if t not in targets]
    if unknown:
        raise FarmError(f"{where}: unknown target {listed(unknown)}; "
                        f"accepted: {', '.join(sorted(targets))}", "add a conf/target/ file or fix the name")
    if not isinstance(spec["groups"], list) or not spec["groups"]:
        raise FarmError(f"{where}: groups must be a non-empty list of groups", "see conf/op/rmsnorm.yaml")
    base_allow = _allow(where, spec.get("allow"), dict.fromkeys(RESOURCE_RULES, False))
    groups = [_group(f"{where} groups[{i}]", i, g, spec, base_allow) for i, g in enumerate(spec["groups"])]
    names = [g.name for g in groups]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FarmError(f"{where}: group name(s) {twice} used more than once", "give every group its own name")
    tuning = [_tuning(f"{where} tuning[{i}]", t, name, spec) for i, t in enumerate(spec.get("tuning") or [])]
    return Op(name=name, family=str(spec["family"]), generator=str(spec["generator"]),
              spec=str(spec["spec"]), symbols=_symbols(where, spec["symbols"]), targets=tuple(spec["targets"]),
              groups=tuple(groups), tuning=tuple(tuning),
              require_instructions=_instruction_classes(where, spec.get("require_instructions")))


def _group(where: str, index: int, g: Any, op: OpFile, base_allow: dict[str, bool]) -> Group:
    if not isinstance(g, dict) or not isinstance(g.get("axes"), dict) or not g["axes"]:
        raise FarmError(f"{where}: a group needs a non-empty 'axes' mapping", "see conf/op/rmsnorm.yaml")
    for axis, values in g["axes"].items():
        if not isinstance(values, list) or not values:
            raise FarmError(f"{where}: axis {shown(axis)} must be a non-empty list, got {shown(values)}",
                            f"e.g. {axis}: [value1, value2]")
    fmt = g.get("name_format") or op.get("name_format")
    if not fmt:
        raise FarmError(f"{where}: no name_format (group or op level)", "add name_format: '...'")
    group_targets = tuple(g.get("targets") or op["targets"])
    stray = [t for t in group_targets if t not in op["targets"]]
    if stray:
        raise FarmError(f"{where}: target(s) {stray} are not targets of op {op['name']}",
                        f"a group's targets are a subset of the op's: {', '.join(op['targets'])}")
    symbols = _symbols(where, g["symbols"]) if g.get("symbols") is not None else None
    return Group(name=str(g.get("name", index)), axes=dict(g["axes"]), name_format=str(fmt),
                 allow=_allow(where, g.get("allow"), base_allow), targets=group_targets, symbols=symbols)


def _tuning(where: str, t: Any, op_name: str, op: OpFile) -> Tuning:
    if not isinstance(t, dict) or not isinstance(t.get("set"), dict) or not t["set"]:
        raise FarmError(f"{where}: a tuning entry needs a non-empty 'set' mapping",
                        "e.g. {match: {dtype: bf16, n: 16384}, set: {block: 512}}")
    extra = set(t) - set(fields_of(TuningFile) or ())
    if extra:
        raise FarmError(f"{where}: unknown key(s) {sorted(extra)}", "a tuning entry has match, targets, set")
    bad = [x for x in t.get("targets") or () if x not in op["targets"]]
    if bad:
        raise FarmError(f"{where}: target(s) {bad} are not targets of op {op_name}",
                        f"accepted: {', '.join(op['targets'])}")
    return Tuning(match=dict(t.get("match") or {}), targets=tuple(t.get("targets") or ()), set=dict(t["set"]))


def _allow(where: str, spec: Any, base: dict[str, bool]) -> dict[str, bool]:
    allow = dict(base)
    for key, value in (spec or {}).items():
        if key not in RESOURCE_RULES or not isinstance(value, bool):
            raise FarmError(f"{where}: allow.{key}={shown(value)} is not a resource rule",
                            f"allow takes {', '.join(RESOURCE_RULES)} set to true or false")
        allow[key] = value
    return allow


def _symbols(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise FarmError(f"{where}: symbols must be a non-empty list of kernel names, got {shown(value)}",
                        "e.g. symbols: [rmsnorm_fwd_0]")
    return tuple(value)


def _instruction_classes(where: str, value: Any) -> tuple[str, ...]:
    value = value or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{where}: require_instructions must be a list of class names, got {shown(value)}",
                        f"e.g. require_instructions: [mfma]; classes: {', '.join(CLASS_NAMES)}")
    unknown = [v for v in value if v not in CLASS_NAMES]
    if unknown:
        raise FarmError(f"{where}: unknown instruction class {shown(unknown[0])} in require_instructions"
                        + nearest_hint(nearest(unknown[0], CLASS_NAMES), " (did you mean {!r}?)"),
                        f"accepted classes: {', '.join(CLASS_NAMES)}")
    return tuple(value)

