"""farm push / pull / status: publish outputs/ with DVC, fetch it back, and say how the two compare.

Git carries `outputs.dvc` (the pointer: the hash of a DVC directory listing) and the sources; the object
bytes live on a DVC remote chosen by conf/remote/ (`remote=local` by default, `remote=s3`). Everything
that touches hashes, caches or remotes goes through DVC's own API (`dvc.repo.Repo`): the farm never
hashes for DVC nor speaks a remote's protocol; it runs its drift guard before publishing and after
fetching, and reads DVC's per-file status to report what changed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.assure.golden import golden_path, tree_digests
from farm.assure.golden import render as render_golden
from farm.core.atomic import write_bytes_atomic, write_text_atomic
from farm.core.canonical import sha256_file
from farm.core.errors import FarmError
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.store.outtree import OutputDir
from farm.table.config import FarmConfig
from farm.table.rows import Row

if TYPE_CHECKING:
    from dvc.repo import Repo

REMOTE_KINDS = ("local", "s3")
# Credentials only ever come from the environment; these are scrubbed from anything the farm prints.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


@dataclass(frozen=True)
class Remote:
    """The composed `remote` config group, validated."""

    kind: str
    name: str
    url: str  # absolute path for kind=local, s3://bucket/prefix for kind=s3
    endpointurl: str | None
    region: str | None
    verify: bool
    allow_anonymous_reads: bool

    def describe(self) -> str:
        """Where the objects go, safe to print (no credentials are part of a remote's config)."""
        return self.url + (f" (endpoint {self.endpointurl})" if self.endpointurl else "")

    def dvc_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"url": self.url, "verify": self.verify}
        if self.endpointurl:
            conf["endpointurl"] = self.endpointurl
        if self.region:
            conf["region"] = self.region
        return conf


# ---------------------------------------------------------------------------------------------- config

def remote_of(cfg: FarmConfig) -> Remote:
    raw = cfg.extra.get("remote")
    if not isinstance(raw, dict):
        raise FarmError("no remote configured (the `remote` config group is missing)",
                        "add conf/remote/local.yaml and `- remote: local` to conf/config.yaml defaults")
    kind = str(raw.get("kind"))
    if kind not in REMOTE_KINDS:
        raise FarmError(f"remote.kind={kind!r} is not supported; accepted: {', '.join(REMOTE_KINDS)}",
                        "pick remote=local or remote=s3")
    url = raw.get("url")
    if url in (None, "", "???"):
        raise FarmError(f"remote.url is not set for remote={kind}",
                        "e.g. farm push remote=s3 remote.url=s3://bucket/prefix")
    url = str(url)
    if kind == "local":
        path = Path(url).expanduser()
        path = (path if path.is_absolute() else cfg.root / path).resolve()
        if path.is_relative_to(cfg.outputs_dir.resolve()):
            raise FarmError(f"the local remote {path} is inside outputs_dir {cfg.outputs_dir}",
                            "put remote.url outside outputs/ (the default is .farm/dvc-remote)")
        url = str(path)
    elif not url.startswith("s3://") or len(url) <= len("s3://"):
        raise FarmError(f"remote.url={url!r} is not an s3:// URL", "e.g. remote.url=s3://bucket/prefix")
    name = str(raw.get("name") or f"farm-{kind}")
    return Remote(kind=kind, name=name, url=url,
                  endpointurl=str(raw["endpointurl"]) if raw.get("endpointurl") else None,
                  region=str(raw["region"]) if raw.get("region") else None,
                  verify=bool(raw.get("verify", True)),
                  allow_anonymous_reads=bool(raw.get("allow_anonymous_reads", False)))


def _paths(cfg: FarmConfig) -> tuple[str, str]:
    """(outputs_dir, its pointer) relative to the project root: DVC can only track what is inside its repo."""
    root = cfg.root.resolve()
    out = cfg.outputs_dir.resolve()
    if out == root or not out.is_relative_to(root):
        raise FarmError(f"outputs_dir {cfg.outputs_dir} is not inside the project root {root}: "
                        "only a tree inside the project can be published with DVC",
                        "publish from the project's own outputs/ (drop the outputs_dir= override)")
    rel = out.relative_to(root).as_posix()
    return rel, rel + ".dvc"


