"""farm pull: `dvc pull` of outputs.dvc under the output tree's lock, naming what did not arrive intact,
then the drift guard on what did."""

from __future__ import annotations

import logging

from dvc.exceptions import DvcException
from dvc.repo import Repo

from farm.core.errors import FarmError
from farm.publish.commands import build_command, not_built
from farm.publish.pointer import read_pointer
from farm.publish.repo import Paths, granular, open_repo, paths
from farm.publish.survey import drift, survey
from farm.restore.remote import remote_errors, remote_of, say_error
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.table.config import FarmConfig

log = logging.getLogger(__name__)


def pull(cfg: FarmConfig, flags: set[str]) -> int:
    """Fetch and check out the published tree (see the module's docstring). Exit status."""
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        return _pull_locked(cfg, flags)


def _pull_locked(cfg: FarmConfig, flags: set[str]) -> int:
    where = paths(cfg)
    rel, pointer_rel = where.tree, where.pointer
    remote = remote_of(cfg)
    pointer = cfg.root / pointer_rel
    if not pointer.is_file():
        raise FarmError(f"{pointer} does not exist: nothing was published here",
                        "get outputs.dvc from git (git pull), or publish first with `farm push`")
    fields = read_pointer(pointer)
    with open_repo(cfg, remote, anonymous=remote.anonymous) as repo:
        try:
            repo.fetch(targets=[pointer_rel])
            # verify=true (conf/remote): DVC re-hashes every download and keeps none that does not match,
            # so a blob corrupted on the remote shows up here as not in the cache.
            broken = {path: _remote_blob(repo, rel, path) for path in sorted(granular(repo, rel).not_in_cache)}
        except remote_errors() as exc:
            say_error("pull", f"fetching {pointer_rel} from {remote.describe()} failed", exc)
            return 1
        applied = ""
        if not broken:  # with a corrupt blob check nothing out: DVC would drop the whole directory
            try:
                applied = _counts(repo.checkout(targets=[pointer_rel], force="--force" in flags))
            except DvcException as exc:  # e.g. local changes DVC will not overwrite without --force
                say_error("pull", f"checkout of {rel}/ failed", exc)
                log.error("farm pull: if %s/ has local changes: `farm pull --force` replaces them with the "
                          "published copy", rel)
                return 1
    if broken:
        for path, blob in broken.items():
            print(f"CORRUPT {rel}/{path}: the remote's copy is missing or does not hash to what {pointer_rel} "
                  f"records (blob {blob or '?'})")
        print(f"{len(broken)} object(s) of {pointer_rel} did not arrive intact from {remote.describe()}; {rel}/ was "
              "left as it was. Fix: delete those blobs on the remote (DVC uploads only what is absent there), "
              "then `farm push` from a tree that checks clean")
        return 1
    print(f"pulled {pointer_rel} (md5 {fields.md5}, {fields.nfiles} files) from {remote.describe()}: {applied}")
    return _check_pulled(cfg, where)


def _counts(stats: object) -> str:
    """`added=N modified=N deleted=N` from what DVC's checkout returns (its own mapping; read, not trusted)."""
    counts = stats.get("stats") if isinstance(stats, dict) else None
    if not isinstance(counts, dict):
        return ""
    return " ".join(f"{k}={counts[k]}" for k in ("added", "modified", "deleted") if k in counts)


def _check_pulled(cfg: FarmConfig, where: Paths) -> int:
    """What the pull brought, against the table: directories it did not have, rows not built, drift."""
    found = survey(cfg)
    for d in found.absent:  # not part of the publication: the table has it, nobody published it
        log.warning("WARNING %s/%s/%s/ is not in %s (%d rows): build it: %s",
                    where.tree, d.op, d.target, where.pointer, len(d.rows), build_command(cfg, d))
    for d in found.incomplete:
        print(not_built(cfg, where.tree, d))
    problems = drift(cfg, found)
    for line in problems:
        print(f"DRIFT {line}")
    tail = f"; {len(found.incomplete)} directories not built completely" if found.incomplete else ""
    print(f"checked {len(found.checked)} objects: "
          + ("no drift" if not problems else f"{len(problems)} problem(s)") + tail)
    return 1 if problems or found.incomplete else 0


def _remote_blob(repo: Repo, rel: str, path: str) -> str | None:
    """Where the remote keeps the blob of outputs/<path> (from the cached listing), for the error message."""
    try:
        out = next(o for st in repo.index.stages for o in st.outs if o.def_path == rel)
        _, hash_info = out.get_obj().get(tuple(path.split("/")))
        odb = repo.cloud.get_remote_odb(None)
        return str(odb.fs.unstrip_protocol(odb.oid_to_path(hash_info.value)))
    except Exception:  # only a detail of a message that is printed anyway
        return None
