"""Model FLOPs utilisation: the training FLOPs a model needs per token, and the device's peak.

FLOPs per trained token follow the PaLM appendix convention: ``6 * N`` for the
matrix multiplies (N counts every weight matrix a token goes through, the
output projection included, the embedding lookup not) plus ``12 * L * H * Q * T``
for attention scores and values at sequence length T (not halved for the
causal mask, as in PaLM, nanoGPT and torchtitan). Activation recomputation
is not counted: MFU measures useful work.
"""

from __future__ import annotations

from transformers import PretrainedConfig

# Dense bf16 tensor-core peaks (TFLOP/s) from the vendors' datasheets, matched on the
# device name torch reports; the first match wins, so specific names come first.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),
    ("H200", 989.4),
    ("H20", 148.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A10G", 70.0),
    ("L4", 121.0),
)


def matmul_parameters(config: PretrainedConfig) -> int:
    """Weights multiplied per token by a Qwen3-style decoder (q/k/v/o, gated MLP, lm head)."""
    d = config.hidden_size
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    attention = d * heads * head_dim * 2 + d * kv_heads * head_dim * 2
    mlp = 3 * d * config.intermediate_size
    return config.num_hidden_layers * (attention + mlp) + d * config.vocab_size


def train_flops_per_token(config: PretrainedConfig, seq_len: int) -> float:
    """Forward + backward FLOPs per token at sequence length ``seq_len``."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    attention = 12 * config.num_hidden_layers * heads * head_dim * seq_len
    return 6.0 * matmul_parameters(config) + attention


def peak_tflops(device_name: str) -> float | None:
    """The bf16 peak of a known accelerator, or None (CPUs and unknown devices)."""
    for key, value in PEAK_BF16_TFLOPS:
        if key.lower() in device_name.lower():
            return value
    return None