def _has_credentials() -> bool:
    """Whether AWS credentials are visible without asking any service (never a metadata endpoint)."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return True
    if any(env.get(k) for k in ("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")):
        return True
    files = (env.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), env.get("AWS_CONFIG_FILE", "~/.aws/config"))
    return any(Path(f).expanduser().is_file() for f in files)


def _scrub(text: str) -> str:
    for key in SECRET_ENV:
        value = os.environ.get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _remote_errors() -> tuple[type[BaseException], ...]:
    """What talking to a remote can raise: DVC's own errors, OS errors, and those of the S3 client stack
    (botocore, aiohttp), which DVC lets through. Each becomes one line naming the remote, not a traceback."""
    from dvc.exceptions import DvcException

    errors: list[type[BaseException]] = [DvcException, OSError]
    try:
        from botocore.exceptions import BotoCoreError, ClientError

        errors += [BotoCoreError, ClientError]
    except ImportError:
        pass
    try:
        from aiohttp import ClientError as HttpClientError

        errors.append(HttpClientError)
    except ImportError:
        pass
    return tuple(errors)


def _say_error(verb: str, what: str, exc: BaseException) -> None:
    detail = _scrub(" ".join(str(exc).split())) or type(exc).__name__
    print(f"farm {verb}: {what}: {detail}", file=sys.stderr)


# ------------------------------------------------------------------------------------------ dvc access

def _git_top(root: Path) -> Path | None:
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                          capture_output=True, text=True, check=False)
    return Path(proc.stdout.strip()).resolve() if proc.returncode == 0 and proc.stdout.strip() else None


@contextlib.contextmanager
def _dvc_output() -> Iterator[None]:
    """DVC's own chatter goes to stderr: stdout is the farm's report (its last line is the summary)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


@contextlib.contextmanager
def _repo(cfg: FarmConfig, remote: Remote, *, anonymous: bool) -> Iterator[Repo]:
    """The project's DVC repo (created on first use), with `remote` as its default remote."""
    # No telemetry: the farm talks to its remote and to nothing else.
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    from dvc.repo import Repo

    # DVC's info lines go to the stdout it saw at import; the farm prints its own report there instead.
    for name in ("dvc", "dvc_data", "dvc_objects"):
        logging.getLogger(name).setLevel(logging.WARNING)

    from dvc.exceptions import DvcException

    root = cfg.root.resolve()
    top = _git_top(root)
    # A committed .dvc/config made in a git checkout fails in a copy without git: read it as git-less there.
    base: dict[str, Any] = {"core": {"no_scm": True}} if top is None else {}
    with contextlib.chdir(root), _dvc_output():
        try:
            if not (root / ".dvc").is_dir():
                # A git checkout gets a normal DVC repo (or a subdir one); anything else a git-less one.
                created = Repo.init(str(root), no_scm=top is None, subdir=top is not None and top != root)
                with created.config.edit("repo") as conf:
                    conf.setdefault("core", {})["analytics"] = False
                created.close()
                print(f"farm: created a DVC repository in {root} (commit .dvc/config, .dvc/.gitignore, .dvcignore)")
            with Repo(str(root), config=base or None) as repo:
                # Machine-specific (which remote, where, which endpoint): --local, never committed.
                with repo.config.edit("local") as conf:
                    conf.setdefault("remote", {})[remote.name] = remote.dvc_config()
                    conf.setdefault("core", {})["remote"] = remote.name
        except DvcException as exc:
            raise FarmError(f"cannot open the DVC repository in {root}: {_scrub(str(exc))}",
                            "fix or remove .dvc/ (the farm recreates it on the next push or pull)") from None
        # Anonymous reads only for this process: a stored setting would also make pushes unsigned.
        if anonymous:
            base["remote"] = {remote.name: {"allow_anonymous_login": True}}
        with Repo(str(root), config=base or None) as repo:
            yield repo


def _anonymous(remote: Remote) -> bool:
    return remote.kind == "s3" and remote.allow_anonymous_reads and not _has_credentials()


def _files(paths: Any, under: str) -> set[str]:
    """File paths (not directories) from a DVC status list, relative to `under`."""
    prefix = under + "/"
    return {p[len(prefix):] for p in paths or () if p.startswith(prefix) and not p.endswith("/")}


@dataclass
class Granular:
    """outputs/ versus the pointer, per file, as DVC's `data status --granular` reports it."""

    unchanged: set[str]
    added: set[str]
    modified: set[str]
    deleted: set[str]
    not_in_cache: set[str]

    @property
    def in_pointer(self) -> set[str]:
        return self.unchanged | self.modified | self.deleted


