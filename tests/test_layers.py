"""The layer rules in pyproject.toml ([tool.importlinter]) hold for the package, and each one catches what it is for.

Each case runs `lint-imports` on a copy of farm/ and amdgpu_models/ with one forbidden import (or an undeclared
package) added: a contract that never fails would let a layout drift unnoticed, so every contract is shown breaking
here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from farm.plan.code_closure import BOUNDARY

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

LAYERS = "farm: layers point down only"
WORKER = "farm.worker loads no driver code"
CYCLES = "farm: no import cycles between siblings"
CHECKS = "farm.verify.rules, farm.elf import no verifier boundary package"
VERIFY = "farm.verify: acceptance above its rules"
MODELS_APART = "amdgpu_models imports nothing from farm"
MODELS_USERS = "only farm.emulate imports amdgpu_models"


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    # cwd first on sys.path: grimp reads the copy of farm/ in `root`, not the installed one.
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120)


def verdict(out: str, contract: str) -> str:
    """'KEPT' or 'BROKEN' for one contract, from lint-imports' summary lines."""
    for line in out.splitlines():
        if line.startswith(contract + " "):  # "<name> KEPT", or "<name> KEPT (1 ignored import)"
            return line.removeprefix(contract + " ").split()[0]
    raise AssertionError(f"contract {contract!r} not reported:\n{out}")


@pytest.fixture()
def farm_copy(tmp_path: Path) -> Path:
    for package in ("farm", "amdgpu_models"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_line(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_package_keeps_every_contract(farm_copy: Path) -> None:
    proc = lint(farm_copy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for contract in (LAYERS, VERIFY, WORKER, CYCLES, CHECKS, MODELS_APART, MODELS_USERS):
        assert verdict(proc.stdout, contract) == "KEPT"


def test_an_upward_import_breaks_the_layers(farm_copy: Path) -> None:
    # table sits below plan: the config must not know how a build is decided.
    add_line(farm_copy / "farm/table/rows.py", "from farm.plan import decide  # noqa")
    proc = lint(farm_copy)
    assert proc.returncode == 1
    assert verdict(proc.stdout, LAYERS) == "BROKEN"
    assert "farm.table is not allowed to import farm.plan" in proc.stdout
    assert "farm.table.rows -> farm.plan.decide" in proc.stdout


def test_siblings_on_one_layer_stay_independent(farm_copy: Path) -> None:
    add_line(farm_copy / "farm/verify/rules.py", "from farm.store import lock  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, LAYERS) == "BROKEN"
    assert "farm.verify.rules is not allowed to import farm.store" in proc.stdout


def test_the_rules_stay_below_the_acceptance(farm_copy: Path) -> None:
    """farm.verify spans two layers: its rules may not reach up into the acceptance (which reads the config)."""
    add_line(farm_copy / "farm/verify/rules.py", "def _late():\n    from farm.verify import accept  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, VERIFY) == "BROKEN"
    assert "farm.verify.rules is not allowed to import farm.verify.accept" in proc.stdout


def test_an_import_inside_a_function_counts(farm_copy: Path) -> None:
    add_line(farm_copy / "farm/core/canonical.py", "def _late():\n    from farm.build import build  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, LAYERS) == "BROKEN"
    assert "farm.core is not allowed to import farm.build" in proc.stdout


def test_the_worker_side_loads_no_driver_code(farm_copy: Path) -> None:
    add_line(farm_copy / "farm/worker/forking.py", "from farm.table import rows  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, WORKER) == "BROKEN"
    assert "farm.worker is not allowed to import farm.table" in proc.stdout


def test_the_object_checks_load_no_config_code(farm_copy: Path) -> None:
    """The verifier record stops at the boundary packages: the checks may not import them (the contract's
    list is the record's)."""
    contract = next(c for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
                    if c["name"] == CHECKS)
    assert contract["source_modules"] == ["farm.verify.rules", "farm.elf"]
    assert tuple(contract["forbidden_modules"]) == BOUNDARY
    add_line(farm_copy / "farm/elf/fast.py", "from farm.table import model  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, CHECKS) == "BROKEN"
    assert "farm.elf is not allowed to import farm.table" in proc.stdout


def test_a_cycle_inside_a_package_is_named(farm_copy: Path) -> None:
    # store imports outtree already; outtree importing manifest back closes a cycle within farm.store.
    add_line(farm_copy / "farm/store/outtree.py", "from farm.store import manifest  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, CYCLES) == "BROKEN"
    assert "No cycles are allowed in farm.store" in proc.stdout


def test_a_new_package_needs_a_layer(farm_copy: Path) -> None:
    (farm_copy / "farm/newstage").mkdir()
    (farm_copy / "farm/newstage/__init__.py").write_text("")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, LAYERS) == "BROKEN"
    assert "- farm.newstage" in proc.stdout


def test_the_isa_models_know_nothing_of_the_farm(farm_copy: Path) -> None:
    add_line(farm_copy / "amdgpu_models/disasm.py", "from farm.core import errors  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, MODELS_APART) == "BROKEN"
    assert "amdgpu_models is not allowed to import farm" in proc.stdout


def test_only_emulate_runs_the_isa_models(farm_copy: Path) -> None:
    add_line(farm_copy / "farm/execute/local.py", "import amdgpu_models  # noqa")
    proc = lint(farm_copy)
    assert verdict(proc.stdout, MODELS_USERS) == "BROKEN"
    assert "farm.execute is not allowed to import amdgpu_models" in proc.stdout
