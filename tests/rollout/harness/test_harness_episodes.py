"""Harness episodes against the capturing endpoint: equivalence with the built-in loop, faults."""

from pathlib import Path

import openpyxl
import pytest

from spreadrl.data.task import CELL_LEVEL, Task, TaskCase
from spreadrl.env.config import EnvConfig
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness.episodes import HarnessEpisodes
from spreadrl.rollout.harness.program import HarnessProgram
from spreadrl.rollout.runner import EpisodeJob, RunValues, run_episodes
from spreadrl.rollout.types import EndReason
from tests.rollout.fakes import FakePool
from tests.rollout.harness.scripted import ScriptedTokenPolicy
from tests.sysdeps import needs_landlock

AGENT = Path(__file__).with_name("mirror_agent.py")


def workbook_task(tmp_path: Path) -> Task:
    """FakePool's task ("Put 42 in A1.") with real workbooks: an empty input, 42 as the answer."""
    book = openpyxl.Workbook()
    book.active.title = "Sheet1"
    book.save(tmp_path / "in.xlsx")
    book.active["A1"] = 42
    book.save(tmp_path / "ans.xlsx")
    case = TaskCase(1, tmp_path / "in.xlsx", tmp_path / "ans.xlsx")
    return Task("t1", "Put 42 in A1.", CELL_LEVEL, "A1", (case,), tmp_path, family="demo")


def harness(function: str, tmp_path: Path) -> HarnessEpisodes:
    return HarnessEpisodes(
        HarnessProgram.parse(f"{AGENT}:{function}"),
        EnvConfig(),
        workdir_root=str(tmp_path / "episodes"),
    )


@pytest.fixture()
def chat(tiny_model):
    return EpisodeChat.of(tiny_model[1])


def test_harness_reproducing_the_loops_prompts_gives_its_tokens(tmp_path, chat):
    """Same policy, seeds and tasks: ids, masks and log-probs equal token for token."""
    task = workbook_task(tmp_path)
    jobs = [EpisodeJob(task, 1, s) for s in range(3)]
    cfg, run = RolloutConfig(max_turns=4), RunValues(seed=7)
    stop = chat.fmt.stop_ids[0]
    built_in = run_episodes(
        ScriptedTokenPolicy(chat.tokenizer, stop), FakePool(), jobs, cfg, chat, run=run
    ).trajectories
    through = harness("run", tmp_path)(
        ScriptedTokenPolicy(chat.tokenizer, stop), None, jobs, cfg, chat, run=run
    )
    assert through.timings["harness_prefix_breaks"] == 0
    for a, b in zip(built_in, through.trajectories, strict=True):
        assert b.error is None, b.traceback
        assert a.turns == b.turns == 2  # a tool call, then the answer
        assert b.prompt_ids == a.prompt_ids
        assert b.response_ids == a.response_ids
        assert b.response_mask == a.response_mask
        assert b.rollout_logprobs == a.rollout_logprobs
        assert b.metadata["harness_samples"] == []
        assert b.tool_calls == 1 and b.passed is False  # the policy never wrote the workbook
    # the seed reaches the log-probs: episodes differ from each other
    assert through.trajectories[0].rollout_logprobs != through.trajectories[1].rollout_logprobs


def test_hf_policy_through_the_endpoint_samples_what_the_loop_samples(tmp_path, tiny_model):
    from spreadrl.rollout.engines.hf import HFPolicy

    model, tokenizer = tiny_model
    chat = EpisodeChat.of(tokenizer)
    task = workbook_task(tmp_path)
    cfg = RolloutConfig(max_turns=2, max_new_tokens_per_turn=12, max_response_tokens=40)
    run = RunValues(seed=3)
    for sample in range(2):  # one episode per call: no batch padding between the paths
        job = [EpisodeJob(task, 1, sample)]
        a = run_episodes(HFPolicy(model, tokenizer), FakePool(), job, cfg, chat, run=run)
        b = harness("run", tmp_path)(HFPolicy(model, tokenizer), None, job, cfg, chat, run=run)
        (ta,), (tb,) = a.trajectories, b.trajectories
        assert tb.error is None, tb.traceback
        assert (tb.prompt_ids, tb.response_ids, tb.response_mask) == (
            ta.prompt_ids,
            ta.response_ids,
            ta.response_mask,
        )
        assert tb.rollout_logprobs == ta.rollout_logprobs


@pytest.mark.parametrize(
    ("function", "why"),
    [
        ("crash", "the harness failed"),
        ("hang", "ran past rollout.episode_wall_time_s"),
        ("flood", "flooded the endpoint"),
        ("write_outside", "wrote outside its episode folder"),
        ("silent", "never called the model"),
    ],
)
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "sandbox-per-episode"])
def test_a_misbehaving_harness_is_an_episode_error(tmp_path, chat, function, why, fork):
    task = workbook_task(tmp_path)
    jobs = [EpisodeJob(task, 1, 0), EpisodeJob(task, 1, 1)]
    cfg = RolloutConfig(max_turns=4, episode_wall_time_s=5.0, harness_fork=fork)
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    out = harness(function, tmp_path)(policy, None, jobs, cfg, chat, run=RunValues(seed=1))
    assert out.timings["harness_errors"] == 2
    for traj in out.trajectories:
        assert traj.stop_reason == EndReason.ERROR and traj.crashed
        assert why in traj.error
    assert not (tmp_path / "episodes" / "escaped.txt").exists()


