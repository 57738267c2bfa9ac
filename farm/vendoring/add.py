"""`farm vendor add`: copy files from a checkout at a commit into kernels_src/ with their provenance.

Everything is read and checked before anything is written; then the vendored files and the license
copy are written (each atomically), the lock last but one, and the generated documents last.

Where a file goes: vendor/<upstream>/<upstream path> by default; with into=, <into>/<file name>; with
base=[folders], its upstream path below the longest of those folders holding it (under <into>/ if given),
so that a nested upstream package keeps its layout. An upstream's recorded repository URL is provenance:
a later add keeps it unless url= says otherwise, and refuses a checkout that is plainly another project.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from farm.core.atomic import write_text_atomic
from farm.core.canonical import sha256_bytes
from farm.core.errors import FarmError
from farm.store import vendored
from farm.store.vendored import FileRecord, LicenseCopy, LicenseRecord, Lock
from farm.table.config import SAFE_NAME
from farm.vendoring import closure, docs, header
from farm.vendoring.args import as_bool, as_list
from farm.vendoring.gitsrc import Checkout, clean_path
from farm.vendoring.license import FileLicense, LicenseText, resolve
from farm.vendoring.missing import Attempt, missing_error, placed_by
from farm.vendoring.project import Project

KEYS = ("from", "commit", "upstream", "paths", "into", "base", "url", "license", "license_file", "force")
log = logging.getLogger(__name__)
USAGE = ("usage: farm vendor add from=<checkout> commit=<sha> upstream=<name> paths=[<path>,...] "
         "[into=<dir under kernels_src>] [base=[<upstream folder>,...]] [url=<repository url>] "
         "[license=<SPDX id>] [license_file=<path>] [force=true]")


@dataclass(frozen=True)
class Incoming:
    rel: str  # destination, relative to kernels_src/
    path: str  # upstream path
    text: str  # upstream blob, decoded
    sha256: str


def _into_dir(into: str) -> str:
    where = PurePosixPath(into.strip().strip("/"))
    if not into.strip().strip("/") or where.is_absolute() or ".." in where.parts or where.as_posix() == ".":
        raise FarmError(f"into={into}: not a directory inside kernels_src/",
                        "e.g. into=rmsnorm (a family directory) or into=vendor/flydsl")
    return where.as_posix()


def bases_of(value: str | None) -> list[str] | None:
    """base=[a,b]: upstream folders ('.' for the root) a file keeps its path below; None when not given."""
    if value is None:
        return None
    return sorted({"." if item.strip().strip("/") in ("", ".") else clean_path(item).strip("/")
                   for item in as_list("base", value)})


def destination(upstream: str, path: str, into: str | None, bases: list[str] | None = None) -> str:
    """Default: vendor/<upstream>/<upstream path>; with into=: <into>/<file name>; with base=: the path below
    the longest base holding it (under <into>/ when into= is given too)."""
    if bases is not None:
        below = placed_by(path, bases)
        if below is None:
            raise FarmError(f"paths: {path} is below none of base=[{','.join(bases)}]",
                            "add its folder to base= (or '.' for the repository root)")
        return f"{_into_dir(into)}/{below}" if into is not None else below
    if into is None:
        return f"vendor/{upstream}/{path}"
    return f"{_into_dir(into)}/{PurePosixPath(path).name}"


def _read(checkout: Checkout, commit: str, upstream: str, paths: list[str], into: str | None,
          bases: list[str] | None) -> list[Incoming]:
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
        rel = destination(upstream, path, into, bases)
        if rel in out:
            raise FarmError(f"paths: {out[rel].path} and {path} would both become kernels_src/{rel}",
                            "keep their folders with base=, or vendor them in separate adds with different into=")
        out[rel] = Incoming(rel, path, text, sha256_bytes(data))
    return list(out.values())


def _check_overwrite(project: Project, data: Lock, item: Incoming, upstream: str, force: bool) -> bool:
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


def _refuse_symlinks(kernels_dir: Path, rel: str) -> None:
    """Never write through a symlink: no component below kernels_src/ of a path written may be one."""
    path = kernels_dir
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            raise FarmError(f"{path} is a symlink: farm vendor writes only into real directories and files",
                            f"replace {path} with a real directory or file (or remove the link)")


def _text_copy(data: Lock, upstream: str, commit: str, text: LicenseText, keep: set[str]) -> str:
    """Where the copy of an upstream license file goes: an existing copy of the same text, else
    vendor/<upstream>/<its upstream path>, unless files not re-added now still use another version of it
    there (then that name with the commit appended)."""
    rel = f"vendor/{upstream}/{text.path}"
    if not vendored.rel_ok(rel):  # the path comes from the upstream's tree: data, checked before any use
        raise FarmError(f"the license file {text.path!r} of {upstream} is not a plain relative path",
                        "name a license file with license_file=<path>")
    digest = sha256_bytes(text.text.encode("utf-8"))
    same = [r for r, t in sorted(data["license_texts"].items())
            if (t.get("upstream"), t.get("path"), t.get("sha256")) == (upstream, text.path, digest)]
    if same:  # this very text is already copied: share the copy
        return same[0]
    old = data["license_texts"].get(rel)
    used = any(r["license"]["text"] == rel for f, r in data["files"].items() if f not in keep)
    if old is not None and used and old.get("sha256") != digest:
        rel = f"{rel}.{commit[:12]}"
    if rel in data["files"]:
        raise FarmError(f"the license file {text.path} of {upstream} would overwrite the vendored file "
                        f"kernels_src/{rel}", "vendor that file with another into=")
    return rel


def _license_record(data: Lock, upstream: str, commit: str, found: FileLicense, keep: set[str],
                    texts: dict[str, str]) -> LicenseRecord:
    """A file's own license for the lock; its text copy is recorded in `license_texts` and queued in `texts`."""
    copy = None
    if found.text is not None:
        copy = _text_copy(data, upstream, commit, found.text, keep)
        data["license_texts"][copy] = {"upstream": upstream, "commit": commit, "path": found.text.path,
                                       "sha256": sha256_bytes(found.text.text.encode("utf-8")),
                                       "license": found.text.spdx}
        texts[copy] = found.text.text
    return {"id": found.spdx, "declared_by": found.declared_by, "text": copy}


