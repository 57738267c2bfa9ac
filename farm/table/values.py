"""Value checks the schema cannot express (ranges, paths, selections), each with one clear message, so a
typo fails at config load and not mid-build (or silently)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from farm.core.errors import FarmError
from farm.table.schema import AuditSettings, AuditVary, ExecutorSettings, fields_of

PATH_KEYS = ("outputs_dir", "instances_dir", "kernels_dir", "report_dir")
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
        raise FarmError(f"{key} must be a mapping, got {value!r}", f"drop the override that replaced {key}")
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_number(key: str, value: Any, example: str) -> float:
    ok = (isinstance(value, int | float) and not isinstance(value, bool)
          and math.isfinite(value) and value > 0)
    if not ok:
        raise FarmError(f"{key}={value!r} is not a positive number", example)
    return float(value)


def path_option(root: Path, key: str, value: Any) -> Path:
    """A directory option: a non-empty path (relative to the project root). An empty value would be the
    root itself and `null` a folder named None, so both are refused."""
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        shown = "null" if value is None else "empty" if not str(value).strip() else repr(value)
        raise FarmError(f"{key} is {shown}, not a directory path",
                        f"give a directory (relative to the project root, or absolute), or drop the {key}= "
                        "override for the default in conf/config.yaml")
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else (root / path)


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


def audit_settings(value: Any) -> AuditSettings:
    """audit.sample: null or a positive row count; audit.vary.<name>: true or false (names: the schema)."""
    audit = mapping("audit", value)
    sample = audit.get("sample")
    if sample is not None and not (is_int(sample) and sample > 0):
        raise FarmError(f"audit.sample={sample!r} is not a positive whole number of rows",
                        "e.g. audit.sample=40, or audit.sample=null to audit every selected row")
    vary = mapping("audit.vary", audit.get("vary") or {})
    for name, flag in vary.items():
        if not isinstance(flag, bool):
            raise FarmError(f"audit.vary.{name}={flag!r} is not true or false", f"e.g. audit.vary.{name}=false")
    return AuditSettings(**audit)  # type: ignore[typeddict-item]  # keys checked against the schema


def executor_settings(executor: dict[str, Any]) -> ExecutorSettings:
    """num_cpus: null or a positive count; max_retries: 0 or more; standing_idle_minutes: positive;
    warm, standing and auto_start: booleans. Checked only where the chosen executor config has the key."""
    num_cpus = executor.get("num_cpus")
    if num_cpus is not None and not (is_int(num_cpus) and num_cpus > 0):
        raise FarmError(f"executor.num_cpus={num_cpus!r} is not a positive whole number",
                        "e.g. executor.num_cpus=2, or executor.num_cpus=null for every core")
    retries = executor.get("max_retries", 0)
    if not (is_int(retries) and retries >= 0):
        raise FarmError(f"executor.max_retries={retries!r} is not a whole number of 0 or more",
                        "e.g. executor.max_retries=2")
    if "standing_idle_minutes" in executor:
        positive_number("executor.standing_idle_minutes", executor["standing_idle_minutes"],
                        "e.g. executor.standing_idle_minutes=30")
    for key in ("warm", "standing", "auto_start"):
        if key in executor and not isinstance(executor[key], bool):
            raise FarmError(f"executor.{key}={executor[key]!r} is not true or false", f"e.g. executor.{key}=false")
    return executor  # type: ignore[return-value]  # keys checked against the schema


def name_list(key: str, value: Any, example: str) -> list[str]:
    value = value or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{key} must be a list of names, got {value!r}", example)
    return value


def selection(key: str, value: Any, accepted: list[str]) -> tuple[str, ...]:
    """ops=/targets=: empty means all; a name without a conf/<kind>/<name>.yaml is named with that file."""
    if value in (None, []):
        return tuple(accepted)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FarmError(f"{key} must be a list of names, got {value!r}", f"e.g. {key}=[{accepted[0]}]")
    unknown = [v for v in value if v not in accepted]
    if unknown:
        kind = key[:-1]
        near = nearest(unknown[0], accepted)
        raise FarmError(f"unknown {kind} {', '.join(repr(u) for u in unknown)}; accepted: {', '.join(accepted)}"
                        + nearest_hint(near, "; did you mean {!r}?"),
                        f"pick from the accepted {key}, or add conf/{kind}/{unknown[0]}.yaml"
                        + (" (and its kernels_src/<family>/)" if kind == "op" else ""))
    return tuple(dict.fromkeys(value))
