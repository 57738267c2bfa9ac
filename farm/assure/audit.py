"""farm audit: rebuild the selected rows under changed conditions and prove the bytes are the same.

The rebuild is a separate `farm build` into a private output root, with its working directory,
temp directory, HOME, locale, time zone, umask, hash seed, environment, row order and worker count
changed (each variation can be switched off by name). `outputs/` is never touched, so the audited
tree can be one this farm did not build (e.g. fetched with `farm pull`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO, TypedDict

from farm.assure.elfdiff import compare, summary, to_json
from farm.core.atomic import write_text_atomic
from farm.core.canonical import canonical_json, sha256_bytes
from farm.core.errors import FarmError
from farm.store import manifest
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.table.config import AUDIT_VARIATIONS, FarmConfig
from farm.table.rows import Row

log = logging.getLogger(__name__)

VARIATIONS = AUDIT_VARIATIONS  # validated at config load (farm.table.config)

# Variables a careless compile could pick up; the farm must shield its compiles from all of them.
ENV_NOISE = {
    "FARM_AUDIT_NOISE": "1",
    "ARCH": "gfx1201",
    "FLYDSL_GPU_ARCH": "gfx1201",
    "COMPILE_ONLY": "0",
    "FLYDSL_DEBUG_ENABLE_DEBUG_INFO": "1",
    "FLYDSL_COMPILE_OPT_LEVEL": "0",
    "ROCM_PATH": "/nonexistent-rocm",
    "SOURCE_DATE_EPOCH": "0",
    "OMP_NUM_THREADS": "7",
}


def sample_rows(rows: list[Row], n: int | None) -> list[Row]:
    """A deterministic sample: the n rows whose keys hash lowest (stable across runs and machines)."""
    if not n or n >= len(rows):
        return rows
    chosen = sorted(rows, key=lambda r: sha256_bytes(r.key.encode()))[:n]
    return sorted(chosen, key=lambda r: r.key)


def rebuild_environment(vary: dict[str, bool], scratch: Path) -> tuple[dict[str, str], Path | None,
                                                                        list[str], int | None]:
    """(environment, working directory, extra overrides, umask) for the rebuild."""
    env = dict(os.environ)
    overrides: list[str] = []
    cwd = None
    if vary.get("cwd"):
        cwd = scratch / "a working dir"
        cwd.mkdir()
    if vary.get("tmpdir"):
        (scratch / "t").mkdir()
        env["TMPDIR"] = str(scratch / "t")
    if vary.get("home"):
        (scratch / "home").mkdir()
        env["HOME"] = str(scratch / "home")
    if vary.get("locale"):
        env["LANG"] = env["LC_ALL"] = "C"
    if vary.get("timezone"):
        env["TZ"] = "Pacific/Chatham"
    if vary.get("hash_seed"):
        env["PYTHONHASHSEED"] = "4242"
    if vary.get("env_noise"):
        env.update(ENV_NOISE)
    if vary.get("row_order"):
        overrides.append("row_order=reversed")
    if vary.get("workers"):
        overrides.append(f"executor.num_cpus={(os.cpu_count() or 1) + 1}")
    return env, cwd, overrides, (0o077 if vary.get("umask") else None)


def _passthrough(overrides: list[str]) -> list[str]:
    """The user's overrides minus those the audit sets for its rebuild."""
    mine = ("outputs_dir=", "report_dir=", "names=", "row_order=", "audit.", "executor.num_cpus=",
            "executor.standing=", "cache.restore=")
    return [o for o in overrides if not o.lstrip("+~").startswith(mine)]


class Comparison(TypedDict, total=False):
    """One compared file in an audit report: `objects[]` name it by row `key`, `manifests[]` by `path`."""

    key: str
    path: str  # op/target/name, with #file for one entry of a sampled manifest
    status: str  # identical | differs | missing | rebuild-failed
    reason: str  # the first difference, or why there is nothing to compare
    details: object  # every difference: elfdiff's JSON for objects, 'path: a vs b' lines for manifests


