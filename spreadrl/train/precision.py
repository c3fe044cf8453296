"""Mixed precision as the large trainers run it: fp32 master weights, bf16 compute.

``model.dtype`` names the *compute* dtype of training; it never lowers the
precision the trained weights are kept in:

- ``bfloat16``: trainable weights, their gradients and AdamW's state stay in
  float32 (the master weights); forward and backward run in bfloat16. Under
  FSDP2 (torchrun) that is ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)``: each unit's shards are gathered as bf16 and gradients
  are reduce-scattered in fp32 onto the fp32 shards. In one process it is
  ``torch.autocast``: the fp32 weights are cast to bf16 per matmul.
- ``float32``: everything in float32.
- ``auto``: ``bfloat16`` on a GPU, ``float32`` on CPU.
- ``float16``: refused for training: fp16 gradients underflow without loss
  scaling, which spreadrl does not do.

Why not bf16 storage: at lr 1e-6 almost every AdamW update (about lr per step)
is smaller than half a bf16 rounding step of a weight near 0.02 (2**-14), so it
is rounded away; reference.md section 12 measured 1.9% of a 2560x2560 matrix
changing after 10 steps in bf16, 99.99% in fp32.

Weights that never train are kept in the compute dtype: a LoRA policy's base
model (peft keeps its adapters in fp32) and the frozen KL reference. A rollout
engine always gets bf16 (or the compute dtype): it is cast at export.
"""

from __future__ import annotations

from dataclasses import dataclass

from spreadrl.errors import ConfigError


@dataclass(frozen=True)
class Precision:
    """The dtypes of one run: what weights are loaded in, what the matmuls run in."""

    load: str  # the dtype weights are loaded in (float32 master weights for a full fine-tune)
    compute_dtype: str  # forward and backward

    @property
    def mixed(self) -> bool:
        return self.compute_dtype != "float32"


def compute_dtype(dtype: str, device: str) -> str:
    """``model.dtype`` resolved for ``device``: the compute dtype of training."""
    if dtype == "auto":
        return "bfloat16" if str(device).startswith("cuda") else "float32"
    if dtype == "float16":
        raise ConfigError(
            "model.dtype=float16 cannot train: fp16 gradients underflow without loss scaling, "
            "which spreadrl does not do; use model.dtype=bfloat16 (fp32 master weights, bf16 "
            "compute)"
        )
    return dtype


def resolve_precision(dtype: str, device: str, *, lora: bool = False) -> Precision:
    """The run's precision: fp32 master weights unless only adapters train (LoRA)."""
    compute = compute_dtype(dtype, device)
    return Precision(load=compute if lora else "float32", compute_dtype=compute)
