"""The ``rollout`` section of a recipe: sampling, budgets and the engine, defined once.

Training (``spreadrl grpo``), evaluation (``spreadrl eval --config``), serving
and the demo hand this one section to the agent loop
(:func:`spreadrl.rollout.runner.run_episodes`), which reads it as it is, so
their defaults cannot drift apart. A generation request's
:class:`~spreadrl.rollout.types.SamplingParams` is built from it by
:func:`~spreadrl.rollout.types.sampling_params`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args, get_type_hints

from spreadrl.config import Section, option
from spreadrl.errors import ConfigError
from spreadrl.rollout.engines import ENGINES

DEFAULT_SYSTEM_PROMPT = (
    "You are a spreadsheet agent. A workbook is open for you to edit with the tools below. "
    "Call one tool at a time. When the task is done, reply with a short final answer "
    "and no tool call."
)


@dataclass(frozen=True)
class RolloutConfig(Section):
    backend: str = option(
        "hf",
        "Rollout engine, by name (spreadrl.rollout.engines.ENGINES): hf (transformers, the "
        "trainer's own model) or vllm (a colocated engine of its own).",
    )
    hf_static_cache: bool = option(
        False,
        "hf: transformers' static KV cache, with generate compiling the decode step into CUDA "
        "graphs on a GPU (torch.compile reduce-overhead; the first calls compile); off: "
        "spreadrl's shared-prefill cache.",
    )
    vllm_gpu_memory_utilization: float = option(
        0.3, "vllm: share of GPU memory the engine takes (weights + KV cache) beside the trainer."
    )
    weight_sync: Literal["auto", "ipc", "files"] = option(
        "auto",
        "vllm: how the trainer's weights reach the engine: ipc (CUDA IPC handles, colocated "
        "on one GPU), files (safetensors in /dev/shm + in-place reload; any device), "
        "auto: ipc on CUDA, files elsewhere.",
    )
    temperature: float = option(1.0, "Sampling temperature.")
    top_p: float = option(1.0, "Nucleus sampling threshold.")
    top_k: int = option(0, "Top-k sampling (0 = off).")
    max_turns: int = option(16, "Max assistant turns per episode.")
    max_new_tokens_per_turn: int = option(1024, "Max tokens sampled in one assistant turn.")
    max_response_tokens: int = option(8192, "Max tokens after the prompt, tool responses included.")
    max_tool_response_tokens: int = option(2048, "Tool responses are cut to this many tokens.")
    max_tool_response_chars: int = option(
        0,
        "Tool responses longer than this many characters keep their first and last halves "
        "around a marker, before the token cut (0 = off; Spreadsheet-RL: 10240).",
    )
    max_calls_per_turn: int = option(
        1, "Tool calls read from one assistant turn (the parallel cap; Spreadsheet-RL: 20)."
    )
    extra_calls: Literal["reject", "skip"] = option(
        "reject",
        "A turn with more calls than max_calls_per_turn: reject (one error, none run) or skip "
        "(the first ones run, each extra one is answered 'not executed'; Spreadsheet-RL).",
    )
    max_serial_calls: int = option(
        0,
        "When a turn calls a tool that edits the workbook, only this many of its calls run, "
        "in order; the rest are answered 'not executed' (0 = no cap; Spreadsheet-RL: 4).",
    )
    calls_in_reasoning: Literal["ignore", "error"] = option(
        "ignore",
        "A <tool_call> inside the reasoning: ignore it, or answer it as a parse error "
        "(Spreadsheet-RL).",
    )
    tool_call_format: Literal["hermes", "qwen3_coder"] = option(
        "hermes",
        "How the model writes tool calls: hermes (JSON in <tool_call>) or qwen3_coder "
        "(<function=...><parameter=...> in <tool_call>).",
    )
    episode_wall_time_s: float = option(
        900.0,
        "Wall-clock budget of one episode, from its first scheduled turn (the only wall-clock budget).",
    )
    system_prompt: str = option(
        DEFAULT_SYSTEM_PROMPT, "System prompt (an environment may bring its own: the code env)."
    )
    prompt_source: Literal["recipe", "task"] = option(
        "recipe",
        "Opening messages: recipe (system_prompt, then the instruction and workbook overview) "
        "or task (the chat a task brings, metadata.prompt, sent verbatim: Spreadsheet-RL's "
        "released rows; a task without one falls back to recipe).",
    )
    group_size: int = option(8, "Rollouts per prompt (G).")
    prompts_per_step: int = option(4, "Prompts per GRPO step.")
    concurrency: int = option(0, "Environment worker processes (0 = run tools in-process).")
    scheduler: Literal["auto", "turn", "episode"] = option(
        "auto",
        "turn: one batched generation per round; episode: each episode's next turn starts "
        "when its tools return (vllm); auto: episode where the backend supports it.",
    )
    max_staleness: int = option(
        0,
        "Asynchronous GRPO: rollouts of the next steps are sampled while the trainer updates, "
        "by weights at most this many steps older than the ones trained (0 = synchronous: "
        "generate, update, sync; docs/async.md).",
    )
    harness: str = option(
        "",
        "Train an agent of your own: each episode runs this program (path/agent.py:function, "
        "module:function or a command line) in the sandbox against a capturing "
        "OpenAI-compatible endpoint, and the gym scores the workbook it leaves "
        "(docs/harness.md); empty: the built-in agent loop.",
    )
    harness_fork: bool = option(
        True,
        "A harness function (file or module) is imported once per rollout in one sandbox "
        "and each episode runs in a process forked from it (no import per episode; the "
        "episodes share that sandbox's uid, kept to their own folders by an audit hook). "
        "false: a fresh sandboxed interpreter per episode (its own uid; under bubblewrap "
        "only its folder writable). A command line always gets its own.",
    )
    harness_mcp: bool = option(
        False,
        "Offer the harness the gym's tools (env.tools, as the built-in loop offers them) over "
        "MCP on its episode's workbook: a function gets the keyword mcp_url, a command "
        "SPREADRL_MCP_URL (served by the endpoint, beside base_url); the calls served are the "
        "episode's tool calls and errors. Needs the openenv extra (docs/harness.md).",
    )
    traces: str = option(
        "",
        "Train on traces captured elsewhere: a folder of OpenEnv TrainingTraces (one "
        "subfolder per group of rollout.group_size episodes, rewards in the traces or a "
        "rewards.json beside them); nothing is generated (docs/harness.md).",
    )

    def validate(self) -> None:
        # YAML is checked against the Literal types on loading; a section built in code
        # (serve, tests) is checked here, where the loop would otherwise meet the typo
        for name in _CHOICES:
            _check_choice(self, name)
        if self.backend not in ENGINES:  # which engine can train is the engine's to say
            raise ConfigError(
                f"rollout.backend: {self.backend!r} is not allowed; choose one of "
                + ", ".join(map(repr, ENGINES))
            )
        if self.group_size < 2:
            raise ConfigError(
                f"rollout.group_size must be at least 2 for GRPO, got {self.group_size}"
            )
        if self.temperature < 0:
            raise ConfigError(
                f"rollout.temperature must be 0 (greedy) or positive, got {self.temperature}"
            )
        if not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ConfigError(
                f"rollout.top_p must be in (0, 1] and rollout.top_k 0 (off) or positive, got "
                f"{self.top_p}, {self.top_k}"
            )
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ConfigError(
                "rollout.vllm_gpu_memory_utilization must be in (0, 1], "
                f"got {self.vllm_gpu_memory_utilization}"
            )
        for name in (
            "max_turns",
            "max_new_tokens_per_turn",
            "max_response_tokens",
            "max_tool_response_tokens",
            "max_calls_per_turn",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"rollout.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("max_tool_response_chars", "max_serial_calls", "max_staleness"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"rollout.{name} must be 0 (off) or positive, got {getattr(self, name)}"
                )
        if self.episode_wall_time_s <= 0:
            raise ConfigError(
                f"rollout.episode_wall_time_s must be positive, got {self.episode_wall_time_s}"
            )
        if self.harness_mcp and not self.harness:
            raise ConfigError(
                "rollout.harness_mcp offers the gym's tools to a harness: set rollout.harness too"
            )
        if self.traces and self.harness:
            raise ConfigError(
                "rollout.traces and rollout.harness both name the episodes' source; set one"
            )


_CHOICES = (
    "weight_sync",
    "extra_calls",
    "calls_in_reasoning",
    "tool_call_format",
    "prompt_source",
    "scheduler",
)


def _check_choice(cfg: RolloutConfig, name: str) -> None:
    """``rollout.NAME`` is one of the choices its ``Literal`` type allows."""
    choices = get_args(get_type_hints(RolloutConfig)[name])
    value = getattr(cfg, name)
    if value not in choices:
        raise ConfigError(
            f"unknown rollout.{name} {value!r}; choose one of {', '.join(map(str, choices))}"
        )
