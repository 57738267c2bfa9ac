"""The build's verify thread (farm/build.py `VerifyThread`): the main thread goes on taking results while a
batch is verified, an error on either side ends the build, and nothing queued is dropped."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import burn_cpu

from farm.build import VerifyThread
from farm.observe import driver_cost
from farm.observe.driver_cost import DriverCost

WAIT_S = 20.0


def test_the_next_batch_is_taken_while_one_is_still_verified() -> None:
    """Batch 1's verification waits until the main thread has queued batch 2: on one thread this would hang."""
    second_queued = threading.Event()
    handled: list[tuple[str, bool]] = []

    def handle(batch: list, taken: float) -> None:
        if batch == ["a"]:
            handled.append(("a", second_queued.wait(WAIT_S)))
        else:
            handled.append((batch[0], True))

    with VerifyThread(handle) as verifying:
        verifying.put(["a"], time.time())
        verifying.put(["b"], time.time())
        second_queued.set()
    assert handled == [("a", True), ("b", True)]  # in the order they came, batch 1 not timed out


def test_an_error_on_the_verify_thread_reaches_the_main_thread() -> None:
    failed = threading.Event()

    def handle(batch: list, taken: float) -> None:
        failed.set()
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        with VerifyThread(handle) as verifying:
            verifying.put(["a"], time.time())
            assert failed.wait(WAIT_S)
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:  # the next put raises it (or, at the latest, the end)
                verifying.put(["b"], time.time())
                time.sleep(0.01)


def test_batches_queued_before_a_main_thread_error_are_still_verified() -> None:
    """The main thread's error (the daemon went away) leaves after the finished compiles it queued are written."""
    handled: list[str] = []
    release = threading.Event()

    def handle(batch: list, taken: float) -> None:
        release.wait(WAIT_S)
        handled.append(batch[0])

    with pytest.raises(RuntimeError, match="daemon went away"):
        with VerifyThread(handle) as verifying:
            verifying.put(["a"], time.time())
            verifying.put(["b"], time.time())
            release.set()
            raise RuntimeError("daemon went away")
    assert handled == ["a", "b"]


def test_the_verify_threads_cpu_is_its_own_not_rays() -> None:
    """Its sections count as verify and write; its CPU is not counted again as Ray's threads."""
    cost = DriverCost()

    def handle(batch: list, taken: float) -> None:  # steps report to the build's recorder, not handed it
        with driver_cost.phase("verify", "disassemble"):
            burn_cpu()
        with driver_cost.phase("write", "flush"):
            burn_cpu()

    with driver_cost.recording(cost), cost.window():
        with VerifyThread(handle) as verifying:
            verifying.put(["a"], time.time())
    cost.rows = 1
    found = cost.report()["breakdown"]
    assert found["verify"] > 0.01 and found["write"] > 0.01
    assert found["threads"] < (found["verify"] + found["write"]) / 4
    assert [s["name"] for s in cost.verify_spans] == ["disassemble", "flush"] and cost.spans == []


def test_the_timeline_gives_the_verify_thread_a_lane_of_its_own() -> None:
    from farm.contract import PhaseJson
    from farm.observe.trace import chrome_trace

    main = [PhaseJson(name="ray results", start_unix=100.0, seconds=1.0)]
    verifying = [PhaseJson(name="disassemble", start_unix=100.2, seconds=0.3)]  # overlaps the main thread's span
    events = chrome_trace([], main, verifying)["traceEvents"]
    lanes = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert spans == {"ray results": lanes["driver work"], "disassemble": lanes["driver verify thread"]}
    assert lanes["driver work"] != lanes["driver verify thread"]


def test_one_time_preparation_runs_first_and_is_not_a_rows_cost() -> None:
    """The verify thread first runs the build's one-time work (deriving the verifier record) while the first
    rows compile; its CPU is left out of the rows' cost, and its error ends the build like a batch's."""
    order: list[str] = []
    cost = DriverCost()
    with driver_cost.recording(cost), cost.window():
        with VerifyThread(lambda batch, taken: order.append(batch[0]),
                          prepare=lambda: (order.append("prepare"), burn_cpu(0.2))) as verifying:
            verifying.put(["a"], time.time())
    cost.rows = 1
    assert order == ["prepare", "a"]
    assert cost.excluded >= 0.2 and cost.report()["cpu_seconds"] < 0.1

    def broken() -> None:
        raise RuntimeError("no verifier record")

    with pytest.raises(RuntimeError, match="no verifier record"):
        with VerifyThread(lambda batch, taken: order.append(batch[0]), prepare=broken) as verifying:
            time.sleep(0.2)  # the preparation failed meanwhile
            verifying.put(["b"], time.time())
    assert "b" not in order
