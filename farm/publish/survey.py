"""What push, pull and status look at: every <op>/<target>/ directory the selection builds or outputs/
holds, which rows of each have an object on disk, what no row accounts for, and the drift guard on it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from farm.assure.check import check
from farm.core.errors import FarmError
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig
from farm.table.expand import fresh_rows
from farm.table.rows import Row, load_table, table_path

DirKey = tuple[str, str]  # (op, target)


@dataclass(frozen=True)
class Directory:
    """One outputs/<op>/<target>/ the table builds: its rows, and which of them have no object on disk."""

    op: str
    target: str
    rows: tuple[Row, ...]  # every row of instances/ that builds into it
    missing: tuple[Row, ...]  # rows whose object is not on disk (all of them when the directory is absent)
    absent: bool  # no such directory, or an empty one: nothing of it would be published

    @property
    def key(self) -> DirKey:
        return self.op, self.target

    @property
    def present(self) -> list[Row]:
        gone = {r.key for r in self.missing}
        return [r for r in self.rows if r.key not in gone]

    @property
    def incomplete(self) -> bool:
        """Some objects are here and some rows have none: a partial build (or objects deleted)."""
        return not self.absent and bool(self.missing)


@dataclass(frozen=True)
class Survey:
    """The selection's directories plus every one present (DVC publishes the whole tree, so nothing in it
    goes unchecked)."""

    dirs: dict[DirKey, Directory]
    every: list[Row]  # every row of every op's table
    strays: list[str]  # entries of outputs/ no row accounts for

    @property
    def checked(self) -> list[Row]:
        """The rows whose objects are here: these the drift guard checks (a missing row is not drift)."""
        return [r for d in self.dirs.values() for r in d.present]

    @property
    def absent(self) -> list[Directory]:
        return [d for d in self.dirs.values() if d.absent]

    @property
    def incomplete(self) -> list[Directory]:
        return [d for d in self.dirs.values() if d.incomplete]

    @property
    def table_dirs(self) -> list[DirKey]:
        """Every <op>/<target>/ directory the whole table builds (every op's, whatever is selected)."""
        return sorted({(r.op, r.target) for r in self.every})

    @property
    def lacking(self) -> list[DirKey]:
        """The table's directories with nothing here: a listing of this tree has none of them."""
        here = {key for key, d in self.dirs.items() if not d.absent}
        return [key for key in self.table_dirs if key not in here]

    def lookup(self, cfg: FarmConfig, key: DirKey) -> Directory | None:
        """The directory as surveyed; one only the pointer has (outside the selection) is looked at too;
        None when no row of instances/ builds it."""
        if key in self.dirs:
            return self.dirs[key]
        rows = tuple(r for r in self.every if (r.op, r.target) == key)
        return directory(cfg, key, rows) if rows else None


def survey(cfg: FarmConfig) -> Survey:
    selected, every = fresh_rows(cfg)
    others = [op for op in sorted(cfg.ops)
              if op not in cfg.selected_ops and table_path(cfg.instances_dir, op).is_file()]
    every = every + [r for op in others for r in load_table(cfg, op)]
    by_dir: dict[DirKey, list[Row]] = {}
    for row in every:
        by_dir.setdefault((row.op, row.target), []).append(row)
    present, strays = _present(cfg.outputs_dir, set(by_dir))
    wanted = {(r.op, r.target) for r in selected} | present
    dirs = {key: directory(cfg, key, tuple(by_dir[key])) for key in sorted(wanted)}
    return Survey(dirs=dirs, every=every, strays=strays)


def directory(cfg: FarmConfig, key: DirKey, rows: tuple[Row, ...]) -> Directory:
    op, target = key
    try:
        with OutputDir(cfg.outputs_dir, op, target) as out:
            if not out.exists or not out.names():
                return Directory(op, target, rows, rows, absent=True)
            # Row file names were validated when the table was loaded; kind() never follows a symlink.
            missing = tuple(r for r in rows if out.kind(r.file_name) is None)
    except FarmError:  # a symlinked directory: present, so the drift guard names it
        missing = ()
    return Directory(op, target, rows, missing, absent=False)


def _present(out: Path, known: set[DirKey]) -> tuple[set[DirKey], list[str]]:
    present: set[DirKey] = set()
    strays: list[str] = []
    if not out.is_dir():
        return present, strays
    for op_dir in sorted(out.iterdir()):
        if not op_dir.is_dir():
            strays.append(f"{op_dir}: not an <op>/<target>/ directory")
            continue
        for t_dir in sorted(op_dir.iterdir()):
            if t_dir.is_dir() and (op_dir.name, t_dir.name) in known:
                present.add((op_dir.name, t_dir.name))
            else:
                strays.append(f"{t_dir}: no row of instances/ builds this "
                              + ("directory" if t_dir.is_dir() else "file"))
    return present, strays


def drift(cfg: FarmConfig, found: Survey) -> list[str]:
    """The drift guard on every object that is here; rows without one are reported as not built instead."""
    return found.strays + check(cfg, found.checked, found.every)


def dir_of(path: str) -> DirKey | None:
    """The <op>/<target> directory of a path relative to outputs/ (None for anything shallower)."""
    parts = path.split("/")
    return (parts[0], parts[1]) if len(parts) >= 3 else None
