"""farm push: under the output tree's lock, check the tree, `dvc add` it (rewriting outputs.dvc) and
`dvc push` it, refusing if the tree DVC recorded is not the one that was checked; print what changed."""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path

from dvc.exceptions import DvcException

from farm.assure.golden import golden_path
from farm.assure.golden import render as render_golden
from farm.assure.golden_code import code_path, recorded_code
from farm.assure.golden_code import render as render_code
from farm.core.atomic import write_text_atomic
from farm.core.canonical import sha256_file
from farm.core.errors import FarmError
from farm.publish.commands import build_command, command, not_built, remote_args
from farm.publish.pointer import Pointer, read_pointer, restore_pointer
from farm.publish.repo import Granular, granular, open_repo, paths
from farm.publish.survey import Survey, dir_of, drift, survey
from farm.restore.remote import has_credentials, remote_errors, remote_of, say_error
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.table.config import FarmConfig

log = logging.getLogger(__name__)


def _snapshot(out: Path) -> dict[str, str]:
    """SHA256 of every file under `out` by relative path; a symlink anywhere is refused (DVC would follow it)."""
    files: dict[str, str] = {}
    for path in sorted(out.rglob("*")):
        if path.is_symlink():
            raise FarmError(f"{path} is a symlink: the farm publishes only files it wrote",
                            f"remove {path}, then `farm build` and `farm push` again")
        if path.is_file():
            files[path.relative_to(out).as_posix()] = sha256_file(path)
    return files


def push(cfg: FarmConfig, flags: set[str]) -> int:
    """Publish outputs/ (see the module's docstring). Exit status."""
    paths(cfg)  # a tree outside the project can never be published: say that first
    if not cfg.outputs_dir.is_dir():
        raise FarmError(f"{cfg.outputs_dir} does not exist: nothing to publish", "run `farm build` first")
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        return _push_locked(cfg)


def _push_locked(cfg: FarmConfig) -> int:
    where = paths(cfg)
    rel = where.tree
    remote = remote_of(cfg)
    pointer = cfg.root / where.pointer
    checked = _snapshot(cfg.outputs_dir)
    found = survey(cfg)
    if _refuse_unpublishable(cfg, rel, found):
        return 1
    if remote.kind == "s3" and not has_credentials():
        raise FarmError("no AWS credentials in the environment: pushing to S3 needs them",
                        "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); never put them in conf/")
    old = read_pointer(pointer) if pointer.is_file() else None
    report = sys.stdout  # inside open_repo stdout is DVC's (sent to stderr); the farm's own lines go here
    with open_repo(cfg, remote, anonymous=False) as repo:
        before = None
        if old is not None:
            try:
                before = granular(repo, rel)
            except remote_errors() as exc:  # the old listing is neither cached nor on the remote
                say_error("push", "could not list the previous outputs.dvc", exc)
        for line in _absent_warnings(cfg, rel, found, old is not None, before):
            log.warning("%s", line)
        old_text = pointer.read_bytes() if pointer.is_file() else None
        code = recorded_code(cfg, sorted({d for key in checked if (d := dir_of(key)) is not None}))
        try:
            repo.add(rel)
        except DvcException as exc:
            say_error("push", f"dvc add {rel} failed", exc)
            return 1
        recorded = read_pointer(pointer)
        now = _snapshot(cfg.outputs_dir)
        if now != checked or recorded.nfiles != len(checked):
            changed = sorted(set(now) ^ set(checked) | {k for k in now if k in checked and now[k] != checked[k]})
            restore_pointer(pointer, old_text)
            print(f"refusing to publish: {rel}/ changed while it was being checked and recorded "
                  f"({', '.join(changed[:5]) or 'file count differs'}); {where.pointer} was left as it was. "
                  "Run `farm check`, then `farm push` again", file=report)
            return 1
        # The pointer and the golden digests in git always describe the same tree.
        write_text_atomic(golden_path(cfg), render_golden(checked))
        write_text_atomic(code_path(cfg), render_code(code))
        try:
            sent = repo.push(targets=[where.pointer])
        except remote_errors() as exc:
            say_error("push", f"dvc push to {remote.describe()} failed ({where.pointer} is updated, "
                      "nothing is published; check that the remote and remote.endpointurl are reachable, then run "
                      "`farm push` again)", exc)
            return 1
    new = read_pointer(pointer)
    _print_changes(cfg.outputs_dir, rel, old, before, new)
    print(f"checked {len(found.checked)} objects; pushed {sent} new blob(s) to {remote.describe()}")
    print(f"published {where.pointer}: md5 {new.md5} ({new.nfiles} files, {new.size} bytes)"
          + ("" if old is None or old.md5 != new.md5 else " (unchanged)")
          + f"; commit {where.pointer}, {golden_path(cfg).name} and {code_path(cfg).name}")
    return 0


