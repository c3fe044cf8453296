"""spreadrl.models.export and `spreadrl merge`: LoRA merges, checkpoint export, DCP round trip.

Exactness: the merged model's logits equal the unmerged peft model's within
atol 1e-5 in float32 (observed differences are ~1e-7, float rounding of
``W + scale * B @ A``); full-model and DCP exports are bit-exact (torch.equal).
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.errors import ConfigError, SpreadrlError
from spreadrl.models.export import export_checkpoint, merge_lora
from spreadrl.train.checkpoint import save_checkpoint
from tests.full_disk import safetensors_fills_the_disk

ATOL = 1e-5
INPUT_IDS = torch.tensor([[1, 5, 9, 42, 7, 100, 3, 250, 17, 64]])
runner = CliRunner()


def _config(vocab: int, tie: bool = False) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
        tie_word_embeddings=tie,
        eos_token_id=vocab - 1,
        pad_token_id=vocab - 2,
    )


def _tiny(vocab: int, seed: int, tie: bool = False) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(_config(vocab, tie)).eval()
    model.generation_config = GenerationConfig(eos_token_id=[vocab - 1, 0], pad_token_id=vocab - 2)
    return model


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=INPUT_IDS).logits.float()


def _load(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype="auto").eval()


@pytest.fixture(scope="module")
def tokenizer():
    from spreadrl.models.tokenizer import default_corpus, train_tokenizer

    return train_tokenizer(default_corpus(size=40), vocab_size=300)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("base") / "base"
    _tiny(len(tokenizer), seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _peft_model(base_dir, seed: int = 1):
    from peft import LoraConfig, get_peft_model

    from spreadrl.models.compat import peft_wrapping

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    with peft_wrapping():
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    torch.manual_seed(seed)
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:  # peft starts B at zero (a no-op adapter); make it change outputs
            torch.nn.init.normal_(param, std=0.05)
    return peft_model.eval()


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, base_dir, tokenizer):
    """An adapter folder saved with a tokenizer marked model_max_length=777, and its logits."""
    folder = tmp_path_factory.mktemp("adapter") / "adapter"
    peft_model = _peft_model(base_dir)
    peft_model.save_pretrained(folder)
    marked = AutoTokenizer.from_pretrained(base_dir)
    marked.model_max_length = 777
    marked.save_pretrained(folder)
    base_logits = _logits(_load(base_dir))
    return folder, _logits(peft_model), base_logits


def test_merge_lora_matches_peft_logits_and_writes_plain_folder(tmp_path, base_dir, adapter):
    adapter_dir, peft_logits, base_logits = adapter
    out = merge_lora(base_dir, adapter_dir, tmp_path / "merged")
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= names
    assert "adapter_config.json" not in names and "adapter_model.safetensors" not in names
    merged = _load(out)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    assert torch.allclose(_logits(merged), peft_logits, atol=ATOL, rtol=0)
    assert (_logits(merged) - base_logits).abs().max() > 1e-2
    gen = GenerationConfig.from_pretrained(out)
    assert gen.eos_token_id == [len(AutoTokenizer.from_pretrained(base_dir)) - 1, 0]
    # the adapter folder's tokenizer wins over the base's
    assert AutoTokenizer.from_pretrained(out).model_max_length == 777


def test_tokenizer_falls_back_to_base_and_dtype_is_applied(tmp_path, base_dir, adapter):
    adapter_dir, peft_logits, _ = adapter
    bare = tmp_path / "bare-adapter"
    bare.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(adapter_dir / name, bare / name)
    out = merge_lora(base_dir, bare, tmp_path / "merged", dtype="bfloat16")
    assert AutoTokenizer.from_pretrained(out).model_max_length != 777
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    merged = _load(out)
    assert merged.model.embed_tokens.weight.dtype == torch.bfloat16
    # bfloat16 keeps ~3 significant digits: the merge survives the cast
    assert torch.allclose(_logits(merged), peft_logits, atol=5e-2, rtol=0)


def test_export_peft_checkpoint_follows_latest_and_reads_base_from_adapter(
    tmp_path, base_dir, tokenizer
):
    root = tmp_path / "ckpt"
    peft_model = _peft_model(base_dir, seed=3)
    opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-3)
    save_checkpoint(root, 5, peft_model, tokenizer, opt, None)
    assert (
        root / "step-000005" / "optim" / ".metadata"
    ).exists()  # a DCP folder that is not a model
    out = export_checkpoint(root, tmp_path / "out")
    assert torch.allclose(_logits(_load(out)), _logits(peft_model), atol=ATOL, rtol=0)
    assert not (out / "trainer_state.pt").exists() and not (out / "optim").exists()


def test_export_full_checkpoint_from_latest_and_from_a_step(tmp_path, tokenizer):
    root = tmp_path / "ckpt"
    models = {step: _tiny(len(tokenizer), seed=10 + step) for step in (1, 2)}
    for step, model in models.items():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        save_checkpoint(root, step, model, tokenizer, opt, None, keep=2)

    latest = _load(export_checkpoint(root, tmp_path / "latest"))
    for name, tensor in models[2].state_dict().items():
        assert torch.equal(latest.state_dict()[name], tensor), name
    first = export_checkpoint(root / "step-000001", tmp_path / "first")
    assert torch.equal(_logits(_load(first)), _logits(models[1]))
    assert {p.name for p in first.iterdir()} >= {"model.safetensors", "tokenizer.json"}
    assert not (first / "trainer_state.pt").exists()

    (root / "latest").unlink()  # a run folder without `latest`: the highest step is taken
    newest = _load(export_checkpoint(root, tmp_path / "newest"))
    assert torch.equal(_logits(newest), _logits(models[2]))


class _Lines:
    """A reporter that keeps the lines it is told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def line(self, text: str, *, level: str = "info") -> None:
        self.lines.append((level, text))


