"""Peak resident memory of process trees, sampled in a thread (bench/throughput.py)."""

from __future__ import annotations

import threading

import psutil


class PeakMemory:
    """Samples the summed resident memory of processes and all their descendants until stopped. A process
    in two of the trees counts once; shared pages count once per process, so the peak is an upper bound."""

    def __init__(self, *pids: int, interval_s: float = 0.1) -> None:
        self.roots = [psutil.Process(pid) for pid in pids]
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> dict[int, psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for root in self.roots:
            try:
                for proc in [root, *root.children(recursive=True)]:
                    found[proc.pid] = proc
            except psutil.Error:  # the root is gone: nothing of its tree to count
                pass
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for proc in self._tree().values():
                try:
                    total += proc.memory_info().rss
                except psutil.Error:  # ended between listing and reading
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(self.interval_s)

    def stop(self) -> float:
        """Stop sampling; the peak in GiB."""
        self._stop.set()
        self._thread.join()
        return self.peak_bytes / 2**30