def _granular(repo: Repo, rel: str) -> Granular:
    """DVC's data status of outputs/ against its pointer, per file."""
    st = repo.data_status(granular=True, untracked_files="all", with_renames=False)
    unc = st.get("uncommitted", {})
    com = st.get("committed", {})  # in a git repo: the pointer against git HEAD
    modified, deleted = _files(unc.get("modified"), rel), _files(unc.get("deleted"), rel)
    # In a git repo `unchanged` also means unchanged since HEAD; files the pointer gained or changed since
    # HEAD and the workspace still matches count as unchanged here.
    in_pointer = _files(st.get("unchanged"), rel) | _files(com.get("added"), rel) | _files(com.get("modified"), rel)
    return Granular(unchanged=in_pointer - modified - deleted, added=_files(unc.get("added"), rel),
                    modified=modified, deleted=deleted, not_in_cache=_files(st.get("not_in_cache"), rel))


def _pointer_fields(path: Path) -> dict[str, Any]:
    """md5 / nfiles / size of the one output an outputs.dvc records (read, not recomputed)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
        out = data["outs"][0]
        return {"md5": str(out["md5"]), "nfiles": int(out.get("nfiles", -1)), "size": int(out.get("size", -1))}
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise FarmError(f"{path}: not a DVC pointer for one directory ({exc})",
                        f"restore it from git (git checkout -- {path.name}) or delete it and `farm push` again",
                        ) from None


# ------------------------------------------------------------------------------------------ the checks

@dataclass(frozen=True)
class Directory:
    """One outputs/<op>/<target>/ the table builds: its rows, and which of them have no object on disk."""

    op: str
    target: str
    rows: tuple[Row, ...]  # every row of instances/ that builds into it
    missing: tuple[Row, ...]  # rows whose object is not on disk (all of them when the directory is absent)
    absent: bool  # no such directory, or an empty one: nothing of it would be published

    @property
    def key(self) -> tuple[str, str]:
        return self.op, self.target

    @property
    def present(self) -> list[Row]:
        gone = {r.key for r in self.missing}
        return [r for r in self.rows if r.key not in gone]

    @property
    def incomplete(self) -> bool:
        """Some objects are here and some rows have none: a partial build (or objects deleted)."""
        return not self.absent and bool(self.missing)


@dataclass(frozen=True)
class Survey:
    """What push, pull and status look at: the selection's directories plus every one present
    (DVC publishes the whole tree, so nothing in it goes unchecked)."""

    dirs: dict[tuple[str, str], Directory]
    every: list[Row]  # every row of every op's table
    strays: list[str]  # entries of outputs/ no row accounts for

    @property
    def checked(self) -> list[Row]:
        """The rows whose objects are here: these the drift guard checks (a missing row is not drift)."""
        return [r for d in self.dirs.values() for r in d.present]

    @property
    def absent(self) -> list[Directory]:
        return [d for d in self.dirs.values() if d.absent]

    @property
    def incomplete(self) -> list[Directory]:
        return [d for d in self.dirs.values() if d.incomplete]


def _survey(cfg: FarmConfig) -> Survey:
    from farm.table.expand import fresh_rows
    from farm.table.rows import load_table, table_path

    selected, every = fresh_rows(cfg)
    others = [op for op in sorted(cfg.ops)
              if op not in cfg.selected_ops and table_path(cfg.instances_dir, op).is_file()]
    every = every + [r for op in others for r in load_table(cfg, op)]
    by_dir: dict[tuple[str, str], list[Row]] = {}
    for row in every:
        by_dir.setdefault((row.op, row.target), []).append(row)
    present, strays = _present(cfg.outputs_dir, set(by_dir))
    wanted = {(r.op, r.target) for r in selected} | present
    dirs = {key: _directory(cfg, key, tuple(by_dir[key])) for key in sorted(wanted)}
    return Survey(dirs=dirs, every=every, strays=strays)


def _directory(cfg: FarmConfig, key: tuple[str, str], rows: tuple[Row, ...]) -> Directory:
    op, target = key
    try:
        with OutputDir(cfg.outputs_dir, op, target) as out:
            if not out.exists or not out.names():
                return Directory(op, target, rows, rows, absent=True)
            # Row file names were validated when the table was loaded; kind() never follows a symlink.
            missing = tuple(r for r in rows if out.kind(r.file_name) is None)
    except FarmError:  # a symlinked directory: present, so the drift guard names it
        missing = ()
    return Directory(op, target, rows, missing, absent=False)


def _present(out: Path, known: set[tuple[str, str]]) -> tuple[set[tuple[str, str]], list[str]]:
    present: set[tuple[str, str]] = set()
    strays: list[str] = []
    if not out.is_dir():
        return present, strays
    for op_dir in sorted(out.iterdir()):
        if not op_dir.is_dir():
            strays.append(f"{op_dir}: not an <op>/<target>/ directory")
            continue
        for t_dir in sorted(op_dir.iterdir()):
            if t_dir.is_dir() and (op_dir.name, t_dir.name) in known:
                present.add((op_dir.name, t_dir.name))
            else:
                strays.append(f"{t_dir}: no row of instances/ builds this "
                              + ("directory" if t_dir.is_dir() else "file"))
    return present, strays


def _drift(cfg: FarmConfig, survey: Survey) -> list[str]:
    """The drift guard on every object that is here; rows without one are reported as not built instead."""
    from farm.assure.check import check

    return survey.strays + check(cfg, survey.checked, survey.every)


# ----------------------------------------------------------------------------------- command lines

def _defaults_remote(root: Path) -> str:
    from omegaconf import OmegaConf

    for item in OmegaConf.to_container(OmegaConf.load(root / "conf" / "config.yaml")).get("defaults", []):
        if isinstance(item, dict) and "remote" in item:
            return str(item["remote"])
    return "local"


def _remote_args(cfg: FarmConfig) -> list[str]:
    """The overrides that select this remote again (for printed fix commands)."""
    from omegaconf import OmegaConf

    raw = cfg.extra.get("remote") or {}
    kind = str(raw.get("kind"))
    args = [] if kind == _defaults_remote(cfg.root) else [f"remote={kind}"]
    path = cfg.root / "conf" / "remote" / f"{kind}.yaml"
    base = OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}
    assert isinstance(base, dict)
    for key, value in raw.items():
        if base.get(key) != value:
            text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
            args.append(f"remote.{key}={text}")
    return args


def _outputs_args(cfg: FarmConfig) -> list[str]:
    """outputs_dir= as given (for printed fix commands)."""
    if cfg.outputs_dir.resolve() != (cfg.root / "outputs").resolve():
        return [f"outputs_dir={cfg.outputs_dir.resolve().relative_to(cfg.root.resolve()).as_posix()}"]
    return []


def _extra_args(cfg: FarmConfig) -> list[str]:
    """dtypes= and outputs_dir= as given (for printed fix commands)."""
    return ([f"dtypes=[{','.join(cfg.selected_dtypes)}]"] if cfg.selected_dtypes else []) + _outputs_args(cfg)


def _selection_args(cfg: FarmConfig) -> list[str]:
    """The selection as given: empty lists (everything) print nothing."""
    args = []
    if set(cfg.selected_ops) != set(cfg.ops):
        args.append(f"ops=[{','.join(cfg.selected_ops)}]")
    if set(cfg.selected_targets) != set(cfg.targets):
        args.append(f"targets=[{','.join(cfg.selected_targets)}]")
    return args + _extra_args(cfg)


def _command(verb: str, *args: str) -> str:
    return "`" + " ".join(["farm", verb, *args]) + "`"


def _build_command(cfg: FarmConfig, d: Directory) -> str:
    """Builds every row of the directory (no dtypes=: its missing rows may be of any dtype)."""
    return _command("build", f"ops=[{d.op}]", f"targets=[{d.target}]", *_outputs_args(cfg))


def _not_built(cfg: FarmConfig, rel: str, d: Directory) -> str:
    return (f"NOT BUILT {rel}/{d.op}/{d.target}/: {len(d.missing)} of {len(d.rows)} rows have no object here; "
            f"build them: {_build_command(cfg, d)}")


# ---------------------------------------------------------------------------------------------- push

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
    """Under the output tree's lock: check, then `dvc add` outputs/ (rewriting outputs.dvc) and `dvc push`
    it, refusing if the tree DVC recorded is not the one that was checked; print what changed."""
    _paths(cfg)  # a tree outside the project can never be published: say that first
    if not cfg.outputs_dir.is_dir():
        raise FarmError(f"{cfg.outputs_dir} does not exist: nothing to publish", "run `farm build` first")
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        return _push_locked(cfg)


def _push_locked(cfg: FarmConfig) -> int:
    rel, pointer_rel = _paths(cfg)
    remote = remote_of(cfg)
    pointer = cfg.root / pointer_rel
    checked = _snapshot(cfg.outputs_dir)
    survey = _survey(cfg)
    if _refuse_unpublishable(cfg, rel, survey):
        return 1
    if remote.kind == "s3" and not _has_credentials():
        raise FarmError("no AWS credentials in the environment: pushing to S3 needs them",
                        "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); never put them in conf/")
    old = _pointer_fields(pointer) if pointer.is_file() else None
    from dvc.exceptions import DvcException

    report = sys.stdout  # inside _repo stdout is DVC's (sent to stderr); the farm's own lines go here
    with _repo(cfg, remote, anonymous=False) as repo:
        before = None
        if old is not None:
            try:
                before = _granular(repo, rel)
            except _remote_errors() as exc:  # the old listing is neither cached nor on the remote
                _say_error("push", "could not list the previous outputs.dvc", exc)
        for line in _absent_warnings(cfg, rel, survey, old is not None, before):
            print(line, file=report)
        old_text = pointer.read_bytes() if pointer.is_file() else None
        try:
            repo.add(rel)
        except DvcException as exc:
            _say_error("push", f"dvc add {rel} failed", exc)
            return 1
        recorded = _pointer_fields(pointer)
        now = _snapshot(cfg.outputs_dir)
        if now != checked or recorded["nfiles"] != len(checked):
            changed = sorted(set(now) ^ set(checked) | {k for k in now if k in checked and now[k] != checked[k]})
            _restore_pointer(pointer, old_text)
            print(f"refusing to publish: {rel}/ changed while it was being checked and recorded "
                  f"({', '.join(changed[:5]) or 'file count differs'}); {pointer_rel} was left as it was. "
                  "Run `farm check`, then `farm push` again")
            return 1
        # The pointer and the golden digests in git always describe the same tree.
        write_text_atomic(golden_path(cfg), render_golden(checked))
        try:
            sent = repo.push(targets=[pointer_rel])
        except _remote_errors() as exc:
            _say_error("push", f"dvc push to {remote.describe()} failed ({pointer_rel} is updated, "
                       "nothing is published; check that the remote and remote.endpointurl are reachable, then run "
                       "`farm push` again)", exc)
            return 1
    new = _pointer_fields(pointer)
    _print_changes(cfg.outputs_dir, rel, old, before, new)
    print(f"checked {len(survey.checked)} objects; pushed {sent} new blob(s) to {remote.describe()}")
    print(f"published {pointer_rel}: md5 {new['md5']} ({new['nfiles']} files, {new['size']} bytes)"
          + ("" if old is None or old["md5"] != new["md5"] else " (unchanged)")
          + f"; commit {pointer_rel} and {golden_path(cfg).name}")
    return 0


def record_pointer(cfg: FarmConfig) -> dict[str, Any]:
    """`dvc add` the output tree: rewrite its pointer (outputs.dvc) without publishing anything (`farm golden`).
    The caller holds the tree's lock and has checked the tree."""
    rel, pointer_rel = _paths(cfg)
    from dvc.exceptions import DvcException

    with _repo(cfg, remote_of(cfg), anonymous=False) as repo:
        try:
            repo.add(rel)
        except DvcException as exc:
            raise FarmError(f"dvc add {rel} failed: {_scrub(str(exc))}",
                            "fix or remove .dvc/ (the farm recreates it), then run the command again") from None
    return _pointer_fields(cfg.root / pointer_rel)


