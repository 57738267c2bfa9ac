"""One piece of work in a forked child, its JSON answer read back: shared by bench/fork_tax.py and
bench/codegen_server.py. Imports nothing of the farm, so a server measuring its own size stays as it is."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable


def in_fork(work: Callable[[], object]) -> object:
    """`work()` in a forked child (cyclic GC off, as in the farm's), its JSON result read back once the
    child is reaped."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        gc.disable()
        os.write(write, json.dumps(work()).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 20):
        data += chunk
    os.waitpid(pid, 0)
    os.close(read)
    return json.loads(data)
