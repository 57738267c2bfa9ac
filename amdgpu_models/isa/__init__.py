"""Per-ISA data: how each target's instructions are decoded and which semantics they map to."""
