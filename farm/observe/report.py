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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from farm.contract import PhaseJson
from farm.core.atomic import write_text_atomic
from farm.core.canonical import canonical_json, sha256_bytes
from farm.core.errors import FarmError
from farm.observe.driver_cost import DriverReport
from farm.observe.trace import TimedRow, chrome_trace
from farm.store.lock import command_line
from farm.table.config import FarmConfig

DEFAULT_KEEP = 20

log = logging.getLogger(__name__)


class ReportRow(TimedRow, total=False):
    """One row of a build report. A compiled row has every field of the worker's result the report keeps
    (farm/contract.py REPORT_FIELDS) plus `written` and `refused`; a re-verified row has key, ok, reverified,
    written and refused."""

    seconds: float | None
    warmup_seconds: float | None
    worker: str | None  # "node pid P"
    toolchain: dict[str, Any] | None  # the worker's toolchain fingerprint
    stderr: str
    written: bool  # its object was written (or, re-verified, its entry re-recorded)
    refused: str | None  # why it was not accepted
    reverified: bool
    restored: bool  # its object came back from the DVC cache (farm/restore/), verified, instead of compiling


class Conditions(TypedDict):
    """The driver's conditions during a build (an audit rebuilds under varied ones and proves they did not
    matter)."""

    cwd: str
    tmpdir: str
    home: str | None
    lang: str | None
    tz: str | None
    umask: str  # octal, 4 digits
    hash_seed: str | None  # PYTHONHASHSEED
    row_order: str | None
    workers: int | None
    env_noise: list[str]  # which of the variables an audit sets were set


class OriginFields(TypedDict):
    """`Origin` as report fields."""

    command: str
    outputs_dir: str
    git_commit: str | None
    git_dirty: bool | None


class StartedReport(OriginFields):
    """What a build report holds from the start."""

    started_utc: str
    rows: list[ReportRow]
    pruned: list[str]  # op/target/file removed because no row makes it any more
    conditions: Conditions


class BuildReport(StartedReport, total=False):
    """A build report (canonical JSON: keys sorted). The counts are set when the build ends; a build stopped
    by a write error (disk full) has `error` instead."""

    error: str
    seconds: float
    built: int  # compiled and written
    restored: int  # fetched from the DVC cache or remote, verified and written (farm/restore/)
    reverified: int
    failed: int
    up_to_date: int
    driver: DriverReport  # the driver's CPU per row (farm/observe/driver_cost.py)
    driver_timeline: list[PhaseJson]  # the driver's main thread's work in time order: its timeline lane
    driver_verify_timeline: list[PhaseJson]  # the driver's verify thread's work: its timeline lane


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


def origin_fields(cfg: FarmConfig) -> OriginFields:
    found = origin(cfg)
    return {"command": found.command, "outputs_dir": found.outputs_dir, "git_commit": found.git_commit,
            "git_dirty": found.git_dirty}


def tree_tag(cfg: FarmConfig) -> str:
    """A short name for the output tree, so each tree's reports are kept (and pruned) apart."""
    return sha256_bytes(str(cfg.outputs_dir.resolve()).encode())[:8]


def keep_count(cfg: FarmConfig) -> int:
    value = cfg.extra.get("report_keep", DEFAULT_KEEP)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FarmError(f"report_keep={value!r} is not a whole number >= 1",
                        f"e.g. report_keep={DEFAULT_KEEP} (the newest reports kept per output tree)")
    return value


def write_build_report(cfg: FarmConfig, report: BuildReport) -> Path | str:
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
        trace = canonical_json(chrome_trace(report["rows"], report.get("driver_timeline", []),
                                             report.get("driver_verify_timeline", [])))
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