def _refuse_unpublishable(cfg: FarmConfig, rel: str, survey: Survey) -> bool:
    """Print why the tree cannot be published, if it cannot: directories with rows missing, or drift.

    DVC tracks outputs/ as one directory (one listing, one hash in outputs.dvc); its only way to leave a
    directory out of that listing is .dvcignore, a committed file that would also hide the directory from
    every later `dvc status`, checkout and pull. So an incomplete directory is not skipped: the push refuses
    as a whole and names every such directory with its build command."""
    incomplete = survey.incomplete
    for d in incomplete:
        print(_not_built(cfg, rel, d))
    found = _drift(cfg, survey)
    for line in found:
        print(f"DRIFT {line}")
    if not incomplete and not found:
        return False
    why = []
    if incomplete:
        names = ", ".join(f"{d.op}/{d.target} ({len(d.missing)} of {len(d.rows)} rows)" for d in incomplete)
        why.append(f"{len(incomplete)} directories not built completely: {names}")
    if found:
        why.append(f"{len(found)} problem(s) in {rel}/")
    fix = "build them (the commands above), then `farm push`" if incomplete else "`farm build`, then `farm push`"
    print(f"refusing to publish: {'; '.join(why)} (DVC publishes {rel}/ as one tree; fix: {fix})")
    return True


