"""Adding a kernel family end to end, as docs/adding-a-family.md walks through it.

A synthetic upstream git repository holds a small FlyDSL kernel written for this test (y = x * alpha)
and a module it imports by its package's absolute name. The test vendors both with `farm vendor add`
into a project copy, adds the two modules of its own (spec and generator) and the op file, then expands
and builds the op for one target: the object is built, verified and recorded with its vendored sources.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import tilek_family
from conftest import run_farm, small_copy
from test_vendor import MIT, commit_files, git

from farm.vendoring.closure import Tree, missing_imports

TILES = '''# SPDX-License-Identifier: MIT
"""Sizes shared by the synthk kernels."""

ELEM_BYTES = 4  # f32
'''
# The upstream kernel: it imports its package by absolute name, as upstream code usually does.
SCALE = '''# SPDX-License-Identifier: MIT
"""y[i] = x[i] * alpha over n f32 elements: one element per lane, `block` lanes per workgroup."""

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import rocdl

from synthk.tiles import ELEM_BYTES

_NULL_STREAM = fx.Stream(None)


def build_scale(block: int):
    """A @flyc.jit launcher for workgroups of `block` lanes."""

    @flyc.kernel
    def scale_kernel(x: fx.Pointer, y: fx.Pointer, n: fx.Int32, alpha: fx.Float32):
        i = fx.block_idx.x * block + fx.thread_idx.x
        # Descriptors bounded by n elements: lanes past the end load 0 and store nothing.
        nbytes = fx.Int64(n) * ELEM_BYTES
        x_rs = rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(x, num_records_bytes=nbytes))
        y_rs = rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(y, num_records_bytes=nbytes))
        raw = rocdl.raw_ptr_buffer_load(fx.T.i32, x_rs, i * ELEM_BYTES, 0)
        v = fx.Int32(raw).bitcast(fx.Float32) * alpha
        rocdl.raw_ptr_buffer_store(v.bitcast(fx.Int32).ir_value(), y_rs, fx.Int32(i * ELEM_BYTES).ir_value(),
                                   fx.Int32(0).ir_value())

    @flyc.jit
    def launch(x: fx.Tensor, y: fx.Tensor, n: fx.Int32, alpha: fx.Float32, stream: fx.Stream = _NULL_STREAM):
        scale_kernel(fx.get_iter(x), fx.get_iter(y), n, alpha).launch(
            grid=((n + (block - 1)) // block, 1, 1), block=(block, 1, 1), stream=stream)

    return launch
'''
# The project's own modules (docs/adding-a-family.md, sections 5 and 6).
SPEC = '''"""Knob contract of the `scale` op: pure Python (no torch, no flydsl), imported at expansion time."""

BLOCKS = (64, 128, 256)


def check_row(knobs: dict) -> None:
    if set(knobs) != {"dtype", "block"}:
        raise ValueError(f"scale takes the knobs dtype and block, got {sorted(knobs)}")
    if knobs["dtype"] != "f32":
        raise ValueError(f"knob dtype={knobs['dtype']!r} not supported; accepted: ['f32']")
    if knobs["block"] not in BLOCKS:
        raise ValueError(f"knob block={knobs['block']!r} not supported; accepted: {list(BLOCKS)}")
'''
GENERATOR = '''"""The farm's entry point for the `scale` op: the vendored builder, adapted to the generator contract."""

import torch

from synthk.scale import build_scale
from synthk.spec import check_row

TRACE_N = 1024  # trace size only: n is a kernel argument, never part of the object


def launcher_and_args(knobs: dict):
    check_row(knobs)
    x = torch.zeros(TRACE_N, dtype=torch.float32)
    return build_scale(knobs["block"]), (x, torch.empty_like(x), TRACE_N, 2.0)
