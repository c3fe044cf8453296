"""train_sft's on_step hook: a caller validates the model in memory and stops at a target
(the demo's one-process SFT), and stopping there equals a run of exactly that many steps."""

import json
from pathlib import Path

import torch

from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.train.sft import train_sft
from tests.train.test_sft_e2e import _cfg, _losses, _rows, _write


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    model, _ = load_model_and_tokenizer(str(folder))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_on_step_stops_where_asked_and_matches_a_fixed_run(tiny_model_dir, tmp_path):
    data = _write(tmp_path / "sft.jsonl", _rows(6))
    seen: list[tuple[int, bool]] = []

    def hook(step, model, tokenizer):
        seen.append((step, model.training))
        # what the demo does between steps: sample from the model in memory
        model.eval()
        with torch.no_grad():
            model(torch.tensor([[tokenizer.pad_token_id or 0, 1, 2]]))
        return step == 3

    stopped = train_sft(_cfg(tiny_model_dir, data, tmp_path / "hook", 10), on_step=hook)
    fixed = train_sft(_cfg(tiny_model_dir, data, tmp_path / "fixed", 3))

    assert [s for s, _ in seen] == [1, 2, 3]  # called after every step, stopped at True
    assert all(training for _, training in seen)  # back in train mode after each call
    assert _losses(tmp_path / "hook") == _losses(tmp_path / "fixed")
    a, b = _weights(stopped), _weights(fixed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    lines = (tmp_path / "hook" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
