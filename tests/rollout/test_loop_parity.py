"""Loop settings for Spreadsheet-RL parity: call caps, middle truncation, calls in reasoning, qwen3_coder.

Each setting is driven end to end through ``run_episodes`` with a fake pool that
records which calls reached the environment, beside parser-level checks.
"""

from __future__ import annotations

import pytest

from spreadrl.env.types import Observation, StepResult, ToolCall
from spreadrl.errors import ConfigError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.parsing import parse_assistant_turn
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from tests.rollout.fakes import FakePool, done, make_task

SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": props},
        },
    }
    for name, props in [
        (
            "write_range",
            {"range": {"type": "string"}, "data": {"type": ["array", "string", "number"]}},
        ),
        (
            "inspect_range",
            {"range": {"type": "string"}, "include_details": {"type": "boolean"}},
        ),
        (
            "fill_formula",
            {
                "start_cell": {"type": "string"},
                "end_row": {"type": "integer"},
                "formula_template": {"type": "string"},
            },
        ),
        ("delete_rows", {"rows": {"type": "array", "items": {"type": "string"}}}),
    ]
]
NAMES = [s["function"]["name"] for s in SCHEMAS]


class ParityPool(FakePool):
    """FakePool with the schemas above; inspect_range is the one read-only tool."""

    def __init__(self, observation: str = "ok") -> None:
        super().__init__(max_calls=100)
        self.observation = observation

    def reset(self, episode_id, task, case):
        self.calls[episode_id] = []
        info = {"parallel_safe_tools": ["inspect_range"]}
        return done(Observation("Put 42 in A1.", "", SCHEMAS, info))

    def step(self, episode_id, call):
        self.calls[episode_id].append(call)
        return done(StepResult(self.observation, True))


class Script:
    token_level = False

    def __init__(self, turns: list[str]) -> None:
        self.turns = turns

    def act_messages(self, states, params):
        return [
            PolicyTurn(text=self.turns[min(s.turns_taken, len(self.turns) - 1)]) for s in states
        ]


def run_one(turns: list[str], pool: ParityPool | None = None, **settings):
    pool = pool or ParityPool()
    out = run_episodes(
        Script([*turns, "Done."]), pool, [EpisodeJob(make_task())], RolloutConfig(**settings)
    )
    traj = out.trajectories[0]
    tool_messages = [m["content"] for m in traj.messages if m["role"] == "tool"]
    return traj, pool.calls["t1/1/0"], tool_messages


def calls(*names: str) -> str:
    return "\n".join(format_tool_call(n, {"range": f"A{i}"}) for i, n in enumerate(names, 1))


# ---- parallel cap: reject (today) or skip (Spreadsheet-RL) ----------------------------------
def test_extra_calls_reject_runs_none_and_skip_runs_the_first_ones():
    turn = calls("inspect_range", "inspect_range", "inspect_range")
    traj, ran, tool = run_one([turn], max_calls_per_turn=2)
    assert ran == [] and traj.parse_errors == 1
    assert tool == ["Error: 3 tool calls in one turn; at most 2 allowed per turn"]

    traj, ran, tool = run_one([turn], max_calls_per_turn=2, extra_calls="skip")
    assert [c.arguments["range"] for c in ran] == ["A1", "A2"]
    assert traj.parse_errors == 0 and traj.tool_calls == 2
    assert tool[:2] == ["ok", "ok"] and len(tool) == 3
    assert tool[2].startswith("Error: not run") and "max_calls_per_turn" in tool[2]


# ---- serial cap: a turn that edits runs only its first N calls -----------------------------
def test_serial_cap_holds_back_calls_of_a_turn_that_writes():
    turn = calls("write_range", "inspect_range", "inspect_range", "write_range")
    traj, ran, tool = run_one([turn], max_calls_per_turn=20, max_serial_calls=2)
    assert [c.arguments["range"] for c in ran] == ["A1", "A2"]
    assert tool[:2] == ["ok", "ok"]
    assert len(tool) == 4 and all("max_serial_calls" in t for t in tool[2:])
    assert traj.tool_calls == 2


