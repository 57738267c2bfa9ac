"""The instance table: one row per object, as checked in under instances/."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from farm.core.errors import FarmError
from farm.table.config import SAFE_NAME, FarmConfig
from farm.table.quoting import listed, shown


class RowJson(TypedDict):
    """One line of instances/<op>.jsonl."""

    op: str
    target: str
    name: str
    group: str
    knobs: dict[str, Any]  # knob name -> value, whatever the op's spec module accepts
    allow: dict[str, bool]


@dataclass(frozen=True)
class Row:
    """One object to build: which op, for which target, with which knobs and resource rules."""

    op: str
    target: str
    name: str
    group: str
    knobs: dict[str, Any]  # knob name -> value, whatever the op's spec module accepts
    allow: dict[str, bool]

    @property
    def key(self) -> str:
        return f"{self.op}/{self.target}/{self.name}"

    @property
    def file_name(self) -> str:
        return f"{self.name}.hsaco"

    def relpath(self) -> str:
        return f"{self.op}/{self.target}/{self.file_name}"

    def to_json(self) -> RowJson:
        return {"op": self.op, "target": self.target, "name": self.name, "group": self.group,
                "knobs": self.knobs, "allow": self.allow}

    @staticmethod
    def from_json(data: Any, where: str) -> Row:
        """A row read back from instances/: data, so every name is checked before it can name a file."""
        fix = "regenerate it with `farm expand`"
        if not isinstance(data, dict):
            raise FarmError(f"{where}: malformed row (not a JSON object)", fix)
        try:
            row = Row(op=data["op"], target=data["target"], name=data["name"], group=str(data["group"]),
                      knobs=dict(data["knobs"]), allow=dict(data["allow"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise FarmError(f"{where}: malformed row (missing or wrong field {exc})", fix) from None
        for field in ("op", "target", "name"):
            value = getattr(row, field)
            if not isinstance(value, str) or not SAFE_NAME.match(value) or len(value) > 150:
                raise FarmError(f"{where}: row {field} {shown(value)} leaves the safe alphabet [a-z0-9_.-]", fix)
        return row


def sort_key(row: Row) -> tuple[str, str, str]:
    return (row.op, row.target, row.name)


def table_path(instances_dir: Path, op: str) -> Path:
    return instances_dir / f"{op}.jsonl"


def render_table(rows: list[Row]) -> str:
    """One compact JSON object per line, sorted: small diffs when a row is added."""
    lines = [json.dumps(r.to_json(), sort_keys=True, separators=(",", ":")) for r in sorted(rows, key=sort_key)]
    return "".join(line + "\n" for line in lines)


def load_table(cfg: FarmConfig, op: str) -> list[Row]:
    path = table_path(cfg.instances_dir, op)
    if not path.is_file():
        raise FarmError(f"{path} is missing: the instance table of op {op!r} was never expanded",
                        "run `farm expand` and commit instances/")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FarmError(f"{path}: not UTF-8 text (byte {exc.start})", "regenerate it with `farm expand`") from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FarmError(f"{where}: not JSON ({exc.msg})", "regenerate it with `farm expand`") from None
        row = Row.from_json(data, where)
        if row.op != op:
            raise FarmError(f"{where}: a row of op {row.op!r} in the table of op {op!r}",
                            "regenerate it with `farm expand`")
        rows.append(row)
    return rows


def select(cfg: FarmConfig, rows: list[Row]) -> list[Row]:
    """Apply ops=/targets=/dtypes= selection; an unknown dtype is an error, not an empty build."""
    rows = [r for r in rows if r.op in cfg.selected_ops and r.target in cfg.selected_targets]
    if cfg.selected_dtypes:
        known = sorted({str(r.knobs.get("dtype")) for r in rows if "dtype" in r.knobs})
        unknown = [d for d in cfg.selected_dtypes if d not in known]
        if unknown:
            raise FarmError(f"unknown dtype {listed(unknown)} for the selected ops; "
                            f"accepted: {', '.join(known)}", "pick from the accepted dtypes")
        rows = [r for r in rows if r.knobs.get("dtype") in cfg.selected_dtypes]
    if cfg.selected_names:
        # A name selects that object on every selected target; op/target/name selects one row.
        known_names = {r.name for r in rows} | {r.key for r in rows}
        unknown = [n for n in cfg.selected_names if n not in known_names]
        if unknown:
            near = difflib.get_close_matches(unknown[0], sorted(known_names), n=3)
            raise FarmError(f"no selected row is named {listed(unknown)}"
                            + (f"; close: {', '.join(near)}" if near else ""),
                            "names are object names without .hsaco, as in instances/ (see `farm plan -v`)")
        wanted = set(cfg.selected_names)
        rows = [r for r in rows if r.name in wanted or r.key in wanted]
    return sorted(rows, key=sort_key)