def _absent_warnings(cfg: FarmConfig, rel: str, survey: Survey, had_pointer: bool,
                     before: Granular | None) -> list[str]:
    """A selected directory that is not here is not published: a warning naming how to get it, not a refusal."""
    lines = []
    for d in survey.absent:
        build = _build_command(cfg, d)
        published = before is not None and any(_dir_of(p) == d.key for p in before.in_pointer)
        if published:
            how = (f"it is in the previous {rel}.dvc, and this push drops it; to keep it: "
                   f"{_command('pull', *_remote_args(cfg))}, then `farm push`")
        elif had_pointer and before is None:
            how = f"build it: {build} (or, if it was published before, `farm pull` it)"
        else:
            how = f"build it: {build}"
        lines.append(f"WARNING {rel}/{d.op}/{d.target}/ is absent ({len(d.rows)} rows): not published; {how}")
    return lines


def _restore_pointer(pointer: Path, old_text: bytes | None) -> None:
    if old_text is None:
        pointer.unlink(missing_ok=True)
    else:
        write_bytes_atomic(pointer, old_text)


def _print_changes(out: Path, rel: str, old: dict[str, Any] | None, before: Granular | None,
                   new: dict[str, Any]) -> None:
    if old is None:
        per_dir = Counter(p.parent.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
        print(f"first publication of {rel}/ (no previous {rel}.dvc): {new['nfiles']} files added")
        for where, n in sorted(per_dir.items()):
            print(f"  + {rel}/{where}/ ({n} files)")
        return
    if before is None or (old["nfiles"] >= 0 and len(before.in_pointer) != old["nfiles"]):
        print(f"changes since the previous {rel}.dvc (md5 {old['md5']}): its listing is not in the local cache "
              "nor on the remote, so per-file changes cannot be shown")
        return
    for mark, paths in (("+", before.added), ("-", before.deleted), ("~", before.modified)):
        for path in sorted(paths):
            print(f"  {mark} {rel}/{path}")
    print(f"changes since the previous {rel}.dvc (md5 {old['md5']}): added={len(before.added)} "
          f"removed={len(before.deleted)} changed={len(before.modified)} unchanged={len(before.unchanged)}")


# ---------------------------------------------------------------------------------------------- pull

def pull(cfg: FarmConfig, flags: set[str]) -> int:
    """`dvc pull` of outputs.dvc under the output tree's lock, naming what did not arrive intact, then the
    drift guard on what did."""
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        return _pull_locked(cfg, flags)


def _pull_locked(cfg: FarmConfig, flags: set[str]) -> int:
    rel, pointer_rel = _paths(cfg)
    remote = remote_of(cfg)
    pointer = cfg.root / pointer_rel
    if not pointer.is_file():
        raise FarmError(f"{pointer} does not exist: nothing was published here",
                        "get outputs.dvc from git (git pull), or publish first with `farm push`")
    fields = _pointer_fields(pointer)
    from dvc.exceptions import DvcException

    with _repo(cfg, remote, anonymous=_anonymous(remote)) as repo:
        try:
            repo.fetch(targets=[pointer_rel])
            # verify=true (conf/remote): DVC re-hashes every download and keeps none that does not match,
            # so a blob corrupted on the remote shows up here as not in the cache.
            broken = {path: _remote_blob(repo, rel, path) for path in sorted(_granular(repo, rel).not_in_cache)}
        except _remote_errors() as exc:
            _say_error("pull", f"fetching {pointer_rel} from {remote.describe()} failed", exc)
            return 1
        stats: dict[str, Any] = {}
        if not broken:  # with a corrupt blob check nothing out: DVC would drop the whole directory
            try:
                stats = repo.checkout(targets=[pointer_rel], force="--force" in flags) or {}
            except DvcException as exc:  # e.g. local changes DVC will not overwrite without --force
                _say_error("pull", f"checkout of {rel}/ failed", exc)
                print(f"farm pull: if {rel}/ has local changes: `farm pull --force` replaces them with the "
                      "published copy", file=sys.stderr)
                return 1
    if broken:
        for path, blob in broken.items():
            print(f"CORRUPT {rel}/{path}: the remote's copy is missing or does not hash to what {pointer_rel} "
                  f"records (blob {blob or '?'})")
        print(f"{len(broken)} object(s) of {pointer_rel} did not arrive intact from {remote.describe()}; {rel}/ was "
              "left as it was. Fix: delete those blobs on the remote (DVC uploads only what is absent there), "
              "then `farm push` from a tree that checks clean")
        return 1
    counts = stats.get("stats") or {}
    applied = " ".join(f"{k}={counts[k]}" for k in ("added", "modified", "deleted") if k in counts)
    print(f"pulled {pointer_rel} (md5 {fields['md5']}, {fields['nfiles']} files) from {remote.describe()}: {applied}")
    survey = _survey(cfg)
    for d in survey.absent:  # not part of the publication: the table has it, nobody published it
        print(f"WARNING {rel}/{d.op}/{d.target}/ is not in {pointer_rel} ({len(d.rows)} rows): "
              f"build it: {_build_command(cfg, d)}")
    for d in survey.incomplete:
        print(_not_built(cfg, rel, d))
    found = _drift(cfg, survey)
    for line in found:
        print(f"DRIFT {line}")
    tail = f"; {len(survey.incomplete)} directories not built completely" if survey.incomplete else ""
    print(f"checked {len(survey.checked)} objects: "
          + ("no drift" if not found else f"{len(found)} problem(s)") + tail)
    return 1 if found or survey.incomplete else 0


def _remote_blob(repo: Repo, rel: str, path: str) -> str | None:
    """Where the remote keeps the blob of outputs/<path> (from the cached listing), for the error message."""
    try:
        out = next(o for st in repo.index.stages for o in st.outs if o.def_path == rel)
        _, hash_info = out.get_obj().get(tuple(path.split("/")))
        odb = repo.cloud.get_remote_odb(None)
        return str(odb.fs.unstrip_protocol(odb.oid_to_path(hash_info.value)))
    except Exception:  # only a detail of a message that is printed anyway
        return None


# -------------------------------------------------------------------------------------------- status

def _dir_of(path: str) -> tuple[str, str] | None:
    parts = path.split("/")
    return (parts[0], parts[1]) if len(parts) >= 3 else None


def _in_dir(files: set[str], where: tuple[str, str]) -> set[str]:
    return {p for p in files if _dir_of(p) == where}


@dataclass(frozen=True)
class StatusContext:
    """What every directory's verdict in `farm status` needs: the tree against its pointer, and the commands."""

    cfg: FarmConfig
    rel: str
    pointer_rel: str
    g: Granular
    every: list[Row]
    push_cmd: str
    pull_cmd: str
    again: list[str]


def _local_listing(out: Path, rel: str) -> Granular:
    """Before the first push every file here is one the pointer does not have yet: all of them are added."""
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} if out.is_dir() else set()
    return Granular(unchanged=set(), added=files, modified=set(), deleted=set(), not_in_cache=set())


