"""Running shipped objects on an instruction-level model of the GPU, without one (`farm emulate`)."""
