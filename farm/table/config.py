"""Load the config (conf/ plus command-line overrides) into typed, validated objects.

conf/config.yaml and its groups (executor, remote, toolchain) are composed by Hydra; every
conf/target/*.yaml and conf/op/*.yaml is found by listing its folder (farm.table.tables). Every key is
checked against the schema (farm.table.schema): overrides before composing, files after. What Hydra and
OmegaConf give is kept between commands (farm.table.config_cache) and checked the same way when used.
Hydra and OmegaConf are imported only when a config is composed: a command whose config is kept needs
neither."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.core.errors import FarmError
from farm.table import config_cache
from farm.table.config_cache import Composed
from farm.table.model import SAFE_NAME, Group, Op, Target, Tuning
from farm.table.quoting import shortened, shown
from farm.table.schema import CONFIG_GROUPS, ConfigFile, ExecutorSettings, ToolchainPin, unknown_key
from farm.table.tables import load_ops, load_targets, read_tables, table_files
from farm.table.values import (
    AUDIT_VARIATIONS,
    PATH_KEYS,
    UNSET,
    absolute,
    audit_settings,
    cache_settings,
    cluster_root,
    compile_timeout,
    executor_settings,
    from_cwd,
    lock_wait_s,
    mapping,
    name_list,
    path_option,
    remote_settings,
    report_keep,
    require_apart_from_outputs,
    require_safe_outputs,
    require_short_path,
    selection,
)
from farm.table.yaml_errors import undecodable, yaml_error

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["AUDIT_VARIATIONS", "SAFE_NAME", "FarmConfig", "Group", "Op", "Target", "Tuning", "compose",
           "find_project_root", "load"]


@dataclass(frozen=True)
class FarmConfig:
    root: Path
    targets: dict[str, Target]
    ops: dict[str, Op]
    toolchain_pin: ToolchainPin  # a mapping: its digest is part of every input record
    executor: ExecutorSettings
    selected_ops: tuple[str, ...]
    selected_targets: tuple[str, ...]
    selected_dtypes: tuple[str, ...]
    selected_names: tuple[str, ...]
    outputs_dir: Path
    instances_dir: Path
    kernels_dir: Path
    report_dir: Path
    compile_timeout_s: float
    cluster_root: Path  # the project whose standing cluster this command uses (executor.standing_root, else root)
    extra: ConfigFile = field(default_factory=ConfigFile)  # the remaining top-level options (audit, remote, ...)


def find_project_root(start: Path | None = None) -> Path:
    """The project is the nearest directory holding conf/config.yaml (or $FARM_PROJECT)."""
    env = os.environ.get("FARM_PROJECT")
    if env:
        require_short_path("FARM_PROJECT", from_cwd(env))
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


def compose(root: Path, overrides: list[str]) -> DictConfig:
    """Compose conf/config.yaml with `overrides` (checked against the schema first) into one config."""
    return _compose(root, overrides)[0]


def _compose(root: Path, overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """(the composed config, the file chosen for each config group)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    from farm.table.overrides import check_overrides  # Hydra's override parser

    check_overrides(root, overrides)
    try:
        with initialize_config_dir(config_dir=str(root / "conf"), version_base=None):
            cfg = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except OverrideParseException as exc:
        raise FarmError(f"malformed override: {shortened(str(exc), 300)}",
                        "overrides look like key=value, lists like targets=[gfx942,gfx950]") from None
    except (ConfigCompositionException, MissingConfigException, OmegaConfBaseException, ValueError,
            YAMLError) as exc:
        # A file Hydra read that is not valid YAML (PyYAML's error, raised through Hydra as it is), or not
        # UTF-8 text (which Hydra does not name): one error naming the file.
        yaml_files = [p for p in config_cache.files_under(root / "conf") if p.suffix == ".yaml"]
        problem = yaml_error(root, exc) or (undecodable(root, yaml_files) if isinstance(exc, UnicodeError) else None)
        if problem:
            raise problem from None
        # Keys and group names were checked above; what is left is e.g. a declared key that the chosen
        # group file does not set (Hydra only overrides keys a file has; `+key=value` adds one).
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FarmError(f"config error: {shortened(first, 300)}",
                        "to set an option the chosen config file does not have, add it: +key=value") from None
    choices = {str(k): str(v) for k, v in cfg.hydra.runtime.choices.items()}
    with open_dict(cfg):
        del cfg["hydra"]  # Hydra's own settings (some resolve only inside a Hydra app)
    return cfg, choices


def _composed(root: Path, overrides: list[str]) -> Composed:
    """What Hydra and OmegaConf give: kept from an earlier command with the same inputs, else composed and read
    now (and kept). Either way the top level is checked here and the rest by `load`."""
    try:
        key = config_cache.key_for(root, overrides)
    except OSError:  # a conf/ file that cannot be read: composing it says which
        key = None
    kept = config_cache.lookup(key) if key else None
    if kept is not None and set(kept.files) == set(table_files(root)) and _top_ok(kept):
        return kept
    from omegaconf import OmegaConf

    cfg, choices = _compose(root, overrides)
    top = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(top, dict)
    _check_top(top, choices)
    composed = Composed(top=top, choices=choices, files=read_tables(root))
    if key:
        config_cache.keep(key, composed)
    return composed


