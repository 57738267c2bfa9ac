"""Issue 16: where a row's worker time goes. A compile's result carries its phases (farm/contract.py `Phase`),
in time order, covering the row's worker seconds; a failed compile reports the phases it reached; the bench
gets the same boundaries for an in-process compile (farm/worker/phases.py `in_process_phases`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO

from farm.contract import CompileRequest, CompileResult, Phase, TargetFacts
from farm.worker import isolate
from farm.worker.phases import merged, read_link_times
from farm.worker.warm import WarmServer

WORKER_PHASES = ["prepare", "fork", "front_end", "mlir_passes", "handoff", "codegen", "link", "return"]
# time.time() boundaries against a time.monotonic() total, rounded to the ms: a few ms apart at most.
TOLERANCE_S = 0.01


@pytest.fixture(scope="module")
def rmsnorm_row() -> tuple[CompileRequest, dict[str, bytes]]:
    from farm.build import compile_request
    from farm.plan.sources import collect
    from farm.table import config as config_mod
    from farm.table.expand import fresh_rows

    cfg = config_mod.load(REPO, ["ops=[rmsnorm]", "targets=[gfx942]", "dtypes=[f32]"])
    rows, _ = fresh_rows(cfg)
    return compile_request(cfg, rows[0]), collect(cfg.kernels_dir)


@pytest.fixture()
def server() -> Iterator[WarmServer]:
    warm = WarmServer()
    yield warm
    warm.stop()  # ends its zygote pair by their pids


def _assert_cover(result: CompileResult, names: list[str]) -> None:
    assert [p.name for p in result.phases] == names
    starts = [p.start_unix for p in result.phases]
    assert starts == sorted(starts)
    assert all(p.seconds >= 0 for p in result.phases)
    assert result.seconds is not None and result.started_unix is not None
    assert sum(p.seconds for p in result.phases) == pytest.approx(result.seconds, abs=TOLERANCE_S)
    assert starts[0] == pytest.approx(result.started_unix, abs=1e-3)


def test_a_warm_compile_reports_every_worker_phase_in_order(rmsnorm_row: tuple[CompileRequest, dict],
                                                             server: WarmServer) -> None:
    request, sources = rmsnorm_row
    first = isolate.compile_isolated(request, sources, 300, server)
    assert first.ok, first.error
    _assert_cover(first, [*WORKER_PHASES[:1], "warmup", *WORKER_PHASES[1:]])  # it started the warm server
    again = isolate.compile_isolated(request, sources, 300, server)
    assert again.ok and again.elf == first.elf
    _assert_cover(again, WORKER_PHASES)
    row = again.report_fields()
    assert row["phases"] == [p.to_json() for p in again.phases]
    assert [Phase.from_json(p) for p in json.loads(json.dumps(row["phases"]))] == list(again.phases)


def test_a_fresh_interpreter_compile_reports_them_too(rmsnorm_row: tuple[CompileRequest, dict]) -> None:
    request, sources = rmsnorm_row
    result = isolate.compile_isolated(request, sources, 300, None)
    assert result.ok, result.error
    _assert_cover(result, WORKER_PHASES)


def test_a_failed_compile_reports_the_phases_it_reached() -> None:
    source = b"def launcher_and_args(knobs):\n    raise ValueError('traced wrong')\n"
    request = CompileRequest(key="boom/gfx942/boom", generator="boom.gen", knobs={},
                             target=TargetFacts("gfx942", "gfx942", "gfx942"))
    result = isolate.compile_isolated(request, {"boom/gen.py": source, "boom/__init__.py": b""}, 300, None)
    assert not result.ok
    _assert_cover(result, ["prepare", "fork", "front_end", "return"])


def test_a_codegen_failure_stops_at_codegen(rmsnorm_row: tuple[CompileRequest, dict], server: WarmServer,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No linker (its shim gone): the row reached codegen, never a link."""
    from farm.worker import warm

    request, sources = rmsnorm_row
    assert isolate.compile_isolated(request, sources, 300, server).ok
    assert server.zygote is not None
    (server.zygote.home / "rocm" / "llvm" / "bin" / "ld.lld").unlink()
    monkeypatch.setattr(warm, "write_linker_shim", lambda rocm, linker=None: rocm)
    failed = isolate.compile_isolated(request, sources, 300, server)
    assert not failed.ok and "lld" in (failed.error or "")
    _assert_cover(failed, ["prepare", "fork", "front_end", "mlir_passes", "handoff", "codegen", "return"])


