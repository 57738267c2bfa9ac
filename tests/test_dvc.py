"""farm push / pull / status with DVC, against a real S3 protocol endpoint (moto_server on loopback)
and the default local-directory remote. One small build (gfx942, 6 objects) is copied around."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, SMALL_ROWS_PER_TARGET, built_one_target_copy, last_line, run_farm

SEL = "targets=[gfx942]"
TARGET_DIR = "rmsnorm/gfx942"
# The small project builds one directory of a table that has many (every op's): publishing it is partial.
PARTIAL = "--partial"
BUCKET = "farm-objects"
# Dummy credentials: the secret must never show up in any output or file the farm writes.
SECRET = "farm-test-secret-" + secrets.token_hex(8)
S3_VENV = REPO / ".venv-s3" / "bin"

# boto3 lives in .venv-s3 (next to moto), not in the farm's env: talk to the bucket through it.
S3_TOOL = r"""
import os, sys, boto3
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1")
op, args = sys.argv[1], sys.argv[2:]
if op == "mb":
    s3.create_bucket(Bucket=args[0])
elif op == "ls":
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=args[0], Prefix=args[1])
    print("\n".join(o["Key"] for p in pages for o in p.get("Contents", [])))
elif op == "flip":  # flip one byte of an object in place (same size)
    data = bytearray(s3.get_object(Bucket=args[0], Key=args[1])["Body"].read())
    data[len(data) // 2] ^= 0xFF
    s3.put_object(Bucket=args[0], Key=args[1], Body=bytes(data))
"""


def tree_bytes(outputs: Path) -> dict[str, bytes]:
    return {p.relative_to(outputs).as_posix(): p.read_bytes() for p in sorted(outputs.rglob("*")) if p.is_file()}


def clone(src: Path, dest: Path, *, outputs: bool, published: bool) -> Path:
    """A copy of `src` as git would carry it (sources, instances, and with `published` the DVC pointer and
    committed DVC config), plus its outputs/ when asked. Never its DVC cache or local remote config."""
    for name in ("conf", "kernels_src", "instances"):
        shutil.copytree(src / name, dest / name)
    if outputs:
        shutil.copytree(src / "outputs", dest / "outputs")
    if published:
        for name in ("outputs.dvc", ".dvcignore", ".dvc/config", ".dvc/.gitignore"):
            if (src / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / name, dest / name)
    return dest


def no_secret_anywhere(*places: Path | str) -> None:
    for place in places:
        if isinstance(place, str):
            assert SECRET not in place
            continue
        for path in [place] if place.is_file() else place.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), f"credential leaked into {path}"


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def blob_of(project: Path, relpath: str) -> str:
    """md5 of outputs/<relpath> as the pointer's directory listing (in the DVC cache) records it."""
    md5 = re.search(r"md5: (\w+)\.dir", (project / "outputs.dvc").read_text()).group(1)
    listing = json.loads((project / ".dvc/cache/files/md5" / md5[:2] / (md5[2:] + ".dir")).read_text())
    return next(e["md5"] for e in listing if e["relpath"] == relpath)


# ------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def src(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small table built for gfx942 only (6 real objects): the session's build, cut down to that target."""
    return built_one_target_copy(built, tmp_path_factory.mktemp("dvc-src"), "gfx942")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    none = str(tmp_path_factory.mktemp("no-aws") / "absent")
    return {"AWS_ACCESS_KEY_ID": "farm-test-key", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_CONFIG_FILE": none,
            "AWS_EC2_METADATA_DISABLED": "true",  # never ask a metadata service: all traffic stays on loopback
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "DVC_NO_ANALYTICS": "1"}


@pytest.fixture(scope="module")
def s3(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto_server on 127.0.0.1 (a free port) with one bucket; its endpoint URL. Killed by pid at the end."""
    server = S3_VENV / "moto_server"
    assert server.is_file(), f"{server} is missing: run `bash scripts/setup.sh --tests` (it creates .venv-s3)"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert proc.poll() is None, "moto_server exited at start"
                assert time.monotonic() < deadline, "moto_server did not answer within 30 s"
                time.sleep(0.2)
        s3_tool(env, endpoint, "mb", BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def s3_tool(env: dict[str, str], endpoint: str, *args: str) -> str:
    proc = subprocess.run([str(S3_VENV / "python"), "-c", S3_TOOL, *args], env={**env, "S3_ENDPOINT": endpoint,
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def s3_args(endpoint: str, prefix: str) -> list[str]:
    return ["remote=s3", f"remote.url=s3://{BUCKET}/{prefix}", f"remote.endpointurl={endpoint}"]


@pytest.fixture(scope="module")
def published(src: Path, s3: str, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the build, published to s3://BUCKET/pub (its outputs.dvc is what git would carry)."""
    project = clone(src, tmp_path_factory.mktemp("dvc-pub"), outputs=True, published=False)
    proc = run_farm(project, "push", PARTIAL, SEL, *s3_args(s3, "pub"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "first publication of outputs/ (no previous outputs.dvc): 8 files added" in proc.stdout
    assert last_line(proc.stdout).startswith("published outputs.dvc: md5 ")
    assert last_line(proc.stdout).endswith("; commit outputs.dvc, outputs.sha256 and outputs.code.sha256")
    # The golden digests of the published tree are written with its pointer: coreutils verify the tree.
    verify = subprocess.run(["sha256sum", "-c", "--quiet", "../outputs.sha256"], cwd=project / "outputs",
                            capture_output=True, text=True)
    assert verify.returncode == 0 and len((project / "outputs.sha256").read_text().splitlines()) == 8
    no_secret_anywhere(proc.stdout, proc.stderr, project)
    return project


# ---------------------------------------------------------------------------------------------- tests

@pytest.mark.slow
def test_s3_push_then_pull_into_fresh_clone_is_byte_identical(published: Path, src: Path, s3: str,
                                                              env: dict[str, str], tmp_path: Path) -> None:
    keys = s3_tool(env, s3, "ls", BUCKET, "pub/").split()
    # 6 objects + manifest.json + SOURCE.md, plus DVC's directory listing
    assert len(keys) == SMALL_ROWS_PER_TARGET + 3 and sum(k.endswith(".dir") for k in keys) == 1
    fresh = clone(published, tmp_path / "fresh", outputs=False, published=True)
    assert not (fresh / ".dvc" / "cache").exists()
    proc = run_farm(fresh, "pull", SEL, *s3_args(s3, "pub"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_line(proc.stdout) == f"checked {SMALL_ROWS_PER_TARGET} objects: no drift"
    assert tree_bytes(fresh / "outputs") == tree_bytes(src / "outputs")
    status = run_farm(fresh, "status", SEL, *s3_args(s3, "pub"), env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert last_line(status.stdout) == "status: 1 directories, everything matches outputs.dvc and instances/"
    no_secret_anywhere(proc.stdout, proc.stderr, status.stdout, status.stderr, fresh)


@pytest.mark.slow
def test_status_names_missing_directory_and_its_pull_command(published: Path, s3: str, env: dict[str, str],
                                                             tmp_path: Path) -> None:
    project = clone(published, tmp_path / "p", outputs=True, published=True)
    shutil.rmtree(project / "outputs" / TARGET_DIR)
    proc = run_farm(project, "status", SEL, *s3_args(s3, "pub"), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith(f"MISSING outputs/{TARGET_DIR}/"))
    assert "8 of 8 published files are absent" in line
    fix = re.search(r"fix: `farm ([^`]*)`", line).group(1).split()
    assert fix == ["pull", "ops=[rmsnorm]", SEL, *s3_args(s3, "pub")]  # the project selects rmsnorm only
    # the printed command is the fix, as printed
    assert run_farm(project, *fix, env=env).returncode == 0
    assert run_farm(project, "status", SEL, *s3_args(s3, "pub"), env=env).returncode == 0


@pytest.mark.slow
def test_blob_corrupted_on_the_remote_is_detected_on_pull(src: Path, s3: str, env: dict[str, str],
                                                          tmp_path: Path) -> None:
    pusher = clone(src, tmp_path / "pusher", outputs=True, published=False)
    assert run_farm(pusher, "push", PARTIAL, SEL, *s3_args(s3, "bad"), env=env).returncode == 0
    victim = f"{TARGET_DIR}/rmsnorm_bf16_train_n2560.hsaco"
    md5 = blob_of(pusher, victim)
    s3_tool(env, s3, "flip", BUCKET, f"bad/files/md5/{md5[:2]}/{md5[2:]}")

    # DVC re-hashes what it downloads (remote.verify, on by default): one line names the blob and where it
    # is, nothing is checked out.
    fresh = clone(pusher, tmp_path / "fresh", outputs=False, published=True)
    proc = run_farm(fresh, "pull", SEL, *s3_args(s3, "bad"), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("farm pull: ")]
    assert line.startswith("farm pull: 1 of 8 files of outputs.dvc are in neither the local DVC cache")
    assert f"outputs/{victim} (blob s3://{BUCKET}/bad/files/md5/{md5[:2]}/{md5[2:]})" in line
    assert "outputs/ was left as it was" in line
    assert not (fresh / "outputs").exists()

    # Told to trust the remote, DVC keeps the bad bytes in its cache; the pull re-hashes every blob before it
    # checks anything out, so the object is still named and nothing is checked out.
    trusting = clone(pusher, tmp_path / "trusting", outputs=False, published=True)
    proc = run_farm(trusting, "pull", SEL, *s3_args(s3, "bad"), "remote.verify=false", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"outputs/{victim} (blob s3://" in proc.stderr and "1 of 8 files" in proc.stderr
    assert not (trusting / "outputs").exists()


@pytest.mark.slow
def test_push_of_a_tampered_tree_is_refused(src: Path, s3: str, env: dict[str, str], tmp_path: Path) -> None:
    project = clone(src, tmp_path / "p", outputs=True, published=False)
    victim = project / "outputs" / TARGET_DIR / "rmsnorm_f32_infer_generic.hsaco"
    flip_byte(victim)
    proc = run_farm(project, "push", SEL, *s3_args(s3, "tampered"), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"DRIFT {victim}: SHA256/size differ" in proc.stdout
    assert last_line(proc.stdout).startswith("refusing to publish: 1 problem(s) in outputs/")
    assert not (project / "outputs.dvc").exists()
    assert s3_tool(env, s3, "ls", BUCKET, "tampered/").split() == []


@pytest.mark.slow
def test_local_default_remote_round_trip_and_change_report(src: Path, env: dict[str, str], tmp_path: Path) -> None:
    project = clone(src, tmp_path / "p", outputs=True, published=False)
    before = run_farm(project, "status", SEL, env=env)
    assert before.returncode == 1 and "NOT PUBLISHED: outputs.dvc does not exist" in before.stdout
    assert run_farm(project, "push", PARTIAL, SEL, env=env).returncode == 0
    assert (project / ".farm" / "dvc-remote" / "files" / "md5").is_dir()  # conf/remote/local.yaml's url
    assert "analytics = False" in (project / ".dvc" / "config").read_text()

    shutil.rmtree(project / "outputs")
    shutil.rmtree(project / ".dvc" / "cache")
    status = run_farm(project, "status", SEL, env=env)
    assert status.returncode == 1
    assert f"MISSING outputs/{TARGET_DIR}/: 8 of 8 published files are absent" in status.stdout
    assert f"fix: `farm pull ops=[rmsnorm] {SEL}`" in status.stdout
    pull = run_farm(project, "pull", SEL, env=env)
    assert pull.returncode == 0, pull.stdout + pull.stderr
    assert tree_bytes(project / "outputs") == tree_bytes(src / "outputs")

    # Another checkout reaches the same directory remote by its absolute path.
    other = clone(project, tmp_path / "other", outputs=False, published=True)
    remote = f"remote.url={project / '.farm' / 'dvc-remote'}"
    assert run_farm(other, "pull", SEL, remote, env=env).returncode == 0
    assert tree_bytes(other / "outputs") == tree_bytes(src / "outputs")

    # A legitimate change (two rows dropped from the table, rebuilt without compiling) is reported per file.
    op = project / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text().replace("n: [2560, 16384]", "n: [2560]"))
    run_farm(project, "expand", check=True)
    run_farm(project, "build", SEL, check=True)
    status = run_farm(project, "status", SEL, env=env)
    assert status.returncode == 1
    assert f"UNPUBLISHED outputs/{TARGET_DIR}/: checks clean but differs from outputs.dvc (0 added, 2 changed, " \
           f"2 removed; 6 files here, 8 in outputs.dvc); fix: `farm push {PARTIAL} ops=[rmsnorm] {SEL}`" \
           in status.stdout
    push = run_farm(project, "push", PARTIAL, SEL, env=env)
    assert push.returncode == 0, push.stdout + push.stderr
    lines = push.stdout.splitlines()
    for mark, name in (("-", "rmsnorm_bf16_train_n16384.hsaco"), ("-", "rmsnorm_f16_f32gamma_train_n16384.hsaco"),
                       ("~", "manifest.json"), ("~", "SOURCE.md")):
        assert f"  {mark} outputs/{TARGET_DIR}/{name}" in lines
    assert any(x.endswith("added=0 removed=2 changed=2 unchanged=4") for x in lines)
    assert "nfiles: 6" in (project / "outputs.dvc").read_text()
    assert run_farm(project, "status", SEL, env=env).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("args, needle", [
    (["outputs_dir=/tmp/farm-elsewhere"], "is not inside the project root"),
    (["remote=s3"], "remote.url is not set for remote=s3"),
    (["remote=s3", "remote.url=https://example.invalid/x"], "is not an s3:// URL"),
    (["remote=s3", "remote.url=s3://b/p", "remote.endpointurl=http://127.0.0.1:9"], "no AWS credentials"),
])
def test_push_user_errors(src: Path, tmp_path: Path, args: list[str], needle: str) -> None:
    project = clone(src, tmp_path / "p", outputs=True, published=False)
    proc = run_farm(project, "push", SEL, *args, env={
        "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE": str(tmp_path / "none")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr
    assert not (project / "outputs.dvc").exists()


@pytest.mark.slow
def test_unreachable_s3_endpoint_on_push_is_one_line(src: Path, env: dict[str, str], tmp_path: Path) -> None:
    """No server at the endpoint (a loopback port nothing listens on): one line naming the remote and the
    fix, not the S3 client stack's traceback."""
    project = clone(src, tmp_path / "p", outputs=True, published=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    proc = run_farm(project, "push", PARTIAL, SEL, *s3_args(f"http://127.0.0.1:{port}", "nowhere"), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "\x1b[" not in proc.stderr  # no terminal codes: not a terminal
    failure = [line for line in proc.stderr.splitlines() if line.startswith("farm push: dvc push to")]
    assert len(failure) == 1 and f"127.0.0.1:{port}" in failure[0] and "reachable" in failure[0]
    # A push that fails writes none of the three files git carries (here: there were none).
    assert not any((project / name).exists() for name in ("outputs.dvc", "outputs.sha256", "outputs.code.sha256"))
    no_secret_anywhere(proc.stdout, proc.stderr)


# ------------------------------------------------------------------ the publishing rule: complete, clean directories

def fix_command(line: str, label: str) -> list[str]:
    """The `farm ...` command a report line names after `label`, as words."""
    return re.search(label + r" `farm ([^`]*)`", line).group(1).split()


@pytest.mark.slow
def test_push_after_partial_build_reports_not_built_not_drift(src: Path, env: dict[str, str],
                                                             tmp_path: Path) -> None:
    """Before: the rows a partial build had not made yet were reported as DRIFT (no entry in manifest.json)."""
    project = clone(src, tmp_path / "p", outputs=False, published=False)
    run_farm(project, "build", SEL, "dtypes=[bf16]", check=True)  # 3 of the directory's 6 rows
    proc = run_farm(project, "push", SEL, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DRIFT" not in proc.stdout and "has no entry" not in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.startswith("NOT BUILT "))
    assert line == (f"NOT BUILT outputs/{TARGET_DIR}/: 3 of 6 rows have no object here; "
                    "build them: `farm build ops=[rmsnorm] targets=[gfx942]`")
    assert last_line(proc.stdout).startswith(
        "refusing to publish: 1 directory not built completely: rmsnorm/gfx942 (3 of 6 rows)")
    assert not (project / "outputs.dvc").exists()

    status = run_farm(project, "status", SEL, env=env)
    assert status.returncode == 1 and "DRIFT" not in status.stdout
    assert (f"NOT BUILT outputs/{TARGET_DIR}/: 3 of 6 rows have no object here nor in outputs.dvc "
            "(5 files here, 0 in outputs.dvc); fix: `farm build ops=[rmsnorm] targets=[gfx942]`") in status.stdout

    # The printed command is the fix: it builds the rest, and the directory is published.
    run_farm(project, *fix_command(line, "build them:"), check=True)
    proc = run_farm(project, "push", PARTIAL, SEL, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tree_bytes(project / "outputs") == tree_bytes(src / "outputs")


@pytest.mark.slow
def test_push_refuses_a_directory_with_objects_deleted_naming_it(src: Path, env: dict[str, str],
                                                                 tmp_path: Path) -> None:
    """A directory missing rows is never published, also outside the selection, and is named with its count."""
    project = clone(src, tmp_path / "p", outputs=True, published=False)
    (project / "outputs" / TARGET_DIR / "rmsnorm_f32_infer_generic.hsaco").unlink()
    proc = run_farm(project, "push", "targets=[gfx90a]", env=env)  # gfx942 is present, so it is looked at
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DRIFT" not in proc.stdout
    assert (f"NOT BUILT outputs/{TARGET_DIR}/: 1 of 6 rows have no object here; "
            "build them: `farm build ops=[rmsnorm] targets=[gfx942]`") in proc.stdout
    assert not (project / "outputs.dvc").exists()


@pytest.mark.slow
def test_status_before_first_push_does_not_contradict_itself(src: Path, env: dict[str, str],
                                                             tmp_path: Path) -> None:
    """Before: `8 files here, 0 in outputs.dvc` next to `0 added`, and `1 directories, 2 need action`."""
    project = clone(src, tmp_path / "p", outputs=True, published=False)
    proc = run_farm(project, "status", SEL, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith(f"UNPUBLISHED outputs/{TARGET_DIR}/"))
    assert line == (f"UNPUBLISHED outputs/{TARGET_DIR}/: checks clean but differs from outputs.dvc (8 added, "
                    f"0 changed, 0 removed; 8 files here, 0 in outputs.dvc); fix: `farm push {PARTIAL} ops=[rmsnorm] "
                    f"{SEL}`")
    added, here = re.search(r"\((\d+) added, .* (\d+) files here", line).groups()
    assert added == here
    assert last_line(proc.stdout) == "status: 1 directories: 0 ok, 1 need action; outputs.dvc not published yet"

    assert run_farm(project, *fix_command(line, "fix:"), env=env).returncode == 0
    proc = run_farm(project, "status", SEL, "--verbose", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ok outputs/{TARGET_DIR}/: 8 files here, 8 in outputs.dvc" in proc.stdout
    assert last_line(proc.stdout) == "status: 1 directories, everything matches outputs.dvc and instances/"


@pytest.mark.slow
def test_absent_directories_are_published_only_on_purpose(src: Path, env: dict[str, str], tmp_path: Path) -> None:
    """Before: a push from a tree lacking directories of the table exited 0 with a warning per directory and
    dropped them from outputs.dvc and their lines from outputs.sha256. Now it refuses unless --partial says so,
    naming what the published listing lacks (a count and the first few)."""
    project = clone(src, tmp_path / "p", outputs=True, published=False)
    both = "targets=[gfx942,gfx90a]"
    proc = run_farm(project, "push", both, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refusal = last_line(proc.stdout)
    assert refusal.startswith("refusing to publish: outputs/ lacks ") and "rmsnorm/gfx90a" in refusal
    assert "(-v lists all)" in refusal and f"`farm push {PARTIAL} ops=[rmsnorm] {both}`" in refusal
    assert not (project / "outputs.dvc").exists() and not (project / "outputs.sha256").exists()
    everything = run_farm(project, "push", "-v", both, env=env)
    assert "(-v lists all)" not in last_line(everything.stdout) and "sdpa_rdna/gfx12-generic" in everything.stdout

    proc = run_farm(project, "push", PARTIAL, both, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = next(x for x in proc.stdout.splitlines() if x.startswith(f"partial publication ({PARTIAL}): "))
    assert "outputs.dvc lists 1 of the table's " in said and "rmsnorm/gfx90a" in said
    assert last_line(proc.stdout).startswith("published outputs.dvc: md5 ")

    fresh = clone(project, tmp_path / "fresh", outputs=False, published=True)
    remote = f"remote.url={project / '.farm' / 'dvc-remote'}"
    proc = run_farm(fresh, "pull", both, remote, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("WARNING outputs/rmsnorm/gfx90a/ is not in outputs.dvc (6 rows): "
            "build it: `farm build ops=[rmsnorm] targets=[gfx90a]`") in proc.stderr.splitlines()
    assert last_line(proc.stdout) == f"checked {SMALL_ROWS_PER_TARGET} objects: no drift"

    # A published directory that is absent here: the warning names the pull that brings it back.
    shutil.rmtree(fresh / "outputs" / TARGET_DIR)
    proc = run_farm(fresh, "push", PARTIAL, SEL, remote, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (f"WARNING 1 directories of the previous outputs.dvc are absent here, and this push drops them from "
            f"it: outputs/{TARGET_DIR}/; to keep them: `farm pull {remote}`, then `farm push {PARTIAL} {remote}`"
            ) in proc.stderr


# ------------------------------------------------------------------ fix commands name the remote as Hydra chose it

@pytest.mark.parametrize("default_entry", ["- remote: s3", "- optional remote: s3"])
def test_fix_commands_name_the_remote_unless_it_is_the_default(tmp_path: Path, default_entry: str) -> None:
    """The default remote is whatever Hydra's defaults list chooses. Before, conf/config.yaml was read again
    by hand: an `optional remote: s3` entry was not recognised, `local` was taken as the default, and the
    printed fix commands left out the `remote=local` they need."""
    from farm.publish.commands import remote_args
    from farm.table.config import load

    project = tmp_path / "p"
    shutil.copytree(REPO / "conf", project / "conf")
    config = project / "conf" / "config.yaml"
    config.write_text(config.read_text().replace("  - remote: local\n", f"  {default_entry}\n", 1))
    s3 = project / "conf" / "remote" / "s3.yaml"
    s3.write_text(s3.read_text().replace("url: ???", "url: s3://bucket/prefix", 1))

    assert remote_args(load(project, [])) == []
    assert remote_args(load(project, ["remote.region=eu-west-1"])) == ["remote.region=eu-west-1"]
    assert remote_args(load(project, ["remote=local"])) == ["remote=local"]
    assert remote_args(load(project, ["remote=local", "remote.verify=false"])) == ["remote=local",
                                                                                   "remote.verify=false"]


def test_opening_the_repository_does_not_walk_the_virtual_environments(tmp_path: Path) -> None:
    # The remote cache opens the project with DVC, which walks the workspace for .dvc files; a venv is
    # thousands of directories. The project's .dvcignore keeps the farm's own folders out of that walk.
    from dvc.repo import Repo

    project = tmp_path / "p"
    (project / ".dvc").mkdir(parents=True)
    shutil.copy(REPO / ".dvcignore", project / ".dvcignore")
    for folder in (".venv/lib", ".venv-s3/lib", ".farm/dvc-remote", "outputs/rmsnorm"):
        (project / folder).mkdir(parents=True)
        (project / folder / "x.dvc").write_text("outs: []\n")
    with Repo(str(project), uninitialized=True) as repo:
        walked = {Path(root).relative_to(project).as_posix()
                  for root, _, _ in repo.dvcignore.walk(repo.fs, str(project))}
    assert not {w for w in walked if w.startswith((".venv", ".farm"))}, sorted(walked)
    assert "outputs/rmsnorm" in walked  # the published tree itself is still seen
