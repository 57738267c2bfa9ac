"""How long `farm emulate` takes, by family: seconds per object and the total wall time.

    python bench/emulate.py [farm selection overrides]     default: every object of the table (all 1,453)

Runs `farm emulate` once on the project's outputs/ (nothing is written there; its reports go to
.farm/reports/bench-emulate/, whose last report also orders the next run's objects slowest first), then
prints, per family and target: objects, their task seconds (min, mean, max per object, summed), and the
run's wall time, CPUs and load average before and after. The emulate command's own table and last line are
printed as they came. Ends with one machine-readable line:
    emulate objects=N wall_s=W task_s=T cpu_s=C per_object_s=P within=... not_emulated=... exit=E
(task_s: the tasks' wall seconds summed; cpu_s: their CPU seconds, with llvm-mc's, which other work on the
machine inflates far less.)
Exit: the command's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    words = list(argv)
    reports = ROOT / ".farm" / "reports" / "bench-emulate"
    load_before = os.getloadavg()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "emulate", *words, f"report_dir={reports}"],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    load_after = os.getloadavg()
    latest = reports / "latest-emulate.json"
    if not latest.is_file():
        sys.stdout.write(proc.stdout + proc.stderr)
        print(f"emulate wrote no report (exit {proc.returncode})")
        return proc.returncode or 1
    report = json.loads(latest.read_text())
    lines = proc.stdout.rstrip().splitlines()
    table_at = next((i for i, line in enumerate(lines) if line.startswith("family ")), len(lines))
    print("\n".join(lines[table_at:]))
    seconds: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu = 0.0
    for o in report["objects"]:
        op, target, _ = o["key"].split("/", 2)
        if o["status"] != "NOT EMULATED":
            seconds[(op, target)].append(float(o["seconds"]))
            cpu += float(o.get("cpu_seconds", 0.0))
    print(f"\nseconds per emulated object (task time on one CPU), by family; selection: {' '.join(words)}")
    print(f"{'family':<18} {'target':<14} {'objects':>7} {'min':>7} {'mean':>7} {'max':>7} {'sum':>9}")
    for (op, target), values in sorted(seconds.items()):
        print(f"{op:<18} {target:<14} {len(values):>7} {min(values):>7.2f} {sum(values) / len(values):>7.2f} "
              f"{max(values):>7.2f} {sum(values):>9.1f}")
    task_s = sum(sum(v) for v in seconds.values())
    count = len(report["objects"])
    executor = report.get("executor") or {}
    print(f"wall {wall:.1f} s for {count} objects (the command's own count: {report['seconds']:.1f} s) on "
          f"{executor.get('num_cpus') or os.cpu_count()} CPUs ({executor.get('kind')}); load average before "
          f"{load_before[0]:.2f}, after {load_after[0]:.2f}")
    per_object = task_s / max(sum(len(v) for v in seconds.values()), 1)
    cpus = executor.get("num_cpus") or os.cpu_count() or 1
    print(f"CPU seconds of the tasks (with llvm-mc): {cpu:.1f}, at least {cpu / cpus:.1f} s of wall time on "
          f"{cpus} CPUs")
    print(f"emulate objects={count} wall_s={wall:.1f} task_s={task_s:.1f} cpu_s={cpu:.1f} "
          f"per_object_s={per_object:.2f} within={report['within']} outside={report['outside']} "
          f"not_emulated={report['not_emulated']} exit={proc.returncode}")
    if proc.returncode and not report["objects"]:
        sys.stdout.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
