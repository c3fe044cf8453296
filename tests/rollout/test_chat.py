"""Token-in/token-out rendering: appended segments equal the chat template's full rendering."""

from __future__ import annotations

import json

import pytest

from spreadrl.models.tokenizer import default_corpus, tool_schema, train_tokenizer
from spreadrl.rollout.chat import (
    FALLBACK,
    assistant_end_ids,
    chat_format,
    render_prompt_ids,
    tool_response_ids,
    tool_response_text,
)

TOOLS = [
    tool_schema("write_range", "Write values.", {"range": {"type": "string"}, "values": {}}),
    tool_schema("inspect_range", "Read cells.", {"ranges": {"type": "array"}}),
]
PROMPT = [
    {"role": "system", "content": "You are a spreadsheet agent."},
    {"role": "user", "content": "Write the sum of C3:C20 into cell C22.\n\nSheet1: A1:C20"},
]


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(default_corpus(size=150), vocab_size=400)


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def full_ids(tok, messages, add_generation_prompt: bool) -> list[int]:
    text = tok.apply_chat_template(
        messages, tools=TOOLS, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return encode(tok, text)


# Assistant turns as a policy would sample them; observations as the gym returns them.
TURNS = [
    ([call("inspect_range", ranges=["C3:C20"])], ["C3: 4\nC4: 7  \n"]),
    (
        [
            "<think>\nTwo writes.\n</think>\n\n"
            + call("write_range", range="C22", values="=SUM(C3:C20)")
            + "\n"
            + call("write_range", range="D22", values=1)
        ],
        ['{"ok": true, "written": 1}', "  Error: D22 is protected"],
    ),
    (["Let me check. " + call("inspect_range", ranges=["C22"])], ["C22: =SUM(C3:C20) -> 11"]),
]
FINAL = "Done. C22 holds the total."


def test_appended_segments_equal_the_full_render(tok):
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    ids = render_prompt_ids(tok, PROMPT, TOOLS)
    assert ids == full_ids(tok, PROMPT, True)
    messages = list(PROMPT)
    for contents, observations in TURNS:
        (content,) = contents
        ids += encode(tok, content) + [im_end]  # what the policy sampled, ending in im_end
        ids += tool_response_ids(tok, observations, chat_format(tok))
        messages.append({"role": "assistant", "content": content})
        messages += [{"role": "tool", "content": o} for o in observations]
        # at every turn, the context the model sees is exactly the template's rendering
        assert ids == full_ids(tok, messages, True)
    ids += encode(tok, FINAL) + [im_end]
    messages.append({"role": "assistant", "content": FINAL})
    # the template also closes the last turn with a newline the model never samples
    assert ids + encode(tok, "\n") == full_ids(tok, messages, False)


def test_tool_response_text_matches_qwen3_layout():
    assert tool_response_text(["a", "b"]) == (
        "\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError):
        tool_response_ids(None, [], FALLBACK)


def test_tool_response_ids_are_template_tokens(tok):
    ids = tool_response_ids(tok, ["x"], chat_format(tok))
    special = {tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")}
    markup = {tok.convert_tokens_to_ids(t) for t in ("<tool_response>", "</tool_response>")}
    assert special <= set(ids) and markup <= set(ids)
    assert tok.decode(ids) == tool_response_text(["x"])


def test_length_cut_turn_is_closed_then_continues(tok):
    """A turn cut before im_end: closing ids make the context a well-formed conversation again."""
    end = assistant_end_ids(chat_format(tok))
    assert end == [tok.convert_tokens_to_ids("<|im_end|>")]
    cut = encode(tok, '<tool_call>\n{"name": "write_')
    ids = render_prompt_ids(tok, PROMPT, TOOLS) + cut + end
    ids += tool_response_ids(tok, ["Error: unterminated <tool_call>"], chat_format(tok))
    text = tok.decode(ids)
    assert text.endswith(
        '{"name": "write_<|im_end|>\n<|im_start|>user\n<tool_response>\nError: unterminated '
        "<tool_call>\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_prompt_without_tools_has_no_tools_block(tok):
    text = tok.decode(render_prompt_ids(tok, PROMPT, None))
    assert "<tools>" not in text
    assert text.endswith("<|im_start|>assistant\n")


def test_templates_rollouts_cannot_append_to_are_named_errors():
    from spreadrl.rollout.chat import ChatTemplateError, chat_format, derive_chat_format

    tok = train_tokenizer(default_corpus(size=50), vocab_size=300)
    assert chat_format(tok).source == "template"
    # no generation prompt: nothing tells where the assistant turn starts
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"
    with pytest.raises(ChatTemplateError, match="add_generation_prompt adds no assistant prompt"):
        derive_chat_format(tok)
    # a template that refuses tool messages
    tok.chat_template = (
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools') }}"
        "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="cannot render a system/user/assistant/tool"):
        chat_format(tok)
    # no template at all: Qwen3's format, with this tokenizer's stop id
    tok.chat_template = None
    fmt = chat_format(tok)
    assert fmt.source == "fallback" and fmt.stop_ids[0] == tok.convert_tokens_to_ids("<|im_end|>")
