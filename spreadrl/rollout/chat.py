"""The chat format of a tokenizer, derived from its own chat template, for token-in/token-out rollouts.

An episode's token ids are built by appending, never by re-rendering:

    render_prompt_ids(system + user)           mask 0   ends in the generation prompt
    sampled assistant ids, ending in the stop  mask 1   (as sampled, never re-tokenized)
    tool_response_ids([obs, ...])              mask 0   ends in the next generation prompt
    sampled assistant ids ...                  mask 1

What to append is not typed in: :func:`chat_format` renders the tokenizer's
template with probe messages and reads off the generation prompt (what
``add_generation_prompt`` adds, e.g. ``<|im_start|>assistant\\n``, or
``<|im_start|>assistant\\n<think>\\n`` for Qwen3-4B-Thinking-2507), the turn
end and the part of it the model samples (its first token, the stop id), the
tool-response wrapper (how the template renders tool messages after an
assistant turn, through the next generation prompt), how reasoning and tool
calls are marked. So the same code drives any template of this shape with
that checkpoint's own conventions, and for well-formed turns the appended ids
equal the template's rendering of the whole conversation, token for token
(``tests/rollout/test_chat*.py``, against Qwen3's real tokenizer too).

Qwen3's literals appear once, here: :data:`FALLBACK`, the format of tokenizers
without a template, and the Hermes tool-call text scripted and remote policies
speak. Conventions the appending relies on (Qwen3's, checked by the tests):
the model samples only the first token of the turn end, the rest (``\\n``)
opens the tool-response text; an assistant message must not begin with a
newline (it would merge with the prompt's). Observation text is tokenized as
the template would tokenize it: a tool result that literally contains a
control token gets the control token; tools that echo model-controlled text
should escape it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spreadrl.errors import SpreadrlError

if TYPE_CHECKING:  # annotations only: the chat format loads without transformers (serve's checks)
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatFormat:
    """How one chat template frames the turns a rollout appends.

    ``generation_prompt``: what ``add_generation_prompt`` appends.
    ``stop_text``: the part of the turn end the model samples (one token);
    ``stop_ids``: it, then the tokenizer's eos. ``tool_prefix`` + observations
    joined by ``tool_separator`` + ``tool_suffix``: the text after ``stop_text``
    through the next generation prompt. ``reasoning_prefix``/``reasoning_suffix``:
    what the model writes around its reasoning (the prefix is empty when the
    generation prompt already opened the block); ``think_open``/``think_close``
    and ``tool_call_open``/``tool_call_close``: the markers the parser splits on.
    """

    generation_prompt: str
    stop_text: str
    tool_prefix: str
    tool_separator: str
    tool_suffix: str
    reasoning_prefix: str
    reasoning_suffix: str
    think_open: str
    think_close: str
    tool_call_open: str
    tool_call_close: str
    end_markers: tuple[str, ...]
    stop_ids: tuple[int, ...] = ()
    source: str = "template"

    @property
    def opens_thinking(self) -> bool:
        """The generation prompt opens the reasoning block (the model starts inside it)."""
        return bool(self.think_close) and not self.reasoning_prefix

    def tool_response_text(self, observations: Sequence[str]) -> str:
        """The text the template puts between an assistant's stop and the next assistant turn."""
        if not observations:
            raise ValueError("tool_response_text needs at least one observation")
        return self.tool_prefix + self.tool_separator.join(observations) + self.tool_suffix

    def strip_end_markers(self, text: str) -> str:
        """``text`` without the turn-end and eos markers a decode leaves in it."""
        for marker in self.end_markers:
            text = text.replace(marker, "")
        return text

    def split_reasoning(self, text: str) -> tuple[str | None, str]:
        """(reasoning, content) of a sampled assistant text; reasoning None when there is none.

        With a generation prompt that opens the block, the model writes only the
        close marker; if it never closes it (cut by the length limit), all of it
        is reasoning. Newlines next to the markers are dropped, as the template
        drops them when it renders ``reasoning_content``.
        """
        if not self.think_close:
            return None, text
        close = text.find(self.think_close)
        open_ = text.find(self.think_open) if self.think_open else -1
        if close == -1:
            if open_ != -1:
                return text[open_ + len(self.think_open) :].strip("\n"), text[:open_]
            if self.opens_thinking:
                return text.strip("\n"), ""
            return None, text
        before, after = text[:close], text[close + len(self.think_close) :].lstrip("\n")
        if open_ != -1 and open_ < close:
            return before[open_ + len(self.think_open) :].strip("\n"), before[:open_] + after
        return before.strip("\n"), after

    def assistant_message(self, text: str) -> dict[str, Any]:
        """A sampled turn as a chat message: reasoning in ``reasoning_content``, as templates read it.

        Only when the fields give back exactly ``text`` (:meth:`assistant_text`);
        irregular markup (``<think>x</think>y``, a turn cut mid-thought) stays
        verbatim in ``content``, where the parser still finds the reasoning.
        """
        reasoning, content = self.split_reasoning(text)
        if reasoning is None or self.assistant_text(content, reasoning) != text:
            return {"role": "assistant", "content": text}
        return {"role": "assistant", "content": content, "reasoning_content": reasoning}

    def split_message(self, content: str) -> tuple[str | None, str]:
        """(reasoning, content) of a *message's* content, read as Qwen3's templates read it.

        Not :meth:`split_reasoning`, which reads *sampled* text: there, under a
        generation prompt that opens the block, text without a close marker is
        all reasoning (a turn cut mid-thought). A message's content is what
        follows the reasoning; it holds reasoning only inline, before a close
        marker (the text before the first one, after the last open marker
        before it), else none (None).
        """
        if not self.think_close or self.think_close not in content:
            return None, content
        parts = content.split(self.think_close)
        reasoning = parts[0].rstrip("\n")
        if self.think_open:
            reasoning = reasoning.split(self.think_open)[-1]
        return reasoning.lstrip("\n"), parts[-1].lstrip("\n")

    def assistant_text(self, content: str, reasoning: str | None = None) -> str:
        """What the model samples (before the stop) for a message the template renders from these fields.

        ``reasoning`` None: the content is read for inline reasoning
        (:meth:`split_message`); without any, a template that opens every turn
        with the reasoning block renders an empty one (``<think>\\n\\n</think>\\n\\n``),
        so the model's part is the close marker and the content: the message
        has empty reasoning, never all-reasoning.
        """
        if reasoning is None:
            reasoning, content = self.split_message(content)
        if reasoning is None and not self.opens_thinking:
            return content
        return (
            self.reasoning_prefix
            + (reasoning or "").strip("\n")
            + self.reasoning_suffix
            + content.lstrip("\n")
        )


