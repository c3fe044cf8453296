"""The capturing endpoint over HTTP: OpenAI's shape plus the ids and log-probs in vLLM's fields."""

import httpx

from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness.app import build_app
from spreadrl.rollout.harness.endpoint import CaptureEndpoint
from spreadrl.rollout.runner import RunValues
from tests.rollout.harness.scripted import ScriptedTokenPolicy
from tests.rollout.harness.test_harness_episodes import chat  # noqa: F401


def test_a_reply_carries_the_ids_and_log_probs_it_was_captured_with(chat):  # noqa: F811
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    endpoint = CaptureEndpoint(policy, chat, RolloutConfig(max_turns=2), RunValues(seed=4))
    endpoint.start(build_app(endpoint))
    try:
        session = endpoint.open_session("t1/1/0")
        url = f"http://127.0.0.1:{endpoint.port}{endpoint.base_path(session)}"
        body = {"model": "any", "messages": [{"role": "user", "content": "Put 42 in A1."}]}
        with httpx.Client(base_url=url, timeout=60) as client:
            reply = client.post("/chat/completions", json=body).json()
            assert client.get("/models").json()["data"][0]["id"] == endpoint.model_name
        (call,) = session.capture.calls
        choice = reply["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "write_range"
        assert reply["prompt_token_ids"] == call.prompt_ids == policy.contexts[0]
        assert choice["token_ids"] == call.completion_ids
        content = choice["logprobs"]["content"]
        assert [c["logprob"] for c in content] == call.logprobs
        assert content[0]["token"] == f"token_id:{call.completion_ids[0]}"
    finally:
        endpoint.close()
