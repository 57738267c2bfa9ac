"""Helpers every kernel family shares (this project's own code; see SOURCE.md).

Split by what a module may import: `dtypes`, `knobs`, `norm` and `trace` are pure Python (spec
modules use them at expansion time, before any GPU toolchain is loaded); `arch`, `buffers`,
`fx_types` and `norm_trace` use FlyDSL's public API and torch; `flydsl_compat` is the one place
that touches FlyDSL internals.
"""
