"""What every ISA model shares: wave state (SGPRs with VCC/EXEC, VGPRs, SCC, pc), float helpers, global memory
with bounds and LDS, the kernel descriptor and launch facts, the scalar/vector/memory semantics, one step of a
wave and a workgroup of waves meeting at barriers."""