@needs_landlock
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "sandbox-per-episode"])
def test_programs_a_harness_starts_write_only_in_its_folder(tmp_path, chat, fork):
    """A shell the harness starts cannot write beside its episode folder or into a
    sibling's name (the audit hook sees only Python's own writes): Landlock refuses it,
    and the episode goes on (the agent raises, an episode error, when a write got
    through or the launcher ran without Landlock)."""
    task = workbook_task(tmp_path)
    jobs = [EpisodeJob(task, 1, 0), EpisodeJob(task, 1, 1)]
    cfg = RolloutConfig(max_turns=4, episode_wall_time_s=30.0, harness_fork=fork)
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    out = harness("shell_writes_outside", tmp_path)(
        policy, None, jobs, cfg, chat, run=RunValues(seed=1)
    )
    assert out.timings["harness_errors"] == 0, [t.error for t in out.trajectories]
    assert all(t.turns == 2 for t in out.trajectories)
    assert not [*tmp_path.rglob("escaped-sh.txt"), *tmp_path.rglob("*-sibling.txt")]


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "sandbox-per-episode"])
def test_a_harness_that_fails_to_import_makes_every_episode_an_error(tmp_path, chat, fork):
    broken = tmp_path / "broken_agent.py"
    broken.write_text("raise RuntimeError('broken at import')\n\ndef run(**kw):\n    pass\n")
    runner = HarnessEpisodes(
        HarnessProgram.parse(f"{broken}:run"), EnvConfig(), workdir_root=str(tmp_path / "ep")
    )
    jobs = [EpisodeJob(workbook_task(tmp_path), 1, s) for s in range(2)]
    cfg = RolloutConfig(max_turns=2, harness_fork=fork)
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    out = runner(policy, None, jobs, cfg, chat, run=RunValues(seed=1))
    assert out.timings["harness_errors"] == 2
    assert all(t.crashed and "broken at import" in t.error for t in out.trajectories)


def test_the_fork_server_imports_the_harness_once_and_forks_each_episode(tmp_path):
    """Two episodes: the same import (a token drawn at import time), two processes, both
    children of the server; each writes only in its own folder."""
    import threading

    from spreadrl.env.sandbox import SandboxLimits
    from spreadrl.rollout.harness.forkserver import ForkServer
    from spreadrl.rollout.harness.program import launcher_args

    agent = tmp_path / "token_agent.py"
    agent.write_text(
        "import os, random\nTOKEN = random.random()\n\n"
        "def run(instruction, workbook, base_url, model):\n"
        "    with open(workbook, 'w') as fh:\n"
        "        fh.write(f'{TOKEN} {os.getpid()} {os.getppid()}')\n"
    )
    program = HarnessProgram.parse(f"{agent}:run")
    root = tmp_path / "root"
    root.mkdir()
    server = ForkServer(program, root, SandboxLimits(), mode="auto", episodes=2).start()
    seen = []
    try:
        for _ in range(2):
            folder = server.folder()
            args = launcher_args(
                program,
                instruction="x",
                workbook=folder / "book.txt",
                socket_path=folder / ".endpoint.sock",
                url_path="/v1",
                model="m",
            )
            result = server.run(args, 30, threading.Event())
            assert result.exit_code == 0 and result.error is None, result.stderr
            seen.append((folder / "book.txt").read_text().split())
    finally:
        server.close()
    (token_a, pid_a, parent_a), (token_b, pid_b, parent_b) = seen
    assert token_a == token_b  # imported once
    assert pid_a != pid_b and parent_a == parent_b  # a process each, forked by one server
    assert not root.exists()  # closing removes the server's folder


def test_a_rerendered_history_breaks_into_samples_that_share_the_advantage(tmp_path, chat):
    """A harness that edits the reply it sends back: each call starts a sample, counted."""
    import torch

    from spreadrl.train.episodes import to_samples

    task = workbook_task(tmp_path)
    jobs = [EpisodeJob(task, 1, s) for s in range(2)]
    cfg, run = RolloutConfig(max_turns=4), RunValues(seed=7)
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    out = harness("edited", tmp_path)(policy, None, jobs, cfg, chat, run=run)
    assert out.timings["harness_prefix_breaks"] == 2  # one per episode: its second call
    for traj in out.trajectories:
        assert traj.error is None, traj.traceback
        assert traj.turns == 2 and traj.metadata["harness_prefix_breaks"] == 1
        (second,) = traj.metadata["harness_samples"]
        # the second call's prompt as the engine saw it: the edited history, rendered whole
        assert second["prompt_ids"] in policy.contexts
        assert "(edited)" in chat.tokenizer.decode(second["prompt_ids"])
        assert all(m == 1 for m in second["response_mask"])  # only the sampled answer
    keep = torch.ones(1, dtype=torch.bool)
    samples = to_samples(out.trajectories, torch.tensor([[0.5, -0.5]]), keep, 2)
    assert [s.advantage for s in samples] == [0.5, 0.5, -0.5, -0.5]
    (second,) = out.trajectories[0].metadata["harness_samples"]
    assert samples[1].ids == second["prompt_ids"] + second["response_ids"]


