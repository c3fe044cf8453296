"""Harness episodes: a program spreadrl did not write plays each episode against the endpoint.

:class:`HarnessEpisodes` has :func:`~spreadrl.rollout.runner.run_episodes`'s
signature, so GRPO's collector runs it in its place (``rollout.harness``). For each
episode it copies the task's workbook into a private folder, opens a session on the
capturing endpoint (:mod:`spreadrl.rollout.harness.endpoint`), runs the harness in
the code interpreter's sandbox (its own process; ``env.code_memory_mb``, the process
and file-size limits, ``env.sandbox_mode``; files confined to the folder, no network
but the endpoint; wall and CPU time: ``rollout.episode_wall_time_s``, since it plays
a whole episode), and scores the workbook it left with the gym's checker.

A harness that crashes (non-zero exit), hangs (past its time), floods the endpoint,
writes outside its folder or never calls the model ends its episode with
``stop_reason`` error: a crash, dropped with its group and counted against
``sampling.max_crashed_fraction``, never a zero-reward sample.

The trajectory holds the episode's first sample in its token fields; samples after
a prefix break (:mod:`~spreadrl.rollout.harness.capture`) are kept in
``metadata["harness_samples"]`` and train with the same advantage. The reward
shaping that reads a trajectory reads the calls: ``tool_calls`` counts the tool
calls the model wrote (as the endpoint parsed them), so the tool-call reward
applies; the overlong shaping reads the first sample's response length. With
``rollout.harness_mcp`` the gym's tools are served to the harness over MCP
(:mod:`~spreadrl.rollout.harness.mcp`) and ``tool_calls`` and ``tool_errors`` are
the gym's counts of the calls served there, as in the built-in loop (the model's
parsed calls: ``metadata["harness_model_tool_calls"]``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from spreadrl.env.config import EnvConfig
from spreadrl.env.sandbox import SandboxLimits, SandboxResult, run_python
from spreadrl.env.spreadsheet import checker
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.episode import EnvPoolLike, EpisodeJob
from spreadrl.rollout.harness.endpoint import CaptureEndpoint, Session, UnixRelay
from spreadrl.rollout.harness.forkserver import ForkServer, ForkServerError
from spreadrl.rollout.harness.mcp import EpisodeTools, require_fastmcp
from spreadrl.rollout.harness.program import (
    OUTSIDE_EXIT,
    OUTSIDE_MARK,
    HarnessProgram,
    launcher_args,
    launcher_code,
)
from spreadrl.rollout.harness.trace import TRAINING_TRACE, to_training_trace
from spreadrl.rollout.policy import Policy, is_token_level
from spreadrl.rollout.runner import RolloutBatch
from spreadrl.rollout.types import EndReason, RunValues, Trajectory

log = logging.getLogger(__name__)

MAX_PARALLEL = 64
"""Harness processes running at once (each waits on the endpoint most of its time)."""


@dataclass(frozen=True)
class HarnessEpisodes:
    """Run episodes through ``program`` (an episode runner in place of ``run_episodes``)."""

    program: HarnessProgram
    env: EnvConfig
    workdir_root: str | None = None
    model_name: str = "spreadrl-policy"
    # keep each episode's calls as OpenEnv TrainingTrace JSON in metadata["training_trace"]
    keep_traces: bool = False
    # the run's fork server (rollout.harness_fork), started by the first rollout
    _forks: list[ForkServer] = field(default_factory=list, compare=False, repr=False)
    _forks_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @classmethod
    def of(
        cls, spec: str, env: EnvConfig, *, mcp: bool = False, keep_traces: bool = False
    ) -> HarnessEpisodes:
        """The runner of ``rollout.harness`` ``spec``; ``mcp`` (``rollout.harness_mcp``)
        checks here, before any episode, that the gym's tools can be served;
        ``keep_traces``: each episode's TrainingTrace in its metadata."""
        if mcp:
            require_fastmcp()
        return cls(HarnessProgram.parse(spec), env, keep_traces=keep_traces)

    def __call__(
        self,
        policy: Policy,
        pool: EnvPoolLike,
        jobs: Sequence[EpisodeJob],
        cfg: RolloutConfig,
        chat: EpisodeChat | None = None,
        *,
        run: RunValues | None = None,
        on_episode_done: Callable[[Trajectory], None] | None = None,
    ) -> RolloutBatch:
        """Run ``jobs`` (``pool`` is unused: the harness brings its own tools, or gets the
        gym's over MCP from the endpoint with ``cfg.harness_mcp``)."""
        run = run or RunValues()
        if not is_token_level(policy) or chat is None:
            raise ValueError("harness episodes need a token-level policy and its EpisodeChat")
        t0 = time.perf_counter()
        tools = EpisodeTools(self.env) if cfg.harness_mcp else None  # fastmcp: openenv extra
        from spreadrl.rollout.harness.app import build_app  # FastAPI: the serve extra

        endpoint = CaptureEndpoint(policy, chat, cfg, run, model_name=self.model_name)
        endpoint.start(build_app(endpoint, tools))
        workers = max(1, min(MAX_PARALLEL, len(jobs)))
        try:
            forks, broken = self._fork_server(cfg), ""
        except ForkServerError as exc:  # every episode would fail alike: each is an error
            forks, broken = None, str(exc)
        try:
            with ThreadPoolExecutor(workers, thread_name_prefix="harness") as ex:
                trajs = list(
                    ex.map(
                        lambda job: (
                            self._episode(endpoint, job, cfg, forks, run.keep_outputs_dir, tools)
                            if not broken
                            else _crashed(self._trajectory(job), broken, "")
                        ),
                        jobs,
                    )
                )
        finally:
            endpoint.close()
        generate_s = endpoint.generate_s
        for traj in trajs:
            if on_episode_done is not None:
                on_episode_done(traj)
        timings = {
            "generate_s": generate_s,
            "harness_engine_calls": float(endpoint.engine_calls),
            "harness_s": time.perf_counter() - t0,
            "harness_prefix_breaks": float(
                sum(t.metadata.get("harness_prefix_breaks", 0) for t in trajs)
            ),
            "harness_errors": float(sum(t.crashed for t in trajs)),
        }
        return RolloutBatch(trajs, timings)

    def _fork_server(self, cfg: RolloutConfig) -> ForkServer | None:
        """The run's fork server (``rollout.harness_fork``), started by the first rollout
        and kept for the next ones (again if it died); None for a sandbox per episode. A
        harness that fails to import fails here, as each of its episodes would."""
        if not cfg.harness_fork or self.program.kind == "command":
            return None
        with self._forks_lock:
            if self._forks and self._forks[0].alive:
                return self._forks[0]
            for server in self._forks:
                server.close()
            self._forks.clear()
            root = Path(tempfile.mkdtemp(prefix="spreadrl-harness-", dir=self._root()))
            server = ForkServer(
                self.program,
                root,
                self._limits(cfg),
                mode=self.env.sandbox_mode,
                episodes=MAX_PARALLEL,
            )
            self._forks.append(server.start())
            weakref.finalize(self, server.close)  # a runner dropped takes its server along
            return server

    def close(self) -> None:
        """End the fork server, if one runs (it also ends with this process)."""
        with self._forks_lock:
            for server in self._forks:
                server.close()
            self._forks.clear()

    def _root(self) -> Path | None:
        root = Path(self.workdir_root) if self.workdir_root else None
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        return root

    def _episode(
        self,
        endpoint: CaptureEndpoint,
        job: EpisodeJob,
        cfg: RolloutConfig,
        forks: ForkServer | None = None,
        keep_outputs_dir: str | None = None,
        tools: EpisodeTools | None = None,
    ) -> Trajectory:
        """One episode: a private copy, the harness in the sandbox, the checker's verdict."""
        traj = self._trajectory(job)
        if forks is not None:
            folder = forks.folder()
        else:
            folder = Path(tempfile.mkdtemp(prefix="spreadrl-harness-", dir=self._root()))
        session = endpoint.open_session(job.episode_id)
        relay = None
        try:
            case = job.task.case(job.case)
            workbook = folder / Path(case.input_path).name
            shutil.copyfile(case.input_path, workbook)
            relay = UnixRelay(folder / ".endpoint.sock", endpoint.port)
            if tools is not None:
                tools.open(session.key, workbook)
            args = launcher_args(
                self.program,
                instruction=job.task.instruction,
                workbook=workbook,
                socket_path=relay.path,
                url_path=endpoint.base_path(session),
                model=endpoint.model_name,
                mcp_path=endpoint.mcp_path(session) if tools is not None else "",
            )
            started = time.monotonic()
            if forks is not None:
                forks.own(workbook)
                result = forks.run(args, cfg.episode_wall_time_s, session.stop)
            else:
                result = run_python(
                    launcher_code(args),
                    folder,
                    self._limits(cfg),
                    mode=self.env.sandbox_mode,
                    read_only=self.program.read_only,
                    stop=session.stop,
                )
            traj.timings["wall_s"] = time.monotonic() - started
            session.stop.set()
            relay.close()
            relay = None
            endpoint.close_session(session.key)
            _fill_tokens(traj, session)
            if tools is not None:  # the gym's counts, as the built-in loop's are
                traj.metadata["harness_model_tool_calls"] = traj.tool_calls
                traj.tool_calls, traj.tool_errors = tools.close(session.key)
            if self.keep_traces:
                traj.metadata[TRAINING_TRACE] = to_training_trace(
                    session.capture.calls, episode_id=job.episode_id, model=endpoint.model_name
                )
            failure = _failure(result, session, cfg)
            if failure is not None:
                _crashed(traj, failure, result.stderr)
                return traj
            self._score(traj, workbook, job)
            if keep_outputs_dir is not None:  # as the built-in loop keeps it (an eval's outputs)
                _keep(workbook, keep_outputs_dir, job)
        except Exception as exc:  # the episode's own failure, not the run's
            log.warning("harness episode %s failed: %s", job.episode_id, exc)
            _crashed(traj, f"{type(exc).__name__}: {exc}", "")
        finally:
            session.stop.set()
            if relay is not None:
                relay.close()
            if tools is not None:
                tools.close(session.key)
            endpoint.sessions.pop(session.key, None)
            shutil.rmtree(folder, ignore_errors=True)
        return traj

    def _score(self, traj: Trajectory, workbook: Path, job: EpisodeJob) -> None:
        """The gym's checker on the workbook the harness left."""
        check = checker.check_workbook(
            workbook,
            job.task.case(job.case).answer_path,
            job.task.answer_position,
            engine=self.env.engine,
            scoring=self.env.scoring,
            locale=self.env.locale,
        )
        traj.passed = check.passed
        traj.env_reward = traj.reward = 1.0 if check.passed else 0.0
        traj.stop_reason = EndReason.ANSWERED
        traj.mismatches = [
            {"sheet": m.sheet, "cell": m.cell, "reason": m.reason} for m in check.mismatches[:50]
        ]

    def _trajectory(self, job: EpisodeJob) -> Trajectory:
        return Trajectory(
            task_id=job.task.id,
            case=job.case,
            sample=job.sample,
            messages=[],
            metadata={"family": job.task.family, "harness": self.program.spec},
        )

    def _limits(self, cfg: RolloutConfig) -> SandboxLimits:
        """The code interpreter's limits, with the episode's time (a whole episode runs)."""
        wall = cfg.episode_wall_time_s
        return SandboxLimits(
            wall_time_s=wall, cpu_time_s=max(1, int(wall)), memory_mb=self.env.code_memory_mb
        )


