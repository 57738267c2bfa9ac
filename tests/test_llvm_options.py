"""Per-compile LLVM options (farm/worker/llvm_options.py): a kernel that asks for them builds through the farm.

The farm's codegen runs in a process of its own (farm/worker/binary_step.py). The options a kernel's compile
hints carry reach it with the codegen job and are set there as FlyDSL sets them in its own process: the
proof is a kernel compiled with an option both ways, FlyDSL's whole pipeline in one process and the farm's
isolated compile (fresh and warm), giving the same bytes, and other bytes than without the option. The
kernel is the third-party-style family of tests/tilek_family.py (a launcher that is no @flyc.jit function,
pointer arguments). Options the farm cannot honour reproducibly are refused by name, before LLVM sees them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from tilek_family import kernel_sources

from farm.contract import CompileRequest, CompileResult, TargetFacts
from farm.toolchain.linker import write_linker_shim
from farm.worker import isolate, llvm_options
from farm.worker.environment import child_environment
from farm.worker.warm import WarmServer

TARGET = TargetFacts("gfx942", "gfx942", "gfx942")
LINKER = yaml.safe_load((REPO / "conf/toolchain/pinned.yaml").read_text()).get("linker")
DEFAULT = {"dtype": "f32", "unroll": 4, "schedule": "default"}
NO_POST_MISCHED = {"dtype": "f32", "unroll": 4, "schedule": "no-post-misched"}

# FlyDSL's own pipeline, whole, in this one process (no farm codegen step): FlyDSL sets the kernel's LLVM
# options around it itself. Only the farm's backend is used, as in every farm compile (its pipeline changes).
IN_PROCESS = """
import json, sys
from farm.worker import flydsl_compat
flydsl_compat.use_farm_backend(sys.argv[2])
sys.path.insert(0, sys.argv[1])
from tilek_farm.generator import launcher_and_args
launcher, args = launcher_and_args(json.loads(sys.argv[3]))
launcher(*args)
sys.stdout.write(flydsl_compat.elf_from_compiled(launcher.launch).hex())
"""


def _in_process_sha(work: Path, knobs: dict) -> str:
    kernels = work / "kernels_src"
    if not kernels.is_dir():
        for rel, data in kernel_sources().items():
            (kernels / rel).parent.mkdir(parents=True, exist_ok=True)
            (kernels / rel).write_bytes(data)
        for sub in ("home", "tmp"):
            (work / sub).mkdir()
        write_linker_shim(work / "rocm", LINKER)
    proc = subprocess.run([sys.executable, "-c", IN_PROCESS, str(kernels), TARGET.mlir_chipset, json.dumps(knobs)],
                          env=child_environment(work, TARGET), cwd=work, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return hashlib.sha256(bytes.fromhex(proc.stdout)).hexdigest()


def _request(knobs: dict) -> CompileRequest:
    return CompileRequest(key=f"axpy/gfx942/{knobs['schedule']}", generator="tilek_farm.generator", knobs=knobs,
                          target=TARGET, linker=LINKER)


def _sha(result: CompileResult) -> str:
    assert result.ok and result.elf is not None, f"{result.error}\n{result.stderr[-3000:]}"
    return hashlib.sha256(result.elf).hexdigest()


@pytest.fixture(scope="module")
def farm_results() -> dict[str, CompileResult]:
    """The family's two rows through the farm's isolated compile: fresh interpreters, and a warm server's forks."""
    sources = kernel_sources()
    server = WarmServer()
    try:
        return {"fresh": isolate.compile_isolated(_request(NO_POST_MISCHED), sources, 600, None),
                "warm": isolate.compile_isolated(_request(NO_POST_MISCHED), sources, 600, server),
                "default": isolate.compile_isolated(_request(DEFAULT), sources, 600, server)}
    finally:
        server.stop()


def test_a_kernel_s_llvm_options_give_the_bytes_flydsl_gives_in_process(farm_results: dict[str, CompileResult],
                                                                         tmp_path: Path) -> None:
    in_process = _in_process_sha(tmp_path, NO_POST_MISCHED)
    assert _sha(farm_results["fresh"]) == in_process
    assert _sha(farm_results["warm"]) == in_process
    # The option changes the code (only LLVM's codegen reads it, so the codegen process set it), and a row
    # without options is FlyDSL's in-process object too.
    assert _sha(farm_results["default"]) != in_process
    assert _sha(farm_results["default"]) == _in_process_sha(tmp_path, DEFAULT)


