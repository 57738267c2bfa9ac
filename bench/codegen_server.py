"""What a fork of the codegen server costs when it holds only FlyDSL's MLIR bindings (the farm's way,
farm/worker/flydsl_mlir.py) against FlyDSL whole (its package imports torch), in one run, interleaved.

    python bench/codegen_server.py [--rows 4] [--forks 10] [--rounds 2] [farm selection overrides]

The rows' gpu.modules are captured as a farm compile hands them over (FlyDSL stopped before the binary pass,
in the farm's compile environment). Then, per round and way, a server process imports that way, makes one
unused MLIR context and forks one child per codegen (`--forks` per module), each parsing the module in that
context and running the binary pass, as the farm's codegen server does. Prints per way the server's memory,
its start, and per fork: wall time (fork to reaped), the child's user and system CPU, the server's own
system CPU (the fork and the child's exit), and the child's minor page faults; and whether both ways gave
the same module text for every row.
"""

from __future__ import annotations

import gc
import hashlib
import json
import resource
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from in_fork import in_fork

WAYS = ("bindings", "flydsl", "premapped")
KEYS = ("wall_ms", "child_user_ms", "child_sys_ms", "server_sys_ms", "child_minflt", "child_file_mib")
PAGE = 4096
MADV_POPULATE_READ = 22  # Linux 5.14+


def _file_rss_kib() -> int:
    fields = {line.split(":")[0]: int(line.split()[1]) for line in
              Path("/proc/self/smaps_rollup").read_text().splitlines()[1:] if line.split()[-1] == "kB"}
    return fields["Rss"] - fields["Anonymous"] - fields.get("Shmem", 0)


def _read_only_file_maps() -> list[tuple[int, int]]:
    found = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) > 5 and parts[5].startswith("/") and "w" not in parts[1]:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            found.append((start, end))
    return found