def _cut_short(step, how: str) -> str:
    """Leave ``step`` as a lost node or a full disk might; what its skip line names."""
    if how == "truncated":  # the manifest lists the weights at their full size
        weights = step / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        return "model.safetensors has"
    (step / "manifest.json").unlink()  # cut before the state and the manifest were written
    (step / "trainer_state.pt").unlink()
    return "no trainer_state.pt"


@pytest.mark.parametrize("how", ["truncated", "no manifest"])
def test_a_checkpoint_cut_short_is_skipped_or_refused_never_exported(tmp_path, tokenizer, how):
    root = tmp_path / "ckpt"
    models = {step: _tiny(len(tokenizer), seed=20 + step) for step in (1, 2)}
    for step, model in models.items():
        save_checkpoint(root, step, model, tokenizer, torch.optim.AdamW(model.parameters()), None)
    problem = _cut_short(root / "step-000002", how)  # `latest` still names it

    said = _Lines()  # the run folder: the newest complete step, the skipped one named
    out = export_checkpoint(root, tmp_path / "out", reporter=said)
    assert torch.equal(_logits(_load(out)), _logits(models[1]))
    assert said.lines[0][0] == "warning"
    assert "step-000002 is incomplete" in said.lines[0][1] and problem in said.lines[0][1]
    assert said.lines[1][1].endswith(str(root / "step-000001"))

    with pytest.raises(SpreadrlError, match=f"step-000002 is incomplete .*{problem}") as refused:
        export_checkpoint(root / "step-000002", tmp_path / "named")  # that step, by name
    assert str(root / "step-000001") in str(refused.value)  # where a complete one is
    assert not (tmp_path / "named").exists()

    (root / "step-000001" / "model.safetensors").unlink()  # none complete: refused
    with pytest.raises(SpreadrlError, match="no complete checkpoint in"):
        export_checkpoint(root, tmp_path / "none")
    result = runner.invoke(app, ["merge", "--checkpoint", str(root), "--out", str(tmp_path / "c")])
    assert isinstance(result.exception, SpreadrlError), result.output  # main: one line, exit 1
    assert "\n" not in str(result.exception) and not (tmp_path / "c").exists()


