"""Complete input identity of a row, on real compiles of one row: every lookup the compile made under
kernels_src/ (hits and misses), the farm code it ran (recorded, not listed), and the verification code
(a change there re-verifies without compiling). Each project here carries its own copy of the farm
package, so editing farm code never touches the checkout others work in."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import REPO, last_line, latest_report, on_shared_ray, run_farm, small_copy

from farm.plan.code_closure import boundary_file

pytestmark = pytest.mark.slow

ROW = "rmsnorm_bf16_train_n2560"
SELECT = ("targets=[gfx942]", f"names=[{ROW}]")
OBJECT = Path("outputs/rmsnorm/gfx942") / f"{ROW}.hsaco"
MANIFEST = Path("outputs/rmsnorm/gfx942/manifest.json")


def farm(project: Path, *args: str) -> subprocess.CompletedProcess:
    # The project's own farm package (its directory comes first on every process's path; its builds go to the
    # session's Ray cluster, `on_shared_ray`, whose fresh workers get this package through Ray's runtime_env).
    return run_farm(project, *args, *SELECT, env={"PYTHONPATH": str(project)})


def built_copy(dest: Path) -> Path:
    """A small project with its own farm package, the one row built."""
    project = small_copy(dest)
    shutil.copytree(REPO / "farm", project / "farm", ignore=shutil.ignore_patterns("__pycache__"))
    run_farm(project, "expand", env={"PYTHONPATH": str(project)}, check=True)
    proc = farm(project, "build", *on_shared_ray())
    assert proc.returncode == 0, proc.stderr
    assert last_line(farm(project, "plan").stdout) == "rows=1 up_to_date=1 to_build=0"
    return project


def entry(project: Path) -> dict:
    return json.loads((project / MANIFEST).read_text())["objects"][0]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_copy(tmp_path_factory.mktemp("inputs"))


@pytest.fixture()
def own_project(project: Path, tmp_path: Path) -> Path:
    """A copy of the module's built project (its farm package too) for a test that edits farm code and builds:
    the same row up to date, without a build of its own (each starts fresh workers)."""
    copy = Path(shutil.copytree(project, tmp_path / "project", symlinks=True))
    assert last_line(farm(copy, "plan").stdout) == "rows=1 up_to_date=1 to_build=0"
    return copy


def plan_line(project: Path) -> str:
    lines = [line for line in farm(project, "plan").stdout.splitlines() if ROW in line]
    assert len(lines) == 1
    return lines[0]


def test_lookups_recorded_compactly(project: Path) -> None:
    """The record: relative paths only, sorted, hits (the family's namespace directory, the modules) as found."""
    lookups = entry(project)["inputs"]["lookups"]
    assert lookups["import rmsnorm"] == ["rmsnorm/"]
    assert lookups["import rmsnorm/rmsnorm_fwd"] == ["rmsnorm/rmsnorm_fwd.py"]
    assert list(lookups) == sorted(lookups) and not any("/tmp" in key for key in lookups)


def test_new_init_py_invalidates_rows_and_names_it(project: Path) -> None:
    init = project / "kernels_src" / "rmsnorm" / "__init__.py"
    init.write_text("import os\nos.environ['RMSNORM_BLOCK'] = '64'  # changes what the generator does\n")
    try:
        line = plan_line(project)
        assert line.split()[0] == "inputs-changed"
        assert "kernels_src/rmsnorm/__init__.py created ('import rmsnorm')" in line
        check = farm(project, "check")
        assert check.returncode == 1
        assert f"{ROW}.hsaco: input drift: kernels_src/rmsnorm/__init__.py created" in check.stdout
    finally:
        init.unlink()
    assert last_line(farm(project, "plan").stdout) == "rows=1 up_to_date=1 to_build=0"


def test_shadowing_package_invalidates_rows(project: Path) -> None:
    """A package directory next to the generator's module wins over it: both new paths are named."""
    package = project / "kernels_src" / "rmsnorm" / "rmsnorm_fwd"
    package.mkdir()
    (package / "__init__.py").write_text("def launcher_and_args(knobs):\n    raise SystemExit('shadowed')\n")
    try:
        line = plan_line(project)
        assert line.split()[0] == "inputs-changed"
        assert ("kernels_src/rmsnorm/rmsnorm_fwd/ created, kernels_src/rmsnorm/rmsnorm_fwd/__init__.py created "
                "('import rmsnorm/rmsnorm_fwd')") in line
        assert farm(project, "check").returncode == 1
    finally:
        shutil.rmtree(package)
    # Files no lookup of this row consulted are not its inputs: another family's new module rebuilds nothing here.
    other = project / "kernels_src" / "sdpa_cdna" / "helpers.py"
    other.write_text("X = 1\n")
    try:
        assert last_line(farm(project, "plan").stdout) == "rows=1 up_to_date=1 to_build=0"
    finally:
        other.unlink()


@contextmanager
def commented(files: list[Path]) -> Iterator[None]:
    """`files` with a comment added at their end (no code changes), as they were again afterwards."""
    before = {path: path.read_bytes() for path in files}
    try:
        for path, data in before.items():
            path.write_bytes(data + b"\n# an edit that changes no code\n")
        yield
    finally:
        for path, data in before.items():
            path.write_bytes(data)


def test_only_code_on_the_compile_path_is_recorded(project: Path) -> None:
    """A row records the farm code that makes its bytes and derives its recorded facts: an edit there rebuilds
    or re-verifies it. The code that loads and caches the config, expands rows, plans, stores, measures or
    moves data (the boundary packages, farm/plan/code_closure.py) is not recorded: what it decides is recorded
    as values, so an edit to any of it leaves the row up to date."""
    inputs = entry(project)["inputs"]
    recorded = set(inputs["generator"]) | set(inputs["verifier"])
    assert "worker/binary_step.py" in inputs["generator"] and "verify/rules.py" in inputs["verifier"]
    # The compile process loads none of the boundary packages, and the verifier's closure stops at them.
    assert not [rel for rel in recorded if boundary_file(rel)]
    farm_dir = project / "farm"
    unrecorded = sorted(path for path in farm_dir.rglob("*.py")
                        if "__pycache__" not in path.parts and path.relative_to(farm_dir).as_posix() not in recorded)
    names = {path.relative_to(farm_dir).as_posix() for path in unrecorded}
    # The config and its cache, the manifest store, the input digests, the build's measurement: none recorded.
    assert {"table/config_cache.py", "table/config.py", "store/manifest.py", "plan/digest.py"} <= names
    assert {"observe/driver_cost.py", "observe/report.py"} <= names
    with commented(unrecorded):
        assert last_line(farm(project, "plan").stdout) == "rows=1 up_to_date=1 to_build=0"
    with commented([farm_dir / "worker" / "binary_step.py"]):  # the codegen step: the row must rebuild
        line = plan_line(project)
        assert line.split()[0] == "inputs-changed"
        assert "farm generator code farm/worker/binary_step.py changed" in line
    with commented([farm_dir / "verify" / "rules.py"]):  # the checks: the object must be verified again
        line = plan_line(project)
        assert line.split()[0] == "reverify"
        assert "farm verification code farm/verify/rules.py changed" in line
    assert last_line(farm(project, "plan").stdout) == "rows=1 up_to_date=1 to_build=0"


def test_new_farm_worker_module_is_an_input(own_project: Path) -> None:
    """A farm module the compile process newly loads is recorded; editing it alone then invalidates the row."""
    project = own_project
    before = entry(project)["inputs"]["generator"]
    assert "worker/lowering.py" in before and "worker/zygote.py" in before  # loaded before the fork too
    (project / "farm" / "worker" / "extra_step.py").write_text('"""A new step of the compile."""\nSTEP = 1\n')
    lowering = project / "farm" / "worker" / "lowering.py"
    lowering.write_text(lowering.read_text() + "\nfrom . import extra_step  # noqa: E402, F401\n")
    assert "farm generator code farm/worker/lowering.py changed" in plan_line(project)
    proc = farm(project, "build", *on_shared_ray())
    assert proc.returncode == 0, proc.stderr
    assert "worker/extra_step.py" in entry(project)["inputs"]["generator"]
    (project / "farm" / "worker" / "extra_step.py").write_text('"""A new step of the compile."""\nSTEP = 2\n')
    line = plan_line(project)
    assert line.split()[0] == "inputs-changed"
    assert "farm generator code farm/worker/extra_step.py changed" in line


def test_verifier_change_reverifies_without_recompiling(own_project: Path) -> None:
    project = own_project
    old = entry(project)
    verifier = {"verify/rules.py", "elf/code_object.py", "toolchain/disasm.py", "verify/accept.py"}
    assert verifier <= set(old["inputs"]["verifier"])
    assert "verify/rules.py" not in old["inputs"]["generator"]
    stat = (project / OBJECT).stat()
    verify = project / "farm" / "verify" / "rules.py"
    verify.write_text(verify.read_text() + '\n"""A docstring-only edit still counts (files are compared by hash)."""\n')
    line = plan_line(project)
    assert line.split()[0] == "reverify"
    assert "farm verification code farm/verify/rules.py changed: re-verifying without compiling" in line
    check = farm(project, "check")
    assert check.returncode == 1
    assert "input drift: farm verification code farm/verify/rules.py changed since it was built" in check.stdout
    proc = farm(project, "build", *on_shared_ray())
    assert proc.returncode == 0, proc.stderr
    assert "built 0, reverified 1, failed 0" in proc.stderr
    report = latest_report(project)
    assert report["built"] == 0 and report["reverified"] == 1
    assert [r["reverified"] for r in report["rows"]] == [True]
    # The object was not rewritten; its entry was, with the new verification code.
    now = (project / OBJECT).stat()
    assert (now.st_ino, now.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    new = entry(project)
    assert new["sha256"] == old["sha256"] and new["inputs"]["generator"] == old["inputs"]["generator"]
    assert new["inputs"]["verifier"]["verify/rules.py"] != old["inputs"]["verifier"]["verify/rules.py"]
    assert last_line(farm(project, "plan").stdout) == "rows=1 up_to_date=1 to_build=0"
    assert farm(project, "check").returncode == 0


def test_failed_reverification_fails_the_row(own_project: Path) -> None:
    """New rules that refuse the object: the row fails, and its old entry stays (still not up to date)."""
    project = own_project
    verify = project / "farm" / "verify" / "rules.py"
    text = verify.read_text()
    marker = "def problems("
    assert marker in text
    verify.write_text(text.replace(marker, "def _problems_before(", 1)
                      + "\n\ndef problems(*args, **kwargs):\n    return ['a new rule refuses every object']\n")
    proc = farm(project, "build", *on_shared_ray())
    assert proc.returncode == 1
    assert "re-verification failed: verification failed: a new rule refuses every object" in proc.stderr
    assert plan_line(project).split()[0] == "reverify"
