"""The recipe presets carry the seed cards' hyperparameters (reference.md table 1)."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.config import config_table, describe_config, dump_config, load_config
from spreadrl.errors import ConfigError
from spreadrl.train.config import GRPOConfig, SFTConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PRESETS = [
    "spreadsheet-rl-4b.yaml",
    "spreadsheet-rl-4b-repo.yaml",
    "grpo-tcr-4b.yaml",
    "tiny-cpu.yaml",
]


def test_spreadsheet_rl_4b_matches_its_model_card():
    cfg = load_config(GRPOConfig, CONFIGS / "spreadsheet-rl-4b.yaml")
    assert cfg.model.name_or_path == "Qwen/Qwen3-4B-Thinking-2507"
    r = cfg.rollout
    assert (r.temperature, r.top_p, r.top_k) == (0.6, 0.95, 20)
    assert (r.prompts_per_step, r.group_size) == (64, 16)
    assert (cfg.data.max_prompt_tokens, r.max_response_tokens) == (4096, 27648)
    # the card's 8,192 tool-response length is verl's, in characters
    assert (r.max_turns, r.max_tool_response_chars) == (20, 8192)
    o = cfg.optim
    assert (o.lr, o.weight_decay, o.betas, o.grad_clip) == (1e-6, 0.01, (0.9, 0.999), 1.0)
    # verl's mini-batch of 32 prompts, in sequences: 32 x 16 rollouts
    assert o.mini_batch_size == 32 * r.group_size and o.micro_batch_tokens > 0
    assert (cfg.loss.kl_coef, cfg.loss.kl_estimator) == (0.001, "k3")
    assert (cfg.loss.clip_low, cfg.loss.clip_high, cfg.loss.dual_clip_c) == (0.2, 0.2, 3.0)
    assert cfg.steps == 60 and cfg.env.kind == "spreadsheet"
    assert cfg.env.tools == "spreadsheet-rl"  # the tools the released checkpoint knows
    assert cfg.reward.outcome and not cfg.reward.tool_call_reward and not cfg.reward.overlong
    assert cfg.sampling.mode == "off"


def test_spreadsheet_rl_4b_repo_matches_the_repo_launcher():
    cfg = load_config(GRPOConfig, CONFIGS / "spreadsheet-rl-4b-repo.yaml")
    r, o = cfg.rollout, cfg.optim
    assert (r.prompts_per_step, r.group_size, o.lr) == (128, 8, 2e-6)
    assert (r.max_turns, r.max_response_tokens) == (15, 24576)
    assert cfg.data.max_prompt_tokens + r.max_response_tokens == 28672  # vLLM max_model_len
    assert (r.max_calls_per_turn, r.max_serial_calls, r.max_tool_response_chars) == (20, 4, 10240)
    assert (r.temperature, r.top_p, r.top_k) == (0.6, 0.95, 20)
    assert cfg.loss.dual_clip_c == 3.0 and cfg.loss.aggregation == "token-mean"
    assert (cfg.loss.kl_coef, cfg.loss.kl_estimator) == (0.001, "k3")
    assert o.mini_batch_size == 64 * r.group_size and o.micro_batch_tokens == 32768
    assert o.schedule == "constant" and o.warmup_steps == 0
    assert cfg.steps == 2 * (5925 // r.prompts_per_step)  # 2 epochs, last batch dropped
    assert (cfg.checkpoint.every_steps, cfg.eval.every_steps) == (5, 15)
    assert cfg.sampling.mode == "off" and cfg.reward.outcome


@pytest.mark.parametrize("name", ["spreadsheet-rl-4b.yaml", "spreadsheet-rl-4b-repo.yaml"])
def test_both_spreadsheet_rl_recipes_turn_tis_off_and_use_upstream_prompts_and_loop(name):
    cfg = load_config(GRPOConfig, CONFIGS / name)
    r = cfg.rollout
    assert not cfg.loss.tis  # neither the card nor the repo corrects against rollout log-probs
    assert load_config(GRPOConfig, CONFIGS / name, ["loss.tis=true"]).loss.tis  # its own switch
    assert r.prompt_source == "task" and cfg.env.overview == "none"
    assert cfg.env.tools == "spreadsheet-rl"  # upstream's twelve tool contracts
    assert (r.extra_calls, r.calls_in_reasoning, r.tool_call_format) == ("skip", "error", "hermes")
    # verl asks each turn for what is left of the response budget
    assert r.max_new_tokens_per_turn == r.max_response_tokens
    # upstream caps calls per turn, never per episode
    assert cfg.env.max_tool_calls >= r.max_turns * r.max_calls_per_turn
    shown = CliRunner().invoke(app, ["config", "show", str(CONFIGS / name)])
    assert shown.exit_code == 0, shown.output
    assert yaml.safe_load(shown.output)["loss"]["tis"] is False


def test_grpo_tcr_4b_matches_its_model_card():
    cfg = load_config(GRPOConfig, CONFIGS / "grpo-tcr-4b.yaml")
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size) == (4, 8)
    assert (cfg.data.max_prompt_tokens, cfg.rollout.max_response_tokens) == (2560, 10480)
    assert cfg.rollout.max_turns == 16
    assert (cfg.loss.clip_low, cfg.loss.clip_high) == (0.2, 0.28)
    assert cfg.loss.aggregation == "token-mean" and cfg.loss.kl_coef == 0.0
    assert cfg.reward.tool_call_reward and cfg.reward.overlong
    r = cfg.reward
    assert (r.tcr_correct, r.tcr_wrong, r.tcr_per_call, r.tcr_cap) == (1.0, -1.0, 0.1, -0.6)
    assert (r.overlong_buffer, r.overlong_factor) == (3000, 1.0)
    assert cfg.optim.lr == 1e-6 and cfg.rollout.temperature == 1.0
    assert cfg.env.kind == "code" and cfg.env.tools == ["code_interpreter"]
    # 3 epochs over the 2,000-prompt RL set at 4 prompts per step
    assert cfg.steps == 3 * 2000 // cfg.rollout.prompts_per_step


def test_tiny_cpu_preset_is_the_cpu_demo():
    cfg = load_config(GRPOConfig, CONFIGS / "tiny-cpu.yaml")
    assert cfg.device == "cpu" and cfg.data.train_tasks == "builtin:demo-train"
    assert (cfg.rollout.group_size, cfg.rollout.prompts_per_step) == (8, 8)
    assert cfg.rollout.temperature == 1.0 and cfg.rollout.max_turns == 2
    assert cfg.optim.lr == 5e-5 and cfg.loss.kl_coef == 0.0 and cfg.env.tools == ["write_range"]


@pytest.mark.parametrize("name", PRESETS)
def test_presets_open_with_a_how_to_run_comment_and_round_trip(name, tmp_path):
    text = (CONFIGS / name).read_text()
    assert text.startswith("#") and f"spreadrl grpo --config configs/{name}" in text
    cfg = load_config(GRPOConfig, CONFIGS / name, ["optim.lr=2e-6"])
    assert cfg.optim.lr == 2e-6
    path = tmp_path / "resolved.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(GRPOConfig, path) == cfg


def test_sampling_mode_off_survives_yaml_bools(tmp_path):
    # YAML 1.1 reads a bare `off` as false; the loader maps it back to the choice
    assert load_config(GRPOConfig, None, ["sampling.mode=off"]).sampling.mode == "off"
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  mode: off\n")
    cfg = load_config(GRPOConfig, path)
    path.write_text(dump_config(cfg))
    assert load_config(GRPOConfig, path).sampling.mode == "off"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("loss.clip_high=1.5", r"loss.clip_high must be in \(0, 1\), got 1.5"),
        ("loss.clip_low=0", r"loss.clip_low must be in \(0, 1\)"),
        ("loss.dual_clip_c=0.5", r"loss.dual_clip_c must be above 1"),
        ("rollout.group_size=1", "rollout.group_size must be at least 2"),
        ("optim.lr=0", "optim.lr must be positive"),
        ("optim.betas=[0.9, 1.5]", r"optim.betas must both be in \[0, 1\)"),
        ("reward.outcome=false", "turn on reward.outcome or reward.tool_call_reward"),
        (
            "rollout.backend=tgi",
            r"rollout.backend: 'tgi' is not allowed; choose one of 'hf', 'vllm', 'openai'",
        ),
        ("loss.kl_estimator=k2", r"loss.kl_estimator.*'k1', 'k3'"),
        ("loss.aggregation=sum", r"'token-mean', 'seq-mean-token-mean'"),
        ("optim.betas=[0.9]", r"optim.betas: expected 2 items, got 1"),
        ("loss.clip_hgh=0.3", r"unknown key 'loss.clip_hgh'; did you mean 'clip_high'\?"),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(GRPOConfig, None, [override])


def test_overlong_buffer_must_fit_the_response_budget():
    ok = load_config(GRPOConfig, None, ["reward.overlong=true", "rollout.max_response_tokens=4000"])
    assert ok.reward.overlong_buffer == 3000
    with pytest.raises(ConfigError, match=r"reward.overlong_buffer \(3000\) must be below"):
        load_config(GRPOConfig, None, ["reward.overlong=true", "rollout.max_response_tokens=2000"])


def test_sft_defaults_and_override():
    cfg = load_config(SFTConfig, None, ["steps=5", "data.path=x.jsonl", "model.lora.enabled=true"])
    assert cfg.steps == 5 and cfg.data.path == "x.jsonl" and cfg.model.lora.enabled
    assert cfg.max_length == 32768


@pytest.mark.parametrize("cls", [GRPOConfig, SFTConfig])
def test_every_key_has_help_text(cls):
    rows = describe_config(cls)
    assert len(rows) > 10
    assert [path for path, _, _, help_text in rows if not help_text.strip()] == []


def test_docs_key_tables_match_the_dataclasses():
    docs = (CONFIGS.parent / "docs" / "config.md").read_text()
    for cls in (GRPOConfig, SFTConfig):
        assert config_table(cls) in docs, "regenerate docs/config.md: spreadrl config keys"