def test_switches_of_several_processes_merge_into_contiguous_phases(tmp_path: Path) -> None:
    """A phase entered twice is one entry (summed, starting where first entered); a link without an end
    (killed halfway) stays codegen's time."""
    links = tmp_path / "links.txt"
    links.write_text("13.0 14.0\n15.0\n")
    switches = [(10.0, "prepare"), (11.0, "front_end"), (12.0, "handoff"), (12.5, "codegen"), (16.0, "handoff"),
                *read_link_times(links), (17.0, "return")]
    assert merged(switches, 20.0) == (Phase("prepare", 10.0, 1.0), Phase("front_end", 11.0, 1.0),
                                      Phase("handoff", 12.0, 1.5), Phase("codegen", 12.5, 2.5),
                                      Phase("link", 13.0, 1.0), Phase("return", 17.0, 3.0))


def test_in_process_phases_time_the_bench_compile_with_the_farm_boundaries(
        rmsnorm_row: tuple[CompileRequest, dict], tmp_path: Path) -> None:
    """One process, FlyDSL's in-process codegen through the farm's step: three phases per row, covering
    the block, and the object is the one the isolated compile makes (golden digest)."""
    from farm.toolchain.linker import write_linker_shim
    from farm.worker.environment import child_environment

    script = tmp_path / "in_process.py"
    script.write_text(IN_PROCESS_SCRIPT)
    for sub in ("home", "tmp"):
        (tmp_path / sub).mkdir()
    write_linker_shim(tmp_path / "rocm", rmsnorm_row[0].linker)
    env = child_environment(tmp_path, rmsnorm_row[0].target)  # the farm's compile environment, as the bench's
    done = subprocess.run([sys.executable, str(script), str(REPO)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    golden = dict(reversed(line.split()) for line in (REPO / "outputs.sha256").read_text().splitlines())
    assert len(rows) == 2
    for row in rows:
        assert [p["name"] for p in row["phases"]] == ["front_end", "mlir_passes", "codegen+link"]
        assert sum(p["seconds"] for p in row["phases"]) == pytest.approx(row["seconds"], abs=TOLERANCE_S)
        assert golden[row["file"]] == row["sha256"]


IN_PROCESS_SCRIPT = """
import hashlib, importlib, json, sys, time
from pathlib import Path
from farm.build import compile_request
from farm.plan.sources import collect
from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.worker import flydsl_compat
from farm.worker.phases import in_process_phases

cfg = config_mod.load(Path(sys.argv[1]), ["ops=[rmsnorm]", "targets=[gfx942]", "dtypes=[f32]"])
rows, _ = fresh_rows(cfg)
flydsl_compat.use_farm_backend(compile_request(cfg, rows[0]).target.mlir_chipset)
flydsl_compat.use_in_process_codegen()
sys.path.insert(0, str(cfg.kernels_dir))
for row in rows[:2]:
    request = compile_request(cfg, row)
    started = time.time()
    with in_process_phases() as timed:
        launcher, args = importlib.import_module(request.generator).launcher_and_args(dict(request.knobs))
        launcher(*args)
        elf = flydsl_compat.elf_from_compiled(launcher)
    seconds = time.time() - started
    print(json.dumps({"file": f"rmsnorm/gfx942/{row.name}.hsaco", "sha256": hashlib.sha256(elf).hexdigest(),
                      "seconds": seconds, "phases": [p.to_json() for p in timed.phases]}))
"""
