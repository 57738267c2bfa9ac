"""The attention families' checks on the RDNA models (`sdpa_rdna`, `sdpa_rdna4`, `sdpa_rdna_decode`): cases
(cases.py), a numpy binary64 reference and its low-precision twin (reference.py), the tolerance
(tolerance.py), buffers with guard bytes and the documented kernel arguments (buffers.py), and one check per
kernel form (forward_check.py, decode_check.py). docs/emulation.md describes them."""