'''
OP = """# y = x * alpha over n f32 elements. Kernel source: kernels_src/synthk/ (vendored from synthk).
name: scale
family: synthk
generator: synthk.generator
spec: synthk.spec
symbols: [scale_kernel_0]
targets: [gfx942]
groups:
  - name: all
    name_format: 'scale_{dtype}_b{block}'
    axes:
      dtype: [f32]
      block: [256]
"""
UPSTREAM_PATHS = "[python/synthk/scale.py,python/synthk/tiles.py]"


def make_upstream(where: Path) -> tuple[Path, str]:
    repo = where / "synthk"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "remote", "add", "origin", "https://example.invalid/synthk.git")
    return repo, commit_files(repo, {"LICENSE": MIT, "python/synthk/scale.py": SCALE,
                                     "python/synthk/tiles.py": TILES}, "scale kernel")


def vendor_add(project: Path, repo: Path, commit: str, paths: str) -> subprocess.CompletedProcess:
    return run_farm(project, "vendor", "add", f"from={repo}", f"commit={commit}", "upstream=synthk", "base=[python]",
                    f"paths={paths}")


@pytest.mark.slow
def test_vendor_and_build_a_new_family(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "proj")
    repo, commit = make_upstream(tmp_path)

    # The kernel alone: its import of synthk.tiles is neither vendored nor installed; upstream's file is named.
    proc = vendor_add(project, repo, commit, "[python/synthk/scale.py]")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.splitlines()[1:] == [
        "  - synthk.tiles: imported by kernels_src/synthk/scale.py:8 (upstream python/synthk/scale.py); "
        "upstream has python/synthk/tiles.py",
        "  fix: vendor upstream's files at the import paths the code uses (base= keeps each file's path below that "
        f"folder): farm vendor add from={repo} commit={commit} upstream=synthk base=[python] "
        "paths=[python/synthk/scale.py,python/synthk/tiles.py]"]
    assert not (project / "kernels_src/synthk").exists()

    proc = vendor_add(project, repo, commit, UPSTREAM_PATHS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"added kernels_src/synthk/scale.py from synthk python/synthk/scale.py at {commit}\n"
                                  f"added kernels_src/synthk/tiles.py from synthk python/synthk/tiles.py at {commit}\n")
    (project / "kernels_src/synthk/spec.py").write_text(SPEC)
    (project / "kernels_src/synthk/generator.py").write_text(GENERATOR)
    # A dropped-in op file is the whole declaration: conf/config.yaml lists no ops.
    (project / "conf/op/scale.yaml").write_text(OP)

    proc = run_farm(project, "expand", "ops=[scale]", check=True)
    assert "scale: 1 rows (gfx942 1)" in proc.stdout
    rows = [json.loads(line) for line in (project / "instances/scale.jsonl").read_text().splitlines()]
    assert [(r["name"], r["knobs"]) for r in rows] == [("scale_f32_b256", {"dtype": "f32", "block": 256})]

    run_farm(project, "build", "ops=[scale]", "targets=[gfx942]", check=True)
    out = project / "outputs/scale/gfx942"
    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = manifest["objects"]
    assert entry["file"] == "scale_f32_b256.hsaco" and (out / entry["file"]).is_file()
    assert [(k["name"], k["symbol"]) for k in entry["kernels"]] == [("scale_kernel_0", "scale_kernel_0.kd")]
    assert sorted(entry["inputs"]["sources"]) == ["synthk/generator.py", "synthk/scale.py", "synthk/spec.py",
                                                  "synthk/tiles.py"]
    source_md = (out / "SOURCE.md").read_text()
    assert (f"- `kernels_src/synthk/scale.py`: synthk `python/synthk/scale.py` at commit {commit} "
            "(https://example.invalid/synthk.git, MIT; local modifications: none)\n") in source_md

    # farm check re-verifies the object from its bytes; the vendored files are clean against upstream.
    proc = run_farm(project, "check", "ops=[scale]", "targets=[gfx942]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_farm(project, "vendor", "diff", f"from={repo}", "--strict")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.endswith("2 file(s): 2 clean\n")


def test_import_closure_of_packages_and_relative_imports(tmp_path: Path) -> None:
    """`from P import N` in a regular package: N is a submodule or a name P's __init__ binds; a namespace
    package binds none; a star import or __getattr__ in __init__ binds anything; a relative import past
    the top of kernels_src/ never works."""
    kernels = tmp_path / "kernels_src"
    (kernels / "pkg").mkdir(parents=True)
    (kernels / "pkg/__init__.py").write_text("from .sub import thing\nhelper = 1\n\n\ndef made():\n    pass\n")
    (kernels / "pkg/sub.py").write_text("thing = 2\n")
    (kernels / "open").mkdir()
    (kernels / "open/__init__.py").write_text("from json import *\n")
    incoming = {"fam/k.py": ("from pkg import helper, made, sub, thing\nfrom pkg import nothere\n"
                             "from open import anything\nfrom fam import gone\nfrom ... import x\n")}
    found = [(m.module, m.importer, m.line) for m in missing_imports(Tree(kernels, incoming), ["fam/k.py"], [])]
    assert found == [("pkg.nothere", "fam/k.py", 2), ("fam.gone", "fam/k.py", 4), ("...", "fam/k.py", 5)]


@pytest.mark.slow
def test_a_third_party_family_end_to_end(tmp_path: Path) -> None:
    """docs/adding-a-family.md on a family unlike this project's (tests/tilek_family.py): a nested upstream
    package vendored with base=, a host-only import met with a stand-in of our own, a launcher that is a class,
    pointer arguments, and LLVM options in the kernel's compile hints. Before: there was no base=, the add's
    fix could not be followed (one into= per folder), and every row failed (the launcher is no @flyc.jit
    function; options were refused)."""
    project = small_copy(tmp_path / "proj")
    repo, commit = tilek_family.make_upstream(tmp_path)

    def vendor(*args: str) -> subprocess.CompletedProcess:
        return run_farm(project, "vendor", "add", f"from={repo}", f"commit={commit}", "upstream=tilek", *args)

    # As section 4 shows: the kernel alone names each missing module once, and a fix that keeps upstream's
    # folders (base=). The benchmark's timer is host-only: a stand-in of our own instead of upstream's, which
    # needs a profiler nobody installs.
    proc = vendor("base=[python]", "paths=[python/tilek/ops/axpy.py]")
    assert proc.returncode == 2, proc.stdout
    assert ("  - tilek.testing.timer: imported by kernels_src/tilek/ops/axpy.py:48 in benchmark() "
            "(upstream python/tilek/ops/axpy.py); upstream has python/tilek/testing/timer.py") in proc.stderr
    assert "base=[python] paths=[python/tilek/ops/axpy.py,python/tilek/common/layout.py," in proc.stderr
    stand_in = project / "kernels_src/tilek/testing/timer.py"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text('"""Stand-in for tilek\'s host-only GPU timer: a compile never calls it."""\n\n\n'
                        "def gpu_time(launcher, n):\n    raise RuntimeError('host-only: not in the farm')\n")
    paths = "paths=[python/tilek/__init__.py,python/tilek/ops/axpy.py,python/tilek/common/layout.py]"
    proc = vendor("base=[python]", paths)
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads((project / "kernels_src/VENDOR.lock.json").read_text())["files"]) == [
        "tilek/__init__.py", "tilek/common/layout.py", "tilek/ops/axpy.py"]

    (project / "kernels_src/tilek_farm").mkdir()
    (project / "kernels_src/tilek_farm/spec.py").write_text(tilek_family.SPEC)
    (project / "kernels_src/tilek_farm/generator.py").write_text(tilek_family.GENERATOR)
    (project / "conf/op/axpy.yaml").write_text(tilek_family.OP)
    proc = run_farm(project, "expand", "ops=[axpy]", check=True)
    assert "axpy: 2 rows (gfx942 2)" in proc.stdout

    run_farm(project, "build", "ops=[axpy]", "targets=[gfx942]", check=True)
    out = project / "outputs/axpy/gfx942"
    entries = {e["name"]: e for e in json.loads((out / "manifest.json").read_text())["objects"]}
    assert sorted(entries) == ["axpy_f32_u4_default", "axpy_f32_u4_no-post-misched"]
    # The option reached LLVM's codegen: the two rows differ only by it, and so do their objects.
    assert entries["axpy_f32_u4_default"]["sha256"] != entries["axpy_f32_u4_no-post-misched"]["sha256"]
    # The options are recorded among the row's inputs (so in its input digest); a row without has no such key.
    assert entries["axpy_f32_u4_no-post-misched"]["inputs"]["llvm_options"] == {"enable-post-misched": False}
    assert "llvm_options" not in entries["axpy_f32_u4_default"]["inputs"]
    assert sorted(entries["axpy_f32_u4_default"]["inputs"]["sources"]) == [
        "tilek/__init__.py", "tilek/common/layout.py", "tilek/ops/axpy.py", "tilek_farm/generator.py",
        "tilek_farm/spec.py"]
    assert [k["name"] for k in entries["axpy_f32_u4_default"]["kernels"]] == ["axpy_kernel_0"]

    proc = run_farm(project, "check", "ops=[axpy]", "targets=[gfx942]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_farm(project, "build", "ops=[axpy]", "targets=[gfx942]", check=True)
    assert "built 0, failed 0, up to date 2" in proc.stdout + proc.stderr
    proc = run_farm(project, "vendor", "diff", f"from={repo}", "--strict")
    assert proc.returncode == 0 and proc.stdout.endswith("3 file(s): 3 clean\n"), proc.stdout
