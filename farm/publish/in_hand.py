"""Whether the tree a pointer names is in hand: its listing (the `.dir` object of outputs.dvc) and every
blob the listing names are in the local DVC cache, each hashed now (by DVC's hash function) and matching its
name. A pull checks out only what is wholly in hand: DVC's checkout of a directory whose listing or a blob is
missing removes the directory (dvc/repo/checkout.py removes every output that failed) and brings nothing
back."""

from __future__ import annotations

from dataclasses import dataclass

from dvc.output import Output
from dvc.repo import Repo
from dvc_data.hashfile.db import HashFileDB
from dvc_data.hashfile.hash import hash_file
from dvc_data.hashfile.tree import Tree
from dvc_objects.errors import ObjectFormatError

from farm.core.errors import FarmError


@dataclass(frozen=True)
class InHand:
    """What the local DVC cache holds of one pointer's tree, verified."""

    listing: str  # the listing's object id ("<md5>.dir")
    cache: str  # where the local cache keeps objects (e.g. <project>/.dvc/cache/files/md5)
    has_listing: bool  # the listing is in the local cache and hashes to its id
    files: int  # how many files the listing names (0 without it)
    missing: tuple[str, ...]  # paths (relative to the tree) whose blob is not in the cache or does not verify
    blobs: tuple[str, ...]  # the object id of each missing path, in the same order

    @property
    def complete(self) -> bool:
        return self.has_listing and not self.missing


def output_of(repo: Repo, rel: str) -> Output:
    """The output `rel` (e.g. "outputs") as the pointer declares it."""
    for stage in repo.index.stages:
        for out in stage.outs:
            if out.def_path == rel:
                return out
    raise FarmError(f"{rel}.dvc declares no output {rel}",
                    f"restore it from git (git checkout -- {rel}.dvc) or delete it and `farm push` again")


def _intact(odb: HashFileDB, oid: str) -> bool:
    """Whether the cache holds `oid` and its bytes hash to it, hashed now by DVC's own function: not taken
    from DVC's record of earlier hashes, which holds what a download was expected to be when remote.verify is
    off. A cache file that does not hash to its name is dropped (as DVC's own check does), so that the next
    fetch downloads it again instead of keeping the bad copy."""
    try:
        _, actual = hash_file(odb.oid_to_path(oid), odb.fs, odb.hash_name)
    except FileNotFoundError:
        return False
    if str(actual.value).split(".")[0] == oid.split(".")[0]:
        return True
    odb.delete(oid)
    return False


def listing(repo: Repo, rel: str) -> tuple[str, Tree | None]:
    """The listing's object id, and the listing when the local cache holds it intact."""
    out = output_of(repo, rel)
    oid = str(out.hash_info.value)
    if not _intact(out.cache, oid):
        return oid, None
    try:
        return oid, Tree.load(out.cache, out.hash_info)
    except (FileNotFoundError, ObjectFormatError):
        return oid, None


def in_hand(repo: Repo, rel: str) -> InHand:
    """Check the listing and every blob it names in the local cache, each hashed now. Reads the cache only
    (a corrupt cache file is dropped): nothing is fetched, nothing in the workspace changes."""
    oid, tree = listing(repo, rel)
    odb = output_of(repo, rel).cache
    if tree is None:
        return InHand(oid, str(odb.path), False, 0, (), ())
    missing = [("/".join(key), str(hash_info.value)) for key, _meta, hash_info in tree
               if not _intact(odb, str(hash_info.value))]
    return InHand(oid, str(odb.path), True, len(tree), tuple(p for p, _ in missing), tuple(b for _, b in missing))


def remote_has(repo: Repo, oid: str) -> bool:
    """Whether the default remote holds the object `oid` (may raise what talking to a remote raises)."""
    return bool(repo.cloud.get_remote_odb(None).exists(oid))


def remote_location(repo: Repo, oid: str) -> str | None:
    """Where the default remote keeps the object `oid`, for a message; None when that cannot be said."""
    try:
        odb = repo.cloud.get_remote_odb(None)
        return str(odb.fs.unstrip_protocol(odb.oid_to_path(oid)))
    except Exception:  # only a detail of a message that is printed anyway
        return None
