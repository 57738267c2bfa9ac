"""farm cluster up|down|status: the standing local cluster with warm compilers (farm/execute/standing.py)."""

from __future__ import annotations

import os
from pathlib import Path

from farm.cli.parser import Invocation
from farm.cli.selection import load
from farm.core.errors import FarmError
from farm.execute import standing

ACTIONS = ("up", "down", "status")


def cmd_cluster(inv: Invocation) -> int:
    actions = [a for a in inv.words if "=" not in a]
    if len(actions) != 1 or actions[0] not in ACTIONS:
        raise FarmError(f"farm cluster needs one of up, down, status; got {' '.join(actions) or 'nothing'}",
                        "e.g. farm cluster up executor.num_cpus=2")
    cfg = load([a for a in inv.words if "=" in a])
    if cfg.executor.get("kind") != "local":
        raise FarmError("a standing cluster is local; executor=cluster already names a running cluster",
                        "drop the executor=cluster override")
    action = actions[0]
    if action == "up":
        num_cpus = standing.num_cpus(cfg.executor) or os.cpu_count() or 1  # a bad value: its own error
        state = standing.up(cfg.cluster_root, num_cpus, float(cfg.executor.get("standing_idle_minutes") or 30))
        print(f"standing cluster up at {state['address']}: {state['num_cpus']} warm compilers, daemon pid "
              f"{state['pid']}; builds use it until `farm cluster down` or "
              f"{state['idle_s'] / 60:.0f} minutes without a build")
    elif action == "down":
        lost = standing.stray(cfg.cluster_root)
        if not standing.down(cfg.cluster_root):
            print("no standing cluster was up")
        elif lost is not None:
            print(f"standing cluster stopped: daemon pid {lost.process.pid}, found by its lock (its state file "
                  f"{lost.why})")
        else:
            print("standing cluster stopped")
    else:
        print(_status(cfg.cluster_root))
    return 0


def _status(root: Path) -> str:
    state = standing.running(root)
    if state:
        warming = "" if state.get("warm", True) else " (still warming up)"
        return (f"standing cluster up at {state['address']}: {state['num_cpus']} warm compilers{warming}, daemon "
                f"pid {state['pid']}")
    lost = standing.stray(root)
    if lost is not None:
        return f"{lost.said}; `farm cluster down` stops it"
    starting = standing.daemon_by_lock(root)
    if starting is not None:
        return (f"a standing cluster's daemon runs (pid {starting.pid}) without a state file: it is still starting, "
                "or the file was removed; `farm cluster down` stops it")
    return "no standing cluster is up"
