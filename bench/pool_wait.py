"""The driver's cost of taking one result while N calls are in flight (issue 18: what breaks first).

    .venv/bin/python bench/pool_wait.py [--in-flight 64,512,2048]

`ray.util.ActorPool.get_next_unordered` (farm/execute/dispatch.py) calls `ray.wait` over every call in
flight to take one result; the farm keeps two calls per compile actor in flight, so a driver feeding C
cores waits over 2C references per result. This measures that wait on a private loopback cluster: N calls
queued behind a busy CPU (they stay pending) plus one ready result, and the driver's CPU for one
`ray.wait(all N + 1, num_returns=1)`, median of repeats. The last line:
`wait_ms in_flight=N:ms ...`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import ray

from farm.execute import local

REPEATS = 30


@ray.remote(num_cpus=1)
def _hold(seconds: float) -> None:
    time.sleep(seconds)


def _wait_ms(pending: list, ready: ray.ObjectRef) -> float:
    refs = [*pending, ready]
    times = []
    for _ in range(REPEATS):
        began = time.process_time()
        done, _ = ray.wait(refs, num_returns=1, timeout=10)
        times.append(time.process_time() - began)
        assert done == [ready]
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", default="64,512,2048")
    sizes = [int(n) for n in parser.parse_args().in_flight.split(",")]
    local.start(2)
    try:
        ready = ray.put(b"x" * 19_000)  # one result of a row's mean size (bench/transfer_sizes.py)
        pending = [_hold.remote(600) for _ in range(max(sizes))]  # two run, the rest queue: all pending
        found = {n: _wait_ms(pending[:n], ready) for n in sizes}
        for n, ms in found.items():
            print(f"  {n:6} calls in flight: {ms:.3f} ms of driver CPU to take one result", flush=True)
        print("wait_ms " + " ".join(f"in_flight={n}:{ms:.3f}" for n, ms in found.items()))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