def _check_copy_targets(project: Project, data: Lock, texts: dict[str, str], known: set[str]) -> None:
    """A license copy never replaces a file the lock does not record as one."""
    for rel in texts:
        _refuse_symlinks(project.kernels_dir, rel)
        if rel not in known and (project.kernels_dir / rel).exists():
            raise FarmError(f"{project.show(rel)} exists and is not a license copy farm vendor made",
                            "move that file away first")


def _unused_texts(data: Lock) -> list[str]:
    """License copies no vendored file refers to any more: dropped from the lock (and from disk)."""
    used = {rec["license"]["text"] for rec in data["files"].values()}
    gone = sorted(rel for rel in data["license_texts"] if rel not in used)
    for rel in gone:
        del data["license_texts"][rel]
    return gone


def _remove_owned(project: Project, rels: list[str], recorded: dict[str, LicenseCopy]) -> None:
    """Delete a dropped license copy only when it is a regular file holding exactly what farm vendor wrote."""
    for rel in rels:
        path = project.kernels_dir / rel
        want = recorded.get(rel, {}).get("sha256")
        try:
            _refuse_symlinks(project.kernels_dir, rel)
        except FarmError:  # not provably ours: left alone
            continue
        if want and path.is_file() and sha256_bytes(path.read_bytes()) == want:
            path.unlink()


def _license_lines(items: list[Incoming], licenses: dict[str, FileLicense]) -> list[str]:
    """One line per license this add found (with the files when they differ)."""
    groups: dict[tuple[str, str | None], list[str]] = {}
    for item in items:
        found = licenses[item.rel]
        groups.setdefault((found.spdx, found.text.path if found.text else None), []).append(item.path)
    lines = []
    for (spdx, source), paths in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] or "")):
        line = f"license: {spdx}" + (f" (text from {source})" if source else " (no license file)")
        lines.append(line + (f": {', '.join(paths)}" if len(groups) > 1 else ""))
    return lines


def _check_imports(project: Project, checkout: Checkout, commit: str, items: list[Incoming],
                   opts: dict[str, str]) -> None:
    """Refuse an add whose files import a module that would be neither under kernels_src/ nor installed:
    every compile of the family would fail on it, long after the add (see closure.py; the error: missing.py)."""
    tree = closure.Tree(project.kernels_dir, {item.rel: item.text for item in items})
    try:
        missing = closure.missing_imports(tree, [item.rel for item in items], [project.root, project.kernels_dir])
    except SyntaxError as exc:
        raise FarmError(f"{project.show(str(exc.filename))}:{exc.lineno}: not valid Python ({exc.msg}); its imports "
                        "cannot be checked", "vendor Python sources this interpreter parses") from None
    log.debug("import closure checked: %d file(s) under %s", len(tree.incoming), project.kernels_dir)
    if missing:
        raise missing_error(Attempt(project, checkout, commit, opts, {item.path: item.rel for item in items},
                                    {item.rel: item.text for item in items}), missing)


