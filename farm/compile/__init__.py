"""Compiling one row in isolation: the child process (worker, lowering) and its parent (isolate)."""
