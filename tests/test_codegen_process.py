"""LLVM codegen runs in a process of its own (farm/worker/binary_step.py), which made the RDNA
head-dim-128 objects reproducible: before, one row gave a second variant in 2-17% of compiles."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO

from farm.build import compile_request
from farm.contract import CompileRequest, CompileResult
from farm.plan.sources import collect
from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.worker import binary_step, isolate
from farm.worker.warm import WarmServer

# The row that varied most often (docs/reproducibility.md).
ROW = ("sdpa_rdna", "gfx11-generic", "sdpa_rdna_f16_d128_mask-causal_bias-none")
WARM_RUNS = 16


@pytest.fixture(scope="module")
def problem_row() -> tuple[CompileRequest, dict[str, bytes]]:
    op, target, name = ROW
    cfg = config_mod.load(REPO, [f"ops=[{op}]", f"targets=[{target}]", f"names=[{name}]"])
    rows, _ = fresh_rows(cfg)
    assert [r.name for r in rows] == [name]
    return compile_request(cfg, rows[0]), collect(cfg.kernels_dir)


def _sha(result: CompileResult) -> str:
    assert result.ok and result.elf is not None, f"{result.error}\n{result.stderr[-3000:]}"
    return hashlib.sha256(result.elf).hexdigest()


@pytest.mark.slow
def test_warm_compiles_of_the_varying_row_agree_with_a_fresh_process(problem_row: tuple[CompileRequest, dict]) -> None:
    request, sources = problem_row
    server = WarmServer()
    try:
        fresh = _sha(isolate.compile_isolated(request, sources, 600, None))
        warm = Counter(_sha(isolate.compile_isolated(request, sources, 600, server)) for _ in range(WARM_RUNS))
    finally:
        server.stop()
    assert warm == Counter({fresh: WARM_RUNS})


def test_codegen_errors_come_back_with_the_server_log(tmp_path: Path) -> None:
    """A module the codegen process cannot compile fails with its log; no server is a clear error too."""
    sock = tmp_path / "binary.sock"
    server = subprocess.Popen([sys.executable, "-m", "farm.worker.binary_step", "--serve", str(sock)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path)
    try:
        assert server.stdout is not None and server.stdout.readline()
        os.environ[binary_step.SERVER_ENV] = str(sock)
        with pytest.raises(RuntimeError, match=r"(?s)failed in its own process \(exit 1\).*not.a.valid.module"):
            binary_step.run_in_own_process("not.a.valid.module", "gpu-module-to-binary", {}, tmp_path)
        server.stdin.close()  # the worker going away ends the server
        assert server.wait(timeout=30) == 0
        with pytest.raises(RuntimeError, match="LLVM codegen server .* unreachable"):
            binary_step.run_in_own_process("module {}", "gpu-module-to-binary", {}, tmp_path)
    finally:
        os.environ.pop(binary_step.SERVER_ENV, None)
        server.kill()


def test_a_fork_past_its_deadline_is_killed_whatever_it_does_with_signals() -> None:
    """Case 7: the codegen server (and the zygote) waited on a forked child forever when the child
    ignored its alarm; run_forked now kills it at the deadline and reports the signal."""
    import signal
    import time

    from farm.worker.forking import run_forked

    def stubborn() -> int:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.alarm(1)
        time.sleep(3600)
        return 0

    told: list[int] = []
    assert run_forked(stubborn, on_start=told.append, deadline=time.monotonic() + 1.0) == -signal.SIGKILL
    assert len(told) == 1 and told[0] != os.getpid()
    assert run_forked(lambda: 3, deadline=time.monotonic() + 30) == 3  # a child that ends on time is untouched


def test_a_fork_does_not_wait_for_the_last_child_still_exiting() -> None:
    """A child that told its code may still be tearing down its copy of the server: the next fork goes on
    without it (it stays listed), and it is reaped by a later fork once it is gone."""
    from farm.worker import forking

    exiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # stands for the child
    forking._EXITING.append(exiting.pid)
    try:
        assert forking.run_forked(lambda: 5) == 5
        assert exiting.pid in forking._EXITING and exiting.poll() is None
    finally:
        os.kill(exiting.pid, 9)
    for _ in range(200):  # its exit takes a moment to be visible
        if forking.run_forked(lambda: 0) == 0 and exiting.pid not in forking._EXITING:
            break
    assert exiting.pid not in forking._EXITING
    exiting.returncode = -9  # reaped by run_forked, not by Popen
    with pytest.raises(ProcessLookupError):
        os.kill(exiting.pid, 0)
    forking._reap_exiting()  # the forks of this test: gone by now or soon


def test_the_codegen_server_holds_the_mlir_bindings_without_flydsl_s_package_or_torch(tmp_path: Path) -> None:
    """Every row forks the codegen server: it loads FlyDSL's MLIR library but not torch (farm/worker/flydsl_mlir.py),
    and still compiles (its fork's codegen of a bad module fails in the pass, not at import)."""
    sock = tmp_path / "binary.sock"
    server = subprocess.Popen([sys.executable, "-m", "farm.worker.binary_step", "--serve", str(sock)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path)
    try:
        assert server.stdout is not None and server.stdout.readline()
        libraries = {Path(line.split()[-1]).name for line in Path(f"/proc/{server.pid}/maps").read_text().splitlines()
                     if len(line.split()) > 5}
        assert any(name.startswith("libFlyPythonCAPI") for name in libraries)
        assert not [name for name in libraries if "torch" in name], sorted(libraries)
    finally:
        server.kill()
    probe = ("import sys; from farm.worker import flydsl_mlir; flydsl_mlir.new_context(); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' "
             "or m in ('flydsl.compiler', 'flydsl.expr')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


def test_every_farm_file_the_codegen_process_runs_is_in_the_row_s_generator_record(
        problem_row: tuple[CompileRequest, dict], tmp_path: Path) -> None:
    """A row is stale when the code that made its bytes changes: the codegen process's code included, though
    the record is taken in the compile process (farm_code.py)."""
    request, sources = problem_row
    result = isolate.compile_isolated(request, sources, 600, None)
    _sha(result)
    job = tmp_path / "binary-job.json"
    job.write_text(json.dumps({"input": str(tmp_path / "in.mlir"), "output": str(tmp_path / "out.mlir"),
                               "fragment": "gpu-module-to-binary", "log": str(tmp_path / "log")}))
    (tmp_path / "in.mlir").write_text("not.a.valid.module")
    probe = ("import json, sys\nfrom farm.worker import binary_step\ntry:\n    binary_step.main([sys.argv[1]])\n"
             "except Exception:\n    pass\nfrom farm.worker import farm_code\n"
             "print(json.dumps(sorted(farm_code.loaded_farm_files())))")
    ran = subprocess.run([sys.executable, "-c", probe, str(job)], capture_output=True, text=True, cwd=REPO)
    loaded = set(json.loads(ran.stdout))
    assert "worker/flydsl_mlir.py" in loaded and "worker/binary_step.py" in loaded, ran.stdout + ran.stderr
    assert loaded - {"worker/farm_code.py"} <= set(result.generator), sorted(loaded - set(result.generator))
