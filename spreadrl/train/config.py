"""The recipes' configuration: one dataclass per concern, every field documented.

Presets in ``configs/`` set these from YAML; any key can be overridden on the
command line (``spreadrl grpo --config configs/tiny-cpu.yaml optim.lr=2e-6``).
``spreadrl config keys`` prints every key with its type, default and help
(the tables in docs/config.md); ``spreadrl config show RECIPE [overrides]``
prints a recipe's resolved config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from spreadrl.config import (
    Section,
    YAMLValue,
    config_table,
    option,
    read_recipe,
    section,
    unknown_keys,
)
from spreadrl.env.config import EnvConfig
from spreadrl.errors import ConfigError
from spreadrl.eval.config import EvalConfig
from spreadrl.rollout.config import RolloutConfig


@dataclass(frozen=True)
class LoraSettings(Section):
    enabled: bool = option(False, "Train LoRA adapters instead of all weights.")
    r: int = option(16, "LoRA rank.")
    alpha: int = option(32, "LoRA alpha (scale = alpha / r).")
    dropout: float = option(0.0, "LoRA dropout.")
    target_modules: list[str] = option(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "Module names that get adapters.",
    )


@dataclass(frozen=True)
class ModelConfig(Section):
    name_or_path: str = option("runs/tiny", "Local model folder or Hugging Face model id.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = option(
        "auto",
        "Compute dtype of training; trained weights and AdamW state stay float32 "
        "(bfloat16 = bf16 forward/backward over fp32 master weights; auto = bfloat16 on GPU, "
        "float32 on CPU; float16 is refused).",
    )
    lora: LoraSettings = section(LoraSettings, "LoRA settings.")
    gradient_checkpointing: bool = option(
        False, "Recompute activations in backward to save memory."
    )
    cpu_offload: bool = option(
        False,
        "FSDP2 CPU offload of the trained model and its KL reference: parameters, gradients "
        "and AdamW state stay in CPU memory, each layer visits the GPU for its forward and "
        "backward, and the optimizer steps on the CPU (needs torchrun; GPU memory for time).",
    )
    checkpoint_every: int = option(
        1,
        "With gradient_checkpointing: recompute every k-th decoder layer only, the others keep "
        "their activations (selective; 1 = every layer; spreadrl plan says what fits).",
    )
    fused_logprob_head: bool = option(
        False,
        "Output layer + sampled-token log-prob with a hand-written chunked backward "
        "(FusedHeadLogprob, spreadrl/train/logprobs.py) instead of autograd over checkpointed "
        "chunks.",
    )
    compile_layers: bool = option(
        False, "torch.compile each decoder layer (one shared graph; the first step compiles)."
    )
    packed_sequences: bool = option(
        False,
        "Pack each micro-batch's rows into one sequence with no padding (position resets; a "
        "varlen flash kernel where installed, a block-diagonal mask otherwise); not with "
        "optim.shared_prefix's prefix rows.",
    )

    def validate(self) -> None:
        if self.checkpoint_every < 1:
            raise ConfigError(
                f"model.checkpoint_every must be at least 1, got {self.checkpoint_every}"
            )


@dataclass(frozen=True)
class DataConfig(Section):
    train_tasks: str = option(
        "builtin:train",
        "Task folder (native layout), builtin:<split>, or openenv:<n>: n episodes of an "
        "env.kind openenv server that brings its own tasks (episode i reset with seed i).",
    )
    max_prompt_tokens: int = option(
        0, "Prompt budget: tasks whose first prompt is longer are skipped (0 = no limit)."
    )


@dataclass(frozen=True)
class RewardConfig(Section):
    outcome: bool = option(
        True,
        "Outcome reward: the environment's own (the checker's 1 iff every answer cell "
        "matches; a foreign OpenEnv server's as it grades); tool_call_reward replaces it "
        "when on.",
    )
    tool_call_reward: bool = option(
        False, "GRPO-TCR: wrong answers get -1 + per_call x calls, capped."
    )
    tcr_correct: float = option(1.0, "TCR reward of a correct answer.")
    tcr_wrong: float = option(-1.0, "TCR base reward of a wrong answer.")
    tcr_per_call: float = option(0.1, "TCR bonus per tool call on a wrong answer.")
    tcr_cap: float = option(-0.6, "TCR ceiling for a wrong answer.")
    overlong: bool = option(False, "Overlong shaping (penalise responses near the length limit).")
    overlong_max_length: int = option(
        0, "Length limit for shaping (0 = rollout.max_response_tokens)."
    )
    overlong_buffer: int = option(3000, "Tokens before the limit where the penalty starts.")
    overlong_factor: float = option(1.0, "Penalty at the limit.")

    def overlong_limit(self, max_response_tokens: int) -> int:
        """The length overlong shaping measures against (the one place it is derived):
        ``overlong_max_length``, or the rollout's response budget when that is 0."""
        return self.overlong_max_length or max_response_tokens

    def validate(self) -> None:
        if not (self.outcome or self.tool_call_reward):
            raise ConfigError(
                "reward: turn on reward.outcome or reward.tool_call_reward (no reward otherwise)"
            )
        if self.overlong and self.overlong_buffer <= 0:
            raise ConfigError(
                f"reward.overlong_buffer must be positive when reward.overlong is on, "
                f"got {self.overlong_buffer}"
            )
        if self.overlong and 0 < self.overlong_max_length <= self.overlong_buffer:
            raise ConfigError(
                f"reward.overlong_max_length ({self.overlong_max_length}) must exceed "
                f"reward.overlong_buffer ({self.overlong_buffer})"
            )