def status(cfg: FarmConfig, flags: set[str]) -> int:
    """Per <op>/<target>/ directory: outputs/ versus outputs.dvc and the instance table, and the fix."""
    rel, pointer_rel = _paths(cfg)
    remote = remote_of(cfg)
    pointer = cfg.root / pointer_rel
    survey = _survey(cfg)
    again = [*_selection_args(cfg), *_remote_args(cfg)]
    push_cmd, pull_cmd = _command("push", *again), _command("pull", *again)
    for line in survey.strays:
        print(f"STRAY {line}: remove it, then {push_cmd}")

    if pointer.is_file():
        try:
            with _repo(cfg, remote, anonymous=_anonymous(remote)) as repo:
                g = _granular(repo, rel)
        except _remote_errors() as exc:
            _say_error("status", f"could not compare {rel}/ with {pointer_rel}", exc)
            return 1
        fields = _pointer_fields(pointer)
        if fields["nfiles"] >= 0 and len(g.in_pointer) != fields["nfiles"]:
            print(f"UNKNOWN: the listing of {pointer_rel} (md5 {fields['md5']}) is neither in the local DVC cache "
                  f"nor readable from {remote.describe()}, so {rel}/ cannot be compared with it; fix: {pull_cmd}")
            return 1
    else:
        g = _local_listing(cfg.outputs_dir, rel)
        print(f"NOT PUBLISHED: {pointer_rel} does not exist; once `farm check` is clean: {push_cmd}")

    ctx = StatusContext(cfg, rel, pointer_rel, g, survey.every, push_cmd, pull_cmd, again)
    dirs = set(survey.dirs) | {d for d in map(_dir_of, g.in_pointer | g.added) if d is not None}
    verbose = "--verbose" in flags or "-v" in flags
    need = 0
    for key in sorted(dirs):
        lines = _dir_verdict(ctx, key, _lookup(cfg, survey, key))
        need += bool(lines)
        for line in lines or ([f"ok {rel}/{key[0]}/{key[1]}/: {_counts(ctx, key)}"] if verbose else []):
            print(line)
    return _status_summary(len(dirs), need, len(survey.strays), pointer.is_file(), pointer_rel)