# The one place Qwen3's chat literals are written: the format of tokenizers without a template.
FALLBACK = ChatFormat(
    generation_prompt="<|im_start|>assistant\n",
    stop_text="<|im_end|>",
    tool_prefix="\n<|im_start|>user\n<tool_response>\n",
    tool_separator="\n</tool_response>\n<tool_response>\n",
    tool_suffix="\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    reasoning_prefix="<think>\n",
    reasoning_suffix="\n</think>\n\n",
    think_open="<think>",
    think_close="</think>",
    tool_call_open="<tool_call>",
    tool_call_close="</tool_call>",
    end_markers=("<|im_end|>", "<|endoftext|>"),
    source="fallback",
)
# Hermes text for a tool result sent to an OpenAI-compatible server as a user message.
HERMES_TOOL_RESPONSE = ("<tool_response>\n", "\n</tool_response>")


def hermes_tool_call(name: object, arguments: object) -> str:
    """A tool call as Hermes text (what Qwen3 models write), for scripted and remote policies."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{FALLBACK.tool_call_open}\n{payload}\n{FALLBACK.tool_call_close}"


def qwen3_coder_tool_call(name: str, arguments: dict[str, object] | None) -> str:
    """A tool call as qwen3_coder text: ``<function=NAME>`` with one ``<parameter=KEY>`` per argument.

    Written the way Qwen3-Coder's chat template renders ``tool_calls``: strings
    verbatim, every other value as JSON, each on its own line, so
    :func:`spreadrl.rollout.parsing.parse_assistant_turn` reads it back typed
    by the tool's schema.
    """
    lines = [FALLBACK.tool_call_open, f"<function={name}>"]
    for key, value in (arguments or {}).items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines += [f"<parameter={key}>", text, "</parameter>"]
    lines += ["</function>", FALLBACK.tool_call_close]
    return "\n".join(lines)


def render_tool_call(
    name: str, arguments: dict[str, object] | None, call_format: str = "hermes"
) -> str:
    """A tool call in ``call_format`` (``hermes`` or ``qwen3_coder``), as a model writes it."""
    if call_format == "qwen3_coder":
        return qwen3_coder_tool_call(name, arguments)
    if call_format != "hermes":
        raise ValueError(f"unknown tool-call format {call_format!r}; use hermes or qwen3_coder")
    return hermes_tool_call(name, arguments)


# Probe texts: plain words a template passes through unchanged and no template contains.
_SYSTEM, _USER = "spreadrl probe system", "spreadrl probe user"
_ANSWER, _REASONING = "spreadrl probe answer", "spreadrl probe reasoning"
_OBS1, _OBS2 = "spreadrl probe observation one", "spreadrl probe observation two"
_TOOL = "spreadrl_probe_tool"
_PROMPT = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER}]


class ChatTemplateError(SpreadrlError):
    """The tokenizer's chat template does not render turns in a shape rollouts can append to."""


