"""The policy protocol: what the loop reads of a policy is declared, and read as declared."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.engines.scripted import NoopPolicy
from spreadrl.rollout.policy import is_streaming, is_token_level
from spreadrl.rollout.runner import EpisodeJob, context_limit, run_episodes
from spreadrl.rollout.types import PolicyTurn, RunValues, derive_seed
from tests.rollout.fakes import FakePool, make_task
from tests.rollout.test_streaming import ContextPolicy, TurnOnlyPolicy

PACKAGE = Path(__file__).resolve().parents[2] / "spreadrl"
SCANNED = ("rollout", "train")


def _is_policy_object(node: ast.expr, policy_class: bool) -> bool:
    """A policy by its name: an identifier containing "policy" (``policy``,
    ``self._policy``), an attribute ``.inner`` (a wrapper's wrapped policy), or
    ``self`` in a class whose name contains "Policy"."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    if "policy" in name.lower() or (isinstance(node, ast.Attribute) and name == "inner"):
        return True
    return policy_class and isinstance(node, ast.Name) and node.id == "self"


def _probes(tree: ast.AST) -> list[tuple[int, str]]:
    """``getattr``/``hasattr`` calls on a policy object, and ``__getattr__`` in a policy
    class (forwarding whatever is asked hides what a policy declares)."""
    found = []

    def visit(node: ast.AST, policy_class: bool) -> None:
        if isinstance(node, ast.ClassDef):
            policy_class = "policy" in node.name.lower()
        if isinstance(node, ast.FunctionDef) and policy_class and node.name == "__getattr__":
            found.append((node.lineno, "__getattr__ in a policy class"))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and _is_policy_object(node.args[0], policy_class)
        ):
            found.append((node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, ...)"))
        for child in ast.iter_child_nodes(node):
            visit(child, policy_class)

    visit(tree, False)
    return found


def contract_breaches(root: Path = PACKAGE) -> list[str]:
    """Every ``type: ignore`` comment and every attribute probe on a policy under
    ``root``'s rollout/ and train/ packages, as ``path:line: what``."""
    breaches = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            source = path.read_text()
            where = path.relative_to(root.parent)
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if tok.type == tokenize.COMMENT and "type: ignore" in tok.string:
                    breaches.append(f"{where}:{tok.start[0]}: {tok.string.strip()}")
            for line, what in _probes(ast.parse(source)):
                breaches.append(f"{where}:{line}: {what}")
    return breaches


def test_rollout_and_train_neither_silence_the_type_checker_nor_probe_policies():
    """The rule: no ``# type: ignore`` comment in spreadrl/rollout or spreadrl/train, and
    no ``getattr``/``hasattr`` whose first argument names a policy (an identifier
    containing "policy", an attribute ``.inner``, or ``self`` inside a class whose name
    contains "Policy"), nor a ``__getattr__`` in such a class. What the loop needs of a policy is
    declared in :mod:`spreadrl.rollout.policy`; getattr on third-party objects (peft
    modules, transformers configs, vLLM internals, torch dtypes by name) is not a probe
    of a policy and stays allowed."""
    assert contract_breaches() == []


def test_the_scan_finds_what_it_forbids(tmp_path):
    """The rule's scanner on a package written to break each part of it."""
    for folder in SCANNED:
        (tmp_path / folder).mkdir()
    (tmp_path / "rollout" / "a.py").write_text(
        "def run(policy):\n"
        "    x = policy.act()  # type: ignore[call-arg]\n"
        "    return getattr(policy, 'seeds_per_context', False)\n"
    )
    (tmp_path / "train" / "b.py").write_text(
        "class WrappedPolicy:\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(self.inner, name)\n"
        "    def limit(self):\n"
        "        return hasattr(self, 'max_context_tokens') or getattr(self.model, 'config')\n"
    )
    found = [line.split(": ", 1)[1] for line in contract_breaches(tmp_path)]
    assert found == [
        "# type: ignore[call-arg]",
        "getattr(policy, ...)",
        "__getattr__ in a policy class",
        "getattr(self.inner, ...)",
        "hasattr(self, ...)",
    ]


class SeedRecorder:
    """A token policy that answers at once and records the seeds each call was given."""

    token_level = True
    streaming = False
    max_context_tokens = 0

    def __init__(self, tokenizer, seeds_per_context: bool) -> None:
        self.tok = tokenizer
        self.seeds_per_context = seeds_per_context
        self.seen: list[object] = []

    def act(self, contexts, params, *, seeds=None):
        self.seen.append(None if seeds is None else list(seeds))
        end = self.tok.convert_tokens_to_ids("<|im_end|>")
        ids = [*self.tok.encode("Done.", add_special_tokens=False), end]
        return [PolicyTurn("Done.", ids, [-0.5] * len(ids), "stop") for _ in contexts]


def _answer_twice(policy, tok):
    jobs = [EpisodeJob(make_task(), 1, s) for s in range(2)]
    settings = RolloutConfig(scheduler="turn")
    return run_episodes(
        policy, FakePool(), jobs, settings, EpisodeChat.of(tok), run=RunValues(seed=7)
    )


def test_a_policy_that_takes_seeds_gets_one_per_episode_turn(tiny_model):
    """Each episode's first turn is seeded by the run's seed and its own key, so its
    tokens do not depend on which episodes share the batch."""
    _, tok = tiny_model
    policy = SeedRecorder(tok, seeds_per_context=True)
    batch = _answer_twice(policy, tok)
    keys = [f"{t.key}#0" for t in batch.trajectories]
    assert policy.seen == [[derive_seed(7, key) for key in keys]]
    assert len(set(policy.seen[0])) == 2


def test_a_policy_that_seeds_itself_gets_no_seeds(tiny_model):
    _, tok = tiny_model
    policy = SeedRecorder(tok, seeds_per_context=False)
    _answer_twice(policy, tok)
    assert policy.seen == [None]


def test_the_context_limit_is_the_policys_declaration(tiny_model):
    """hf declares its model's positions; the loop reads what a policy declares (the
    loop's clipping to it: test_budgets.test_no_turn_is_asked_past_the_models_context_length)."""
    model, tok = tiny_model
    hf = HFPolicy(model, tok)
    assert hf.max_context_tokens == model.config.max_position_embeddings > 0
    assert context_limit(hf) == model.config.max_position_embeddings
    recorder = SeedRecorder(tok, seeds_per_context=False)
    recorder.max_context_tokens = 321
    assert context_limit(recorder) == 321


def test_streaming_is_what_a_policy_declares(tiny_model):
    """A policy with submit/poll that does not declare ``streaming`` is driven turn by
    turn; one that declares it is a streaming policy; a message policy never is."""
    model, tok = tiny_model
    streaming, turn_only = ContextPolicy(tok), TurnOnlyPolicy(tok)
    assert callable(turn_only.submit) and callable(turn_only.poll)
    assert is_streaming(streaming) and not is_streaming(turn_only)
    assert is_token_level(turn_only) and not is_streaming(HFPolicy(model, tok))
    assert not is_token_level(NoopPolicy()) and not is_streaming(NoopPolicy())


@pytest.mark.parametrize("declared", [True, False])
def test_the_scheduler_follows_the_declaration(tiny_model, declared):
    _, tok = tiny_model
    policy = ContextPolicy(tok)
    policy.streaming = declared
    run_episodes(
        policy, FakePool(), [EpisodeJob(make_task())], RolloutConfig(), EpisodeChat.of(tok)
    )
    assert policy.events[0][0] == ("submit" if declared else "act")
