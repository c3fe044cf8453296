"""A token policy for harness tests: a tool call, then an answer; log-probs drawn from the seed."""

import random

from spreadrl.rollout.types import PolicyTurn

CALL = (
    '<tool_call>\n{"name": "write_range", "arguments": {"range": "A1", "values": 42}}\n</tool_call>'
)


class ScriptedTokenPolicy:
    """Writes a tool call until the context holds a tool response, then answers.

    Its log-probs come from each row's seed, so two paths agree only when they seed
    each turn alike; every call is recorded (``contexts``)."""

    token_level = True
    streaming = False
    seeds_per_context = True
    max_context_tokens = 0

    def __init__(self, tokenizer, stop_id):
        self.tokenizer, self.stop_id = tokenizer, stop_id
        self.contexts = []

    def act(self, contexts, params, *, seeds=None):
        turns = []
        for i, ctx in enumerate(contexts):
            self.contexts.append(list(ctx))
            seen = self.tokenizer.decode(list(ctx), skip_special_tokens=False)
            text = "Done: 42 is in A1." if "<tool_response>" in seen else CALL
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.stop_id]
            ids = ids[: params.max_new_tokens]
            rng = random.Random(seeds[i] if seeds else params.seed)
            turns.append(
                PolicyTurn(
                    text=self.tokenizer.decode(ids, skip_special_tokens=False),
                    token_ids=ids,
                    logprobs=[-rng.random() for _ in ids],
                    finish_reason="stop" if ids[-1] == self.stop_id else "length",
                )
            )
        return turns
