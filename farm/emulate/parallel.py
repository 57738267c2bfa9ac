"""`farm emulate`'s objects as Ray tasks on the farm's executor: the cluster `farm build` would use, started or
joined by farm/execute/executor.py's RaySession (a private local cluster on loopback by default, the one at
executor.address with executor=cluster), one CPU per task. A standing cluster (`farm cluster up`) is not
used: its compile actors hold its CPUs.

Each task carries its object's bytes, its row and its decoder's name (farm/emulate/task.py); results come back in
the order they finish, each naming the node it ran on (the report's "node", as a build's rows do). A task whose
worker died is retried by Ray (executor.max_retries), then its object is NOT EMULATED, named with Ray's reason.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import amdgpu_models
from farm.emulate.task import ObjectResult, Task, run

# Tasks in flight per CPU: one running, one waiting, so a worker never idles while a result travels back.
IN_FLIGHT_PER_CPU = 2


def results(executor_cfg: Mapping[str, Any], tasks: list[Task]) -> Generator[ObjectResult, None, None]:
    """Each task's result as it finishes; the cluster is left (or ended) when the last one came."""
    if not tasks:
        return
    from farm.execute.executor import RaySession  # Ray (~0.7 s to import) only when an object runs

    # A cluster's nodes have the farm's dependencies, not this checkout: the models travel with the farm.
    session = RaySession(executor_cfg, modules=[Path(amdgpu_models.__file__).resolve().parent])
    cpus = session.start()
    try:
        for task, result in session.tasks(run_on_node, tasks, IN_FLIGHT_PER_CPU * cpus):
            yield result if isinstance(result, ObjectResult) else ObjectResult(
                task.key, task.op, task.target, stopped=f"the emulation task failed on Ray: {result}")
    finally:
        session.close()


def run_on_node(task: Task) -> ObjectResult:
    """`run` in a Ray worker, the result naming the node it ran on (a cluster's report shows the spread)."""
    from farm.execute.compiler import node_name

    result = run(task)
    result.node = node_name()
    return result
