"""farm push: under the output tree's lock, check the tree, `dvc add` it (rewriting outputs.dvc) and
`dvc push` it, refusing if the tree DVC recorded is not the one that was checked; print what changed.

A tree that lacks directories of the table is published only when `--partial` says so: its listing then
lacks them, and outputs.sha256 keeps their golden lines (a push never drops the digests of rows it did not
build). outputs.dvc, outputs.sha256 and outputs.code.sha256 change only once the push has succeeded."""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dvc.exceptions import DvcException

from farm.assure.golden import golden_path, load
from farm.assure.golden import render as render_golden
from farm.assure.golden_code import code_path, load_code, merge, recorded_code
from farm.assure.golden_code import render as render_code
from farm.core.atomic import write_bytes_atomic, write_text_atomic
from farm.core.canonical import sha256_file
from farm.core.errors import FarmError
from farm.core.words import count
from farm.publish.brevity import first_few, lines_shown, wants_all
from farm.publish.commands import command, not_built, outputs_args, remote_args, selection_args
from farm.publish.pointer import Pointer, read_pointer
from farm.publish.repo import Granular, granular, open_repo, paths
from farm.publish.survey import DirKey, Survey, dir_of, drift, survey
from farm.restore.remote import has_credentials, remote_errors, remote_of, say_error
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.table.config import FarmConfig

log = logging.getLogger(__name__)

PARTIAL = "--partial"


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
        return _push_locked(cfg, flags)


def _push_locked(cfg: FarmConfig, flags: set[str]) -> int:
    where = paths(cfg)
    rel = where.tree
    remote = remote_of(cfg)
    if remote.kind == "s3" and not has_credentials():
        raise FarmError("no AWS credentials in the environment: pushing to S3 needs them",
                        "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); never put them in conf/")
    everything = wants_all(flags)
    pointer = cfg.root / where.pointer
    checked = _snapshot(cfg.outputs_dir)
    found = survey(cfg)
    if _refuse_unpublishable(cfg, rel, found, everything):
        return 1
    lacking = found.lacking
    if lacking and PARTIAL not in flags:
        _refuse_partial(cfg, rel, found, everything)
        return 1
    digests, code, kept = _golden_records(cfg, checked, lacking, everything)
    if digests is None:
        return 1
    old = read_pointer(pointer) if pointer.is_file() else None
    report = sys.stdout  # inside open_repo stdout is DVC's (sent to stderr); the farm's own lines go here
    with open_repo(cfg, remote, anonymous=False) as repo, _unchanged_unless_published(cfg, pointer) as done:
        before = None
        if old is not None:
            try:
                before = granular(repo, rel)
            except remote_errors() as exc:  # the old listing is neither cached nor on the remote
                say_error("push", "could not list the previous outputs.dvc", exc)
        dropped = sorted({d for p in (before.in_pointer if before else ()) if (d := dir_of(p)) in set(lacking)})
        if dropped:
            log.warning("WARNING %d directories of the previous %s are absent here, and this push drops them from "
                        "it: %s; to keep them: %s, then %s", len(dropped), where.pointer,
                        first_few([f"{rel}/{o}/{t}/" for o, t in dropped], everything),
                        command("pull", *remote_args(cfg)), command("push", PARTIAL, *remote_args(cfg)))
        try:
            repo.add(rel)
        except DvcException as exc:
            say_error("push", f"dvc add {rel} failed ({where.pointer} was left as it was)", exc)
            return 1
        recorded = read_pointer(pointer)
        now = _snapshot(cfg.outputs_dir)
        if now != checked or recorded.nfiles != len(checked):
            changed = sorted(set(now) ^ set(checked) | {k for k in now if k in checked and now[k] != checked[k]})
            print(f"refusing to publish: {rel}/ changed while it was being checked and recorded "
                  f"({first_few(changed, everything) or 'file count differs'}); {where.pointer} was left as it was. "
                  "Run `farm check`, then `farm push` again", file=report)
            return 1
        try:
            sent = repo.push(targets=[where.pointer])
        except remote_errors() as exc:
            say_error("push", f"dvc push to {remote.describe()} failed (nothing is published; {where.pointer}, "
                      f"{golden_path(cfg).name} and {code_path(cfg).name} were left as they were; check that the "
                      "remote and remote.endpointurl are reachable, then run `farm push` again)", exc)
            return 1
        # The pointer and the golden digests in git always describe the published tree (plus, after a
        # partial push, the kept golden lines of the directories it lacks).
        write_text_atomic(golden_path(cfg), render_golden(digests))
        write_text_atomic(code_path(cfg), render_code(code))
        done()
    new = read_pointer(pointer)
    _print_changes(cfg.outputs_dir, rel, old, before, new)
    print(f"checked {len(found.checked)} objects; pushed {sent} new blob(s) to {remote.describe()}")
    if lacking:
        names = first_few([f"{o}/{t}" for o, t in lacking], everything)
        print(f"partial publication ({PARTIAL}): {where.pointer} lists {len(found.table_dirs) - len(lacking)} of the "
              f"table's {len(found.table_dirs)} directories; it lacks {len(lacking)}: {names}; "
              f"{golden_path(cfg).name} keeps the {kept} golden lines it had of them")
    print(f"published {where.pointer}: md5 {new.md5} ({new.nfiles} files, {new.size} bytes)"
          + ("" if old is None or old.md5 != new.md5 else " (unchanged)")
          + f"; commit {where.pointer}, {golden_path(cfg).name} and {code_path(cfg).name}")
    return 0


