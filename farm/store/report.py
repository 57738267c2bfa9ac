"""Build reports: what a build did, and what it belongs to; kept outside outputs/ (timings vary).

Each report records the command line, the output tree and the project's git commit (with a dirty
flag: uncommitted or untracked changes), so a report found later says which sources it speaks of.
Reports are named per output tree (`build-<tree tag>-<UTC stamp>-<pid>.json`), and only the newest
`report_keep` of each tree are kept. A build that had nothing to do writes none.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from farm.core.atomic import write_text_atomic
from farm.core.canonical import canonical_json, sha256_bytes
from farm.core.errors import FarmError
from farm.store.lock import command_line
from farm.store.trace import chrome_trace
from farm.table.config import FarmConfig

DEFAULT_KEEP = 20

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Origin:
    """What a report belongs to."""

    command: str
    outputs_dir: str
    git_commit: str | None  # None outside a git checkout (or without git)
    git_dirty: bool | None


def _git(root: Path, *args: str) -> str | None:
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False,
                          timeout=60)
    return proc.stdout if proc.returncode == 0 else None


def origin(cfg: FarmConfig) -> Origin:
    commit = _git(cfg.root, "rev-parse", "HEAD")
    status = _git(cfg.root, "status", "--porcelain") if commit else None
    return Origin(command=command_line(),
                  outputs_dir=str(cfg.outputs_dir.resolve()),
                  git_commit=commit.strip() if commit else None,
                  git_dirty=bool(status.strip()) if status is not None else None)


def origin_fields(cfg: FarmConfig) -> dict[str, Any]:
    return asdict(origin(cfg))


def tree_tag(cfg: FarmConfig) -> str:
    """A short name for the output tree, so each tree's reports are kept (and pruned) apart."""
    return sha256_bytes(str(cfg.outputs_dir.resolve()).encode())[:8]


def keep_count(cfg: FarmConfig) -> int:
    value = cfg.extra.get("report_keep", DEFAULT_KEEP)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FarmError(f"report_keep={value!r} is not a whole number >= 1",
                        f"e.g. report_keep={DEFAULT_KEEP} (the newest reports kept per output tree)")
    return value


def write_build_report(cfg: FarmConfig, report: dict[str, Any]) -> Path | str:
    """Write the report and its timeline, then drop this tree's oldest beyond `report_keep`. The name carries
    the time to the microsecond and the pid: two builds never write the same report. A report that cannot be
    written (disk full) is said in one line; it never hides the build's own result."""
    keep = keep_count(cfg)
    stamp = report["started_utc"].replace(":", "").replace("-", "").split("+")[0].replace(".", "-")
    name = f"build-{tree_tag(cfg)}-{stamp}-{os.getpid()}"
    path = cfg.report_dir / f"{name}.json"
    try:
        text = canonical_json(report)
        write_text_atomic(path, text)
        write_text_atomic(cfg.report_dir / "latest-build.json", text)
        trace = canonical_json(chrome_trace(report["rows"]))
        write_text_atomic(cfg.report_dir / f"{name}.trace.json", trace)
        write_text_atomic(cfg.report_dir / "latest-build.trace.json", trace)
        _prune(cfg.report_dir, tree_tag(cfg), keep)
    except OSError as exc:
        log.warning("the build report could not be written to %s (%s)", cfg.report_dir, exc.strerror or exc)
        return f"not written ({exc.strerror or exc})"
    return path


def _prune(report_dir: Path, tag: str, keep: int) -> None:
    """Remove this tree's reports beyond the newest `keep` (names sort by time). Only regular files whose
    names the farm gave them are touched."""
    reports = sorted(p for p in report_dir.glob(f"build-{tag}-*.json")
                     if not p.name.endswith(".trace.json") and p.is_file() and not p.is_symlink())
    for old in reports[:-keep]:
        old.unlink(missing_ok=True)
        trace = old.with_name(old.name[: -len(".json")] + ".trace.json")
        if trace.is_file() and not trace.is_symlink():
            trace.unlink()
