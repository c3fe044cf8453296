"""SFT end to end on the tiny model: masks, learning, exact resume, long rows dropped not cut."""

import json
from pathlib import Path

import pytest

from spreadrl.config import load_config, section_dict
from spreadrl.errors import SpreadrlError
from spreadrl.models.init import load_model_and_tokenizer
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.train.config import SFTConfig
from spreadrl.train.setup import claim_training_folder
from spreadrl.train.sft import train_sft
from spreadrl.train.sft_data import encode_conversation, load_sft_dataset
from tests.rollout.fakes import SCHEMAS


def _rows(n=8):
    rows = []
    for i in range(n):
        call = format_tool_call(
            "write_range", {"range": f"B{i + 2}", "values": [[f"=SUM(A1:A{i + 2})"]]}
        )
        rows.append(
            {
                "tools": SCHEMAS,
                "messages": [
                    {"role": "system", "content": "You are a spreadsheet agent."},
                    {"role": "user", "content": f"Put the sum of A1:A{i + 2} in B{i + 2}."},
                    {"role": "assistant", "content": call},
                    {"role": "tool", "content": f"Wrote 1 cell: B{i + 2}"},
                    {"role": "assistant", "content": "Done."},
                ],
            }
        )
    return rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_only_assistant_tokens_are_trained(tiny_model):
    _, tok = tiny_model
    row = _rows(1)[0]
    sample = encode_conversation(tok, row["messages"], row["tools"])
    trained = tok.decode([t for t, m in zip(sample.ids, sample.mask, strict=True) if m])
    assert "write_range" in trained and "Done." in trained
    assert "Put the sum" not in trained and "Wrote 1 cell" not in trained
    rendered = tok.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
    assert tok.decode(sample.ids) == rendered.rstrip("\n")


def test_too_long_rows_are_dropped_and_counted(tiny_model, tmp_path):
    _, tok = tiny_model
    rows = _rows(3)
    rows[0]["messages"][1]["content"] += " Please be careful." * 20
    path = _write(tmp_path / "d.jsonl", rows)
    data = load_sft_dataset(path, tok, max_length=100_000)
    longest = max(len(s.ids) for s in data.samples)
    shorter = load_sft_dataset(path, tok, max_length=longest - 1)
    assert shorter.dropped_too_long >= 1 and all(len(s.ids) < longest for s in shorter.samples)
    assert data.dropped_line is None and "(max_length; never cut)" in shorter.dropped_line
    capped = load_sft_dataset(path, tok, max_length=100_000, context=longest - 1)
    assert capped.dropped_too_long == shorter.dropped_too_long
    assert f"(the model's {longest - 1}-token context; never cut)" in capped.dropped_line
    with pytest.raises(SpreadrlError, match="exceed 5 tokens, max_length"):
        load_sft_dataset(path, tok, max_length=5)


def test_bad_rows_name_file_and_line(tmp_path, tiny_model):
    _, tok = tiny_model
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n{not json\n')
    with pytest.raises(SpreadrlError, match=r"bad.jsonl:2: not valid JSON"):
        load_sft_dataset(bad, tok, max_length=100)
    bad.write_text('{"messages": []}\n')
    with pytest.raises(SpreadrlError, match=r"bad.jsonl:1: .*no assistant message"):
        load_sft_dataset(bad, tok, max_length=100)


def _cfg(model_dir, data, out, steps, extra=()):
    return load_config(
        SFTConfig,
        None,
        [
            f"model.name_or_path={model_dir}",
            f"data.path={data}",
            f"output_dir={out}",
            f"steps={steps}",
            "batch_size=4",
            "optim.lr=3e-3",
            "optim.weight_decay=0.0",
            "micro_batch_tokens=2000",
            "device=cpu",
            *extra,
        ],
    )


def _losses(out):
    return [
        json.loads(line)["loss"] for line in (Path(out) / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.mark.slow
def test_sft_learns_and_resumes_exactly(tiny_model_dir, tmp_path):
    data = _write(tmp_path / "sft.jsonl", _rows(8))
    final = train_sft(_cfg(tiny_model_dir, data, tmp_path / "a", 12))
    losses = _losses(tmp_path / "a")
    assert losses[-1] < 0.5 * losses[0]  # it learns the conversations
    model, _ = load_model_and_tokenizer(str(final))
    assert model is not None

    train_sft(_cfg(tiny_model_dir, data, tmp_path / "b", 3))
    train_sft(_cfg(tiny_model_dir, data, tmp_path / "c", 2, ["checkpoint.every_steps=1"]))
    longer = _cfg(tiny_model_dir, data, tmp_path / "c", 3, ["checkpoint.every_steps=1"])
    claim_training_folder(
        longer, section_dict(longer), resume_changes=True
    )  # what `spreadrl sft --resume` does
    train_sft(longer)
    assert _losses(tmp_path / "c")[2] == pytest.approx(_losses(tmp_path / "b")[2], rel=1e-6)