def _keep(workbook: Path, folder: str, job: EpisodeJob) -> None:
    kept = Path(folder) / (f"sample{job.sample}" if job.sample else "")
    kept /= job.task.output_name(job.case)
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(workbook, kept)


def _failure(result: SandboxResult, session: Session, cfg: RolloutConfig) -> str | None:
    """Why the episode is an error, or None when the harness finished cleanly."""
    if session.flooded:
        return session.flooded
    if result.timed_out:
        return f"the harness ran past rollout.episode_wall_time_s={cfg.episode_wall_time_s:g} s"
    if result.exit_code == OUTSIDE_EXIT and OUTSIDE_MARK in result.stderr:
        line = next(ln for ln in result.stderr.splitlines() if OUTSIDE_MARK in ln)
        return f"the harness wrote outside its episode folder ({line.split(':', 1)[1].strip()})"
    if result.error or result.exit_code != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the harness failed (exit {result.exit_code}, {result.error or last})"
    if not session.capture.calls:
        return "the harness never called the model"
    return None


def _crashed(traj: Trajectory, why: str, stderr: str) -> Trajectory:
    traj.stop_reason = EndReason.ERROR
    traj.error = why
    traj.traceback = stderr[-8000:] or None
    traj.env_reward = traj.reward = 0.0
    traj.passed = False
    return traj


def _fill_tokens(traj: Trajectory, session: Session) -> None:
    """The captured calls as the trajectory's tokens and conversation."""
    capture = session.capture
    traj.turns = len(capture.calls)
    traj.tool_calls = sum(c.tool_calls for c in capture.calls)
    traj.generated_tokens = sum(len(c.completion_ids) for c in capture.calls)
    traj.metadata["harness_prefix_breaks"] = capture.prefix_breaks
    if capture.calls:
        last = capture.calls[-1]
        traj.messages = [*last.messages, last.reply]
        traj.tools = list(last.tools or [])
    if capture.samples:
        first = capture.samples[0]
        traj.prompt_ids = first.prompt_ids
        traj.response_ids = first.response_ids
        traj.response_mask = first.response_mask
        traj.rollout_logprobs = first.logprobs
        traj.metadata["harness_samples"] = [s.to_json() for s in capture.samples[1:]]
