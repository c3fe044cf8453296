"""A tiny OpenEnv environment from outside spreadrl, served by openenv's own server code
(``create_app``; run it with ``uvicorn tests.envs.length_env:app``).

Each episode asks for a reply of an exact length: ``reset(seed=i)`` draws the length
from the seed, and the one action, ``{"message": ...}``, ends the episode with its
reward: 1.0 for exactly that many characters, else ``1 - |length - asked| / asked``
(0.0 at twice the length or more). A verifiable reward, like an instruction-following
length constraint, and a graded one: an untrained model's random replies score
differently from each other, so GRPO has something to learn from in two steps.
"""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

LENGTHS = (6, 7, 8, 9, 10, 11)


class LengthAction(Action):
    message: str = Field(..., description="Your reply.")


class LengthObservation(Observation):
    prompt: str = Field(default="", description="The task (reset only).")
    length: int = Field(default=0, description="The length of the message sent.")


class LengthEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._target = LENGTHS[0]

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **_: Any
    ) -> LengthObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._target = random.Random(seed).choice(LENGTHS)
        prompt = f"Reply with a message of exactly {self._target} characters."
        return LengthObservation(prompt=prompt, done=False, reward=None)

    def step(self, action: LengthAction, **_: Any) -> LengthObservation:  # type: ignore[override]
        self._state.step_count += 1
        length = len(action.message)
        reward = max(0.0, 1.0 - abs(length - self._target) / self._target)
        return LengthObservation(length=length, done=True, reward=reward)

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    LengthEnvironment, LengthAction, LengthObservation, env_name="length", max_concurrent_envs=4
)
