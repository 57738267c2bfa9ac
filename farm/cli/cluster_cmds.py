"""farm cluster up|down|status: the standing local cluster with warm compilers (farm/execute/standing.py)."""

from __future__ import annotations

import os

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
        state = standing.up(cfg.root, num_cpus, float(cfg.executor.get("standing_idle_minutes") or 30))
        print(f"standing cluster up at {state['address']}: {state['num_cpus']} warm compilers, daemon pid "
              f"{state['pid']}; builds use it until `farm cluster down` or "
              f"{state['idle_s'] / 60:.0f} minutes without a build")
    elif action == "down":
        print("standing cluster stopped" if standing.down(cfg.root) else "no standing cluster was up")
    else:
        state = standing.running(cfg.root)
        warming = "" if not state or state.get("warm", True) else " (still warming up)"
        print(f"standing cluster up at {state['address']}: {state['num_cpus']} warm compilers{warming}, daemon "
              f"pid {state['pid']}" if state else "no standing cluster is up")
    return 0