def test_a_command_line_harness_gets_its_episode_from_the_environment(tmp_path, chat):
    """The example agent run as a command (``python agent.py``): it reads the instruction,
    workbook, endpoint and model from the environment and plays the episode."""
    example = Path(__file__).resolve().parents[3] / "examples" / "harness" / "openai_agent.py"
    runner = HarnessEpisodes(HarnessProgram.parse(f"python {example}"), EnvConfig())
    assert runner.program.kind == "command"
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    jobs = [EpisodeJob(workbook_task(tmp_path), 1, 0)]
    out = runner(policy, None, jobs, RolloutConfig(max_turns=4), chat, run=RunValues(seed=1))
    (traj,) = out.trajectories
    assert traj.error is None, traj.traceback
    # its own prompt, then the scripted call (an unknown tool to this agent), then the answer
    assert traj.turns == 2 and traj.tool_calls == 1
    assert traj.messages[0]["content"].startswith("You edit an Excel workbook")
    assert "error:" in traj.messages[-2]["content"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "rollout.harness is empty"),
        ("missing/agent.py:run", "no file"),
        ("no_such_module_here:run", "no module 'no_such_module_here'"),
        (f"{AGENT}:not-a-name", "is not a function name"),
    ],
)
def test_a_harness_that_cannot_be_found_is_one_config_error(spec, message):
    from spreadrl.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        HarnessProgram.parse(spec)


def test_vllm_through_the_endpoint_is_seeded_as_its_episode_scheduler_seeds(
    tmp_path, chat, monkeypatch
):
    """The vllm policy (the signature-checked fake engine) behind the endpoint: each call
    gets the seed the built-in loop's episode scheduler gives that turn, so the same
    seeds draw the same tokens; here the fake's log-probs are a function of the seed."""
    from spreadrl.rollout.engines.vllm import VLLMPolicy
    from tests.rollout import fake_vllm
    from tests.rollout.harness.scripted import CALL

    tok = chat.tokenizer
    fake_vllm.install(monkeypatch)

    class Engine(fake_vllm.FakeLLM):
        def complete(self, prompt_ids, params):
            seen = tok.decode(prompt_ids, skip_special_tokens=False)
            text = "Done: 42 is in A1." if "<tool_response>" in seen else CALL
            ids = tok.encode(text, add_special_tokens=False) + [chat.fmt.stop_ids[0]]
            logprobs = [-((params.seed + i) % 997) / 997 for i in range(len(ids))]
            return fake_vllm.finish_like_vllm(ids, logprobs, params, eos=ids[-1])

    task = workbook_task(tmp_path)
    jobs = [EpisodeJob(task, 1, s) for s in range(3)]
    cfg, run = RolloutConfig(max_turns=4), RunValues(seed=11)
    built_in = run_episodes(
        VLLMPolicy("m", llm=Engine("m")), FakePool(), jobs, cfg, chat, run=run
    ).trajectories
    through = harness("run", tmp_path)(
        VLLMPolicy("m", llm=Engine("m")), None, jobs, cfg, chat, run=run
    ).trajectories
    for a, b in zip(built_in, through, strict=True):
        assert b.error is None, b.traceback
        assert a.turns == b.turns == 2
        assert (b.prompt_ids, b.response_ids, b.response_mask) == (
            a.prompt_ids,
            a.response_ids,
            a.response_mask,
        )
        assert b.rollout_logprobs == a.rollout_logprobs


def test_a_harness_file_in_a_private_folder_runs_in_the_sandbox(tmp_path, chat):
    """A 0700 folder (a home, pytest's temporary root): the sandbox's uid cannot enter it,
    so the file alone is bound read-only and the harness still plays its episode."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    agent = private / "agent.py"
    agent.write_text(AGENT.read_text())
    program = HarnessProgram.parse(f"{agent}:run")
    assert program.read_only == (str(agent),)
    runner = HarnessEpisodes(program, EnvConfig(), workdir_root=str(tmp_path / "episodes"))
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    jobs = [EpisodeJob(workbook_task(tmp_path), 1, 0)]
    out = runner(policy, None, jobs, RolloutConfig(max_turns=4), chat, run=RunValues(seed=1))
    (traj,) = out.trajectories
    assert traj.error is None, traj.traceback
