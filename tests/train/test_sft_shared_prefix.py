"""SFT with a shared prefix run once: the same loss and gradients as the full padded forward."""

import torch

from spreadrl.train.batching import MIN_SHARED_PREFIX, Sample, common_untrained_prefix
from spreadrl.train.logprobs import LogprobSettings
from spreadrl.train.sft import sft_loss_step, train_sft


def _samples(tok):
    system = tok("You are a spreadsheet agent. Tools: write_range, inspect_range. " * 3)[
        "input_ids"
    ]
    rows = []
    for i, (ask, answer) in enumerate(
        [
            ("Sum column C.", "=SUM(C3:C20)"),
            ("Average of B?", "=AVERAGE(B2:B9)"),
            ("Max D", "=MAX(D:D)"),
        ]
    ):
        user = tok(f" user: {ask} ({i})")["input_ids"]
        reply = tok(f" assistant: {answer} done")["input_ids"]
        ids = system + user + reply
        rows.append(Sample(ids, [0] * (len(system) + len(user)) + [1] * len(reply)))
    return rows, len(system)


def _loss_and_grads(model, samples, pad_id, shared):
    model.zero_grad(set_to_none=True)
    settings = LogprobSettings(shared_prefix_min=MIN_SHARED_PREFIX if shared else 0)
    stats = sft_loss_step(
        model, samples, pad_id=pad_id, micro_batch_tokens=100_000, settings=settings
    )
    return stats, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prefix_matches_the_full_forward(tiny_model):
    model, tok = tiny_model
    model.train()
    samples, system = _samples(tok)
    prefix = common_untrained_prefix(samples)
    assert system <= prefix < min(len(s.ids) for s in samples)  # the system prompt at least
    assert all(1 not in s.mask[:prefix] for s in samples)
    pad = tok.pad_token_id or 0
    full, g_full = _loss_and_grads(model, samples, pad, shared=False)
    fast, g_fast = _loss_and_grads(model, samples, pad, shared=True)
    model.zero_grad(set_to_none=True)
    assert fast["tokens"] == full["tokens"]
    assert abs(fast["loss"] - full["loss"]) < 1e-5 * max(1.0, abs(full["loss"]))
    assert g_fast.keys() == g_full.keys()
    for name, grad in g_full.items():
        torch.testing.assert_close(g_fast[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_train_sft_with_a_shared_prefix_learns_the_same(tiny_model_dir, tmp_path):
    from tests.train.test_sft_e2e import _cfg, _losses, _rows, _write

    data = _write(tmp_path / "sft.jsonl", _rows(6))
    train_sft(_cfg(tiny_model_dir, data, tmp_path / "full", 3))
    train_sft(_cfg(tiny_model_dir, data, tmp_path / "shared", 3), shared_prefix=True)
    full, shared = _losses(tmp_path / "full"), _losses(tmp_path / "shared")
    assert len(full) == len(shared) == 3
    for a, b in zip(full, shared, strict=True):
        assert abs(a - b) < 1e-4 * max(1.0, abs(a))
