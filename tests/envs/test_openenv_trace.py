"""spreadrl's TrainingTrace JSON against OpenEnv 0.10's own model (``openenv.core.harness``).

Run by ``make test-envs`` (marked ``envs``) where ``openenv`` 0.10 is installed; like the
leg's other tests they fail, never skip, without it. OpenEnv is imported in each test so
that collecting this file in the default leg (openenv-core 0.3, whose module of the same
name has no harness capture) does not fail."""

import json

import pytest

from spreadrl.rollout.harness.capture import CapturedCall
from spreadrl.rollout.harness.trace import samples_from_trace, to_training_trace

pytestmark = pytest.mark.envs


def calls() -> list[CapturedCall]:
    """Two calls of one episode: the second prompt continues the first (tool ids between)."""
    first = CapturedCall([1, 2, 3], [4, 5, 9], [-0.5, -0.25, -0.125], "stop", [], None, {})
    second = CapturedCall(
        [1, 2, 3, 4, 5, 9, 7, 8], [6, 9], [-1.0, -0.0625], "stop", [], None, {}, continued=True
    )
    return [first, second]


def test_a_spreadrl_trace_validates_in_openenv():
    from openenv.core.harness import training

    written = json.loads(json.dumps(to_training_trace(calls(), episode_id="t1/1/0")))
    trace = training.TrainingTrace.model_validate(written)  # runs validate_training_turn per turn
    assert [t.node_id for t in trace.turns] == ["t1/1/0#0", "t1/1/0#1"]


def test_an_openenv_trace_trains_as_one_sample():
    from openenv.core.harness import training

    turns = [
        training.TrainingTurn(
            node_id=f"n{i}",
            prompt_token_ids=c.prompt_ids,
            completion_token_ids=c.completion_ids,
            per_token_logps=c.logprobs,
            loss_mask=[0] * len(c.prompt_ids) + [1] * len(c.completion_ids),
        )
        for i, c in enumerate(calls())
    ]
    trace = json.loads(training.TrainingTrace(turns=turns).model_dump_json())
    (sample,), breaks = samples_from_trace(trace)
    assert breaks == 0
    assert sample.prompt_ids == [1, 2, 3]
    assert sample.response_ids == [4, 5, 9, 7, 8, 6, 9]
    assert sample.response_mask == [1, 1, 1, 0, 0, 1, 1]
    assert sample.logprobs == [-0.5, -0.25, -0.125, 0.0, 0.0, -1.0, -0.0625]


def through_capture_server(tiny_model, episodes: int, seed: int = 1):
    """``episodes`` two-call sessions through OpenEnv's CaptureServer in front of spreadrl's
    endpoint (one endpoint session each): OpenEnv's TrainingTrace of each, as JSON, and
    the endpoint's own calls."""
    import socket

    import httpx
    from openenv.core.harness import capture, training

    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.engines.hf import HFPolicy
    from spreadrl.rollout.harness.app import build_app
    from spreadrl.rollout.harness.endpoint import CaptureEndpoint
    from spreadrl.rollout.runner import RunValues

    model, tokenizer = tiny_model
    chat = EpisodeChat.of(tokenizer)
    cfg = RolloutConfig(max_turns=4, max_new_tokens_per_turn=16)
    endpoint = CaptureEndpoint(HFPolicy(model, tokenizer), chat, cfg, RunValues(seed=seed))
    endpoint.start(build_app(endpoint))
    traces, own = [], []
    try:
        for episode in range(episodes):
            session = endpoint.open_session(f"interop/1/{episode}")
            upstream = f"http://127.0.0.1:{endpoint.port}{endpoint.base_path(session)}"
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            server = capture.CaptureServer(llm_url=upstream, model=endpoint.model_name, port=port)
            server.start()
            base = f"http://127.0.0.1:{port}"
            key = httpx.post(f"{base}/sessions", json={}).json()["session_id"]
            tools = [{"type": "function", "function": {"name": "write_range", "parameters": {}}}]
            messages = [{"role": "user", "content": "Put 42 in A1."}]
            for _ in range(2):
                reply = httpx.post(
                    f"{base}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}"},
                    json={"model": endpoint.model_name, "messages": messages, "tools": tools},
                    timeout=120,
                )
                assert reply.status_code == 200, reply.text
                messages += [reply.json()["choices"][0]["message"]]
                messages += [{"role": "tool", "tool_call_id": "c", "content": "wrote"}]
            entries = httpx.get(f"{base}/sessions/{key}/trace_entries").json()["entries"]
            trace = training.TrainingTrace.from_entries(entries).model_dump_json()
            traces.append(json.loads(trace))
            own.append(session.capture.calls)
    finally:
        endpoint.close()
    return traces, own


