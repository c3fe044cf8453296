"""One episode of the agent loop, step by step: the records and the moves both schedulers share.

:mod:`spreadrl.rollout.runner` (turn scheduler) and
:mod:`spreadrl.rollout.streaming` (episode scheduler) drive many episodes at
once; what happens to one episode lives here: start it (render the prompt),
record a sampled turn and start its tool calls, append the observations as
tokens with loss mask 0, apply the budgets, and finish it (score). Keeping
these apart from both drivers keeps imports one way (runner -> streaming ->
episode) instead of a cycle.

Every move reads the recipe's ``rollout`` section (:class:`RolloutConfig`) as it
is, the run's :class:`~spreadrl.rollout.types.RunValues` (seed, prompt and context
limits, where workbooks are kept) and, for a token-level policy, the
:class:`~spreadrl.rollout.chat.EpisodeChat` its caller derived once (``None``: a
message-level policy, read in the fallback format).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from spreadrl.data.jsontypes import scalar_or_str
from spreadrl.data.task import Task
from spreadrl.env.types import EpisodeResult, Observation, StepResult, ToolCall
from spreadrl.rollout.chat import FALLBACK, EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.parsing import ParsedTurn, parse_assistant_turn
from spreadrl.rollout.types import EndReason, PolicyTurn, RunValues, Trajectory

log = logging.getLogger(__name__)

# end reasons the environment gives at finish that the trajectory keeps as its own
ENV_ENDED = frozenset({EndReason.WORKBOOK_REFUSED, EndReason.ENV_LIMIT})


class EnvPoolLike(Protocol):
    """What the loop needs from spreadrl.env.pool's pools."""

    def reset(self, episode_id: str, task: Task, case: int) -> Future[Observation]: ...

    def step(self, episode_id: str, call: ToolCall) -> Future[StepResult]: ...

    def finish(
        self, episode_id: str, *, final_answer: str | None = None, output_path: str | None = None
    ) -> Future[EpisodeResult]: ...


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: a task case and which sample of it this is."""

    task: Task
    case: int = 1
    sample: int = 0

    @property
    def episode_id(self) -> str:
        return f"{self.task.id}/{self.case}/{self.sample}"


@dataclass
class EpisodeState:
    """The loop's running view of one episode."""

    job: EpisodeJob
    traj: Trajectory
    tool_names: list[str]
    tools: list[dict[str, Any]]
    # the wall clock of ``episode_wall_time_s``: set when the first turn is scheduled
    # (start_clock), not at reset, so an episode is not timed while it waits its turn
    started: float | None = None
    turns_taken: int = 0
    done: bool = False
    # tools that only read (the environment says which): a turn of only these is not
    # held to the serial cap
    parallel_safe: frozenset[str] = frozenset()

    def start_clock(self) -> None:
        """Start the episode's wall clock, once: when its first turn is scheduled."""
        if self.started is None:
            self.started = time.monotonic()

    def elapsed_s(self) -> float:
        """Seconds since the first turn was scheduled (0 before)."""
        return 0.0 if self.started is None else time.monotonic() - self.started

    @property
    def task(self) -> Task:
        return self.job.task

    @property
    def case(self) -> int:
        return self.job.case

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.traj.messages

    @property
    def context_ids(self) -> list[int]:
        return self.traj.prompt_ids + self.traj.response_ids

    def end(self, reason: EndReason) -> None:
        self.done = True
        self.traj.stop_reason = reason


def opening_messages(task: Task, obs: Observation, cfg: RolloutConfig) -> list[dict]:
    """The episode's first messages: the task's own chat, or the recipe's prompt.

    With ``prompt_source="task"`` a task that brings a chat (``metadata.prompt``,
    e.g. a Spreadsheet-RL parquet row) opens the episode with it verbatim, so a
    checkpoint trained on those rows sees them unchanged; otherwise the system
    prompt (the environment's own, else the recipe's), then the instruction.
    """
    given = task.metadata.get("prompt") if cfg.prompt_source == "task" else None
    if given:
        return [dict(message) for message in given]
    system = obs.info.get("system_prompt") or cfg.system_prompt
    return [{"role": "system", "content": system}, {"role": "user", "content": user_message(obs)}]


def user_message(obs: Observation) -> str:
    """The first user turn: the instruction, then the workbook overview if any."""
    if obs.workbook_overview:
        return f"{obs.instruction}\n\n{obs.workbook_overview}"
    return obs.instruction