def _repository(data: Lock, upstream: str, checkout: Checkout, given: str | None) -> tuple[str, str | None]:
    """The repository URL to record for `upstream`, and a line telling how it relates to what was recorded.

    Recorded provenance changes only when the user says so (url=). Without url=, an upstream already recorded
    keeps its URL when the checkout's origin differs (a local clone, a mirror) as long as the checkout holds
    a commit vendored from it; a checkout holding none of them is another project, and the add is refused."""
    recorded = data["upstreams"].get(upstream, {}).get("url")
    origin = checkout.origin_url() or str(checkout.path)
    if given and given.strip():
        url = given.strip()
        changed = recorded is not None and recorded != url
        return url, f"repository of {upstream}: {recorded} -> {url} (url=)" if changed else None
    if recorded is None or recorded == origin:
        return recorded or origin, None
    commits = sorted({rec["commit"] for rec in data["files"].values() if rec["upstream"] == upstream})
    if commits and not any(checkout.has_commit(c) for c in commits):
        shown = ", ".join(c[:12] for c in commits)
        raise FarmError(f"from={checkout.path} (origin {origin}) is not upstream {upstream}'s recorded repository "
                        f"{recorded}: it holds none of the commits vendored from {upstream} ({shown})",
                        f"point from= at a clone of {recorded}; vendor another project under another upstream= "
                        f"name; or, if {upstream} now lives at {origin}, say so with url={origin}")
    return recorded, f"kept {upstream}'s recorded repository {recorded} (the checkout's origin is {origin}; " \
                     "url= changes it)"


def add(project: Project, opts: dict[str, str]) -> int:
    upstream = opts["upstream"].strip()
    if not SAFE_NAME.match(upstream):
        raise FarmError(f"upstream={upstream}: not a simple name", "lower-case letters, digits, . _ -, e.g. flydsl")
    force = as_bool("force", opts.get("force"))
    checkout = Checkout(Path(opts["from"]))
    commit = checkout.resolve(opts["commit"])
    items = _read(checkout, commit, upstream, as_list("paths", opts["paths"]), opts.get("into"),
                  bases_of(opts.get("base")))
    data = vendored.load(project.kernels_dir)
    dropped = {item.rel for item in items if _check_overwrite(project, data, item, upstream, force)}
    # Each file's own license, told before anything is written (an error leaves everything as it was).
    licenses = {i.rel: resolve(checkout, commit, i.path, i.text, opts.get("license"), opts.get("license_file"))
                for i in items}
    _check_imports(project, checkout, commit, items, opts)
    url, provenance = _repository(data, upstream, checkout, opts.get("url"))

    keep = {item.rel for item in items}
    known_texts = dict(data["license_texts"])
    data["upstreams"][upstream] = {"url": url}
    texts: dict[str, str] = {}
    report = []
    for item in items:
        old = data["files"].get(item.rel)
        rec: FileRecord = {"upstream": upstream, "commit": commit, "path": item.path, "sha256": item.sha256,
                           "license": _license_record(data, upstream, commit, licenses[item.rel], keep, texts),
                           "modifications": []}
        data["files"][item.rel] = rec
        note = " (local modifications dropped)" if item.rel in dropped else ""
        if old is None:
            report.append(f"added {project.show(item.rel)} from {upstream} {item.path} at {commit}")
        elif old["commit"] != commit or old["sha256"] != item.sha256:
            report.append(f"updated {project.show(item.rel)}: {old['commit']} -> {commit}{note}")
        else:
            report.append(f"unchanged {project.show(item.rel)} (already at {commit}){note}")
    gone = _unused_texts(data)
    _check_copy_targets(project, data, texts, set(known_texts))

    # Every new text is made (and every header parsed) before the first write.
    writes = {project.kernels_dir / item.rel: header.render(upstream, url, data["files"][item.rel]) + item.text
              for item in items}
    for rel, rec in sorted(data["files"].items()):  # the upstream's other files name its URL too (their own license)
        path = project.kernels_dir / rel
        if rec["upstream"] == upstream and path not in writes and path.is_file():
            writes[path] = header.restamped(path.read_text(encoding="utf-8"), project.show(rel), upstream, url, rec)
    writes.update({project.kernels_dir / rel: text for rel, text in texts.items()})
    for path in writes:
        _refuse_symlinks(project.kernels_dir, path.relative_to(project.kernels_dir).as_posix())
    write_changed(writes)
    _remove_owned(project, [g for g in gone if g not in texts], known_texts)
    vendored.save(project.kernels_dir, data)
    changed = docs.write_all(project.root, project.kernels_dir, data)
    for line in ([provenance] if provenance else []) + report:
        print(line)
    for line in _license_lines(items, licenses):
        print(line)
    for path in changed:
        print(f"wrote {docs.shown(project.root, path)}")
    print(f"recorded in {docs.shown(project.root, vendored.lock_path(project.kernels_dir))}")
    return 0