def _top_ok(kept: Composed) -> bool:
    """A kept entry passes the check its fresh compose passed (one that does not was not written by `keep`)."""
    try:
        _check_top(kept.top, kept.choices)
    except FarmError:
        return False
    return True


def _check_top(raw: dict[str, Any], choices: dict[str, str]) -> None:  # the keys of ConfigFile, values unchecked
    """Every key of the composed top level is declared (a stray one named with its file)."""
    if "op_table" in raw or "target_table" in raw:
        raise FarmError("conf/config.yaml lists op or target files in its defaults (op@op_table.NAME or "
                        "target@target_table.NAME)",
                        "remove those lines: every conf/op/*.yaml and conf/target/*.yaml is found by itself")
    bad = unknown_key(raw, ConfigFile)
    if bad is not None:
        top = bad.path.split(".")[0]
        where = f"conf/{top}/{choices.get(top)}.yaml" if top in CONFIG_GROUPS else "conf/config.yaml"
        near = bad.nearest
        raise FarmError(f"{where}: unknown key '{bad.path}'"
                        + (f"; did you mean '{bad.parent + '.' if bad.parent else ''}{near}'?" if near else ""),
                        f"{'accepted under ' + bad.parent if bad.parent else 'accepted'}: {', '.join(bad.accepted)}")


def load(root: Path, overrides: list[str]) -> FarmConfig:
    """Compose and validate: unknown targets, ops, bad values or malformed tables fail here, before any compile."""
    composed = _composed(root, overrides)
    raw = dict(composed.top)
    targets = load_targets(composed.files)
    ops = load_ops(targets, composed.files)
    if not ops or not targets:
        raise FarmError(f"no {'op' if not ops else 'target'} files under conf/{'op' if not ops else 'target'}/",
                        "add one file per op (conf/op/NAME.yaml) and per target (conf/target/NAME.yaml)")

    selected_ops = selection("ops", raw.get("ops"), sorted(ops))
    selected_targets = selection("targets", raw.get("targets"), sorted(targets))
    dtypes = name_list("dtypes", raw.get("dtypes"), "e.g. dtypes=[bf16,f16]")
    names = name_list("names", raw.get("names"), "e.g. names=[rmsnorm_bf16_infer_n4096]")
    if raw.get("row_order") not in ("sorted", "reversed"):
        raise FarmError(f"row_order={shown(raw.get('row_order'))}; accepted: sorted, reversed",
                        "e.g. row_order=reversed")
    # Every value is checked here, before any command does any work (none is left for its first use).
    paths = {key: path_option(root, key, raw.get(key)) for key in PATH_KEYS}  # lengths first: no call fails
    require_safe_outputs(root, paths)
    raw["audit"] = audit_settings(raw.get("audit"))
    executor = executor_settings(mapping("executor", raw.get("executor")))
    compile_timeout_s = compile_timeout(raw.get("compile_timeout_s"))
    if "report_keep" in raw:  # absent: the reports' own default (farm/observe/report.py)
        report_keep(raw["report_keep"])
    lock_wait_s(raw.get("lock_wait_s"))
    cache_settings(raw.get("cache"))
    apart = {key: paths[key] for key in ("report_dir", "kernels_dir", "instances_dir")}
    if "remote" in raw:  # without the group, the commands that need a remote say so
        remote = raw["remote"] = remote_settings(root, raw["remote"])
        url = remote.get("url")
        if remote.get("kind") == "local" and isinstance(url, str) and url not in ("", UNSET):
            apart["remote.url"] = absolute(root, url)
    require_apart_from_outputs(paths["outputs_dir"], apart)
    pin = mapping("toolchain", raw.get("toolchain"))
    for tool in ("linker", "disassembler"):
        where = pin.get(tool)
        if isinstance(where, dict) and isinstance(where.get("path"), str) and where["path"]:
            require_short_path(f"toolchain.{tool}.path", from_cwd(where["path"]))
    taken = {"toolchain", "executor", "ops", "targets", "dtypes", "names", *PATH_KEYS, "compile_timeout_s"}

    return FarmConfig(
        root=root,
        targets=targets,
        ops=ops,
        toolchain_pin=pin,  # type: ignore[arg-type]  # keys checked
        executor=executor,
        selected_ops=selected_ops,
        selected_targets=selected_targets,
        selected_dtypes=tuple(dtypes),
        selected_names=tuple(names),
        outputs_dir=paths["outputs_dir"],
        instances_dir=paths["instances_dir"],
        kernels_dir=paths["kernels_dir"],
        report_dir=paths["report_dir"],
        compile_timeout_s=compile_timeout_s,
        cluster_root=cluster_root(root, executor),
        extra={k: v for k, v in raw.items() if k not in taken},  # type: ignore[typeddict-item]
    )