def test_merge_says_which_checkpoint_it_skipped(tmp_path, tokenizer):
    root = tmp_path / "ckpt"
    for step in (1, 2):
        model = _tiny(len(tokenizer), seed=step)
        save_checkpoint(root, step, model, tokenizer, torch.optim.AdamW(model.parameters()), None)
    _cut_short(root / "step-000002", "truncated")
    result = runner.invoke(app, ["merge", "--checkpoint", str(root), "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert "step-000002 is incomplete" in result.output and "skipped" in result.output
    assert (tmp_path / "m" / "model.safetensors").is_file()


def test_merge_on_a_full_disk_is_one_line_and_leaves_nothing(
    tmp_path, tokenizer, monkeypatch, capsys
):
    """safetensors' writer reports a full disk as a SafetensorError naming the OS error:
    merge used to end in its traceback."""
    from tests.cli.test_cli_mistakes import cli, one_error_line

    root = tmp_path / "ckpt"
    model = _tiny(len(tokenizer), seed=1)
    save_checkpoint(root, 1, model, tokenizer, torch.optim.AdamW(model.parameters()), None)

    safetensors_fills_the_disk(monkeypatch)
    out = tmp_path / "m"
    code, _, err = cli(monkeypatch, capsys, "merge", "--checkpoint", str(root), "--out", str(out))
    line = one_error_line(err)
    assert code == 1 and f"no space left on device writing {tmp_path / '.tmp-m'}" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # its temporary folder freed


def _dcp_save(state, folder):
    import torch.distributed.checkpoint as dcp

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    dcp.save(state, checkpoint_id=str(folder))


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("nested", [True, False])
def test_dcp_round_trip_is_exact(tmp_path, tokenizer, tie, nested):
    vocab = len(tokenizer)
    base = tmp_path / "base"
    _tiny(vocab, seed=0, tie=tie).save_pretrained(base)
    tokenizer.save_pretrained(base)
    trained = _tiny(vocab, seed=7, tie=tie)
    sd = trained.state_dict()
    opt = torch.optim.AdamW(trained.parameters(), lr=1e-3)
    trained(input_ids=INPUT_IDS).logits.sum().backward()
    opt.step()
    sd = {k: v.clone() for k, v in trained.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = {"model": sd, "optim": get_optimizer_state_dict(trained, opt)} if nested else sd
    _dcp_save(state, tmp_path / "sharded")
    assert any((tmp_path / "sharded").glob("*.distcp"))

    out = export_checkpoint(tmp_path / "sharded", tmp_path / "out", base=base)
    loaded = _load(out)
    for name, tensor in sd.items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert torch.equal(_logits(loaded), _logits(trained))
    assert (out / "generation_config.json").exists() and (out / "tokenizer.json").exists()


def test_dcp_model_inside_a_step_folder(tmp_path, base_dir, tokenizer):
    root = tmp_path / "ckpt"
    step = root / "step-000003"
    trained = _tiny(len(tokenizer), seed=9)
    _dcp_save({"model": trained.state_dict()}, step / "model")
    _dcp_save({"optim": {"state": {}, "param_groups": []}}, step / "optim")
    torch.save({"step": 3}, step / "trainer_state.pt")
    (root / "latest").write_text(step.name)
    with pytest.raises(SpreadrlError, match="--base"):
        export_checkpoint(root, tmp_path / "out")
    out = export_checkpoint(root, tmp_path / "out", base=base_dir)
    assert torch.equal(_logits(_load(out)), _logits(trained))
    (step / "trainer_state.pt").write_bytes(b"\x80")  # the step cut short: the model in it too
    with pytest.raises(SpreadrlError, match="step-000003 is incomplete"):
        export_checkpoint(step / "model", tmp_path / "again", base=base_dir)


def test_dcp_of_another_architecture_is_refused(tmp_path, base_dir):
    _dcp_save({"model": torch.nn.Linear(3, 2).state_dict()}, tmp_path / "sharded")
    with pytest.raises(SpreadrlError, match="no weights of the --base model"):
        export_checkpoint(tmp_path / "sharded", tmp_path / "out", base=base_dir)
    assert not (tmp_path / "out").exists()


def test_dcp_missing_a_parameter_is_refused(tmp_path, base_dir, tokenizer):
    sd = _tiny(len(tokenizer), seed=4).state_dict()
    del sd["model.layers.1.mlp.down_proj.weight"]
    _dcp_save({"model": sd}, tmp_path / "sharded")
    with pytest.raises(SpreadrlError, match=r"1 parameters .* not in the checkpoint.*down_proj"):
        export_checkpoint(tmp_path / "sharded", tmp_path / "out", base=base_dir)


def test_errors_name_the_problem(tmp_path, base_dir, adapter):
    adapter_dir, _, _ = adapter
    with pytest.raises(SpreadrlError, match="not found"):
        export_checkpoint(tmp_path / "nope", tmp_path / "out")
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "notes.txt").write_text("x")
    with pytest.raises(SpreadrlError, match=r"notes\.txt.*expected"):
        export_checkpoint(odd, tmp_path / "out")

    no_base = tmp_path / "no-base"
    shutil.copytree(adapter_dir, no_base)
    cfg = json.loads((no_base / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = None
    (no_base / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(SpreadrlError, match="base_model_name_or_path"):
        export_checkpoint(no_base, tmp_path / "out")
    with pytest.raises(SpreadrlError, match="not found"):
        merge_lora(tmp_path / "missing-base", adapter_dir, tmp_path / "out")
    with pytest.raises(ConfigError, match="dtype"):
        export_checkpoint(adapter_dir, tmp_path / "out", dtype="int8")
    with pytest.raises(SpreadrlError, match="overlaps"):
        merge_lora(base_dir, adapter_dir, adapter_dir / "merged")


def test_non_empty_out_needs_overwrite_and_holds_a_model(tmp_path, base_dir, adapter):
    adapter_dir, peft_logits, _ = adapter
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for overwrite in (False, True):  # no model folder: the user's, kept whatever the flag
        with pytest.raises(SpreadrlError, match="keep.txt.*did not write"):
            merge_lora(base_dir, adapter_dir, out, overwrite=overwrite)
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    merge_lora(base_dir, adapter_dir, out)
    with pytest.raises(SpreadrlError, match="not empty.*--overwrite"):
        merge_lora(base_dir, adapter_dir, out)
    merge_lora(base_dir, adapter_dir, out, overwrite=True)
    assert torch.allclose(_logits(_load(out)), peft_logits, atol=ATOL, rtol=0)


def test_cli_adapter_and_checkpoint(tmp_path, base_dir, adapter):
    adapter_dir, peft_logits, _ = adapter
    result = runner.invoke(
        app,
        [
            "merge",
            "--base",
            str(base_dir),
            "--adapter",
            str(adapter_dir),
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert torch.allclose(_logits(_load(tmp_path / "a")), peft_logits, atol=ATOL, rtol=0)

    args = ["merge", "--checkpoint", str(tmp_path / "a"), "--out", str(tmp_path / "b")]
    result = runner.invoke(app, [*args, "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    assert _load(tmp_path / "b").lm_head.weight.dtype == torch.bfloat16
    result = runner.invoke(app, [*args, "--dtype", "float32"])
    assert isinstance(result.exception, SpreadrlError) and "--overwrite" in str(result.exception)
    result = runner.invoke(app, [*args, "--dtype", "float32", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert _load(tmp_path / "b").lm_head.weight.dtype == torch.float32


def test_cli_needs_exactly_one_input_and_has_examples(tmp_path, adapter):
    adapter_dir, _, _ = adapter
    out = ["--out", str(tmp_path / "x")]
    result = runner.invoke(app, ["merge", *out])
    assert isinstance(result.exception, ConfigError) and "exactly one" in str(result.exception)
    result = runner.invoke(app, ["merge", *out, "--adapter", str(adapter_dir), "--checkpoint", "c"])
    assert isinstance(result.exception, ConfigError)
    result = runner.invoke(app, ["merge", "--help"])
    assert result.exit_code == 0 and "spreadrl merge --checkpoint" in result.output
