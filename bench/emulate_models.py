"""The models' speed before and after a change, side by side in one run, and whether the results are the same.

    python bench/emulate_models.py [--before REV | --without REV,...] [--after REV] [--repeat N] [KEY ...]
    python bench/emulate_models.py --profile KEY            cProfile of one object, top functions by own time

KEY: op/target/name of a row whose object is in outputs/ (default: one object of each slow RDNA family and,
when the models run it, of each CDNA attention family). "before" is the commit REV's amdgpu_models/ and farm/
(default HEAD), unpacked with `git archive` into a temporary directory; "after" is the checkout as it is, or
the commit `--after` names, unpacked the same way (in a shared tree others' uncommitted work is left out).
`--without C1,C2`: "before" is "after" (a commit) with those commits' changes taken back out (`git apply -R`),
the effect of those commits alone on today's code. Each
side runs in its own process (`--worker`), the sides alternating in every round so that a change in the
machine's load falls on both; an object's time is the CPU seconds of task.run (the check, the launches and the
decode with its llvm-mc, after the modules are imported; --wall: its wall seconds), the least of the rounds.
Prints, per object, both times and before/after, then the totals and one machine-readable line:
    emulate_models objects=N before_s=B after_s=A speedup=B/A identical=yes|no
identical: every object's report entry (status, every case and measure) is the same on both sides but for
its seconds. Exit 0 when identical, 1 when not.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_KEYS = [  # objects near their family's median seconds in bench/emulate.py's run of 2026-12-06
    "rmsnorm/gfx11-generic/rmsnorm_f16_infer_n16384",
    "rmsnorm_bwd/gfx11-generic/rmsnorm_bwd_f16_f32gamma_n6144",
    "sdpa_rdna/gfx11-generic/sdpa_rdna_f16_dmax128_mask-causal_bias-qdtype",
    "sdpa_rdna4/gfx12-generic/sdpa_rdna4_bf16_dmax128_mask-none_bias-none",
    "sdpa_rdna_decode/gfx11-generic/sdpa_rdna_decode_f16_d64_causal_c128_m64",
    "rmsnorm/gfx942/rmsnorm_f16_infer_n16384",
    "sdpa_cdna/gfx942/sdpa_bf16_d128_c0_m128n64w4",
    "sdpa_cdna_decode/gfx942/sdpa_cdna_decode_bf16_d128_causal_c128_m16",
    "sdpa_cdna_dualwave/gfx950/sdpa_dw_bf16_d128_c0_m128n128w8",
]


def _row(key: str) -> dict:
    op, target, name = key.split("/", 2)
    for line in (ROOT / "instances" / f"{op}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["name"] == name and row["target"] == target:
            return row
    raise SystemExit(f"no row {key} in instances/{op}.jsonl")


def _task(key: str):  # noqa: ANN202 (farm.emulate.task.Task of whichever side imported it)
    from farm.emulate.families import CHECKS, ISAS
    from farm.emulate.task import Task

    row = _row(key)
    op, target = row["op"], row["target"]
    data = (ROOT / "outputs" / op / target / f"{row['name']}.hsaco").read_bytes()
    return Task(key, op, target, row["knobs"], data, CHECKS[op], ISAS[target], "/usr/bin/llvm-mc-22")


def worker(keys: list[str]) -> int:
    """In a side's process (its tree first on sys.path): each object once, one JSON line each."""
    from farm.emulate.families import CHECKS, ISAS, named
    from farm.emulate.task import run

    for key in keys:
        op, target, _ = key.split("/", 2)
        named(CHECKS[op]), named(ISAS[target])  # imported before the clock starts
        task = _task(key)
        before = _cpu()
        result = run(task)
        entry = {k: v for k, v in result.as_json().items() if k not in ("seconds", "cpu_seconds", "node")}
        print(json.dumps({"key": key, "seconds": result.seconds, "cpu": _cpu() - before, "entry": entry}),
              flush=True)
    return 0


