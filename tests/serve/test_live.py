"""A real uvicorn server on 127.0.0.1: chat over HTTP, a bounded load test, 504, graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx

from tests.serve.conftest import GatedPolicy, ManualDeadlines, live_server

CHAT = "/v1/chat/completions"


def ask(max_tokens: int = 4, **extra) -> dict:
    return {
        "messages": [{"role": "user", "content": "Sum column B."}],
        "max_tokens": max_tokens,
        **extra,
    }


def test_chat_plain_and_streamed_over_real_http(app_factory):
    with live_server(app_factory()) as url, httpx.Client(base_url=url, timeout=30) as client:
        r = client.post(CHAT, json=ask())
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
        with client.stream("POST", CHAT, json=ask(stream=True)) as stream:
            assert stream.status_code == 200
            lines = [line for line in stream.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        first = json.loads(lines[0][len("data: ") :])
        assert first["choices"][0]["delta"]["role"] == "assistant"
        assert client.get("/health").json()["status"] == "ok"


async def _burst(url: str, n: int) -> list[int]:
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        responses = await asyncio.gather(*(client.post(CHAT, json=ask()) for _ in range(n)))
    for r in responses:
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "queue_full"
    return [r.status_code for r in responses]


def test_load_over_the_queue_gets_clean_503s_and_nothing_is_lost(app_factory, tiny_policy):
    gated = GatedPolicy(tiny_policy[0])
    app = app_factory(policy=gated, max_concurrency=2, max_queue=4)
    n = 16
    with live_server(app) as url:
        result: list[int] = []
        # hold every admitted request inside the model until the refused ones have all come back
        runner = threading.Thread(target=lambda: result.extend(asyncio.run(_burst(url, n))))
        runner.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            snap = httpx.get(f"{url}/metrics").json()
            refused = snap["routes"].get(f"POST {CHAT}", {}).get("by_status", {}).get("503", 0)
            if refused == n - 6 and snap["in_flight"] == 2 and snap["queue_depth"] == 4:
                break
            time.sleep(0.05)
        gated.gate.set()
        runner.join(timeout=60)
        assert not runner.is_alive()
        assert sorted(result) == [200] * 6 + [503] * (n - 6)
        snap = httpx.get(f"{url}/metrics").json()
        chat = snap["routes"][f"POST {CHAT}"]
        assert chat["count"] == n
        assert chat["by_status"] == {"200": 6, "503": n - 6}
        assert snap["in_flight"] == 0 and snap["queue_depth"] == 0
        assert gated.calls == 6


def test_load_within_the_queue_is_all_answered(app_factory):
    n = 16
    with live_server(app_factory(max_concurrency=2, max_queue=n)) as url:
        codes = asyncio.run(_burst(url, n))
        assert codes == [200] * n
        chat = httpx.get(f"{url}/metrics").json()["routes"][f"POST {CHAT}"]
        assert chat["by_status"] == {"200": n}


def test_a_request_past_its_timeout_gets_504_and_frees_its_slot_later(app_factory, tiny_policy):
    # the deadline expires when the policy is entered (not after a time that a loaded
    # machine might overrun), and the next request's deadline never expires
    deadlines = ManualDeadlines()
    fired: list[int] = []

    def expire_the_first_request() -> None:
        if not fired:
            fired.append(deadlines.fire())

    gated = GatedPolicy(tiny_policy[0], on_enter=expire_the_first_request)
    with live_server(app_factory(policy=gated, deadline=deadlines, max_concurrency=1)) as url:
        r = httpx.post(f"{url}{CHAT}", json=ask(), timeout=30)
        assert r.status_code == 504
        assert r.json()["error"]["code"] == "timeout"
        assert httpx.get(f"{url}/metrics").json()["in_flight"] == 1  # its thread still runs
        gated.gate.set()
        deadline = time.monotonic() + 20
        while httpx.get(f"{url}/metrics").json()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{url}/metrics").json()["in_flight"] == 0
        assert httpx.post(f"{url}{CHAT}", json=ask(), timeout=30).status_code == 200
        assert fired == [1] and deadlines.armed == 2 and gated.calls == 2


def test_a_request_waiting_for_a_slot_past_its_timeout_gets_504(app_factory, tiny_policy):
    deadlines = ManualDeadlines()
    gated = GatedPolicy(tiny_policy[0])
    with live_server(app_factory(policy=gated, deadline=deadlines, max_concurrency=1)) as url:
        first: list[httpx.Response] = []
        holder = threading.Thread(
            target=lambda: first.append(httpx.post(f"{url}{CHAT}", json=ask(), timeout=30))
        )
        holder.start()
        assert gated.entered.wait(timeout=30)
        waiting: list[httpx.Response] = []
        queued = threading.Thread(
            target=lambda: waiting.append(httpx.post(f"{url}{CHAT}", json=ask(), timeout=30))
        )
        queued.start()
        end = time.monotonic() + 20
        while (
            httpx.get(f"{url}/metrics").json()["queue_depth"] != 1 or deadlines.armed != 2
        ) and time.monotonic() < end:
            time.sleep(0.05)
        assert deadlines.fire() == 2  # both requests' time is up
        queued.join(timeout=30)
        assert waiting[0].status_code == 504
        snap = httpx.get(f"{url}/metrics").json()
        assert snap["queue_depth"] == 0 and snap["in_flight"] == 1
        gated.gate.set()
        holder.join(timeout=30)
        assert first[0].status_code == 504
        assert gated.calls == 1  # the queued request never reached the model
        assert httpx.post(f"{url}{CHAT}", json=ask(), timeout=30).status_code == 200


def test_shutdown_finishes_the_request_in_flight(app_factory, tiny_policy):
    gated = GatedPolicy(tiny_policy[0])
    app = app_factory(policy=gated)
    answers: list[httpx.Response] = []
    with live_server(app) as url:
        client = threading.Thread(
            target=lambda: answers.append(httpx.post(f"{url}{CHAT}", json=ask(), timeout=60))
        )
        client.start()
        assert gated.entered.wait(timeout=30)
        # leaving the block asks uvicorn to exit while the request is inside the model;
        # open the gate shortly after so the request can finish during the graceful shutdown
        threading.Timer(0.5, gated.gate.set).start()
    client.join(timeout=30)
    assert len(answers) == 1
    assert answers[0].status_code == 200
    assert answers[0].json()["choices"][0]["message"]["role"] == "assistant"