def _render(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], generation_prompt: bool
) -> str:
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception as exc:  # jinja errors, raise_exception() in the template, ...
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        roles = "/".join(m["role"] for m in messages)
        raise ChatTemplateError(
            f"chat template of {name}: cannot render a {roles} conversation "
            f"({type(exc).__name__}: {exc})"
        ) from exc


def _after(text: str, marker: str, what: str) -> str:
    at = text.find(marker)
    if at == -1:
        raise ChatTemplateError(f"{what}: the template dropped the probe text {marker!r}")
    return text[at + len(marker) :]


def _tool_call_markers(
    tokenizer: PreTrainedTokenizerBase, header: str, stop_text: str
) -> tuple[str, str] | None:
    """(open, close) around a Hermes-style JSON call, as the template renders ``tool_calls``."""
    call = {"type": "function", "function": {"name": _TOOL, "arguments": {"probe": 1}}}
    messages = [*_PROMPT, {"role": "assistant", "content": "", "tool_calls": [call]}]
    messages.append({"role": "tool", "content": _OBS1})
    try:
        text = _render(tokenizer, messages, False)
    except ChatTemplateError:  # a template without tool calls: the fallback markers stay
        return None
    base = _render(tokenizer, list(_PROMPT), False)
    seg = text[len(base) :] if text.startswith(base) else ""
    name = seg.find(_TOOL)
    start = seg.rfind("{", 0, name) if name != -1 else -1
    if not seg.startswith(header) or start < len(header):
        return None
    try:
        obj, end = json.JSONDecoder().raw_decode(seg, start)
    except json.JSONDecodeError:
        return None
    stop = seg.find(stop_text, end)
    if not isinstance(obj, dict) or obj.get("name") != _TOOL or stop == -1:
        return None
    opening, closing = seg[len(header) : start].strip(), seg[end:stop].strip()
    return (opening, closing) if opening and closing else None