def _lookup(cfg: FarmConfig, survey: Survey, key: tuple[str, str]) -> Directory | None:
    """The directory as surveyed; one only the pointer has (outside the selection) is looked at too;
    None when no row of instances/ builds it."""
    if key in survey.dirs:
        return survey.dirs[key]
    rows = tuple(r for r in survey.every if (r.op, r.target) == key)
    return _directory(cfg, key, rows) if rows else None


def _status_summary(n: int, need: int, strays: int, published: bool, pointer_rel: str) -> int:
    """The last line: its counts are those of the lines above (ok + need action = directories)."""
    if not need and not strays and published:
        print(f"status: {n} directories, everything matches {pointer_rel} and instances/")
        return 0
    extra = ([f"{strays} stray entries"] if strays else []) + ([f"{pointer_rel} not published yet"]
                                                               if not published else [])
    print(f"status: {n} directories: {n - need} ok, {need} need action" + "".join(f"; {x}" for x in extra))
    return 1


def _counts(ctx: StatusContext, key: tuple[str, str]) -> str:
    local = ctx.cfg.outputs_dir / key[0] / key[1]
    on_disk = sum(1 for p in local.iterdir() if p.is_file()) if local.is_dir() else 0
    return f"{on_disk} files here, {len(_in_dir(ctx.g.in_pointer, key))} in {ctx.pointer_rel}"