def _present(maps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(address, length) runs of the pages of `maps` mapped in this process."""
    runs: list[tuple[int, int]] = []
    with open("/proc/self/pagemap", "rb") as pagemap:
        for start, end in maps:
            pagemap.seek(start // PAGE * 8)
            entries = [e for (e,) in struct.iter_unpack("<Q", pagemap.read((end - start) // PAGE * 8))]
            first = None
            for i, entry in enumerate([*entries, 0]):
                if entry >> 63 and first is None:
                    first = i
                elif not entry >> 63 and first is not None:
                    runs.append((start + first * PAGE, (i - first) * PAGE))
                    first = None
    return runs


def _codegen(text: str, fragment: str, context: object, premap: list[tuple[int, int]],
             madvise: Callable[[int, int, int], int] | None) -> dict:
    """In the forked child: map `premap` ahead, run the binary pass; the output's digest, the file-backed
    memory it mapped, and (`madvise` given, nothing premapped yet) which read-only file pages are mapped
    after it."""
    from farm.worker import flydsl_mlir  # loaded by the server already: no import work here
    from farm.worker.phases import Timeline

    for address, length in premap:
        assert madvise is not None
        madvise(address, length, MADV_POPULATE_READ)
    file_before = _file_rss_kib()
    out = flydsl_mlir.run_binary_pass(text, f"builtin.module({fragment})", Timeline(), context)
    reply: dict = {"digest": hashlib.sha256(out.encode()).hexdigest(), "file_kib": _file_rss_kib() - file_before}
    if madvise is not None and not premap:
        reply["present"] = _present(_read_only_file_maps())
    return reply


def _server(way: str, modules_file: str, forks: int) -> int:
    """One server of `way`: import, one context, then `forks` forked codegens per module; JSON on stdout."""
    started = time.perf_counter()
    madvise = None
    if way == "premapped":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        madvise = libc.madvise
    if way == "flydsl":
        import flydsl.compiler  # noqa: F401  (FlyDSL whole: its package, torch)
    from farm.worker import flydsl_mlir
    from farm.worker.phases import Timeline  # noqa: F401  (for the children, loaded before they fork)

    context = flydsl_mlir.new_context()
    imported = time.perf_counter() - started
    memory = {line.split(":")[0]: int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
              if line.startswith(("VmRSS", "RssAnon"))}
    modules = json.loads(Path(modules_file).read_text())
    gc.collect()
    gc.freeze()
    samples, outputs = [], []
    for text, fragment in modules:
        premap: list[tuple[int, int]] = []
        for _ in range(forks + (way == "premapped")):
            children, own = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
            began = time.perf_counter()
            reply = in_fork(lambda premap=premap, text=text, fragment=fragment: _codegen(
                text, fragment, context, premap, madvise))
            ended = time.perf_counter()
            after, own_after = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
            samples.append({"wall_ms": (ended - began) * 1e3,
                            "child_user_ms": (after.ru_utime - children.ru_utime) * 1e3,
                            "child_sys_ms": (after.ru_stime - children.ru_stime) * 1e3,
                            "server_sys_ms": (own_after.ru_stime - own.ru_stime) * 1e3,
                            "child_minflt": after.ru_minflt - children.ru_minflt,
                            "child_file_mib": reply["file_kib"] / 1024})
            if "present" in reply:  # the learning fork: not counted
                premap = [tuple(run) for run in reply["present"]]
                samples.pop()
        outputs.append(reply["digest"])
    print(json.dumps({"import_s": imported, "memory_kib": memory, "samples": samples, "outputs": outputs}))
    return 0


def child(jobs_file: str, forks: int, rounds: int) -> int:
    modules = Path("codegen-modules.json")
    capture = subprocess.run([sys.executable, __file__, "--capture", jobs_file, str(modules)])
    if capture.returncode:
        return capture.returncode
    found: dict[str, list[dict]] = {way: [] for way in WAYS}
    for _ in range(rounds):
        for way in WAYS:
            ran = subprocess.run([sys.executable, __file__, "--serve", way, str(modules), str(forks)],
                                 capture_output=True, text=True)
            if ran.returncode:
                print(ran.stderr[-3000:])
                return ran.returncode
            found[way].append(json.loads(ran.stdout))
    print(f"  {'way':10}{'RSS MiB':>9}{'anon MiB':>9}{'start s':>8}" + "".join(f"{k:>15}" for k in KEYS)
          + "   (median per fork)")
    for way, runs in found.items():
        samples = [s for run in runs for s in run["samples"]]
        memory = runs[-1]["memory_kib"]
        print(f"  {way:10}{memory['VmRSS'] / 1024:9.0f}{memory['RssAnon'] / 1024:9.0f}"
              f"{statistics.median(r['import_s'] for r in runs):8.2f}"
              + "".join(f"{statistics.median(s[k] for s in samples):15.1f}" for k in KEYS))
    outputs = {tuple(run["outputs"]) for runs in found.values() for run in runs}
    same = len(outputs) == 1
    print(f"  codegen output: {'the same module text for every row, way and round' if same else 'DIFFERS'}")
    return 0 if same else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        return _server(argv[1], argv[2], int(argv[3]))
    if argv[:1] == ["--capture"]:
        import probe_rows

        Path(argv[2]).write_text(json.dumps(probe_rows.captured_handoffs(argv[1])))
        return 0
    if argv[:1] == ["--child"]:
        return child(argv[1], int(argv[2]), int(argv[3]))
    import probe_rows

    args = probe_rows.parse(argv, default_rows=4)
    settings = {"--forks": "10", "--rounds": "2"}
    for flag in settings:
        if flag in args.rest:
            at = args.rest.index(flag)
            settings[flag] = args.rest[at + 1]
            del args.rest[at:at + 2]
    return probe_rows.run_child(Path(__file__).resolve(), args, args.rest,
                                [settings["--forks"], settings["--rounds"]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