def take_turn(
    state: EpisodeState,
    turn: PolicyTurn,
    pool: EnvPoolLike,
    cfg: RolloutConfig,
    chat: EpisodeChat | None,
) -> list[Future[StepResult] | str]:
    """Record a sampled turn and start its tool calls; the episode ends on a plain answer.

    ``chat`` is the token-level policy's tokenizer and chat format (None for a
    message-level policy: its text is read in :data:`~spreadrl.rollout.chat.FALLBACK`'s
    format). Returns what the turn's observations will come from, one per call in
    order: tool futures, error strings for calls that could not be parsed, and
    "not run" strings for calls past the serial or parallel cap."""
    _record_turn(state, turn, chat)
    parsed = parse_assistant_turn(
        turn.text,
        state.tool_names,
        max_calls=cfg.max_calls_per_turn,
        fmt=chat.fmt if chat is not None else FALLBACK,
        call_format=cfg.tool_call_format,
        schemas=state.tools,
        calls_in_reasoning=cfg.calls_in_reasoning,
        extra_calls=cfg.extra_calls,
    )
    record_parsed_turn(state.traj.metadata, len(state.traj.messages) - 1, parsed)
    if parsed.errors:
        state.traj.parse_errors += len(parsed.errors)
        return [f"Error: {e}" for e in parsed.errors]
    if parsed.tool_calls:
        run, held = parsed.tool_calls, []
        cap = cfg.max_serial_calls
        if cap and any(call.name not in state.parallel_safe for call in run):
            run, held = run[:cap], run[cap:]
        state.traj.tool_calls += len(run)
        items: list[Future[StepResult] | str] = [
            pool.step(state.job.episode_id, call) for call in run
        ]
        items += [
            f"Error: not run: a turn that edits the workbook runs at most {cap} calls "
            "(max_serial_calls); send this call again in a later turn"
        ] * len(held)
        items += [
            f"Error: not run: at most {cfg.max_calls_per_turn} calls run per turn "
            "(max_calls_per_turn); send this call again in a later turn"
        ] * parsed.extra_calls
        return items
    state.end(EndReason.ANSWERED if turn.finish_reason == "stop" else EndReason.MAX_RESPONSE_TOKENS)
    return []


def record_parsed_turn(metadata: dict[str, Any], index: int, parsed: ParsedTurn) -> None:
    """Keep how an assistant message was read, for viewers: ``metadata.assistant_turns``.

    Keyed by the message's index (as ``cell_changes`` is): its ``content`` without
    reasoning and calls, its ``reasoning_content``, the well-formed ``tool_calls`` and
    the parse ``errors`` (a turn with errors runs none of its calls). The split used
    the chat format read off the tokenizer's template, which a page cannot know (a thinking template opens the reasoning block in the
    prompt, so the sampled text has no opening marker); the message itself stays as
    the template renders it.
    """
    metadata.setdefault("assistant_turns", {})[str(index)] = {
        "content": parsed.content,
        "reasoning_content": parsed.reasoning,
        "tool_calls": [call.to_json() for call in parsed.tool_calls],
        "errors": list(parsed.errors),
    }


def take_observations(
    state: EpisodeState,
    items: list[Future[StepResult] | str],
    cfg: RolloutConfig,
    run: RunValues,
    chat: EpisodeChat | None,
) -> None:
    """Append a turn's tool results (waiting for them) and apply the episode budgets."""
    observations: list[str] = []
    changes: list[object] = []  # cells each call changed (env info), for run viewers
    for item in items:
        if isinstance(item, str):
            observations.append(item)
            changes.append(None)
            continue
        try:
            result = item.result()
        except Exception as exc:  # a crashed worker fails only this episode
            record_crash(state.traj, exc)
            state.end(EndReason.ERROR)
            return
        if not result.ok:
            state.traj.tool_errors += 1
        observations.append(result.observation)
        changes.append(result.info.get("changed_cells"))
        if result.truncated:
            state.end(EndReason.MAX_TOOL_CALLS)
        if result.terminated:  # the environment ended it (a refused workbook), with its reason
            state.end(EndReason(result.info.get("end_reason", EndReason.ERROR)))
    first = len(state.traj.messages)
    _record_observations(state, observations, cfg, chat)
    for offset, changed in enumerate(changes):
        if changed:  # keyed by the index of the tool message it belongs to
            state.traj.metadata.setdefault("cell_changes", {})[str(first + offset)] = changed
    check_budgets(state, cfg, run)


def episode_room(state: EpisodeState, cfg: RolloutConfig, run: RunValues) -> int:
    """Tokens left in this episode's budget; a longer turn is clipped to it.

    The response budget, and never past the model's context length when the
    run knows it (``max_context_tokens``): a turn that would run past the
    model's positions is cut before it is asked for."""
    room = cfg.max_response_tokens - len(state.traj.response_ids)
    if run.max_context_tokens:
        room = min(room, run.max_context_tokens - len(state.context_ids))
    return room


