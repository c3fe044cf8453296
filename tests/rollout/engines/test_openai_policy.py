"""The openai backend against a small fake OpenAI-compatible server on localhost."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spreadrl.errors import SpreadrlError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.openai import OpenAIPolicy, to_openai_messages
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from tests.rollout.fakes import FakePool, make_task


class _Handler(BaseHTTPRequestHandler):
    requests: list = []

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.requests.append(body)
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.end_headers()
            return
        seen_tool = any("<tool_response>" in m["content"] for m in body["messages"])
        if seen_tool:
            message = {"role": "assistant", "content": "Done."}
        else:  # a structured tool call, as vLLM's tool parser returns it
            args = json.dumps({"range": "A1", "values": 42})
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "write_range", "arguments": args},
                    }
                ],
            }
        payload = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture()
def fake_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Handler.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_episodes_through_an_openai_compatible_server(fake_server):
    policy = OpenAIPolicy("fake-model", base_url=fake_server, concurrency=2)
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(3)]
    out = run_episodes(policy, FakePool(), jobs, RolloutConfig(max_turns=4))
    policy.close()
    for t in out.trajectories:
        assert t.passed and t.tool_calls == 1 and t.stop_reason == "answered"
    first = _Handler.requests[0]
    assert first["model"] == "fake-model" and first["tools"][0]["function"]["name"] == "write_range"
    # tool results go back as user turns wrapped in <tool_response>
    later = [r for r in _Handler.requests if len(r["messages"]) > 2][0]
    assert later["messages"][-1]["role"] == "user"
    assert later["messages"][-1]["content"].startswith("<tool_response>")


def test_server_errors_are_clear(fake_server):
    policy = OpenAIPolicy("m", base_url=fake_server + "/nope")
    with pytest.raises(SpreadrlError, match="answered 404"):
        run_episodes(policy, FakePool(), [EpisodeJob(make_task())], RolloutConfig())


def test_missing_endpoint_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(SpreadrlError, match="needs an endpoint"):
        OpenAIPolicy("m")


def test_consecutive_tool_messages_share_one_user_turn():
    msgs = [
        {"role": "assistant", "content": "x"},
        {"role": "tool", "content": "a"},
        {"role": "tool", "content": "b"},
    ]
    out = to_openai_messages(msgs)
    assert len(out) == 2 and out[1]["content"].count("<tool_response>") == 2
