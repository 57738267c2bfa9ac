"""FlyDSL and torch element classes by knob name, and the default launch stream."""

from __future__ import annotations

import flydsl.expr as fx
import torch

FX_TYPES: dict[str, type] = {"bf16": fx.BFloat16, "f16": fx.Float16, "f32": fx.Float32}
TORCH_TYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}

# Launchers run on the null stream unless the caller passes one (one shared default object).
NULL_STREAM = fx.Stream(None)