def test_the_options_are_part_of_the_compile_s_record(farm_results: dict[str, CompileResult]) -> None:
    """The worker reports the options the kernel compiled with (the driver records them with the row's inputs);
    a kernel without options reports none."""
    assert farm_results["fresh"].llvm_options == {"enable-post-misched": False}
    assert farm_results["warm"].llvm_options == {"enable-post-misched": False}
    assert farm_results["default"].llvm_options == {}
    # The vendored package was imported through its nested path; the farm's own modules too.
    assert sorted(farm_results["warm"].sources) == ["tilek/__init__.py", "tilek/common/layout.py",
                                                    "tilek/ops/axpy.py", "tilek_farm/generator.py",
                                                    "tilek_farm/spec.py"]


def test_an_option_the_farm_cannot_honour_fails_the_row_naming_it(tmp_path: Path) -> None:
    """The kernel asks for an option naming a file: the row fails with the option's name and why, before LLVM
    reads that file."""
    sources = kernel_sources()
    generator = sources["tilek_farm/generator.py"].decode()
    sources["tilek_farm/generator.py"] = generator.replace(
        '"no-post-misched": {"enable-post-misched": False}',
        '"no-post-misched": {"sample-profile-file": "/etc/hostname"}').encode()
    result = isolate.compile_isolated(_request(NO_POST_MISCHED), sources, 600, None)
    assert not result.ok
    assert result.error is not None and ("ValueError: LLVM option 'sample-profile-file' refused by the farm: it "
                                         "names a file, which LLVM would read (an input no row records) or write "
                                         "(outside the compile) (what it supports: docs/adding-a-family.md)"
                                         ) in result.error


@pytest.mark.parametrize(("options", "refused"), [
    ({"help": True}, "'help' refused by the farm: LLVM prints and ends the process"),
    ({"version": True}, "'version' refused"),
    ({"info-output-file": "/tmp/x"}, "'info-output-file' refused by the farm: it names a file"),
    ({"sample-profile-file": 3}, "'sample-profile-file' refused by the farm: it names a file"),
    ({"dot-cfg-mssa": "cfg.dot"}, "'dot-cfg-mssa' refused by the farm: it names a file"),
    ({"-enable-post-misched": False}, "'-enable-post-misched' refused by the farm: it is not a plain LLVM option name"),
    ({"amdgpu-schedule-metric-bias": 1.5}, "its value 1.5 is a float"),
])
def test_options_that_cannot_be_honoured_are_refused_by_name(options: dict, refused: str) -> None:
    with pytest.raises(ValueError, match="LLVM option ") as caught:
        llvm_options.check(options)
    assert refused in str(caught.value)


def test_other_options_pass_as_given() -> None:
    given = {"enable-post-misched": False, "amdgpu-schedule-metric-bias": 3, "amdgpu-sched-strategy": "max-ilp",
             "dfa-max-path-length": 8, "asan-always-slow-path": True}
    assert llvm_options.check(given) == given and list(llvm_options.check(given)) == list(given)
    assert llvm_options.check(None) == {}


def test_the_codegen_process_sets_the_job_s_options_before_it_parses(tmp_path: Path) -> None:
    """An option LLVM does not know fails the codegen process with LLVM's own words, though the module it was
    given does not even parse: the options are set first, as FlyDSL sets them before its pipeline."""
    (tmp_path / "in.mlir").write_text("not.a.valid.module")

    def run(options: dict) -> str:
        job = tmp_path / "binary-job.json"
        job.write_text(json.dumps({"input": str(tmp_path / "in.mlir"), "output": str(tmp_path / "out.mlir"),
                                   "fragment": "gpu-module-to-binary", "llvm_options": options}))
        proc = subprocess.run([sys.executable, "-m", "farm.worker.binary_step", str(job)], capture_output=True,
                              text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode != 0
        return proc.stderr

    assert "Unknown LLVM option: no-such-option-for-the-farm-test" in run({"no-such-option-for-the-farm-test": True})
    assert "Unknown LLVM option" not in run({})
    # A job file is data: an option the farm refuses is refused there too.
    assert "'version' refused by the farm" in run({"version": True})