@dataclass(frozen=True)
class LossConfig(Section):
    clip_low: float = option(0.2, "PPO clip below 1 (ratio >= 1 - clip_low).")
    clip_high: float = option(0.2, "PPO clip above 1; > clip_low is clip-higher.")
    dual_clip_c: float | None = option(
        None, "Dual clip bound for negative advantages (null = off)."
    )
    aggregation: Literal["token-mean", "seq-mean-token-mean"] = option(
        "token-mean", "Loss aggregation."
    )
    kl_coef: float = option(0.0, "KL coefficient against the frozen reference (0 = off).")
    kl_estimator: Literal["k1", "k3"] = option("k3", "KL estimator; k3 is the low-variance one.")
    kl_clamp: float = option(10.0, "Clamp of the log-ratio inside the KL estimate.")
    tis: bool = option(False, "Truncated importance sampling against rollout log-probs.")
    tis_cap: float = option(2.0, "Cap of the TIS weights.")
    entropy_coef: float = option(0.0, "Entropy bonus coefficient.")

    def validate(self) -> None:
        for name in ("clip_low", "clip_high"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
                raise ConfigError(f"loss.{name} must be in (0, 1), got {value}")
        if self.dual_clip_c is not None and self.dual_clip_c <= 1.0:
            raise ConfigError(
                f"loss.dual_clip_c must be above 1 (e.g. 3.0) or null for off, got {self.dual_clip_c}"
            )
        if self.kl_clamp <= 0 or self.tis_cap <= 0:
            raise ConfigError(
                f"loss.kl_clamp and loss.tis_cap must be positive, got {self.kl_clamp}, {self.tis_cap}"
            )


@dataclass(frozen=True)
class OptimConfig(Section):
    """AdamW and its learning-rate schedule: what SFT and GRPO optimise alike."""

    lr: float = option(1e-6, "AdamW learning rate.")
    weight_decay: float = option(0.01, "AdamW weight decay.")
    betas: tuple[float, float] = option((0.9, 0.999), "AdamW betas.")
    grad_clip: float = option(1.0, "Max gradient norm.")
    fused_adamw: bool = option(
        False, "AdamW's fused kernel (one launch for every parameter; CUDA and CPU)."
    )
    warmup_steps: int = option(0, "Linear warmup steps.")
    schedule: Literal["constant", "linear", "cosine"] = option(
        "constant", "LR schedule after warmup."
    )

    def validate(self) -> None:
        if self.lr <= 0:
            raise ConfigError(f"optim.lr must be positive, got {self.lr}")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"optim.betas must both be in [0, 1), got {list(self.betas)}")


@dataclass(frozen=True)
class GRPOOptimConfig(OptimConfig):
    """GRPO's ``optim``: AdamW plus how each step's rollouts are batched for the update."""

    micro_batch_tokens: int = option(16384, "Token budget of one micro-batch (dynamic batch size).")
    mini_batch_size: int = option(0, "Sequences per optimizer step (0 = the whole step's batch).")
    ppo_epochs: int = option(1, "Passes over each step's rollouts.")
    shared_prefix: bool = option(
        True,
        "Run the prompt a group's samples share once per micro-batch, its continuations "
        "against its KV cache (same values; off under gradient checkpointing and FSDP).",
    )

    def validate(self) -> None:
        super().validate()
        if self.micro_batch_tokens <= 0 or self.ppo_epochs < 1:
            raise ConfigError(
                "optim.micro_batch_tokens must be positive and optim.ppo_epochs at least 1, "
                f"got {self.micro_batch_tokens} and {self.ppo_epochs}"
            )