def turn_budget(state: EpisodeState, cfg: RolloutConfig, run: RunValues) -> int:
    """Tokens to ask the policy for in this episode's next turn."""
    return max(1, min(cfg.max_new_tokens_per_turn, episode_room(state, cfg, run)))


def clip_turn(turn: PolicyTurn, room: int) -> PolicyTurn:
    """Cut a turn that overran the episode's token budget (batched calls share one budget)."""
    if turn.token_ids is not None and len(turn.token_ids) > room:
        turn.token_ids = turn.token_ids[:room]
        turn.logprobs = (turn.logprobs or [])[:room]
        turn.finish_reason = "length"
    return turn


def start_episodes(
    pool: EnvPoolLike,
    jobs: Sequence[EpisodeJob],
    cfg: RolloutConfig,
    run: RunValues,
    chat: EpisodeChat | None,
) -> list[EpisodeState]:
    """Reset an environment for each job and render its opening prompt (ids with ``chat``).

    A prompt over the run's prompt budget, or one that leaves the model no room,
    ends its episode at once (untrained)."""
    futures = [pool.reset(job.episode_id, job.task, job.case) for job in jobs]
    states = []
    for job, future in zip(jobs, futures, strict=True):
        traj = Trajectory(
            task_id=job.task.id,
            case=job.case,
            sample=job.sample,
            messages=[],
            metadata={
                "family": job.task.family,
                "difficulty": job.task.difficulty,
                "instruction_type": job.task.instruction_type,
            },
        )
        try:
            obs = future.result()
        except Exception as exc:
            record_crash(traj, exc)
            state = EpisodeState(job, traj, [], [])
            state.end(EndReason.ERROR)
            states.append(state)
            continue
        traj.messages.extend(opening_messages(job.task, obs, cfg))
        names = [t["function"]["name"] for t in obs.tool_schemas]
        traj.tools = list(obs.tool_schemas)
        if chat is not None:
            traj.prompt_ids = chat.prompt_ids(traj.messages, obs.tool_schemas)
        state = EpisodeState(job, traj, names, obs.tool_schemas)
        state.parallel_safe = frozenset(obs.info.get("parallel_safe_tools") or ())
        too_long = run.max_prompt_tokens and len(traj.prompt_ids) > run.max_prompt_tokens
        no_room = run.max_context_tokens and len(traj.prompt_ids) >= run.max_context_tokens
        if too_long or no_room:  # the numbers, so an eval in which none started can say why
            traj.metadata["prompt_tokens"] = len(traj.prompt_ids)
            traj.metadata["prompt_limit"] = (
                {"data.max_prompt_tokens": run.max_prompt_tokens}
                if too_long
                else {"the model's context": run.max_context_tokens}
            )
            state.end(EndReason.PROMPT_TOO_LONG)
        states.append(state)
    return states


def _record_turn(state: EpisodeState, turn: PolicyTurn, chat: EpisodeChat | None) -> None:
    fmt = chat.fmt if chat is not None else FALLBACK
    state.turns_taken += 1
    traj = state.traj
    traj.turns += 1
    text = turn.text
    if chat is not None and turn.token_ids is not None:
        if turn.version is not None:  # asynchronous GRPO: which weights sampled these tokens
            traj.response_versions.extend(
                [-1] * (len(traj.response_ids) - len(traj.response_versions))
            )
            traj.response_versions.extend([turn.version] * len(turn.token_ids))
        traj.response_ids.extend(turn.token_ids)
        traj.response_mask.extend([1] * len(turn.token_ids))
        traj.generated_tokens += len(turn.token_ids)
        lps = turn.logprobs or [0.0] * len(turn.token_ids)
        traj.rollout_logprobs.extend(lps)
        if turn.finish_reason != "stop":
            closing = chat.assistant_end_ids()
            traj.response_ids.extend(closing)
            traj.response_mask.extend([0] * len(closing))
            traj.rollout_logprobs.extend([0.0] * len(closing))
        text = fmt.strip_end_markers(
            chat.tokenizer.decode(turn.token_ids, skip_special_tokens=False)
        )
    # reasoning as reasoning_content, so re-rendering with the template gives the sampled text
    traj.messages.append(fmt.assistant_message(text))
    turn.text = text


