"""MFU arithmetic and the `spreadrl bench train` command."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spreadrl.bench.flops import matmul_parameters, peak_tflops, train_flops_per_token
from spreadrl.cli.main import app
from spreadrl.models.init import count_parameters, make_config
from spreadrl.models.tokenizer import default_corpus, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(default_corpus(), vocab_size=512)


@pytest.mark.parametrize("preset", ["tiny", "4b-shape"])
def test_matmul_parameters_are_every_weight_but_the_norms(tokenizer, preset):
    config = make_config(preset, tokenizer, {"vocab_size": 151936})
    d, head_dim, layers = config.hidden_size, config.head_dim, config.num_hidden_layers
    norms = layers * (2 * d + 2 * head_dim) + d  # input/post norms, q/k norms, final norm
    # tied embeddings: the one embedding matrix is counted once, as the output projection
    assert matmul_parameters(config) == count_parameters(config) - norms


def test_qwen3_4b_shape_costs_about_24_gflops_per_token(tokenizer):
    config = make_config("4b-shape", tokenizer, {"vocab_size": 151936})
    assert 4.0e9 < matmul_parameters(config) < 4.05e9  # Qwen3-4B: 4.02B parameters
    short, long = train_flops_per_token(config, 1), train_flops_per_token(config, 8192)
    assert short == pytest.approx(6 * matmul_parameters(config), rel=1e-3)
    assert long - short == pytest.approx(12 * 36 * 32 * 128 * 8191)


def test_peak_lookup_by_device_name():
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA H200") == 989.4
    assert peak_tflops("NVIDIA H20") == 148.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert peak_tflops("cpu") is None


def test_bench_train_reports_throughput_and_mfu_against_a_given_peak():
    result = CliRunner().invoke(
        app,
        [
            "bench", "train", "--grpo-steps", "0", "--sft-steps", "1",
            "--seq-len", "32", "--batch", "2", "--peak-tflops", "1.0",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "SFT tokens/s (batch 2 x 32)" in result.output
    assert "% of 1 TFLOP/s" in result.output
