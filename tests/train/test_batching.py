import pytest

from spreadrl.train.batching import Sample, collate, pack_by_tokens


def test_pack_respects_token_budget_and_keeps_every_sample():
    samples = [Sample(ids=[1] * n, mask=[1] * n) for n in (3, 10, 4, 7, 2, 9)]
    batches = pack_by_tokens(samples, max_tokens=20)
    assert sorted(i for b in batches for i in b) == list(range(len(samples)))
    for batch in batches:
        width = max(len(samples[i].ids) for i in batch)
        assert width * len(batch) <= 20 or len(batch) == 1


def test_oversized_sample_gets_its_own_batch_uncut():
    samples = [Sample(ids=[1] * 50, mask=[1] * 50), Sample(ids=[1] * 3, mask=[1] * 3)]
    batches = pack_by_tokens(samples, max_tokens=10)
    assert [0] in batches


def test_collate_aligns_mask_and_values_with_targets():
    s = Sample(ids=[5, 6, 7, 8], mask=[0, 0, 1, 1], advantage=2.0, old_logprobs=[-1.0, -2.0, -3.0])
    t = Sample(ids=[5, 6], mask=[0, 1], advantage=-1.0, old_logprobs=[-0.5])
    batch = collate([s, t], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [5, 6, 0, 0]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    assert batch["advantages"][0].tolist() == [2.0, 2.0, 2.0]
    assert batch["old_logprobs"][1].tolist() == [-0.5, 0.0, 0.0]


def test_mismatched_lengths_rejected():
    with pytest.raises(ValueError):
        Sample(ids=[1, 2], mask=[1])
