"""A spec module that does not import gets the fix for what broke: the module missing, or a package around it.

Before, both got "fix it there (spec modules must import cleanly and check_row may raise only ValueError)":
for a missing module "there" was `<frozen importlib._bootstrap>:1140`, and for a vendored package whose
__init__.py imports a host-only module, the hint was about the spec module, which never ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import copy_project

from farm.table.kernel_modules import SpecFailure, check_rows

OP = """name: brk
family: brk
generator: brk.generator
spec: brk.spec
symbols: [brk_0]
targets: [gfx942]
groups:
  - name: all
    name_format: 'brk_{dtype}'
    axes:
      dtype: [f32]
"""
SPEC = "def check_row(knobs):\n    pass\n"


def _failure(kernels: Path, module: str = "brk.spec") -> SpecFailure:
    (result,) = check_rows(kernels, [(module, [{"dtype": "f32"}])], timeout_s=30)
    assert isinstance(result, SpecFailure), result
    return result


def test_a_missing_spec_module_is_named_by_its_file(tmp_path: Path) -> None:
    (tmp_path / "brk").mkdir()
    failure = _failure(tmp_path)
    assert failure.file == str(tmp_path / "brk/spec.py") and failure.line is None
    assert failure.what == "no such file (nor kernels_src/brk/spec/__init__.py): the spec module does not exist"
    assert failure.fix is not None and failure.fix.startswith("create it there, or name an existing module")
    # A missing package says the same (the spec's own file is what is missing).
    assert _failure(tmp_path, "nopkg.spec").file == str(tmp_path / "nopkg/spec.py")


def test_a_package_whose_init_breaks_is_named_with_its_fix(tmp_path: Path) -> None:
    (tmp_path / "brk").mkdir()
    (tmp_path / "brk/spec.py").write_text(SPEC)
    # Upstream-style: the package's __init__ imports its kernels, one of which needs a host-only module.
    (tmp_path / "brk/__init__.py").write_text("from brk.kern import launch\n")
    (tmp_path / "brk/kern.py").write_text("import host_only_profiler\n\nlaunch = None\n")
    failure = _failure(tmp_path)
    assert (failure.file, failure.line) == (str(tmp_path / "brk/kern.py"), 1)
    assert failure.what == ("ModuleNotFoundError: No module named 'host_only_profiler' (raised while package brk's "
                            "__init__.py ran, before the spec module)")
    assert failure.fix is not None and ("make kernels_src/brk/__init__.py import cleanly there, or keep the spec "
                                        "module out of package brk (e.g. kernels_src/brk_farm/spec.py, then "
                                        "spec: brk_farm.spec)") in failure.fix
    # The spec's own import failing is the spec's own failure, with the generic fix.
    (tmp_path / "brk/__init__.py").write_text("")
    (tmp_path / "brk/spec.py").write_text("import host_only_profiler\n" + SPEC)
    failure = _failure(tmp_path)
    assert (failure.file, failure.line, failure.fix) == (str(tmp_path / "brk/spec.py"), 1, None)


def test_farm_expand_prints_the_failure_s_own_fix(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "proj")
    (project / "conf/op/brk.yaml").write_text(OP)
    (project / "kernels_src/brk").mkdir()
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "expand", "ops=[brk]"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.splitlines() == [
        "farm expand: error: kernels_src/brk/spec.py: no such file (nor kernels_src/brk/spec/__init__.py): the spec "
        "module does not exist (spec module brk.spec of op 'brk')",
        "  fix: create it there, or name an existing module in the op's spec: (its import name under kernels_src/); "
        "ops using other spec modules still work, e.g. ops=[rmsnorm]"]
