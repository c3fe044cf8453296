"""SFT drops the conversations longer than the model's context (issue 32).

Its max_length defaulted to 32,768 while the tiny model holds 4,096 positions, so the
README's 5k-token rows were trained on past the model's context without a word.
"""

from __future__ import annotations

import json

from rich.console import Console

from spreadrl.cli.console import RichReporter
from spreadrl.config import load_config
from spreadrl.train.config import SFTConfig
from spreadrl.train.sft import train_sft
from tests.train.test_sft_e2e import _rows, _write


def test_rows_over_the_models_context_are_dropped_and_counted(tiny_model_dir, tmp_path):
    rows = _rows(2)
    long = " ".join(str(n) for n in range(3000))  # well over 4,096 tokens
    rows[1]["messages"][1]["content"] = long
    data = _write(tmp_path / "sft.jsonl", rows)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["max_position_embeddings"] == 4096
    cfg = load_config(
        SFTConfig,
        None,
        [
            f"model.name_or_path={tiny_model_dir}",
            f"data.path={data}",
            f"output_dir={tmp_path / 'run'}",
            "steps=1",
            "batch_size=1",
            "device=cpu",
        ],
    )
    assert cfg.max_length > 4096  # the default: larger than this model's context
    console = Console(record=True, width=200)
    train_sft(cfg, reporter=RichReporter(console))
    shown = console.export_text()
    assert (
        "dropped 1 conversations longer than 4096 tokens (the model's 4096-token context" in shown
    )
