"""A KV-cache layer written in place, for the hf backend's ``generate``.

Shared by :mod:`spreadrl.rollout.engines.hf` (every generation's cache) and
:mod:`spreadrl.rollout.cascade` (whose per-row suffix buffers are these).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast, ModelOutput


class PreallocatedLayer(DynamicLayer):
    """transformers' ``DynamicLayer`` with its keys and values in buffers allocated once.

    ``DynamicLayer.update`` appends each new token with ``torch.cat``, copying the whole
    cache of every layer at every decoding step: on the GRPO shape of ``bench trl`` (600-token
    prompts, 128 new tokens) that copying was the largest single cost of generation. This
    layer writes each token into a buffer of ``capacity`` positions instead and hands
    attention a view of the filled part, so attention sees exactly the tensors the dynamic
    cache would give it (same length, same values: same samples and log-probs), where a
    ``StaticCache`` would attend over the whole buffer under a mask. Past ``capacity`` the
    buffer doubles.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(int(capacity), 1)
        self.length = 0
        # the buffers (None until the first update), of which keys/values are views
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self._allocate(key_states, value_states, self.capacity)
        self.is_initialized = True

    def _allocate(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        """New buffers of ``capacity`` positions holding the first ``self.length`` of
        ``keys`` / ``values``."""
        shape_k, shape_v = list(keys.shape), list(values.shape)
        shape_k[-2] = shape_v[-2] = capacity
        new_k = torch.empty(shape_k, dtype=keys.dtype, device=keys.device)
        new_v = torch.empty(shape_v, dtype=values.dtype, device=values.device)
        if self.length:
            new_k[..., : self.length, :] = keys[..., : self.length, :]
            new_v[..., : self.length, :] = values[..., : self.length, :]
        self._keys, self._values, self.capacity = new_k, new_v, capacity
        self._expose()

    def _expose(self) -> None:
        self.keys = self._keys[..., : self.length, :]
        self.values = self._values[..., : self.length, :]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        elif self.keys is not None and (
            self.keys.shape[-2] != self.length or self.keys.data_ptr() != self._keys.data_ptr()
        ):
            # something (crop, batch selection) replaced the tensors: adopt them
            self.length = self.keys.shape[-2]
            self._allocate(self.keys, self.values, max(self.capacity, self.length))
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            self._allocate(self._keys, self._values, max(end, 2 * self.capacity))
        self._keys[..., self.length : end, :] = key_states
        self._values[..., self.length : end, :] = value_states
        self.length = end
        self._expose()
        return self.keys, self.values

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.is_initialized:
            index = beam_idx.to(self._keys.device)
            self._keys = self._keys.index_select(0, index)
            self._values = self._values.index_select(0, index)
            self._expose()

    def reset(self) -> None:
        super().reset()
        self.length = 0
        self._keys = self._values = None


def cache_name() -> str:
    """What transformers calls the KV cache: the forward/``generate`` argument and output field.

    transformers renamed ``past_key_values`` to ``cache`` (5.24 still accepts the old
    name but warns on every call, FutureWarning, removal announced for 6.0); the older
    versions the project supports (from 5.16.1, vLLM's pins) know only the old name.
    Decided by what the installed version's output classes hold, not by its number.
    """
    global _CACHE_NAME
    if _CACHE_NAME is None:
        fields = CausalLMOutputWithPast.__dataclass_fields__
        _CACHE_NAME = "cache" if "cache" in fields else "past_key_values"
    return _CACHE_NAME


_CACHE_NAME: str | None = None


def output_cache(output: ModelOutput) -> Cache:
    """The KV cache a model forward returned, read under the installed version's name."""
    return getattr(output, cache_name())