def test_serial_cap_leaves_read_only_turns_alone_and_zero_is_off():
    reads = calls(*["inspect_range"] * 5)
    _, ran, tool = run_one([reads], max_calls_per_turn=20, max_serial_calls=2)
    assert len(ran) == 5 and tool == ["ok"] * 5
    writes = calls(*["write_range"] * 5)
    _, ran, _ = run_one([writes], max_calls_per_turn=20, max_serial_calls=0)
    assert len(ran) == 5


def test_serial_and_parallel_caps_together_answer_every_call_in_order():
    turn = calls(*["write_range"] * 6)
    _, ran, tool = run_one([turn], max_calls_per_turn=4, extra_calls="skip", max_serial_calls=3)
    assert len(ran) == 3 and len(tool) == 6
    assert ["serial" in t for t in tool[3:]] == [True, False, False]
    assert all("max_calls_per_turn" in t for t in tool[4:])


# ---- truncation in characters, head and tail kept ------------------------------------------
def test_tool_response_cut_in_characters_keeps_head_and_tail():
    long = "HEAD" + "x" * 5000 + "TAIL"
    pool = ParityPool(observation=long)
    _, _, tool = run_one(
        [calls("inspect_range")], pool, max_tool_response_chars=100, max_tool_response_tokens=10**6
    )
    text = tool[0]
    assert text.startswith("HEAD" + "x" * 46) and text.endswith("x" * 46 + "TAIL")
    assert f"{len(long) - 100} characters" in text
    assert len(text) < 100 + 80  # the kept halves plus the marker


def test_char_cut_off_by_default_keeps_the_head_only_token_cut():
    long = "HEAD" + "x" * 5000 + "TAIL"
    _, _, tool = run_one([calls("inspect_range")], ParityPool(long), max_tool_response_tokens=100)
    assert tool[0].startswith("HEAD") and "TAIL" not in tool[0]
    _, _, tool = run_one([calls("inspect_range")], ParityPool("short"), max_tool_response_chars=10)
    assert tool == ["short"]


# ---- a call inside the reasoning -----------------------------------------------------------
def test_call_inside_reasoning_is_ignored_or_reported():
    turn = "<think>I could " + format_tool_call("inspect_range", {"range": "A1"}) + "</think>Done."
    traj, ran, tool = run_one([turn])
    assert ran == [] and tool == [] and traj.stop_reason == "answered"

    traj, ran, tool = run_one([turn], calls_in_reasoning="error")
    assert ran == [] and traj.parse_errors == 1
    assert tool[0].startswith("Error: a tool call (<tool_call>) inside the reasoning")
    assert traj.turns == 2  # the model got the error and answered in the next turn


def test_call_after_reasoning_runs_with_the_error_setting():
    turn = "<think>plan</think>\n" + format_tool_call("inspect_range", {"range": "A1"})
    traj, ran, _ = run_one([turn], calls_in_reasoning="error")
    assert len(ran) == 1 and traj.parse_errors == 0


# ---- qwen3_coder format --------------------------------------------------------------------
def test_qwen3_coder_calls_are_typed_by_the_schema_end_to_end():
    args = {
        "write_range": {"range": "B2", "data": [[1, "a"], [2.5, None]]},
        "fill_formula": {"start_cell": "C2", "end_row": 9, "formula_template": "=A2*2"},
        "delete_rows": {"rows": ["3", "7:9"]},
        "inspect_range": {"range": "A1:C3", "include_details": True},
    }
    turn = "\n".join(format_tool_call(n, a, "qwen3_coder") for n, a in args.items())
    _, ran, _ = run_one([turn], max_calls_per_turn=4, tool_call_format="qwen3_coder")
    assert ran == [ToolCall(n, a) for n, a in args.items()]
    # the same text read as Hermes is malformed: the format is a real switch
    traj, ran, _ = run_one([turn], max_calls_per_turn=4)
    assert ran == [] and traj.parse_errors == 4


