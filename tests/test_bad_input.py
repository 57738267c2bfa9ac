"""Careless or hostile input: every case is one clear error (exit 2) naming the thing and the fix, before
any work is done; nothing is lost; no traceback. None of these tests compiles anything."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, copy_project, last_line, run_farm, small_copy

from farm.core.errors import FarmError
from farm.table import config as config_mod


def refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The one error a refused command prints: exit 2, no traceback, every needle in it."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count(": error: ") == 1 and "\n  fix: " in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    return proc.stderr


# --------------------------------------------------------------------------------------------------
# 11: raw tracebacks instead of one clear error.


@pytest.mark.parametrize(("override", "says"), [
    ("compile_timeout_s=abc", "compile_timeout_s='abc' is not a positive number"),
    ("audit.sample=x", "audit.sample='x' is not a positive whole number of rows"),
    ("executor.num_cpus=abc", "executor.num_cpus='abc' is not a positive whole number"),
    ("compile_timeout_s=[1]", "compile_timeout_s=[1] is not a positive number"),
])
def test_non_numeric_option_values_are_one_clear_error(small_project: Path, override: str, says: str) -> None:
    refused(run_farm(small_project, "plan", override), says)


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "61"])
def test_a_bad_batch_gather_setting_is_refused_before_any_work(small_project: Path, tmp_path: Path,
                                                               value: str) -> None:
    out = tmp_path / "out"
    proc = run_farm(small_project, "build", f"outputs_dir={out}", env={"FARM_BATCH_GATHER_S": value},
                    driver_env=True)  # a setting of the build's own process
    refused(proc, f"FARM_BATCH_GATHER_S={value!r} is not a number of seconds from 0 to 60", "unset it")
    assert "rows=" not in proc.stderr and not list(out.rglob("*.hsaco"))


def test_override_without_a_key_is_refused(small_project: Path) -> None:
    refused(run_farm(small_project, "plan", "=1"), "malformed override '=1'", "with a key")
    refused(run_farm(small_project, "plan", "executor=1"), "config error in executor=1", "conf/<group>/")


def test_plan_piped_into_head_exits_quietly(small_project: Path) -> None:
    """`farm plan -v | head -3`: the reader leaves after 3 lines of ~1,450 (more than a pipe holds)."""
    env = {k: v for k, v in os.environ.items() if k != "FARM_PROJECT"}
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", "plan", "-v", "ops=[]"], cwd=small_project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        head = [proc.stdout.readline() for _ in range(3)]
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert all(line.strip() for line in head)
    assert err == "", err  # no BrokenPipeError traceback, no "Exception ignored" at exit
    assert code == 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


# --------------------------------------------------------------------------------------------------
# 11: directories that cannot be written, found before any compile.


def unprivileged() -> list[str]:
    """A command prefix under which permission bits apply: root without CAP_DAC_OVERRIDE."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to test permissions as root"
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