def test_capture_server_in_front_of_the_endpoint_captures_what_it_sampled(tiny_model):
    """OpenEnv's CaptureServer proxies spreadrl's endpoint; its trace is the endpoint's own
    calls token for token, and it reads back as one joined sample."""
    (trace,), (own,) = through_capture_server(tiny_model, 1)
    assert [
        (t["prompt_token_ids"], t["completion_token_ids"], t["per_token_logps"])
        for t in trace["turns"]
    ] == [(c.prompt_ids, c.completion_ids, c.logprobs) for c in own]
    samples, breaks = samples_from_trace(trace)
    assert breaks == 0 and len(samples) == 1


def test_grpo_trains_on_what_the_capture_server_captured(
    tiny_model, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """`spreadrl grpo` with rollout.traces naming a folder of the proxy's TrainingTraces
    (a verifier's rewards beside them): it trains on those ids and the weights move."""
    import sys

    import torch
    from safetensors.torch import load_file

    from spreadrl.cli.main import main
    from tests.train.test_grpo_smoke import RECIPE, _two_tasks

    traces, _ = through_capture_server(tiny_model, 2, seed=4)
    group = tmp_path / "traces" / "put-42"
    group.mkdir(parents=True)
    for i, trace in enumerate(traces):
        (group / f"e{i}.json").write_text(json.dumps(trace))
    (group / "rewards.json").write_text(json.dumps({"e0": 1.0, "e1": 0.0}))
    tasks, _, _ = _two_tasks(tmp_path / "tasks")  # the recipe's data (the traces replace it)
    out = tmp_path / "run"
    args = ["spreadrl", "grpo", "--config", str(RECIPE)]
    args += [
        f"model.name_or_path={tiny_model_dir}",
        f"data.train_tasks={tasks}",
        f"output_dir={out}",
        "steps=1",
        "rollout.group_size=2",
        "rollout.prompts_per_step=1",
        f"rollout.traces={tmp_path / 'traces'}",
        "sampling.mode=keep",
        "optim.lr=1e-3",
    ]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None), capsys.readouterr().err
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["trained_sequences"] == 2 and metrics["harness_errors"] == 0
    generated = sum(len(t["completion_token_ids"]) for tr in traces for t in tr["turns"])
    assert metrics["response_tokens"] > 0 and generated > 0
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(moved) > len(before) // 2, moved


def test_the_traces_a_harness_run_writes_validate_in_openenv(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """`logging.harness_traces`: every episode file of a harness run's step folder is an
    OpenEnv TrainingTrace, read by OpenEnv's own model from the file's text."""
    from openenv.core.harness import training

    from tests.cli.test_cli_mistakes import cli
    from tests.rollout.harness.test_harness_episodes import AGENT
    from tests.train.test_grpo_smoke import _two_tasks
    from tests.train.test_harness_traces import _args

    tasks, _, _ = _two_tasks(tmp_path / "tasks")
    out = tmp_path / "run"
    harness = [f"rollout.harness={AGENT}:run", "logging.harness_traces=true"]
    code, _, err = cli(monkeypatch, capsys, *_args(tiny_model_dir, tasks, out, 1, *harness))
    assert code == 0, err
    files = sorted((out / "traces" / "step-000001").glob("*/e*.json"))
    assert len(files) == 4
    for path in files:
        trace = training.TrainingTrace.model_validate_json(path.read_text())
        assert trace.turns and trace.turns[0].loss_mask[-1] == 1
