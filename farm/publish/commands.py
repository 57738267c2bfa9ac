"""The `farm ...` commands that push, pull and status print as fixes: they repeat the selection, the
output tree and the remote as given, so that a printed command is the fix exactly as printed."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf

from farm.publish.survey import Directory
from farm.table.config import FarmConfig


@functools.cache
def _remote_choice(conf_dir: Path, overrides: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """(the `remote` option Hydra chooses, the remote group it composes) for conf/ with `overrides`.
    Hydra's own answer: nothing here reads the defaults list."""
    with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
        composed = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    group = OmegaConf.to_container(composed.remote, resolve=True)
    assert isinstance(group, dict)
    return str(composed.hydra.runtime.choices["remote"]), group


def _remote_defaults(conf_dir: Path, kind: str) -> dict[str, Any]:
    """The values conf/remote/<kind>.yaml gives, as composed; {} when there is no such option."""
    try:
        return _remote_choice(conf_dir, (f"remote={kind}",))[1]
    except HydraException:
        return {}


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def remote_args(cfg: FarmConfig) -> list[str]:
    """The overrides that select this remote again: `remote=<kind>` unless it is the default choice, then
    every remote.<key> that differs from that option's own value."""
    raw = cfg.extra.get("remote") or {}
    kind = str(raw.get("kind"))
    conf_dir = cfg.root / "conf"
    default_choice, _ = _remote_choice(conf_dir, ())
    args = [] if kind == default_choice else [f"remote={kind}"]
    base = _remote_defaults(conf_dir, kind)
    args += [f"remote.{key}={_text(value)}" for key, value in raw.items() if base.get(key) != value]
    return args


def outputs_args(cfg: FarmConfig) -> list[str]:
    """outputs_dir= as given."""
    if cfg.outputs_dir.resolve() != (cfg.root / "outputs").resolve():
        return [f"outputs_dir={cfg.outputs_dir.resolve().relative_to(cfg.root.resolve()).as_posix()}"]
    return []


def selection_args(cfg: FarmConfig) -> list[str]:
    """The selection as given (empty lists, everything, print nothing), then dtypes= and outputs_dir=."""
    args = []
    if set(cfg.selected_ops) != set(cfg.ops):
        args.append(f"ops=[{','.join(cfg.selected_ops)}]")
    if set(cfg.selected_targets) != set(cfg.targets):
        args.append(f"targets=[{','.join(cfg.selected_targets)}]")
    if cfg.selected_dtypes:
        args.append(f"dtypes=[{','.join(cfg.selected_dtypes)}]")
    return args + outputs_args(cfg)


def command(verb: str, *args: str) -> str:
    return "`" + " ".join(["farm", verb, *args]) + "`"


def build_command(cfg: FarmConfig, d: Directory) -> str:
    """Builds every row of the directory (no dtypes=: its missing rows may be of any dtype)."""
    return command("build", f"ops=[{d.op}]", f"targets=[{d.target}]", *outputs_args(cfg))


def not_built(cfg: FarmConfig, rel: str, d: Directory) -> str:
    return (f"NOT BUILT {rel}/{d.op}/{d.target}/: {len(d.missing)} of {len(d.rows)} rows have no object here; "
            f"build them: {build_command(cfg, d)}")
