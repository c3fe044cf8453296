"""Token-in/token-out: the ids trained on are exactly the ids the policy saw and sampled."""

from spreadrl.rollout.chat import EpisodeChat, chat_format, tool_response_ids
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn, RunValues
from tests.rollout.fakes import FakePool, make_task


class RecordingPolicy:
    """Token-level policy that 'samples' scripted texts and records every context it was given."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tokenizer, texts):
        self.tokenizer = tokenizer
        self.texts = texts
        self.contexts = []
        self.turn = 0

    def act(self, contexts, params, *, seeds=None):
        self.contexts.append([list(c) for c in contexts])
        text = self.texts[min(self.turn, len(self.texts) - 1)]
        self.turn += 1
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [end]
        return [PolicyTurn(text, list(ids), [-0.5] * len(ids), "stop") for _ in contexts]


def test_ids_equal_what_the_model_saw_and_the_template_rendering(tiny_model):
    _, tok = tiny_model
    call = format_tool_call("write_range", {"range": "A1", "values": 42})
    policy = RecordingPolicy(tok, [call, "Done."])
    out = run_episodes(
        policy, FakePool(), [EpisodeJob(make_task())], RolloutConfig(), EpisodeChat.of(tok)
    )
    t = out.trajectories[0]
    assert t.passed and t.turns == 2
    # every turn's context is exactly prompt + everything appended so far
    full = t.prompt_ids + t.response_ids
    for contexts in policy.contexts:
        assert full[: len(contexts[0])] == contexts[0]
    # sampled tokens carry mask 1 and their log-probs; the tool response carries mask 0
    first_len = len(tok.encode(call, add_special_tokens=False)) + 1
    assert t.response_mask[:first_len] == [1] * first_len
    obs_ids = tool_response_ids(tok, ["wrote"], chat_format(tok))
    assert t.response_ids[first_len : first_len + len(obs_ids)] == obs_ids
    assert t.response_mask[first_len : first_len + len(obs_ids)] == [0] * len(obs_ids)
    assert t.rollout_logprobs[:first_len] == [-0.5] * first_len
    assert len(t.response_ids) == len(t.response_mask) == len(t.rollout_logprobs)
    # the appended ids equal the chat template's rendering of the whole conversation
    rendered = tok.apply_chat_template(t.messages, tools=t.tools, tokenize=False)
    assert tok.decode(full) == rendered.rstrip("\n")


def test_hf_policy_samples_batched_turns_with_logprobs(tiny_model):
    model, tok = tiny_model
    policy = HFPolicy(model, tok)
    settings = RolloutConfig(
        temperature=1.0, max_new_tokens_per_turn=12, max_turns=2, max_response_tokens=40
    )
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(4)]
    out = run_episodes(
        policy, FakePool(), jobs, settings, EpisodeChat.of(tok), run=RunValues(seed=0)
    )
    for t in out.trajectories:
        assert 1 <= t.turns <= 2
        assert t.stop_reason in {"answered", "max_turns", "max_response_tokens"}
        assert len(t.response_ids) == len(t.response_mask) == len(t.rollout_logprobs)
        sampled = [lp for lp, m in zip(t.rollout_logprobs, t.response_mask, strict=True) if m]
        assert sampled and all(lp <= 0.0 for lp in sampled)