def _cpu() -> float:
    """CPU seconds of this process and its finished children (llvm-mc): less moved by other work on the machine
    than wall time."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _side(tree: Path, keys: list[str]) -> dict[str, dict]:
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); sys.argv[0] = {__file__!r}\n"
            f"import runpy; runpy.run_path({__file__!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, "--worker", *keys], cwd=ROOT, capture_output=True,
                          text=True)
    if proc.returncode:
        raise SystemExit(f"the side in {tree} failed:\n{proc.stdout}{proc.stderr}")
    return {d["key"]: d for d in map(json.loads, proc.stdout.splitlines())}


def runnable(keys: list[str]) -> list[str]:
    from farm.emulate.families import runnable as can

    return [k for k in keys if can(*k.split("/", 2)[:2]) and
            (ROOT / "outputs" / k.split("/")[0] / k.split("/")[1] / f"{k.split('/')[2]}.hsaco").is_file()]


def _unpack(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev, "amdgpu_models", "farm"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def without(after_rev: str, commits: list[str]) -> str:
    """A tree: `after_rev`'s, with each commit's diff reversed (the last first)."""
    env = dict(os.environ, GIT_INDEX_FILE=str(Path(tempfile.mkdtemp(prefix="emulate-index-")) / "index"))
    subprocess.run(["git", "read-tree", after_rev], cwd=ROOT, env=env, check=True)
    for commit in reversed(commits):
        diff = subprocess.run(["git", "diff", f"{commit}^", commit, "--", "amdgpu_models", "farm"], cwd=ROOT,
                              capture_output=True, check=True).stdout
        subprocess.run(["git", "apply", "-R", "--cached", "-C1"], cwd=ROOT, env=env, input=diff, check=True)
    return subprocess.run(["git", "write-tree"], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def compare(before_rev: str, after_rev: str | None, keys: list[str], repeat: int, measure: str) -> int:
    with tempfile.TemporaryDirectory(prefix="emulate-sides-") as tmp:
        sides = {"before": _unpack(before_rev, Path(tmp) / "before"),
                 "after": _unpack(after_rev, Path(tmp) / "after") if after_rev else ROOT}
        best: dict[str, dict[str, float]] = {"before": {}, "after": {}}
        entries: dict[str, dict[str, dict]] = {"before": {}, "after": {}}
        started = time.monotonic()
        for round_ in range(repeat):
            order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
            for side in order:
                for key, d in _side(sides[side], keys).items():
                    best[side][key] = min(best[side].get(key, float("inf")), d[measure])
                    entries[side].setdefault(key, d["entry"])
    after = f"{after_rev} ({_describe(after_rev)})" if after_rev else "the checkout"
    print(f"before = {before_rev} ({_describe(before_rev)}), after = {after}; {repeat} rounds, least {measure} "
          f"seconds of each; {time.monotonic() - started:.0f} s in all; load average now {os.getloadavg()[0]:.1f}")
    print(f"{'object':<78} {'before':>7} {'after':>7} {'ratio':>6} same")
    identical = True
    for key in keys:
        b, a = best["before"][key], best["after"][key]
        same = entries["before"][key] == entries["after"][key]
        identical &= same
        print(f"{key:<78} {b:>7.2f} {a:>7.2f} {b / a:>6.2f} {'yes' if same else 'NO'}")
    total_b, total_a = sum(best["before"].values()), sum(best["after"].values())
    print(f"{'total':<78} {total_b:>7.2f} {total_a:>7.2f} {total_b / total_a:>6.2f}")
    print(f"emulate_models objects={len(keys)} before_s={total_b:.2f} after_s={total_a:.2f} "
          f"speedup={total_b / total_a:.2f} identical={'yes' if identical else 'no'}")
    return 0 if identical else 1


def _describe(rev: str) -> str:
    described = subprocess.run(["git", "log", "-1", "--format=%h %s", rev], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()[:60]
    return described or "a tree: --after without the --without commits"


def profile(key: str, top: int) -> int:
    from farm.emulate.task import run

    task = _task(key)
    run(task)  # imports and caches warm
    profiler = cProfile.Profile()
    profiler.enable()
    result = run(task)
    profiler.disable()
    print(f"{key}: {result.status}, {result.seconds:.2f} s under the profiler")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*")
    parser.add_argument("--before", default="HEAD")
    parser.add_argument("--without", default=None, help="before = after without these commits (comma-separated)")
    parser.add_argument("--after", default=None, help="a commit instead of the checkout")
    parser.add_argument("--wall", action="store_true", help="compare wall seconds (default: CPU seconds)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.keys)
    keys = args.keys or runnable(DEFAULT_KEYS)
    if args.profile:
        return profile(keys[0], args.top)
    before = args.before
    if args.without:
        args.after = args.after or "HEAD"
        before = without(args.after, args.without.split(","))
    return compare(before, args.after, keys, args.repeat, "seconds" if args.wall else "cpu")


if __name__ == "__main__":
    if "--worker" not in sys.argv:  # a worker's side put its own tree first
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