def _cut_middle(text: str, limit: int) -> str:
    """``text`` cut to its first and last ``limit // 2`` characters around a marker.

    The end of a tool response (a traceback's last line, a table's totals) is
    often what the model needs, so the character cut keeps both ends
    (Spreadsheet-RL's default).
    """
    if not limit or len(text) <= limit:
        return text
    half = limit // 2
    marker = f"\n...[truncated: {len(text) - 2 * half} characters of the tool response cut]...\n"
    return text[:half] + marker + text[len(text) - half :]


def _truncate_observation(text: str, cfg: RolloutConfig, chat: EpisodeChat | None) -> str:
    text = _cut_middle(text, cfg.max_tool_response_chars)
    limit = cfg.max_tool_response_tokens
    marker = "\n...[truncated: tool response over the token budget]"
    if chat is None:
        return text if len(text) <= 4 * limit else text[: 4 * limit] + marker
    ids = chat.tokenizer.encode(text, add_special_tokens=False)
    return text if len(ids) <= limit else chat.tokenizer.decode(ids[:limit]) + marker


def _record_observations(
    state: EpisodeState, observations: list[str], cfg: RolloutConfig, chat: EpisodeChat | None
) -> None:
    observations = [_truncate_observation(o, cfg, chat) for o in observations]
    for obs in observations:
        state.traj.messages.append({"role": "tool", "content": obs})
    if chat is not None:
        ids = chat.tool_response_ids(observations)
        state.traj.response_ids.extend(ids)
        state.traj.response_mask.extend([0] * len(ids))
        state.traj.rollout_logprobs.extend([0.0] * len(ids))


def check_budgets(state: EpisodeState, cfg: RolloutConfig, run: RunValues) -> None:
    """The episode's budgets, all in one place: turns, tokens, context, wall clock.

    (Tool calls are the environment's budget: it answers the call that spends
    them with ``truncated=True``, and :func:`take_observations` ends the episode.)"""
    if state.done:
        return
    if state.turns_taken >= cfg.max_turns:
        state.end(EndReason.MAX_TURNS)
    elif len(state.traj.response_ids) >= cfg.max_response_tokens:
        state.end(EndReason.MAX_RESPONSE_TOKENS)
    elif run.max_context_tokens and len(state.context_ids) >= run.max_context_tokens:
        state.end(EndReason.MAX_CONTEXT_TOKENS)
    elif state.elapsed_s() > cfg.episode_wall_time_s:
        state.end(EndReason.WALL_TIME)


def finish_episode(pool: EnvPoolLike, state: EpisodeState, run: RunValues) -> Future[EpisodeResult]:
    """Score the episode (its final answer), keeping the workbook where the run says."""
    final = next(
        (m["content"] for m in reversed(state.traj.messages) if m["role"] == "assistant"), None
    )
    if run.keep_outputs_dir is None:
        return pool.finish(state.job.episode_id, final_answer=final)
    name = state.task.output_name(state.case)
    out = f"{run.keep_outputs_dir}/{name}"
    if state.job.sample:
        out = f"{run.keep_outputs_dir}/sample{state.job.sample}/{name}"
    return pool.finish(state.job.episode_id, final_answer=final, output_path=out)


def apply_result(state: EpisodeState, future: Future[EpisodeResult]) -> None:
    traj = state.traj
    try:
        result = future.result()
    except Exception as exc:
        record_crash(traj, exc)
        traj.stop_reason = EndReason.ERROR
        traj.env_reward, traj.reward, traj.passed = 0.0, 0.0, False
        return
    # the environment's reward; a recipe may shape ``reward`` later, never ``env_reward``
    traj.env_reward = traj.reward = float(result.reward)
    if result.stop_reason in ENV_ENDED:  # e.g. the grading refused the output workbook
        traj.stop_reason = result.stop_reason
    traj.passed = bool(result.passed)
    traj.mismatches = [
        {
            "sheet": m.sheet,
            "cell": m.cell,
            "expected": scalar_or_str(m.expected),
            "actual": scalar_or_str(m.actual),
            "reason": m.reason,
        }
        for m in result.mismatches[:50]
    ]
    traj.metadata["output_path"] = result.output_path
    traj.timings["wall_s"] = state.elapsed_s()


def record_crash(traj: Trajectory, exc: BaseException) -> None:
    """Keep what failed in the trajectory: ``error`` (one line) and the whole ``traceback``.

    The first failure wins (finishing an episode that already crashed fails too). The
    traceback is the exception's own plus the worker's, which the pool attaches as a
    note (:func:`spreadrl.env.pool._portable_exception`): a bug in a tool is found from
    the trajectory, not taken for the model's mistake."""
    if traj.error is None:
        traj.error = f"{type(exc).__name__}: {exc}"
    if traj.traceback is None:
        traj.traceback = "".join(traceback.format_exception(exc))