def derive_chat_format(tokenizer: PreTrainedTokenizerBase) -> ChatFormat:
    """Render the tokenizer's chat template with probe messages and read off its format.

    Raises :class:`ChatTemplateError` (naming what is missing) for a template
    whose turns cannot be appended to: no generation prompt, a tool-response
    wrapper that does not end in the generation prompt, or a turn end that does
    not start with one token. Markers the template does not express (reasoning,
    tool calls) keep :data:`FALLBACK`'s.
    """
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    what = f"chat template of {name}"
    base = _render(tokenizer, list(_PROMPT), False)
    with_prompt = _render(tokenizer, list(_PROMPT), True)
    if not with_prompt.startswith(base) or with_prompt == base:
        raise ChatTemplateError(f"{what}: add_generation_prompt adds no assistant prompt")
    generation_prompt = with_prompt[len(base) :]

    answered = _render(tokenizer, [*_PROMPT, {"role": "assistant", "content": _ANSWER}], False)
    turn_end = _after(answered, _ANSWER, what)
    end_ids = tokenizer.encode(turn_end, add_special_tokens=False)
    stop_text = tokenizer.decode(end_ids[:1], skip_special_tokens=False) if end_ids else ""
    if not stop_text or not turn_end.startswith(stop_text):
        raise ChatTemplateError(f"{what}: the assistant turn end {turn_end!r} has no stop token")

    plain = {"role": "assistant", "content": _ANSWER}
    tools = [{"role": "tool", "content": _OBS1}, {"role": "tool", "content": _OBS2}]
    two = _render(tokenizer, [*_PROMPT, plain, *tools], True)
    header = two[len(base) :].split(_ANSWER)[0] if two.startswith(base) else ""
    rest = _after(two, _ANSWER, what)
    if not rest.startswith(stop_text) or not rest.endswith(generation_prompt):
        raise ChatTemplateError(
            f"{what}: tool messages after an assistant turn are not rendered as "
            f"{stop_text!r} ... {generation_prompt!r}: {rest!r}"
        )
    wrapper = rest[len(stop_text) :]
    prefix, _, tail = wrapper.partition(_OBS1)
    separator, _, suffix = tail.partition(_OBS2)
    one = _after(_render(tokenizer, [*_PROMPT, plain, tools[0]], True), _ANSWER, what)
    if not (prefix and suffix) or one != stop_text + prefix + _OBS1 + suffix:
        raise ChatTemplateError(f"{what}: tool responses are not rendered in one wrapper: {rest!r}")

    r_prefix, r_suffix = FALLBACK.reasoning_prefix, FALLBACK.reasoning_suffix
    think_open, think_close = FALLBACK.think_open, FALLBACK.think_close
    thought = {"role": "assistant", "content": _ANSWER, "reasoning_content": _REASONING}
    seg = _render(tokenizer, [*_PROMPT, thought, tools[0]], True)[len(base) :]
    if _REASONING in seg and seg.find(_REASONING) < seg.find(_ANSWER):
        before, _, between = seg.partition(_REASONING)
        between = between.split(_ANSWER)[0]
        if before.startswith(generation_prompt) and between.strip():
            r_prefix, r_suffix = before[len(generation_prompt) :], between
            think_close = between.strip()
            # the opening marker: written by the model, or the last line of the prompt
            think_open = r_prefix.strip() or generation_prompt.rstrip("\n").rsplit("\n", 1)[-1]
    markers = _tool_call_markers(tokenizer, header, stop_text)
    call_open, call_close = markers or (FALLBACK.tool_call_open, FALLBACK.tool_call_close)

    eos, pad = getattr(tokenizer, "eos_token", None), getattr(tokenizer, "pad_token", None)
    stop_ids = [end_ids[0]]
    eos_id = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos_id, int) and eos_id not in stop_ids:
        stop_ids.append(eos_id)
    return ChatFormat(
        generation_prompt=generation_prompt,
        stop_text=stop_text,
        tool_prefix=prefix,
        tool_separator=separator,
        tool_suffix=suffix,
        reasoning_prefix=r_prefix,
        reasoning_suffix=r_suffix,
        think_open=think_open,
        think_close=think_close,
        tool_call_open=call_open,
        tool_call_close=call_close,
        end_markers=tuple(dict.fromkeys(m for m in (stop_text, eos, pad) if m)),
        stop_ids=tuple(stop_ids),
    )