def _dir_verdict(ctx: StatusContext, key: tuple[str, str], d: Directory | None) -> list[str]:
    """The lines saying what one directory needs (none: it matches the pointer and the table)."""
    from farm.assure.check import check

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
    build = _build_command(ctx.cfg, d)
    if deleted and (fetchable or drift):  # published files are absent and what is here is not complete
        state = "MISSING" if d.absent else "INCOMPLETE"
        return [f"{state} {where}/: {len(deleted)} of {len(in_ptr)} published files are absent ({counts}); "
                f"fix: {ctx.pull_cmd}"]
    if drift:
        restore = f" (or restore the published copy: {_command('pull', '--force', *ctx.again)})" \
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


def seal_golden(cfg: FarmConfig, rows: list[Row], every: list[Row], log: object) -> int:
    """`farm golden`: under the tree's lock, require the selected ops' whole table built and clean, then write
    `<outputs_dir>.sha256` from the tree (farm/assure/golden.py) and the DVC pointer. Exit status."""
    from farm.assure.check import check

    if rows != every:
        raise FarmError("farm golden records the whole table of the selected ops, not a part of it",
                        "drop targets=/dtypes=/names= (ops=[...] may stay)")
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        found = check(cfg, rows, every)
        dirs = {(r.op, r.target) for r in rows}
        present = {tuple(p.relative_to(cfg.outputs_dir).parts) for p in cfg.outputs_dir.glob("*/*")}
        found += [f"{cfg.outputs_dir / '/'.join(d)}: no selected row builds this directory"
                  for d in sorted(present - dirs)]
        for line in found:
            print(f"DRIFT {line}", file=log)
        if found:
            print(f"refusing to record golden digests: {len(found)} problem(s); `farm build`, then `farm golden`",
                  file=log)
            return 1
        digests = tree_digests(cfg.outputs_dir)
        path = golden_path(cfg)
        write_text_atomic(path, render_golden(digests))
        pointer = record_pointer(cfg)
    print(f"wrote {path}: {len(digests)} files ({len(rows)} objects in {len(dirs)} directories)", file=log)
    print(f"wrote {path.with_suffix('.dvc').name}: md5 {pointer['md5']} ({pointer['nfiles']} files); "
          f"commit both ({path.name}, {path.with_suffix('.dvc').name})", file=log)
    return 0