@contextmanager
def _unchanged_unless_published(cfg: FarmConfig, pointer: Path) -> Iterator[Callable[[], None]]:
    """Puts outputs.dvc, outputs.sha256 and outputs.code.sha256 back as they were (absent if they were) unless
    the block calls what it is given, once everything is published and written."""
    files = [pointer, golden_path(cfg), code_path(cfg)]
    saved = {path: path.read_bytes() if path.is_file() else None for path in files}
    published = False

    def done() -> None:
        nonlocal published
        published = True

    try:
        yield done
    finally:
        if not published:
            for path, text in saved.items():
                if text is None:
                    path.unlink(missing_ok=True)
                else:
                    write_bytes_atomic(path, text)


def _golden_records(cfg: FarmConfig, checked: dict[str, str], lacking: list[DirKey],
                    everything: bool) -> tuple[dict[str, str] | None, dict[str, str], int]:
    """(outputs.sha256's new digests, outputs.code.sha256's farm files, how many golden lines were kept): the
    tree's files, plus the committed lines of the table's directories the tree lacks; None when the farm
    code the kept lines were made with differs from the one the tree's manifests record."""
    golden = load(cfg)
    missing = set(lacking)
    kept = {p: sha for p, sha in (golden.sha256 if golden else {}).items() if dir_of(p) in missing}
    code = recorded_code(cfg, sorted({d for key in checked if (d := dir_of(key)) is not None}))
    if not kept:
        return checked, code, 0
    code, clashes = merge(load_code(code_path(cfg)), code)
    if clashes:
        print(f"refusing to publish: the {len(kept)} golden lines {PARTIAL} would keep (of the directories "
              f"{cfg.outputs_dir.name}/ lacks) were made with other farm code than this tree's manifests record "
              f"({first_few(clashes, everything)} differ from {code_path(cfg).name}), so {code_path(cfg).name} "
              f"cannot describe both; build those directories too (`farm build`), then `farm push`")
        return None, {}, 0
    return {**kept, **checked}, code, len(kept)


def _refuse_partial(cfg: FarmConfig, rel: str, found: Survey, everything: bool) -> None:
    """The tree lacks directories of the table: say which, and how to publish it whole or in part."""
    lacking = found.lacking
    ops = sorted({op for op, _ in lacking})
    rows = sum(1 for r in found.every if (r.op, r.target) in set(lacking))
    build = command("build", "ops=[" + ",".join(ops) + "]", *outputs_args(cfg))
    partial = command("push", PARTIAL, *selection_args(cfg), *remote_args(cfg))
    print(f"refusing to publish: {rel}/ lacks {len(lacking)} of the table's {len(found.table_dirs)} directories "
          f"({rows} rows): {first_few([f'{o}/{t}' for o, t in lacking], everything)}; the published listing would "
          f"have none of them. Fix: build them ({build}) or fetch them ({command('pull', *remote_args(cfg))}), "
          f"or publish only what is here, on purpose: {partial}")


def _refuse_unpublishable(cfg: FarmConfig, rel: str, found: Survey, everything: bool) -> bool:
    """Print why the tree cannot be published, if it cannot: directories with rows missing, or drift.

    DVC tracks outputs/ as one directory (one listing, one hash in outputs.dvc); its only way to leave a
    directory out of that listing is .dvcignore, a committed file that would also hide the directory from
    every later `dvc status`, checkout and pull. So an incomplete directory is not skipped: the push refuses
    as a whole and names every such directory with its build command."""
    incomplete = found.incomplete
    problems = drift(cfg, found)
    for line in lines_shown([not_built(cfg, rel, d) for d in incomplete], everything):
        print(line)
    for line in lines_shown([f"DRIFT {line}" for line in problems], everything):
        print(line)
    if not incomplete and not problems:
        return False
    why = []
    if incomplete:
        names = first_few([f"{d.op}/{d.target} ({len(d.missing)} of {len(d.rows)} rows)" for d in incomplete],
                          everything)
        why.append(f"{count(len(incomplete), 'directory')} not built completely: {names}")
    if problems:
        why.append(f"{len(problems)} problem(s) in {rel}/")
    fix = "build them (the commands above), then `farm push`" if incomplete else "`farm build`, then `farm push`"
    print(f"refusing to publish: {'; '.join(why)} (DVC publishes {rel}/ as one tree; fix: {fix})")
    return True


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