def chat_format(tokenizer: PreTrainedTokenizerBase | None) -> ChatFormat:
    """The chat format of ``tokenizer``, derived anew on each call; :data:`FALLBACK` without one.

    Deriving renders the template several times, so whoever starts a set of
    episodes derives it once, in an :class:`EpisodeChat`, and carries that."""
    if tokenizer is None:
        return FALLBACK
    if not getattr(tokenizer, "chat_template", None):
        return _fallback_with_ids(tokenizer)
    fmt = derive_chat_format(tokenizer)
    log.debug("chat format of %s: %s", getattr(tokenizer, "name_or_path", "?"), fmt)
    return fmt


@dataclass(frozen=True)
class EpisodeChat:
    """A tokenizer and its chat format, derived once for a set of episodes and carried down.

    The caller that starts episodes (GRPO's rollouts, eval, serve, the demo)
    builds it with :meth:`of`; the loop renders prompts and appends tool
    responses through it, so the template is read once, not at every turn."""

    tokenizer: PreTrainedTokenizerBase
    fmt: ChatFormat

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> EpisodeChat:
        """``tokenizer`` with the format read off its chat template (:func:`chat_format`)."""
        return cls(tokenizer, chat_format(tokenizer))

    def prompt_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> list[int]:
        """:func:`render_prompt_ids` with this tokenizer."""
        return render_prompt_ids(self.tokenizer, messages, tools)

    def tool_response_ids(self, observations: Sequence[str]) -> list[int]:
        """:func:`tool_response_ids` with this tokenizer and format."""
        return tool_response_ids(self.tokenizer, observations, self.fmt)

    def assistant_end_ids(self) -> list[int]:
        """:func:`assistant_end_ids` of this format."""
        return assistant_end_ids(self.fmt)


def _fallback_with_ids(tokenizer: PreTrainedTokenizerBase) -> ChatFormat:
    """:data:`FALLBACK` with this tokenizer's stop ids (its ``<|im_end|>``, then its eos)."""
    ids: list[int] = []
    for token in (FALLBACK.stop_text, getattr(tokenizer, "eos_token", None)):
        if token is None:
            continue
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    if not ids:
        raise ChatTemplateError(
            f"{getattr(tokenizer, 'name_or_path', 'tokenizer')}: no chat template, "
            f"and neither {FALLBACK.stop_text} nor an eos token to stop on"
        )
    return replace(FALLBACK, stop_ids=tuple(ids))


def render_prompt_ids(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
) -> list[int]:
    """Ids of ``messages`` rendered by the tokenizer's chat template, ending in the generation prompt."""
    text = tokenizer.apply_chat_template(
        list(messages),
        tools=list(tools) if tools else None,
        add_generation_prompt=True,
        tokenize=False,
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def tool_response_text(observations: Sequence[str], fmt: ChatFormat = FALLBACK) -> str:
    """The text ``fmt``'s template puts between an assistant's stop and the next assistant turn."""
    return fmt.tool_response_text(observations)


def tool_response_ids(
    tokenizer: PreTrainedTokenizerBase, observations: Sequence[str], fmt: ChatFormat
) -> list[int]:
    """Ids to append after an assistant turn that ended with its stop token.

    One wrapper holding every observation (one per tool call of the turn, in
    order), then the prompt for the next assistant turn. Not trained (mask 0).
    """
    if not observations:
        raise ValueError("tool_response_ids needs at least one observation")
    text = fmt.tool_response_text(observations)
    return list(tokenizer.encode(text, add_special_tokens=False))


def assistant_end_ids(fmt: ChatFormat) -> list[int]:
    """Ids that close an assistant turn the sampler cut short (length limit): the stop token.

    The rollout loop appends these with mask 0, so the context stays a
    well-formed conversation and :func:`tool_response_ids` can follow.
    """
    return list(fmt.stop_ids[:1])
