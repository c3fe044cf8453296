"""The app through FastAPI's TestClient: chat (plain and streamed), models, health, metrics, errors."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.serve.conftest import xlsx_bytes

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_range",
            "description": "Write values.",
            "parameters": {"type": "object", "properties": {"range": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def client(app_factory):
    with TestClient(app_factory()) as c:
        yield c


def sse_events(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def test_chat_completion_is_openai_shaped(client):
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Put 42 in A1."}],
        "tools": TOOLS,
        "max_tokens": 6,
        "temperature": 0.7,
        "top_p": 0.9,
        "presence_penalty": 0.0,  # unknown fields are ignored, as OpenAI clients send them
    }
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "tiny"
    choice = data["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length", "tool_calls")
    assert isinstance(choice["message"]["content"], str)
    usage = data["usage"]
    assert 1 <= usage["completion_tokens"] <= 6
    assert usage["prompt_tokens"] > 10
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_accepts_a_tool_round_trip_and_text_parts(client):
    messages = [
        {"role": "system", "content": "You edit workbooks."},
        {"role": "user", "content": [{"type": "text", "text": "Put 42 in A1."}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "write_range", "arguments": '{"range": "A1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "wrote 1 cell"},
    ]
    r = client.post(
        "/v1/chat/completions", json={"messages": messages, "tools": TOOLS, "max_tokens": 4}
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 4


def test_streamed_chat_is_server_sent_events_ending_in_done(client):
    r = client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True},
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"]["completion_tokens"] >= 1


def test_models_health_and_metrics(client):
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["in_flight"] == 0
    client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    client.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    snap = client.get("/metrics").json()
    chat = snap["routes"]["POST /v1/chat/completions"]
    assert chat["count"] == 2
    assert chat["by_status"] == {"200": 1, "400": 1}
    assert snap["in_flight"] == 0 and snap["queue_depth"] == 0
    assert snap["generated_tokens_total"] >= 1
    prom = client.get("/metrics", params={"format": "prometheus"}).text
    assert 'spreadrl_requests_total{route="POST /v1/chat/completions",status="200"} 1' in prom
    assert "spreadrl_queue_depth 0" in prom


def test_bad_json_is_a_400_naming_json(client):
    r = client.post(
        "/v1/chat/completions",
        content=b'{"messages": [',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    assert "JSON" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 5}, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 3}, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}, "max_tokens"),
    ],
)
def test_invalid_fields_are_422_naming_the_field(client, body, needle):
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 422
    assert needle in r.json()["error"]["message"]


def test_unknown_model_is_404(client):
    r = client.post(
        "/v1/chat/completions",
        json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
    )
    assert r.status_code == 404
    assert "gpt-9" in r.json()["error"]["message"]


def test_body_over_the_limit_is_413(app_factory):
    with TestClient(app_factory(max_body_bytes=2048)) as client:
        big = {"messages": [{"role": "user", "content": "x" * 4096}]}
        r = client.post("/v1/chat/completions", json=big)
        assert r.status_code == 413
        assert "2048" in r.json()["error"]["message"]
        r = client.post(
            "/v1/tasks",
            files={"file": ("big.xlsx", b"PK\x03\x04" + b"0" * 4096)},
            data={"instruction": "x"},
        )
        assert r.status_code == 413
        assert client.get("/health").status_code == 200


def _chunks(data: bytes, size: int = 512):
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_chunked_body_without_length_is_counted_and_refused(app_factory):
    with TestClient(app_factory(max_body_bytes=2048)) as client:
        payload = json.dumps({"messages": [{"role": "user", "content": "y" * 5000}]}).encode()
        r = client.post(
            "/v1/chat/completions",
            content=_chunks(payload),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413


@pytest.mark.parametrize(
    ("name", "data", "status", "code"),
    [
        ("book.csv", b"a,b\n1,2\n", 400, "not_xlsx"),
        ("book.xlsx", b"a,b\n1,2\n", 400, "not_xlsx"),
        ("book.xlsx", b"", 400, "empty_file"),
        ("book.xlsx", b"PK\x03\x04 this is not really a zip", 422, "corrupt_workbook"),
    ],
)
def test_bad_uploads_are_4xx_naming_the_problem(client, name, data, status, code):
    r = client.post("/v1/tasks", files={"file": (name, data)}, data={"instruction": "Sum B"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    assert name in error["message"]


def test_task_upload_needs_an_instruction_and_a_file(client):
    r = client.post("/v1/tasks", files={"file": ("b.xlsx", xlsx_bytes())})
    assert r.status_code == 422
    assert "instruction" in r.json()["error"]["message"]
    r = client.post("/v1/tasks", data={"instruction": "x"})
    assert r.status_code == 422
    assert "file" in r.json()["error"]["message"]


def test_unknown_task_output_is_404(client):
    assert client.get("/v1/tasks/abc123/output.xlsx").status_code == 404
    assert client.get("/v1/tasks/..%2f..%2fetc/output.xlsx").status_code == 404


def test_page_has_the_upload_form(client):
    r = client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    for needle in ('id="file"', 'id="instruction"', "/v1/tasks", 'id="download"'):
        assert needle in r.text


class EnginePolicy:
    """A policy that runs an engine beside the server (as vLLM's does): ``close()`` stops it."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, policy) -> None:
        self.policy = policy
        self.closed = 0

    def act(self, contexts, params, *, seeds=None):
        assert not self.closed, "generation after the engine was stopped"
        return self.policy.act(contexts, params, seeds=seeds)

    def close(self) -> None:
        self.closed += 1


def test_shutdown_stops_the_policys_engine(app_factory, tiny_policy):
    policy = EnginePolicy(tiny_policy[0])
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with TestClient(app_factory(policy=policy)) as client:
        assert client.post("/v1/chat/completions", json=body).status_code == 200
        assert policy.closed == 0  # serving: the engine runs
    assert policy.closed == 1  # the lifespan's exit stopped it, once