@dataclass(frozen=True)
class DynamicSamplingConfig(Section):
    mode: Literal["off", "keep", "drop", "refill"] = option(
        "drop",
        "Groups whose rewards are all equal: off (train on them; 'keep' is the same), "
        "drop them, or refill the batch with new groups.",
    )
    max_refill_rounds: int = option(2, "Extra rollout rounds when refilling.")
    max_crashed_fraction: float = option(
        0.05,
        "Stop the run when more than this fraction of a step's episodes crashed (a tool, "
        "worker, environment or engine failed); groups with a crash are never trained on.",
    )
    max_untrained_steps: int = option(
        3, "Stop the run after this many steps in a row that kept no group (0 = never stop)."
    )

    def validate(self) -> None:
        if not 0.0 <= self.max_crashed_fraction <= 1.0 or self.max_untrained_steps < 0:
            raise ConfigError(
                "sampling.max_crashed_fraction must be in [0, 1] and "
                "sampling.max_untrained_steps >= 0, got "
                f"{self.max_crashed_fraction}, {self.max_untrained_steps}"
            )


@dataclass(frozen=True)
class CheckpointConfig(Section):
    dir: str = option("", "Checkpoint folder (empty = OUTPUT_DIR/checkpoints).")
    every_steps: int = option(
        0, "Save every N steps (0 = only on Ctrl-C / SIGTERM and at the end)."
    )
    keep: int = option(2, "Checkpoints kept.")

    def root(self, output_dir: str) -> Path:
        """Where the run keeps its checkpoints: ``dir``, or OUTPUT_DIR/checkpoints."""
        return Path(self.dir) if self.dir else Path(output_dir) / "checkpoints"


@dataclass(frozen=True)
class LoggingConfig(Section):
    backends: list[Literal["jsonl", "tensorboard", "wandb", "trackio"]] = option(
        ["jsonl"],
        "Where metrics go; metrics.jsonl is always written. tensorboard, wandb and trackio "
        "need the extra of the same name (WANDB_MODE=offline keeps wandb local).",
    )
    project: str = option("spreadrl", "Project name for wandb and trackio.")
    run_name: str = option("", "Run name for wandb and trackio (empty = the run folder's name).")
    every_steps: int = option(1, "Print a line every N steps.")
    trajectories_per_step: int = option(
        4, "GRPO: rollouts per step saved to trajectories.jsonl for spreadrl view (0 = none)."
    )
    harness_traces: bool = option(
        False,
        "GRPO with rollout.harness: write every step's episodes as OpenEnv TrainingTraces "
        "to traces/step-NNNNNN/ (a group folder each, rewards.json beside them: the layout "
        "rollout.traces reads; docs/harness.md).",
    )


@dataclass(frozen=True)
class GRPOConfig(Section):
    command: ClassVar[str] = "grpo"  # the command that runs it; a run folder's record names it

    model: ModelConfig = section(ModelConfig, "Policy model.")
    data: DataConfig = section(DataConfig, "Task sets.")
    rollout: RolloutConfig = section(RolloutConfig, "Rollouts and sampling.")
    env: EnvConfig = section(EnvConfig, "Environment.")
    reward: RewardConfig = section(RewardConfig, "Reward shaping.")
    loss: LossConfig = section(LossConfig, "Policy loss.")
    optim: GRPOOptimConfig = section(GRPOOptimConfig, "Optimizer and batching.")
    sampling: DynamicSamplingConfig = section(DynamicSamplingConfig, "Dynamic sampling.")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "Checkpoints.")
    logging: LoggingConfig = section(LoggingConfig, "Logging.")
    eval: EvalConfig = section(EvalConfig, "Held-out evaluation inside the loop.")
    steps: int = option(60, "GRPO steps.")
    seed: int = option(0, "Random seed.")
    output_dir: str = option("runs/grpo", "Run folder: config, metrics, checkpoints, final model.")
    device: str = option("auto", "cpu, cuda, or auto.")

    def summary(self) -> dict[str, str]:
        """What a run folder's record shows of the run: its model and tasks."""
        return {"model": self.model.name_or_path, "tasks": self.data.train_tasks}

    def validate(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"steps must be at least 1, got {self.steps}")
        if self.logging.harness_traces and not self.rollout.harness:
            raise ConfigError(
                "logging.harness_traces writes the episodes a harness plays: set "
                "rollout.harness too (or logging.harness_traces=false)"
            )
        length = self.reward.overlong_limit(self.rollout.max_response_tokens)
        if self.reward.overlong and length <= self.reward.overlong_buffer:
            raise ConfigError(
                f"reward.overlong_buffer ({self.reward.overlong_buffer}) must be below the "
                f"shaping length ({length}: reward.overlong_max_length or "
                "rollout.max_response_tokens)"
            )