def _json_diff(a: object, b: object, path: str = "") -> list[str]:
    """Leaf-level differences between two JSON values, as 'path: a vs b'."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _json_diff(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _json_diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)} vs {json.dumps(b)}"]


def _compare_object(shipped: Path, rebuilt: Path, failure: str | None) -> Comparison:
    if not shipped.is_file():
        return {"status": "missing", "reason": f"{shipped} is not in the audited tree"}
    if not rebuilt.is_file():
        return {"status": "rebuild-failed", "reason": failure or "the rebuild produced no object"}
    a, b = shipped.read_bytes(), rebuilt.read_bytes()
    if a == b:
        return {"status": "identical"}
    diffs = compare(a, b)
    return {"status": "differs", "reason": summary(diffs), "details": to_json(diffs)}


def _compare_manifests(cfg: FarmConfig, audited: Path, rebuilt: Path, rows: list[Row],
                       every: list[Row]) -> list[Comparison]:
    results: list[Comparison] = []
    dirs = sorted({(r.op, r.target) for r in rows})
    for op, target in dirs:
        rel = f"{op}/{target}"
        whole = {r.file_name for r in every if (r.op, r.target) == (op, target)} == {
            r.file_name for r in rows if (r.op, r.target) == (op, target)}
        a_path, b_path = audited / rel / "manifest.json", rebuilt / rel / "manifest.json"
        if not a_path.is_file():
            results.append({"path": f"{rel}/manifest.json", "status": "missing", "reason": "not in the audited tree"})
            continue
        if not b_path.is_file():
            results.append({"path": f"{rel}/manifest.json", "status": "rebuild-failed", "reason": "not rebuilt"})
            continue
        if whole:
            for name in ("manifest.json", "SOURCE.md"):
                a, b = (audited / rel / name), (rebuilt / rel / name)
                same = a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()
                entry: Comparison = {"path": f"{rel}/{name}", "status": "identical" if same else "differs"}
                if not same and name == "manifest.json":
                    details = _manifest_diff(a, b)
                    entry["details"] = details
                    entry["reason"] = details[0] if details else "formatting differs (bytes only)"
                elif not same:
                    entry["reason"] = "provenance text differs"
                results.append(entry)
            continue
        # A sample: compare the audited rows' entries (the rest of the directory was not rebuilt).
        try:
            a_entries = manifest.entries_of(manifest.load(a_path))
            b_entries = manifest.entries_of(manifest.load(b_path))
        except manifest.ManifestUnreadable as exc:
            results.append({"path": f"{rel}/manifest.json", "status": "differs", "reason": exc.what})
            continue
        for row in rows:
            if (row.op, row.target) != (op, target):
                continue
            a_e, b_e = a_entries.get(row.file_name), b_entries.get(row.file_name)
            diffs = _json_diff(a_e, b_e) if a_e is not None and b_e is not None else [
                "entry missing in the audited manifest" if a_e is None else "entry missing in the rebuild"]
            sampled: Comparison = {"path": f"{rel}/manifest.json#{row.file_name}",
                                   "status": "identical" if not diffs else "differs"}
            if diffs:
                sampled |= {"reason": diffs[0], "details": diffs}
            results.append(sampled)
    return results


def _manifest_diff(a: Path, b: Path) -> list[str]:
    try:
        da, db = json.loads(a.read_text()), json.loads(b.read_text())
    except ValueError as exc:
        return [f"audited manifest is not JSON ({exc})"]
    diffs = _json_diff({k: v for k, v in da.items() if k != "objects"}, {k: v for k, v in db.items() if k != "objects"})
    ea, eb = manifest.entries_of(da), manifest.entries_of(db)
    for file in sorted(set(ea) | set(eb)):
        diffs += [f"{file}: {d}" for d in _json_diff(ea.get(file), eb.get(file))]
    return diffs


def audit(cfg: FarmConfig, rows: list[Row], every: list[Row], overrides: list[str], out: TextIO = sys.stdout) -> int:
    """Returns the process exit code: 0 only when every object and manifest is identical."""
    started = time.monotonic()
    settings = cfg.extra.get("audit") or {}
    vary = {name: bool((settings.get("vary") or {}).get(name, True)) for name in VARIATIONS}
    rows = sample_rows(rows, settings.get("sample"))
    if not rows:  # the CLI refuses an empty selection first; a caller passing none gets the same answer
        raise FarmError("audit: no row selected, so nothing would be audited", "select rows: ops=, targets=, names=")
    scratch = Path(tempfile.mkdtemp(prefix="fa-"))  # short: Ray's socket paths live under TMPDIR
    try:
        rebuilt = scratch / "rebuild"
        env, cwd, extra, umask = rebuild_environment(vary, scratch)
        env["FARM_PROJECT"] = str(cfg.root)
        keys = [r.key for r in rows]
        command = [sys.executable, "-m", "farm.cli", "build", *_passthrough(overrides), f"outputs_dir={rebuilt}",
                   f"report_dir={scratch / 'reports'}", f"names=[{','.join(keys)}]",
                   # Its own private workers, which see the varied conditions (a standing cluster's
                   # workers keep the conditions they started with).
                   "++executor.standing=false",
                   # Compiled for real: never fetched back from the DVC cache (farm/restore/).
                   "cache.restore=false", *extra]
        varied = ", ".join(n for n in VARIATIONS if vary[n]) or "nothing"
        log.info("audit: rebuilding %d rows with varied %s", len(rows), varied)
        proc = subprocess.run(command, cwd=cwd or cfg.root, env=env, capture_output=True, text=True,
                              preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
        if proc.returncode == 2:  # the rebuild refused (toolchain, config): nothing to compare
            log.error(proc.stderr.strip())
            return 2
        rebuild_report = scratch / "reports" / "latest-build.json"
        failures = _rebuild_failures(rebuild_report)
        conditions = json.loads(rebuild_report.read_text()).get("conditions") if rebuild_report.is_file() else None
        objects: list[Comparison] = []
        # Shared hold on the audited tree: a build writing it now would make the comparison meaningless.
        with tree_lock(cfg.outputs_dir, command_line(), shared=True, wait_s=lock_wait(cfg)):
            for row in rows:
                result = _compare_object(cfg.outputs_dir / row.relpath(), rebuilt / row.relpath(),
                                         failures.get(row.key))
                objects.append(result | {"key": row.key})
            manifests = _compare_manifests(cfg, cfg.outputs_dir, rebuilt, rows, every)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _report(cfg, objects, manifests, vary, conditions, time.monotonic() - started, out)


def _rebuild_failures(report: Path) -> dict[str, str]:
    if not report.is_file():
        return {}
    data = json.loads(report.read_text())
    return {r["key"]: r.get("refused") or r.get("error") or "failed" for r in data.get("rows", []) if not r["written"]}


def _report(cfg: FarmConfig, objects: list[Comparison], manifests: list[Comparison], vary: dict[str, bool],
            conditions: object, seconds: float, out: TextIO) -> int:
    """`conditions`: the rebuild's, from its build report (farm/observe/report.py Conditions), passed through."""
    same = [o for o in objects if o["status"] == "identical"]
    other = [o for o in objects if o["status"] != "identical"]
    bad_manifests = [m for m in manifests if m["status"] != "identical"]
    for o in other:
        print(f"DIFFERS {o['key']}: {o['status']}: {o.get('reason', '')}", file=out)
    for m in bad_manifests:
        print(f"DIFFERS {m['path']}: {m['status']}: {m.get('reason', '')}", file=out)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    report = {"finished_utc": stamp, "seconds": round(seconds, 3), "variations": vary,
              "rebuild_conditions": conditions,
              "identical": len(same), "different": len(other), "objects": objects,
              "manifests": manifests, "manifests_different": len(bad_manifests),
              "audited_tree": str(cfg.outputs_dir)}
    path = cfg.report_dir / f"audit-{stamp}-{os.getpid()}.json"  # two audits never share a report name
    write_text_atomic(path, canonical_json(report))
    write_text_atomic(cfg.report_dir / "latest-audit.json", canonical_json(report))
    print(f"audit: {len(same)} identical, {len(other)} differ; manifests: "
          f"{len(manifests) - len(bad_manifests)} identical, {len(bad_manifests)} differ "
          f"in {seconds:.1f} s; report: {path}", file=out)
    return 0 if not other and not bad_manifests else 1
