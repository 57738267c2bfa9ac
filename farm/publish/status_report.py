"""farm status: per <op>/<target>/ directory, outputs/ versus outputs.dvc and the instance table, and the
command that fixes it. The last line counts the lines above."""

from __future__ import annotations

from dataclasses import dataclass

from farm.assure.check import check
from farm.publish.commands import build_command, command, remote_args, selection_args
from farm.publish.in_hand import listing, remote_has
from farm.publish.pointer import read_pointer
from farm.publish.repo import Granular, granular, local_listing, open_repo, paths
from farm.publish.survey import Directory, DirKey, dir_of, survey
from farm.restore.remote import remote_errors, remote_of, say_error
from farm.table.config import FarmConfig
from farm.table.rows import Row


def _in_dir(files: set[str], where: DirKey) -> set[str]:
    return {p for p in files if dir_of(p) == where}


@dataclass(frozen=True)
class StatusContext:
    """What every directory's verdict needs: the tree against its pointer, and the commands."""

    cfg: FarmConfig
    rel: str
    pointer_rel: str
    g: Granular
    every: list[Row]
    push_cmd: str
    pull_cmd: str
    again: list[str]


def status(cfg: FarmConfig, flags: set[str]) -> int:
    """The verdict of every directory (see the module's docstring). Exit status."""
    where = paths(cfg)
    rel, pointer_rel = where.tree, where.pointer
    remote = remote_of(cfg)
    pointer = cfg.root / pointer_rel
    found = survey(cfg)
    again = [*selection_args(cfg), *remote_args(cfg)]
    # A tree that lacks directories of the table is published only on purpose (`--partial`): that is the push
    # that publishes what is here; the NOT BUILT lines say how to build the rest instead.
    push_cmd = command("push", *(["--partial"] if found.lacking else []), *again)
    pull_cmd = command("pull", *again)
    for line in found.strays:
        print(f"STRAY {line}: remove it, then {push_cmd}")

    published = ""  # why nothing is published, when it is not
    if pointer.is_file():
        fields = read_pointer(pointer)
        try:
            with open_repo(cfg, remote, anonymous=remote.anonymous) as repo:
                oid, tree = listing(repo, rel)
                on_remote = tree is not None or remote_has(repo, oid)
                # DVC's status reads a listing that is only on the remote from there.
                g = granular(repo, rel) if on_remote else local_listing(cfg.outputs_dir)
        except remote_errors() as exc:
            say_error("status", f"could not compare {rel}/ with {pointer_rel}", exc)
            return 1
        if not on_remote:  # a fresh clone's pointer, pushed to another remote (or never pushed)
            published = f"nothing of {pointer_rel} is published at {remote.describe()}"
            print(f"NOT PUBLISHED: neither the local DVC cache nor {remote.describe()} holds the listing of "
                  f"{pointer_rel} (md5 {oid}), so {rel}/ is compared with nothing published; if it was pushed "
                  f"to another remote, name it (remote.url=...); to publish {rel}/ here: {push_cmd}")
        elif fields.nfiles >= 0 and len(g.in_pointer) != fields.nfiles:
            print(f"UNKNOWN: the listing of {pointer_rel} (md5 {fields.md5}) could not be read from the local DVC "
                  f"cache nor {remote.describe()}, so {rel}/ cannot be compared with it; fix: {pull_cmd}")
            return 1
    else:
        g = local_listing(cfg.outputs_dir)
        published = f"{pointer_rel} not published yet"
        print(f"NOT PUBLISHED: {pointer_rel} does not exist; once `farm check` is clean: {push_cmd}")

    ctx = StatusContext(cfg, rel, pointer_rel, g, found.every, push_cmd, pull_cmd, again)
    dirs = set(found.dirs) | {d for d in map(dir_of, g.in_pointer | g.added) if d is not None}
    verbose = "--verbose" in flags or "-v" in flags
    need = 0
    for key in sorted(dirs):
        lines = _dir_verdict(ctx, key, found.lookup(cfg, key))
        need += bool(lines)
        for line in lines or ([f"ok {rel}/{key[0]}/{key[1]}/: {_counts(ctx, key)}"] if verbose else []):
            print(line)
    return _status_summary(len(dirs), need, len(found.strays), published, pointer_rel)


def _status_summary(n: int, need: int, strays: int, unpublished: str, pointer_rel: str) -> int:
    """The last line: its counts are those of the lines above (ok + need action = directories)."""
    if not need and not strays and not unpublished:
        print(f"status: {n} directories, everything matches {pointer_rel} and instances/")
        return 0
    extra = ([f"{strays} stray entries"] if strays else []) + ([unpublished] if unpublished else [])
    print(f"status: {n} directories: {n - need} ok, {need} need action" + "".join(f"; {x}" for x in extra))
    return 1


def _counts(ctx: StatusContext, key: DirKey) -> str:
    local = ctx.cfg.outputs_dir / key[0] / key[1]
    on_disk = sum(1 for p in local.iterdir() if p.is_file()) if local.is_dir() else 0
    return f"{on_disk} files here, {len(_in_dir(ctx.g.in_pointer, key))} in {ctx.pointer_rel}"


def _dir_verdict(ctx: StatusContext, key: DirKey, d: Directory | None) -> list[str]:
    """The lines saying what one directory needs (none: it matches the pointer and the table)."""
    op, target = key
    where = f"{ctx.rel}/{op}/{target}"
    g, counts = ctx.g, _counts(ctx, key)
    in_ptr = _in_dir(g.in_pointer, key)
    deleted, added, modified = (_in_dir(x, key) for x in (g.deleted, g.added, g.modified))
    if d is None:
        return [f"STALE {where}/: no row of instances/ builds this directory ({counts}); "
                f"remove it, then {ctx.push_cmd}"]
    # A missing row whose object the pointer has comes back with pull; one it lacks must be built.
    unbuilt = [r for r in d.missing if f"{op}/{target}/{r.file_name}" not in g.in_pointer]
    fetchable = len(d.missing) - len(unbuilt)
    drift = check(ctx.cfg, d.present, ctx.every) if d.present else []
    build = build_command(ctx.cfg, d)
    if deleted and (fetchable or drift):  # published files are absent and what is here is not complete
        state = "MISSING" if d.absent else "INCOMPLETE"
        return [f"{state} {where}/: {len(deleted)} of {len(in_ptr)} published files are absent ({counts}); "
                f"fix: {ctx.pull_cmd}"]
    if drift:
        restore = f" (or restore the published copy: {command('pull', '--force', *ctx.again)})" \
            if in_ptr and (added or modified) else ""
        more = f"; and {len(unbuilt)} rows not built" if unbuilt else ""
        return [f"  DRIFT {line}" for line in drift] + [
            f"DRIFT {where}/: {len(drift)} problem(s) against instances/ ({counts}{more}); fix: {build}{restore}"]
    if unbuilt:
        return [f"NOT BUILT {where}/: {len(unbuilt)} of {len(d.rows)} rows have no object here nor in "
                f"{ctx.pointer_rel} ({counts}); fix: {build}, then {ctx.push_cmd}"]
    if added or modified or deleted or not in_ptr:
        # A clean, complete tree that differs from the pointer is a newer build (rows added, changed or dropped).
        return [f"UNPUBLISHED {where}/: checks clean but differs from {ctx.pointer_rel} ({len(added)} added, "
                f"{len(modified)} changed, {len(deleted)} removed; {counts}); fix: {ctx.push_cmd}"]
    return []
