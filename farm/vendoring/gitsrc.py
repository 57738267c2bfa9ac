"""Read an upstream's local git checkout: commits, blobs at a commit, HEAD, the origin URL.

Through dulwich (pure Python, already installed with DVC) rather than the `git` program: it reads the
object store directly, so the user's git config (filters, `safe.directory` ownership checks, pagers,
locale) cannot change what we read, and there is no porcelain output to parse.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path, PurePosixPath

from dulwich.errors import NotGitRepository, NotTreeError
from dulwich.object_store import iter_tree_contents, tree_lookup_path
from dulwich.objects import Blob, Commit, Tree
from dulwich.objectspec import parse_commit
from dulwich.repo import Repo

from farm.core.errors import FarmError

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


class Checkout:
    """One local git checkout of an upstream."""

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser().resolve()
        try:
            self.repo = Repo(str(self.path))
        except (NotGitRepository, FileNotFoundError, NotADirectoryError):
            raise FarmError(f"from={path}: not a git checkout (no .git at {self.path})",
                            "point from= at the root of a local clone of the upstream") from None

    def resolve(self, commit: str) -> str:
        """The full 40-hex id of `commit` (a full or short sha, a branch, a tag, HEAD)."""
        try:
            found = parse_commit(self.repo, commit.strip())
        except (KeyError, ValueError):
            raise FarmError(f"commit={commit}: no such commit in {self.path}",
                            "fetch it into the checkout (git fetch), or give a commit it has") from None
        except Exception as exc:  # dulwich raises its own types for ambiguous prefixes
            raise FarmError(f"commit={commit}: cannot be resolved in {self.path} ({exc})",
                            "give the full 40-hex commit id") from None
        return found.id.decode("ascii")

    def has_commit(self, sha: str) -> bool:
        if not FULL_SHA.match(sha):
            return False
        try:
            return isinstance(self.repo[sha.encode("ascii")], Commit)
        except KeyError:
            return False

    def head(self) -> str:
        try:
            return self.repo.head().decode("ascii")
        except KeyError:
            raise FarmError(f"{self.path}: the checkout has no commits (HEAD names nothing)",
                            "point from= at a clone of the upstream with its history") from None

    def _tree(self, sha: str) -> bytes:
        commit = self.repo[sha.encode("ascii")]
        assert isinstance(commit, Commit)
        return commit.tree

    def blob(self, sha: str, path: str) -> bytes | None:
        """The bytes of regular file `path` at commit `sha`; None when the commit has none there
        (no such path, a directory, a symlink or a submodule)."""
        try:
            mode, oid = tree_lookup_path(self.repo.__getitem__, self._tree(sha), path.encode("utf-8"))
            obj = self.repo[oid]
        except (KeyError, NotADirectoryError, NotTreeError):
            return None
        return obj.data if isinstance(obj, Blob) and stat.S_ISREG(mode) else None

    def files_in(self, sha: str, directory: str) -> list[str]:
        """Names of the regular files directly in `directory` ("" for the root) at commit `sha`;
        empty when there is no such directory."""
        tree_id = self._tree(sha)
        try:
            if directory:
                mode, tree_id = tree_lookup_path(self.repo.__getitem__, tree_id, directory.encode("utf-8"))
                if not stat.S_ISDIR(mode):
                    return []
            tree = self.repo[tree_id]
        except (KeyError, NotADirectoryError, NotTreeError):
            return []
        assert isinstance(tree, Tree)
        return sorted(e.path.decode("utf-8", "replace") for e in tree.iteritems() if stat.S_ISREG(e.mode))

    def files_named(self, sha: str, name: re.Pattern[str]) -> list[str]:
        """Paths of every regular file at commit `sha` whose own name matches `name`, shallowest first."""
        found = []
        for entry in iter_tree_contents(self.repo.object_store, self._tree(sha)):
            path = entry.path.decode("utf-8", "replace")
            if stat.S_ISREG(entry.mode) and name.match(PurePosixPath(path).name):
                found.append(path)
        return sorted(found, key=lambda p: (p.count("/"), p))

    def origin_url(self) -> str | None:
        try:
            url = self.repo.get_config().get((b"remote", b"origin"), b"url")
        except KeyError:
            return None
        return url.decode("utf-8") if url else None


def clean_path(path: str) -> str:
    """An upstream path as a normalised relative POSIX path; a FarmError for absolute or `..` paths."""
    p = PurePosixPath(path.strip().replace("\\", "/"))
    if not path.strip() or p.is_absolute() or ".." in p.parts:
        raise FarmError(f"path {path!r}: not a relative path inside the upstream repository",
                        "name files relative to the checkout's root, e.g. paths=[python/kernels/foo.py]")
    return p.as_posix()
