"""farm pull: under the output tree's lock, fetch what outputs.dvc names into the local DVC cache, check
that its listing and every blob are there and verify, and only then check it out; then the drift guard on
what arrived. When anything is missing, outputs/ is left exactly as it was and one line says what."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from dvc.exceptions import DownloadError, DvcException

from farm.core.errors import FarmError
from farm.core.words import count
from farm.publish.brevity import first_few, lines_shown, wants_all
from farm.publish.commands import build_command, command, not_built, outputs_args, remote_args
from farm.publish.in_hand import InHand, in_hand, remote_location
from farm.publish.pointer import read_pointer
from farm.publish.repo import Paths, open_repo, paths
from farm.publish.survey import drift, survey
from farm.restore.remote import Remote, remote_errors, remote_of, say_error, scrub
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.table.config import FarmConfig

log = logging.getLogger(__name__)

# The first line of DVC's refusal to remove files its cache does not hold (dvc/repo/checkout.py); the paths
# follow, one a line. DVC gives that list only in its message, so the farm reads it from there.
UNSAVED = "Can't remove the following unsaved files without confirmation."


def pull(cfg: FarmConfig, flags: set[str]) -> int:
    """Fetch and check out the published tree (see the module's docstring). Exit status."""
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        return _pull_locked(cfg, flags)


@contextlib.contextmanager
def _dvc_errors_only() -> Iterator[None]:
    """DVC warns of each blob it cannot find, a line apiece; the farm says what is missing once, itself."""
    loggers = [logging.getLogger(name) for name in ("dvc", "dvc_data", "dvc_objects")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _pull_locked(cfg: FarmConfig, flags: set[str]) -> int:
    where = paths(cfg)
    rel, pointer_rel = where.tree, where.pointer
    remote = remote_of(cfg)
    pointer = cfg.root / pointer_rel
    if not pointer.is_file():
        raise FarmError(f"{pointer} does not exist: nothing was published here",
                        "get outputs.dvc from git (git pull), or publish first with `farm push`")
    fields = read_pointer(pointer)
    everything = wants_all(flags)
    failed = 0  # downloads DVC reports as failed
    with open_repo(cfg, remote, anonymous=remote.anonymous) as repo:
        try:
            with _dvc_errors_only():
                repo.fetch(targets=[pointer_rel])
        except DownloadError as exc:  # what is missing is named below, from the cache itself
            failed = int(exc.amount)
        except remote_errors() as exc:
            say_error("pull", f"fetching {pointer_rel} from {remote.describe()} failed ({rel}/ was left as it "
                      "was)", exc)
            return 1
        # verify=true (conf/remote): DVC re-hashes every download and keeps none that does not match, so a
        # blob corrupted on the remote shows up here as missing from the cache.
        held = in_hand(repo, rel)
        if not held.complete:
            _say_missing(cfg, where, remote, held, [remote_location(repo, b) for b in held.blobs], failed,
                         everything)
            return 1
        try:
            applied = _counts(repo.checkout(targets=[pointer_rel], force="--force" in flags))
        except DvcException as exc:
            return _say_checkout_refused(cfg, rel, exc, everything)
    print(f"pulled {pointer_rel} (md5 {fields.md5}, {fields.nfiles} files) from {remote.describe()}: {applied}")
    return _check_pulled(cfg, where, everything)


def _say_missing(cfg: FarmConfig, where: Paths, remote: Remote, held: InHand, blobs: list[str | None],
                 failed: int, everything: bool) -> None:
    """One line: what of the publication is not in hand, where the farm looked, and what to do."""
    rel, pointer_rel = where.tree, where.pointer
    places = f"the local DVC cache ({held.cache}) nor {remote.describe()}" + (
        f" (DVC reported {failed} failed download(s): the remote may also have been unreachable)" if failed else "")
    if not held.has_listing:
        log.error("farm pull: nothing to pull: neither %s holds the listing of %s (md5 %s); %s/ was left as it "
                  "was; fix: name the remote it was pushed to (`farm pull remote.url=DIR`, or `farm pull "
                  "remote=s3 remote.url=s3://BUCKET/PREFIX`), or publish this tree with `farm push`",
                  places, pointer_rel, held.listing, rel)
        return
    named = [f"{rel}/{path}" + (f" (blob {blob})" if blob else "") for path, blob in zip(held.missing, blobs,
                                                                                          strict=True)]
    log.error("farm pull: %d of %d files of %s are in neither %s intact (missing, or not hashing to what it "
              "records): %s; %s/ was left as it was; fix: push them again from a tree that checks clean (first "
              "delete any corrupt blob on the remote: DVC uploads only what is absent there), then %s",
              len(named), held.files, pointer_rel, places, first_few(named, everything), rel,
              command("pull", *remote_args(cfg)))


def _say_checkout_refused(cfg: FarmConfig, rel: str, exc: DvcException, everything: bool) -> int:
    """DVC refused to check out (it changed nothing): one line, with a count and the first few paths."""
    lines = scrub(str(exc)).splitlines()
    if not lines or not lines[0].startswith(UNSAVED):  # e.g. a disk that filled up while files were written
        say_error("pull", f"checkout of {rel}/ failed (every published file is in the local DVC cache, verified: "
                  "once the cause is fixed, `farm pull` again checks it out)", exc)
        return 1
    root = str(cfg.root.resolve()) + "/"
    files = [line.strip().removeprefix(root) for line in lines[1:] if line.strip()]
    log.error("farm pull: %d local files in %s/ are in no DVC cache, and checking out the published copy "
              "would replace or remove them: %s; %s/ was left as it was; fix: move them away first, or "
              "`farm pull --force` replaces them with the published copy and removes those it does not have",
              len(files), rel, first_few(files, everything), rel)
    return 1


def _counts(stats: object) -> str:
    """`added=N modified=N deleted=N` from what DVC's checkout returns (its own mapping; read, not trusted)."""
    counts = stats.get("stats") if isinstance(stats, dict) else None
    if not isinstance(counts, dict):
        return ""
    return " ".join(f"{k}={counts[k]}" for k in ("added", "modified", "deleted") if k in counts)


def _check_pulled(cfg: FarmConfig, where: Paths, everything: bool) -> int:
    """What the pull brought, against the table: selected directories it did not have, rows not built, drift."""
    found = survey(cfg)
    absent = found.absent  # not part of the publication: the table has them, nobody published them
    if len(absent) == 1:
        d = absent[0]
        log.warning("WARNING %s/%s/%s/ is not in %s (%d rows): build it: %s",
                    where.tree, d.op, d.target, where.pointer, len(d.rows), build_command(cfg, d))
    elif absent:
        names = first_few([f"{where.tree}/{d.op}/{d.target}/ ({len(d.rows)} rows)" for d in absent], everything)
        ops, targets = sorted({d.op for d in absent}), sorted({d.target for d in absent})
        build = command("build", "ops=[" + ",".join(ops) + "]", "targets=[" + ",".join(targets) + "]",
                        *outputs_args(cfg))
        log.warning("WARNING %d selected directories are not in %s: %s; build them: %s", len(absent),
                    where.pointer, names, build)
    for line in lines_shown([not_built(cfg, where.tree, d) for d in found.incomplete], everything):
        print(line)
    problems = drift(cfg, found)
    for line in lines_shown([f"DRIFT {line}" for line in problems], everything):
        print(line)
    tail = f"; {count(len(found.incomplete), 'directory')} not built completely" if found.incomplete else ""
    print(f"checked {len(found.checked)} objects: "
          + ("no drift" if not problems else f"{len(problems)} problem(s)") + tail)
    return 1 if problems or found.incomplete else 0
