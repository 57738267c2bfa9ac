"""RDNA3 (gfx11, wave32): its instruction encodings and operand fields."""
