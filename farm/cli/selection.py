"""The config and the rows a verb works on: `key=value` overrides -> FarmConfig -> the selected rows."""

from __future__ import annotations

from farm.core.errors import FarmError
from farm.store.preflight import selected_dirs
from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.table.rows import Row


def load(overrides: list[str]) -> config_mod.FarmConfig:
    return config_mod.load(config_mod.find_project_root(), overrides)


def selected_rows(cfg: config_mod.FarmConfig) -> tuple[list[Row], list[Row]]:
    """(selected rows, every row of the selected ops); a selection matching no row is an error, not a
    silent success that did nothing."""
    if not selected_dirs(cfg):  # before rows.select, whose dtype check would blame the dtypes
        built_for = "; ".join(f"{op}: {', '.join(cfg.ops[op].targets)}" for op in cfg.selected_ops)
        raise FarmError(f"no row matches the selection {describe(cfg)}: no selected op is built for a "
                        "selected target", f"choose targets the ops are built for ({built_for})")
    rows, every = fresh_rows(cfg)
    if not rows:
        raise FarmError(f"no row matches the selection {describe(cfg)}",
                        "widen it (fewer dtypes=/names=, other targets=); `farm plan -v ops=[...]` lists the rows")
    return rows, every


def describe(cfg: config_mod.FarmConfig) -> str:
    parts = [f"ops=[{','.join(cfg.selected_ops)}]", f"targets=[{','.join(cfg.selected_targets)}]"]
    parts += [f"dtypes=[{','.join(cfg.selected_dtypes)}]"] if cfg.selected_dtypes else []
    parts += [f"names=[{','.join(cfg.selected_names)}]"] if cfg.selected_names else []
    return " ".join(parts)