def test_qwen3_coder_text_as_a_model_writes_it():
    text = (
        "Let me fill it.\n<tool_call>\n<function=fill_formula>\n<parameter=start_cell>\nC2\n"
        "</parameter>\n<parameter=end_row>\n12\n</parameter>\n<parameter=formula_template>\n"
        "=SUM(A2:B2)\n</parameter>\n</function>\n<function=inspect_range>\n<parameter=range>\n"
        "C2:C12\n</parameter>\n</function>\n</tool_call>"
    )
    parsed = parse_assistant_turn(
        text, NAMES, max_calls=5, call_format="qwen3_coder", schemas=SCHEMAS
    )
    assert parsed.errors == [] and parsed.content == "Let me fill it."
    assert parsed.tool_calls == [
        ToolCall(
            "fill_formula", {"start_cell": "C2", "end_row": 12, "formula_template": "=SUM(A2:B2)"}
        ),
        ToolCall("inspect_range", {"range": "C2:C12"}),
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<function=inspect_range><parameter=range>A1</parameter>", "unclosed <function"),
        ("<function=inspect_range><parameter=range>A1</function>", "unclosed <parameter=range>"),
        ('{"name": "inspect_range", "arguments": {}}', "expected <function=NAME>"),
        ("<function=nope></function>", "unknown tool 'nope'"),
        ("<function=a b></function>", "invalid function name"),
        ("   ", "empty <tool_call>"),
    ],
)
def test_malformed_qwen3_coder_calls_become_errors(body, message):
    parsed = parse_assistant_turn(
        f"<tool_call>{body}</tool_call>", NAMES, call_format="qwen3_coder", schemas=SCHEMAS
    )
    assert parsed.tool_calls == [] and len(parsed.errors) == 1
    assert message in parsed.errors[0]


def test_qwen3_coder_values_that_do_not_fit_the_type_stay_text():
    body = (
        "<function=fill_formula><parameter=end_row>ten</parameter>"
        "<parameter=start_cell>null</parameter><parameter=other>[1]</parameter></function>"
    )
    parsed = parse_assistant_turn(
        f"<tool_call>{body}</tool_call>", None, call_format="qwen3_coder", schemas=SCHEMAS
    )
    assert parsed.tool_calls == [
        ToolCall("fill_formula", {"end_row": "ten", "start_cell": None, "other": "[1]"})
    ]


# ---- the recipe keys -----------------------------------------------------------------------
def test_recipe_keys_default_to_todays_behaviour():
    default = RolloutConfig()
    assert (
        default.max_calls_per_turn,
        default.extra_calls,
        default.max_serial_calls,
        default.max_tool_response_chars,
        default.calls_in_reasoning,
        default.tool_call_format,
    ) == (1, "reject", 0, 0, "ignore", "hermes")
    with pytest.raises(ConfigError, match="max_serial_calls"):
        RolloutConfig(max_serial_calls=-1)


# ---- with the real gym and the spreadsheet-rl tools ---------------------------------------
def test_upstream_loop_settings_with_the_spreadsheet_rl_gym(tmp_path):
    import json

    from spreadrl.env.config import EnvConfig
    from spreadrl.env.factory import make_env_pool
    from tests.env.spreadsheet.gym_helpers import make_task as gym_task

    def answer(ws):
        for r in range(2, 7):
            ws[f"D{r}"] = f"=B{r}*C{r}"

    task = gym_task(tmp_path, answer)
    fill = {"start_cell": "D2", "end_row": 6, "formula_template": "=B2*C2"}
    turn = "<think>Read, then fill.</think>\n" + "\n".join(
        [
            format_tool_call("inspect_range", {"range": "A1:C2"}),
            format_tool_call("fill_formula", fill),
            format_tool_call("write_range", {"range": "E1", "data": "note"}),
        ]
    )
    settings = RolloutConfig(
        max_calls_per_turn=20, extra_calls="skip", max_serial_calls=2, calls_in_reasoning="error"
    )
    with make_env_pool(EnvConfig(tools="spreadsheet-rl"), workers=0) as pool:
        out = run_episodes(Script([turn, "Done."]), pool, [EpisodeJob(task)], settings)
    traj = out.trajectories[0]
    tool = [json.loads(m["content"]) if m["content"].startswith("{") else m["content"]
            for m in traj.messages if m["role"] == "tool"]  # fmt: skip
    assert tool[0]["ranges"][0]["cells"][0] == {"address": "A1", "value": "Region"}
    assert tool[1]["filled_cells"] == 5 and tool[1]["recalculated"]
    assert tool[2].startswith("Error: not run") and "max_serial_calls" in tool[2]
    assert traj.tool_calls == 2 and traj.passed and traj.stop_reason == "answered"