@dataclass(frozen=True)
class SFTDataConfig(Section):
    path: str = option("runs/sft.jsonl", "JSONL of conversations ({messages, tools}).")


@dataclass(frozen=True)
class SFTConfig(Section):
    command: ClassVar[str] = "sft"  # the command that runs it; a run folder's record names it

    model: ModelConfig = section(ModelConfig, "Model to fine-tune.")
    data: SFTDataConfig = section(SFTDataConfig, "SFT data.")
    max_length: int = option(32768, "Conversations longer than this are dropped (never cut).")
    steps: int = option(0, "Optimizer steps (0 = derive from epochs).")
    epochs: int = option(1, "Passes over the data when steps is 0.")
    batch_size: int = option(32, "Conversations per optimizer step.")
    micro_batch_tokens: int = option(
        16384, "Token budget of one micro-batch (gradient accumulation)."
    )
    shared_prefix: bool = option(
        True,
        "Run the prefix a micro-batch's conversations share (the system prompt) once per "
        "micro-batch (same values; off under gradient checkpointing and FSDP).",
    )
    optim: OptimConfig = section(OptimConfig, "Optimizer.")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "Checkpoints.")
    logging: LoggingConfig = section(LoggingConfig, "Logging.")
    seed: int = option(0, "Random seed.")
    output_dir: str = option("runs/sft", "Run folder.")
    device: str = option("auto", "cpu, cuda, or auto.")

    def summary(self) -> dict[str, str]:
        """What a run folder's record shows of the run: its model and data."""
        return {"model": self.model.name_or_path, "data": self.data.path}

    def validate(self) -> None:
        if self.steps < 0 or self.epochs < 1 or self.batch_size < 1 or self.max_length < 1:
            raise ConfigError(
                "steps must be 0 (derive from epochs) or positive, and epochs, batch_size and "
                f"max_length at least 1; got steps {self.steps}, epochs {self.epochs}, "
                f"batch_size {self.batch_size}, max_length {self.max_length}"
            )
        if self.logging.harness_traces:
            raise ConfigError(
                "logging.harness_traces is GRPO's (the episodes of rollout.harness); "
                "an SFT run plays none: set logging.harness_traces=false"
            )

    def total_steps(self, dataset_size: int) -> int:
        """``steps`` when set, else enough steps for ``epochs`` passes over the data."""
        if self.steps:
            return int(self.steps)
        return max(1, -(-dataset_size * int(self.epochs) // self.batch_size))


RECIPES: dict[str, type] = {"grpo": GRPOConfig, "sft": SFTConfig}
"""The config class of each recipe command, by command name."""


def recipe_kinds(data: dict[str, YAMLValue]) -> list[str]:
    """The commands (``grpo``, ``sft``) whose config has a field for every key of ``data``."""
    return [name for name, cls in RECIPES.items() if not unknown_keys(cls, data)]


def check_recipe_kind(command: str, path: str | Path) -> None:
    """Refuse, in one line, a recipe written for another command (``sft --config tiny-cpu``).

    A recipe knows its kind by its keys: one that only another command's config
    takes is named as that command's, with the command to run it.
    """
    data = read_recipe(path)
    unknown = unknown_keys(RECIPES[command], data)
    others = [k for k in recipe_kinds(data) if k != command]
    if unknown and others:
        raise ConfigError(
            f"{path} is a `spreadrl {others[0]}` recipe, not a `spreadrl {command}` one (its keys "
            f"{', '.join(map(repr, unknown[:3]))} are {others[0]}'s); run "
            f"`spreadrl {others[0]} --config {path}`"
        )


def config_tables() -> str:
    """Markdown tables of every recipe's keys: path, type, default, help (docs/config.md)."""
    out = []
    for command, cls in RECIPES.items():
        out.append(f"## `spreadrl {command}` ({cls.__name__})\n\n{config_table(cls)}\n")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    sys.stdout.write(config_tables())
