"""`farm vendor add`: copy files from a checkout at a commit into kernels_src/ with their provenance.

Everything is read and checked before anything is written; then the vendored files and the license
copy are written (each atomically), the lock last but one, and the generated documents last.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..atomic import write_text_atomic
from ..canonical import sha256_bytes
from ..config import SAFE_NAME
from ..errors import FarmError
from . import docs, header, lock
from .args import as_bool, as_list
from .gitsrc import Checkout, clean_path
from .license import detect
from .project import Project

KEYS = ("from", "commit", "upstream", "paths", "into", "url", "license", "license_file", "force")
USAGE = ("usage: farm vendor add from=<checkout> commit=<sha> upstream=<name> paths=[<path>,...] "
         "[into=<dir under kernels_src>] [url=<repository url>] [license=<SPDX id>] [license_file=<path>] "
         "[force=true]")


@dataclass(frozen=True)
class Incoming:
    rel: str  # destination, relative to kernels_src/
    path: str  # upstream path
    text: str  # upstream blob, decoded
    sha256: str


def destination(upstream: str, path: str, into: str | None) -> str:
    """Default: vendor/<upstream>/<upstream path>; with into=: <into>/<file name>."""
    if into is None:
        return f"vendor/{upstream}/{path}"
    where = PurePosixPath(into.strip().strip("/"))
    if not into.strip().strip("/") or where.is_absolute() or ".." in where.parts or where.as_posix() == ".":
        raise FarmError(f"into={into}: not a directory inside kernels_src/",
                        "e.g. into=rmsnorm (a family directory) or into=vendor/flydsl")
    return f"{where.as_posix()}/{PurePosixPath(path).name}"


def _read(checkout: Checkout, commit: str, upstream: str, paths: list[str], into: str | None) -> list[Incoming]:
    out: dict[str, Incoming] = {}
    for given in paths:
        path = clean_path(given)
        if not path.endswith(".py"):
            raise FarmError(f"paths: {path} is not a Python file",
                            "farm vendor handles .py sources (the header is a # comment; diffs use ruff format)")
        data = checkout.blob(commit, path)
        if data is None:
            raise FarmError(f"paths: {path} is not a file in {checkout.path} at commit {commit}",
                            "check the path (relative to the checkout root) and the commit")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise FarmError(f"paths: {path} at {commit} is not UTF-8 text", "vendor UTF-8 Python sources") from None
        rel = destination(upstream, path, into)
        if rel in out:
            raise FarmError(f"paths: {out[rel].path} and {path} would both become kernels_src/{rel}",
                            "vendor them in separate adds with different into=")
        out[rel] = Incoming(rel, path, text, sha256_bytes(data))
    return list(out.values())


def _check_overwrite(project: Project, data: dict[str, Any], item: Incoming, upstream: str, force: bool) -> bool:
    """Refuse to replace a non-vendored file, another upstream's file, or local changes (unless force).
    True when the file has local changes that force=true will drop."""
    target = project.kernels_dir / item.rel
    rec = data["files"].get(item.rel)
    if rec is None:
        if target.exists():
            raise FarmError(f"{project.show(item.rel)} exists and is not a vendored file",
                            "choose another into=, or move that file away first")
        return False
    if rec["upstream"] != upstream:
        raise FarmError(f"{project.show(item.rel)} is vendored from {rec['upstream']}, not {upstream}",
                        f"use upstream={rec['upstream']} or another into=")
    if not target.is_file():
        return False
    body = header.body(target.read_text(encoding="utf-8"), project.show(item.rel))
    modified = sha256_bytes(body.encode("utf-8")) != rec["sha256"]
    if modified and not force:
        mods = "; ".join(m["why"] for m in rec.get("modifications", [])) or "none recorded"
        raise FarmError(f"{project.show(item.rel)} has local modifications ({mods}); re-adding it would drop them",
                        "force=true to replace it with upstream (then re-apply and `farm vendor note` them)")
    return modified


def write_changed(writes: dict[Path, str]) -> None:
    """Write each text whose file does not already hold it (atomically, one by one)."""
    for path, text in writes.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            write_text_atomic(path, text)


def add(project: Project, opts: dict[str, str]) -> int:
    upstream = opts["upstream"].strip()
    if not SAFE_NAME.match(upstream):
        raise FarmError(f"upstream={upstream}: not a simple name", "lower-case letters, digits, . _ -, e.g. flydsl")
    force = as_bool("force", opts.get("force"))
    checkout = Checkout(Path(opts["from"]))
    commit = checkout.resolve(opts["commit"])
    items = _read(checkout, commit, upstream, as_list("paths", opts["paths"]), opts.get("into"))
    data = lock.load(project.kernels_dir)
    dropped = {item.rel for item in items if _check_overwrite(project, data, item, upstream, force)}
    found = detect(checkout, commit, {i.path: i.text for i in items}, opts.get("license"), opts.get("license_file"))
    url = (opts.get("url") or "").strip() or checkout.origin_url() or str(checkout.path)

    license_rel = f"vendor/{upstream}/LICENSE" if found.text is not None else None
    data["upstreams"][upstream] = {"url": url, "license": found.spdx, "license_file": license_rel,
                                   "license_source": found.source, "license_commit": commit}
    report = []
    for item in items:
        old = data["files"].get(item.rel)
        rec = {"upstream": upstream, "commit": commit, "path": item.path, "sha256": item.sha256,
               "modifications": []}
        data["files"][item.rel] = rec
        note = " (local modifications dropped)" if item.rel in dropped else ""
        if old is None:
            report.append(f"added {project.show(item.rel)} from {upstream} {item.path} at {commit}")
        elif old["commit"] != commit or old["sha256"] != item.sha256:
            report.append(f"updated {project.show(item.rel)}: {old['commit']} -> {commit}{note}")
        else:
            report.append(f"unchanged {project.show(item.rel)} (already at {commit}){note}")

    # Every new text is made (and every header parsed) before the first write.
    writes = {project.kernels_dir / item.rel: header.render(upstream, url, data["files"][item.rel], found.spdx)
              + item.text for item in items}
    for rel, rec in sorted(data["files"].items()):  # the upstream's other files name its URL and license too
        path = project.kernels_dir / rel
        if rec["upstream"] == upstream and path not in writes and path.is_file():
            writes[path] = header.restamped(path.read_text(encoding="utf-8"), project.show(rel), upstream, url,
                                            rec, found.spdx)
    if license_rel is not None and found.text is not None:
        writes[project.kernels_dir / license_rel] = found.text
    write_changed(writes)
    lock.save(project.kernels_dir, data)
    changed = docs.write_all(project.root, project.kernels_dir, data)
    for line in report:
        print(line)
    print(f"license: {found.spdx}" + (f" (text from {found.source})" if found.source else " (no license file)"))
    for path in changed:
        print(f"wrote {docs.shown(project.root, path)}")
    print(f"recorded in {docs.shown(project.root, lock.lock_path(project.kernels_dir))}")
    return 0