def run_unprivileged(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_bounded(project, *args, prefix=unprivileged(), timeout=timeout)


def run_bounded(project: Path, *args: str, prefix: list[str] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """`farm ARGS` in `project`; a command that hangs fails the test (subprocess.run kills it on timeout)."""
    env = {k: v for k, v in os.environ.items() if k != "FARM_PROJECT"}
    return subprocess.run([*(prefix or []), sys.executable, "-m", "farm.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    yield directory
    directory.chmod(0o755)  # so that pytest can remove it


def test_read_only_outputs_dir_is_refused_before_compiling(small_project: Path, read_only_dir: Path,
                                                           tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    proc = run_unprivileged(small_project, "build", f"outputs_dir={read_only_dir}", f"report_dir={reports}")
    refused(proc, f"cannot write to outputs_dir {read_only_dir}: permission denied", "nothing was built")
    assert "rows=" not in proc.stderr  # stopped before planning, so before any compile
    assert not reports.exists()
    # A directory it would create inside a read-only one: named, with where it would be created.
    proc = run_unprivileged(small_project, "build", f"outputs_dir={read_only_dir / 'out'}", f"report_dir={reports}")
    refused(proc, f"outputs_dir {read_only_dir / 'out'} (it would be created in {read_only_dir})")


def test_unwritable_report_dir_is_refused_before_compiling(small_project: Path, read_only_dir: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_unprivileged(small_project, "build", f"outputs_dir={out}", f"report_dir={read_only_dir / 'r'}")
    refused(proc, "cannot write to report_dir", str(read_only_dir), "report_dir=PATH")
    assert not out.exists()


def test_outputs_dir_that_is_a_symlink_or_not_a_directory_is_refused(small_project: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    refused(run_farm(small_project, "build", f"outputs_dir={tmp_path / 'link'}", f"report_dir={tmp_path / 'r'}"),
            f"outputs_dir {tmp_path / 'link'} is a symlink (to {real})")
    (tmp_path / "file").write_text("mine")
    refused(run_farm(small_project, "build", f"outputs_dir={tmp_path / 'file' / 'out'}", f"report_dir={tmp_path}/r"),
            f"{tmp_path / 'file'}, on the way to {tmp_path / 'file' / 'out'}, is a regular file, not a directory")
    assert (tmp_path / "file").read_text() == "mine" and not any(real.iterdir())


def test_pull_into_a_read_only_outputs_dir_is_refused(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "p")
    (project / "outputs").mkdir()
    (project / "outputs").chmod(0o555)
    try:
        refused(run_unprivileged(project, "pull"), f"cannot write to outputs_dir {project / 'outputs'}")
    finally:
        (project / "outputs").chmod(0o755)


def test_pin_into_a_read_only_conf_toolchain_is_refused(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    pin = project / "conf" / "toolchain" / "pinned.yaml"
    before = pin.read_text().replace("flydsl: 0.3.4", "flydsl: 0.0.1")  # a pin that must move
    assert before != pin.read_text()
    pin.write_text(before)
    pin.parent.chmod(0o555)
    try:
        refused(run_unprivileged(project, "pin"), f"cannot write to the toolchain pin's directory {pin.parent}")
    finally:
        pin.parent.chmod(0o755)
    assert pin.read_text() == before


# --------------------------------------------------------------------------------------------------
# 12: bad values that were accepted silently.


@pytest.mark.parametrize(("override", "says"), [
    ("outputs_dir=", "outputs_dir is empty, not a directory path"),
    ("outputs_dir=null", "outputs_dir is null, not a directory path"),
    ("instances_dir=", "instances_dir is empty"),
    ("kernels_dir=null", "kernels_dir is null"),
    ("report_dir=", "report_dir is empty"),
])
def test_empty_or_null_directory_is_refused(small_project: Path, override: str, says: str) -> None:
    refused(run_farm(small_project, "build", override), says, "drop the")
    assert not (small_project / "None").exists()


def test_outputs_dir_pointing_at_the_project_is_refused(small_project: Path, tmp_path: Path) -> None:
    inputs = "is inside the project's inputs"
    for value, says in ((".", "is the project root"), ("..", "contains the project root"), ("conf", inputs),
                        ("kernels_src/x", inputs)):
        refused(run_farm(small_project, "build", f"outputs_dir={value}"), says, "the farm deletes stray files")
    other = copy_project(tmp_path / "other")
    refused(run_farm(small_project, "plan", f"outputs_dir={other}"), "holds conf/ or kernels_src/")
    assert run_farm(small_project, "plan", f"outputs_dir={tmp_path / 'fine'}").returncode == 0


@pytest.mark.parametrize("value", ["0", "-5", "inf"])
def test_non_positive_compile_timeout_is_refused(small_project: Path, value: str) -> None:
    refused(run_farm(small_project, "build", f"compile_timeout_s={value}"), "is not a positive number")


def test_positive_compile_timeout_is_accepted(small_project: Path) -> None:
    """A positive timeout, a fraction of a second too, is taken as given (neither refused nor rounded) and the
    command goes on as without it."""
    plain = run_farm(small_project, "plan")
    proc = run_farm(small_project, "plan", "compile_timeout_s=1.5")
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, "", plain.stdout)
    assert last_line(proc.stdout).startswith("rows=30 ")
    assert config_mod.load(small_project, ["compile_timeout_s=1.5"]).compile_timeout_s == 1.5


@pytest.mark.parametrize("value", ["-5", "-1", "0", "1.5", "true"])
def test_audit_sample_must_be_null_or_positive(small_project: Path, value: str) -> None:
    refused(run_farm(small_project, "audit", f"audit.sample={value}"), "audit.sample=", "audit.sample=null")


@pytest.mark.parametrize("verb", ["plan", "build", "check", "audit"])
def test_selection_matching_no_row_fails(small_project: Path, verb: str) -> None:
    # The names exist, but not together: sdpa_cdna is never built for gfx11-generic.
    refused(run_farm(small_project, verb, "ops=[sdpa_cdna]", "targets=[gfx11-generic]", "dtypes=[bf16]"),
            "no row matches the selection ops=[sdpa_cdna] targets=[gfx11-generic] dtypes=[bf16]",
            "sdpa_cdna: gfx90a, gfx942, gfx950")


def test_selection_emptied_by_a_group_target_limit_fails(tmp_path: Path) -> None:
    """Op and target match, but no group of the op is built for that target: zero rows."""
    project = small_copy(tmp_path / "p")
    op = project / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text().replace("  - name: generic\n", "  - name: generic\n    targets: [gfx942]\n")
                  .replace("  - name: baked\n", "  - name: baked\n    targets: [gfx942]\n"))
    run_farm(project, "expand", check=True)
    refused(run_farm(project, "plan", "targets=[gfx950]"),
            "no row matches the selection ops=[rmsnorm] targets=[gfx950]")
    assert run_farm(project, "plan", "targets=[gfx942]").returncode == 0


@pytest.mark.parametrize(("override", "says"), [
    ("executor.num_cpus=0", "executor.num_cpus=0 is not a positive whole number"),
    ("executor.max_retries=-1", "executor.max_retries=-1 is not a whole number of 0 or more"),
    ("executor.standing_idle_minutes=0", "executor.standing_idle_minutes=0 is not a positive number"),
    ("executor.warm=yes", "executor.warm='yes' is not true or false"),
    ("executor.standing_root=/no/such/farm", "executor.standing_root=/no/such/farm is not a farm project (no "
                                             "conf/config.yaml in /no/such/farm)"),
    ("executor.standing_root=", "executor.standing_root='' is not a directory path"),
    ("row_order=sideways", "row_order='sideways'; accepted: sorted, reversed"),
    ("audit.vary.umask=maybe", "audit.vary.umask='maybe' is not true or false"),
    ("+audit.vary.umaks=false", "did you mean 'audit.vary.umask'?"),
])
def test_executor_and_audit_values_are_validated(small_project: Path, override: str, says: str) -> None:
    refused(run_farm(small_project, "plan", override), says)


def test_valid_values_are_still_accepted(small_project: Path) -> None:
    """Valid values of the keys refused above are taken as given, and the command goes on as without them."""
    valid = ["executor.num_cpus=1", "executor.max_retries=0", "audit.sample=null",
             "executor.standing_idle_minutes=0.5", "audit.vary.umask=false", "row_order=reversed",
             "executor.standing_root=."]
    plain = run_farm(small_project, "plan")
    proc = run_farm(small_project, "plan", *valid)
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, "", plain.stdout)
    cfg = config_mod.load(small_project, valid)
    executor = cfg.executor
    assert (executor["num_cpus"], executor["max_retries"], executor["standing_idle_minutes"]) == (1, 0, 0.5)
    assert cfg.cluster_root == small_project.resolve()  # this project's own standing cluster, named by path
    audit = cfg.extra["audit"]
    assert audit["sample"] is None and audit["vary"]["umask"] is False
    assert sum(audit["vary"].values()) == len(audit["vary"]) - 1  # only umask turned off
    assert cfg.extra["row_order"] == "reversed"


def test_unknown_key_in_an_op_group_is_refused(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "p")
    op = project / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text().replace("  - name: generic\n", "  - name: generic\n    tagets: [gfx942]\n"))
    refused(run_farm(project, "plan"), "conf/op/rmsnorm.yaml groups[1]: unknown key 'tagets' (did you mean 'targets'?)")


# --------------------------------------------------------------------------------------------------
# 13: farm diff names what a path is instead of "no such file", and never blocks on a FIFO.


def test_diff_names_what_a_non_file_is(small_project: Path, tmp_path: Path) -> None:
    regular = tmp_path / "a.hsaco"
    regular.write_bytes(b"\x7fELF")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    cases = {str(tmp_path): f"{tmp_path} is a directory", str(fifo): f"{fifo} is not a regular file (it is a FIFO)",
             "/dev/null": "/dev/null is not a regular file (it is a character device)",
             str(tmp_path / "gone"): f"no such file: {tmp_path / 'gone'}"}
    for path, says in cases.items():
        # A FIFO opened for reading would block until a writer came: the timeout would fail the test.
        refused(run_bounded(small_project, "diff", path, str(regular), timeout=60), says)
        refused(run_bounded(small_project, "diff", str(regular), path, timeout=60), says)


# --------------------------------------------------------------------------------------------------
# Issue 37, cases 7-10: every value and every conf/ file is checked when the config loads, before any work.


@pytest.fixture()
def conf_only(tmp_path: Path) -> Path:
    """A project holding only conf/: every refusal below comes while loading the config, before anything
    else is read."""
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    return tmp_path


def load_error(project: Path, *overrides: str) -> str:
    with pytest.raises(FarmError) as caught:
        config_mod.load(project, list(overrides))
    assert caught.value.fix, str(caught.value)
    return str(caught.value)


def lines_in(path: Path) -> int:
    return path.read_text().count("\n")


def test_a_yaml_syntax_error_in_an_op_not_selected_is_one_error_naming_file_line_column(conf_only: Path) -> None:
    """Case 7's reproducer. Every op file is read by every command (the table is loaded, checked and kept as
    a whole), so a broken file fails commands on other ops too: with its file, line, column and the fix."""
    op = conf_only / "conf" / "op" / "sdpa_cdna.yaml"
    n = lines_in(op)
    with op.open("a") as f:
        f.write("groups:\n  - name: [unclosed\n")
    message = refused(run_farm(conf_only, "plan", "ops=[rmsnorm]"),
                      f"conf/op/sdpa_cdna.yaml:{n + 3}:1: not valid YAML: expected ',' or ']', but got '<stream end>'",
                      f"(while parsing a flow sequence that starts at line {n + 2}, column 11)",
                      f"fix: fix the YAML syntax of conf/op/sdpa_cdna.yaml near line {n + 3}, column 1",
                      "every command reads every op and target file, selected or not")
    assert "yaml" not in message.split("not valid YAML")[0].replace(".yaml", "")  # no exception class names


@pytest.mark.parametrize(("file", "text", "line_after", "column", "says"), [
    ("config.yaml", "ops: [unclosed\n", 2, 1, "expected ',' or ']'"),  # read by Hydra
    ("executor/local.yaml", "num_cpus: [x\n", 2, 1, "expected ',' or ']'"),  # a group file Hydra reads
    ("remote/local.yaml", "extra:\n\t- 1\n", 2, 1, "found character '\\t' that cannot start any token"),
    ("target/gfx942.yaml", "wave_size: 32\n", 1, 1, "found duplicate key wave_size"),  # read by the farm
    ("op/rmsnorm.yaml", "x: \x01\n", 1, 4, "special characters are not allowed: '\\x01'"),
    ("config.yaml", "a: b: c\n", 1, 5, "mapping values are not allowed here"),
])
def test_a_yaml_error_anywhere_in_conf_names_file_line_and_column(conf_only: Path, file: str, text: str,
                                                                 line_after: int, column: int, says: str) -> None:
    path = conf_only / "conf" / file
    line = lines_in(path) + line_after
    with path.open("a") as f:
        f.write(text)
    message = load_error(conf_only, "ops=[rmsnorm]")
    assert f"conf/{file}:{line}:{column}: not valid YAML: {says}" in message
    assert f"near line {line}, column {column}" in message


@pytest.mark.parametrize("file", ["config.yaml", "op/sdpa_rdna.yaml"])
def test_a_conf_file_that_is_not_utf8_is_named(conf_only: Path, file: str) -> None:
    path = conf_only / "conf" / file
    size = len(path.read_bytes())
    with path.open("ab") as f:
        f.write(b"x: \xff\n")
    assert f"conf/{file}: not UTF-8 text (byte {size + 3}: b'\\xff')" in load_error(conf_only, "ops=[rmsnorm]")


def test_a_broken_file_is_found_after_the_config_was_kept(conf_only: Path) -> None:
    """The config cache keys every conf/ byte: a file broken after a kept load is read (and refused) again."""
    assert config_mod.load(conf_only, ["ops=[rmsnorm]"])
    config_mod.load(conf_only, ["ops=[rmsnorm]"])  # from the cache now
    target = conf_only / "conf" / "target" / "gfx90a.yaml"
    good = target.read_text()
    target.write_text(good + "members: [\n")
    assert "conf/target/gfx90a.yaml:" in load_error(conf_only, "ops=[rmsnorm]")
    target.write_text(good)
    assert config_mod.load(conf_only, ["ops=[rmsnorm]"])


NAME_MAX = os.pathconf("/tmp", "PC_NAME_MAX")
PATH_MAX = os.pathconf("/tmp", "PC_PATH_MAX")


def test_an_outputs_dir_name_too_long_is_refused_before_any_file_system_call(small_project: Path,
                                                                             tmp_path: Path) -> None:
    """Case 8's reproducers: one 300-character component, and a 5,000-character path (each component fits)."""
    long_name = tmp_path / ("a" * 300)
    refused(run_farm(small_project, "build", f"outputs_dir={long_name}"),
            "outputs_dir: the name 'aaaa", "(300 chars) is 300 bytes",
            f"takes names of at most {NAME_MAX} bytes (NAME_MAX)", "shorten that name in outputs_dir")
    deep = Path("/tmp", *["b" * 99] * 50)
    refused(run_farm(small_project, "build", f"outputs_dir={deep}"),
            f"outputs_dir is {len(str(deep))} bytes long", f"at most {PATH_MAX - 1} bytes (PATH_MAX)",
            "choose a shorter outputs_dir")
    assert not Path("/tmp", "b" * 99).exists()


@pytest.mark.parametrize("key", ["report_dir", "instances_dir", "kernels_dir", "remote.url",
                                 "executor.auth_token_path"])
def test_every_configured_path_is_checked_for_length(conf_only: Path, tmp_path: Path, key: str) -> None:
    has_it = ["executor=cluster", "executor.address=127.0.0.1:1"] if key.startswith("executor.") else []
    too_long_name = f"{key}={tmp_path / ('c' * (NAME_MAX + 1))}"
    assert f"{key}: the name 'ccc" in load_error(conf_only, *has_it, too_long_name)
    deep = Path("/tmp", *["d" * 99] * 45)
    message = load_error(conf_only, *has_it, f"{key}={deep}")
    assert f"{key} is {len(str(deep))} bytes long" in message and "(PATH_MAX)" in message


def test_outputs_dir_leaves_room_for_the_files_beside_it(conf_only: Path, tmp_path: Path) -> None:
    """outputs_dir's name must fit with '.code.sha256' added: `farm golden` writes <name>.code.sha256."""
    fits = NAME_MAX - len(".code.sha256")
    assert config_mod.load(conf_only, [f"outputs_dir={tmp_path / ('o' * fits)}"])
    message = load_error(conf_only, f"outputs_dir={tmp_path / ('o' * (fits + 1))}")
    assert f"is {fits + 1} bytes and the farm writes <that name>.code.sha256 beside it" in message
    assert f"at most {fits} bytes" in message


def test_farm_project_too_long_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_PROJECT", "/tmp/" + "/".join(["e" * 99] * 50))
    with pytest.raises(FarmError, match=r"FARM_PROJECT is \d+ bytes long"):
        config_mod.find_project_root()


def test_a_bad_report_keep_is_refused_before_any_work(small_project: Path, tmp_path: Path) -> None:
    """Case 9's reproducer: refused by the config load, before planning, compiling or writing anything."""
    out = tmp_path / "out"
    for value in ("-1", "0", "1.5", "true"):
        proc = run_farm(small_project, "build", f"outputs_dir={out}", f"report_keep={value}")
        refused(proc, f"report_keep={value if value != 'true' else 'True'} is not a whole number >= 1")
        assert "rows=" not in proc.stderr + proc.stdout
        assert not out.exists()


@pytest.mark.parametrize(("overrides", "says"), [
    (["report_keep=-1"], "report_keep=-1 is not a whole number >= 1"),
    (["lock_wait_s=-1"], "lock_wait_s=-1 is not a number of seconds >= 0"),
    (["lock_wait_s=nan"], "lock_wait_s=nan is not a number of seconds >= 0"),
    (["lock_wait_s=abc"], "lock_wait_s='abc' is not a number of seconds >= 0"),
    (["cache.restore=maybe"], "cache.restore='maybe' is not true or false"),
    (["compile_timeout_s=1e300"], "compile_timeout_s=1e+300 is more than a week (604800 s)"),
    (["remote.kind=ftp"], "remote.kind='ftp' is not supported; accepted: local, s3"),
    (["remote.verify=maybe"], "remote.verify='maybe' is not true or false"),
    (["remote=s3", "remote.allow_anonymous_reads=1"], "remote.allow_anonymous_reads=1 is not true or false"),
    (["remote=s3", "remote.url=http://bucket/p"], "remote.url='http://bucket/p' is not an s3:// URL"),
    (["executor=cluster"], "executor=cluster needs an address"),
    (["executor.kind=k8s"], "executor.kind='k8s' is not supported; accepted: local, cluster"),
    (["executor=cluster", "executor.address=[1]"], "executor.address=[1] is not text"),
])
def test_every_value_is_checked_when_the_config_loads(conf_only: Path, overrides: list[str], says: str) -> None:
    """Values that used to be checked only where a command first used them (the report's pruning, the output
    tree's lock, the restore stage, the remote, Ray's start, the compile timers) are refused at load."""
    assert says in load_error(conf_only, *overrides)


def test_valid_values_of_the_late_checked_keys_are_accepted(conf_only: Path) -> None:
    cfg = config_mod.load(conf_only, ["report_keep=1", "lock_wait_s=2.5", "cache.restore=false",
                                      "compile_timeout_s=604800", "remote=s3"])  # an s3 url not set yet: ok
    assert cfg.extra["report_keep"] == 1 and cfg.extra["lock_wait_s"] == 2.5
    assert config_mod.load(conf_only, ["lock_wait_s=0", "remote=s3", "remote.url=s3://b/p",
                                       "executor=cluster", "executor.address=127.0.0.1:1"])


def test_report_dir_inside_outputs_dir_is_refused_before_any_work(small_project: Path, tmp_path: Path) -> None:
    """Case 10's reproducer: reports inside the output tree were strays to `farm status` and `farm push` forever."""
    out = tmp_path / "out"
    proc = run_farm(small_project, "build", f"outputs_dir={out}", f"report_dir={out / 'reports'}")
    refused(proc, f"report_dir {out / 'reports'} is inside outputs_dir {out}", "would name every file there as a stray",
            "fix: keep them apart: e.g. report_dir=.farm/reports (the default)")
    assert "rows=" not in proc.stderr and not out.exists()


@pytest.mark.parametrize(("outputs", "other", "says"), [
    ("o", "o", "report_dir {o} is the same directory as outputs_dir {o}"),
    ("r/out", "r", "report_dir {r} contains outputs_dir {r/out}"),
    ("outputs", "outputs/reports", "report_dir {outputs/reports} is inside outputs_dir {outputs}"),
])
def test_report_dir_and_outputs_dir_hold_each_other_in_neither_direction(conf_only: Path, outputs: str,
                                                                          other: str, says: str) -> None:
    where = {"{o}": conf_only / "o", "{r}": conf_only / "r", "{r/out}": conf_only / "r/out",
             "{outputs}": conf_only / "outputs", "{outputs/reports}": conf_only / "outputs/reports"}
    for placeholder, path in where.items():
        says = says.replace(placeholder, str(path))
    assert says in load_error(conf_only, f"outputs_dir={outputs}", f"report_dir={other}")


def test_report_dir_reaching_into_outputs_dir_through_a_symlink_is_refused(conf_only: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "link").symlink_to(out)
    message = load_error(conf_only, f"outputs_dir={out}", f"report_dir={tmp_path / 'link' / 'r'}")
    assert f"report_dir {tmp_path / 'link' / 'r'} (resolved: {out / 'r'}) is inside outputs_dir {out}" in message


@pytest.mark.parametrize(("override", "says"), [
    ("remote.url=outputs/dvc", "remote.url {root}/outputs/dvc is inside outputs_dir {root}/outputs"),
    ("kernels_dir=outputs/k", "kernels_dir {root}/outputs/k is inside outputs_dir {root}/outputs"),
    ("instances_dir=outputs/i", "instances_dir {root}/outputs/i is inside outputs_dir {root}/outputs"),
])
def test_the_farms_other_directories_stay_out_of_outputs_dir(conf_only: Path, override: str, says: str) -> None:
    assert says.format(root=conf_only) in load_error(conf_only, override)


def test_separate_report_and_outputs_dirs_are_accepted(conf_only: Path, tmp_path: Path) -> None:
    cfg = config_mod.load(conf_only, [f"outputs_dir={tmp_path / 'out'}", f"report_dir={tmp_path / 'reports'}"])
    assert cfg.report_dir == tmp_path / "reports"


HUGE = "x" * 100_000


@pytest.mark.parametrize("override", [
    f"ops=[{HUGE}]", f"targets=[{HUGE}]", f"dtypes=[{HUGE}]", f"names=[{HUGE}]", f"ops=[{HUGE}",
    f"executor={HUGE}", f"compile_timeout_s={HUGE}", f"report_keep={HUGE}", f"row_order={HUGE}",
    f"outputs_dir={HUGE}", f"audit.sample={HUGE}", f"executor.num_cpus={HUGE}", HUGE, f"{HUGE}=1",
])
def test_a_huge_override_value_is_quoted_once_and_shortened(small_project: Path, override: str) -> None:
    """The smaller item: a 100 KB value used to be echoed (twice) in full. Its first 60 characters, once."""
    message = refused(run_farm(small_project, "plan", override))
    assert len(message) < 1000, message[:2000]
    quoted = re.findall("x{5,}", message)  # outputs_dir is quoted resolved: the project's path comes first
    assert len(quoted) == 1 and len(quoted[0]) <= 60, message
    assert "chars)" in message


def test_a_huge_unknown_verb_is_quoted_shortened(small_project: Path) -> None:
    proc = run_farm(small_project, HUGE)
    assert proc.returncode == 2 and len(proc.stderr) < 1000, proc.stderr[:2000]
    assert [len(q) for q in re.findall("x{20,}", proc.stderr)] == [59], proc.stderr