def _refuse_unpublishable(cfg: FarmConfig, rel: str, found: Survey) -> bool:
    """Print why the tree cannot be published, if it cannot: directories with rows missing, or drift.

    DVC tracks outputs/ as one directory (one listing, one hash in outputs.dvc); its only way to leave a
    directory out of that listing is .dvcignore, a committed file that would also hide the directory from
    every later `dvc status`, checkout and pull. So an incomplete directory is not skipped: the push refuses
    as a whole and names every such directory with its build command."""
    incomplete = found.incomplete
    for d in incomplete:
        print(not_built(cfg, rel, d))
    problems = drift(cfg, found)
    for line in problems:
        print(f"DRIFT {line}")
    if not incomplete and not problems:
        return False
    why = []
    if incomplete:
        names = ", ".join(f"{d.op}/{d.target} ({len(d.missing)} of {len(d.rows)} rows)" for d in incomplete)
        why.append(f"{len(incomplete)} directories not built completely: {names}")
    if problems:
        why.append(f"{len(problems)} problem(s) in {rel}/")
    fix = "build them (the commands above), then `farm push`" if incomplete else "`farm build`, then `farm push`"
    print(f"refusing to publish: {'; '.join(why)} (DVC publishes {rel}/ as one tree; fix: {fix})")
    return True


def _absent_warnings(cfg: FarmConfig, rel: str, found: Survey, had_pointer: bool,
                     before: Granular | None) -> list[str]:
    """A selected directory that is not here is not published: a warning naming how to get it, not a refusal."""
    lines = []
    for d in found.absent:
        build = build_command(cfg, d)
        published = before is not None and any(dir_of(p) == d.key for p in before.in_pointer)
        if published:
            how = (f"it is in the previous {rel}.dvc, and this push drops it; to keep it: "
                   f"{command('pull', *remote_args(cfg))}, then `farm push`")
        elif had_pointer and before is None:
            how = f"build it: {build} (or, if it was published before, `farm pull` it)"
        else:
            how = f"build it: {build}"
        lines.append(f"WARNING {rel}/{d.op}/{d.target}/ is absent ({len(d.rows)} rows): not published; {how}")
    return lines


def _print_changes(out: Path, rel: str, old: Pointer | None, before: Granular | None, new: Pointer) -> None:
    if old is None:
        per_dir = Counter(p.parent.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
        print(f"first publication of {rel}/ (no previous {rel}.dvc): {new.nfiles} files added")
        for where, n in sorted(per_dir.items()):
            print(f"  + {rel}/{where}/ ({n} files)")
        return
    if before is None or (old.nfiles >= 0 and len(before.in_pointer) != old.nfiles):
        print(f"changes since the previous {rel}.dvc (md5 {old.md5}): its listing is not in the local cache "
              "nor on the remote, so per-file changes cannot be shown")
        return
    for mark, changed in (("+", before.added), ("-", before.deleted), ("~", before.modified)):
        for path in sorted(changed):
            print(f"  {mark} {rel}/{path}")
    print(f"changes since the previous {rel}.dvc (md5 {old.md5}): added={len(before.added)} "
          f"removed={len(before.deleted)} changed={len(before.modified)} unchanged={len(before.unchanged)}")
