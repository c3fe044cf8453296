"""Cascade (shared-prefix) attention for decoding with the hf backend.

The G rollouts of a GRPO group start from one identical context (tool schema and task,
~600 tokens). ``HFPolicy`` prefills it once per group; copying that KV cache to every row
would then have each decoded token of each row read its own copy of the same prompt keys
and values, G times the memory traffic of reading it once. Here the prompt's keys and
values are kept once per distinct context (``[groups, kv_heads, P, head_dim]``) beside a
per-row suffix buffer (the last context token and the generated tokens, written in place),
and each decode step computes the prefix scores once per group (all of that group's queries
stacked against its keys) and the suffix scores per row, then one exact softmax over both
(the log-sum-exp merge of the two partial softmaxes, done as one).

transformers reaches it through its attention registry: ``cascade_attention(model, cache)``
registers the function under ``ATTN_NAME`` (with transformers' sdpa mask) and switches the
model's attention implementation to it only for the duration of a ``generate`` call. The
function falls back to transformers' own sdpa attention whenever the cascade does not apply
(a query longer than one token, another cache, another caller).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator, Sequence

import torch
from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache
from transformers.cache_utils import Cache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from spreadrl.rollout.kv_cache import PreallocatedLayer

ATTN_NAME = "spreadrl_cascade"

_ACTIVE: contextvars.ContextVar[Cache | None] = contextvars.ContextVar(
    "spreadrl_cascade", default=None
)
_REGISTERED = False
_SWITCH_LOCK = threading.Lock()
# id(config) -> [blocks inside, implementation before]
_SWITCHED: dict[int, list[int | str | None]] = {}


def cascade_cache(
    prefill_cache: DynamicCache, inverse: Sequence[int], new_tokens: int
) -> DynamicCache:
    """A cache for ``generate`` whose layers hold ``prefill_cache``'s keys and values once per
    distinct context and a suffix buffer of ``new_tokens + 1`` positions per row.

    ``inverse[row]`` is the distinct context (row of ``prefill_cache``) of batch row ``row``;
    ``prefill_cache`` is a ``DynamicCache`` whose layers are plain full-attention layers.
    """
    device = prefill_cache.layers[0].keys.device
    group_of_row = torch.tensor(list(inverse), dtype=torch.long, device=device)
    shared: dict[str, object] = {}  # per-forward state the layers share (the converted mask)
    prefill_cache.layers = [
        CascadeLayer(layer.keys, layer.values, group_of_row, new_tokens + 1, shared)
        for layer in prefill_cache.layers
    ]
    return prefill_cache


def is_cascade_cache(cache: object) -> bool:
    """Whether ``cache`` is one ``cascade_cache`` made (its layers hold a shared prefix)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and isinstance(layers[0], CascadeLayer)


@contextlib.contextmanager
def cascade_attention(model: torch.nn.Module, cache: Cache) -> Iterator[None]:
    """Run the model's attention through the cascade function while the block runs, with
    ``cache`` as this context's cascade state; the attention implementation and the state
    are restored on exit, also on error.

    The implementation is the model config's, shared by every thread using the model: it
    is switched by the first block to enter and restored by the last to leave, so
    overlapping calls never see it restored under them (a thread without cascade state
    gets plain sdpa from the function either way).
    """
    _register()
    config = model.config
    with _SWITCH_LOCK:
        entry = _SWITCHED.get(id(config))
        if entry is None:
            entry = _SWITCHED[id(config)] = [0, config._attn_implementation]
            config._attn_implementation = ATTN_NAME
        entry[0] += 1
    token = _ACTIVE.set(cache)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        with _SWITCH_LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                config._attn_implementation = entry[1]
                del _SWITCHED[id(config)]


def _register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    AttentionInterface.register(ATTN_NAME, cascade_attention_forward)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
    _REGISTERED = True


def cascade_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; output ``[batch, q_len, heads, head_dim]``.

    The cascade applies when ``key`` is the suffix a cascade layer of the active cache just
    handed back and the query is one token; a longer query on such a layer attends over the
    prefix and suffix joined (correct, not fast); anything else is transformers' sdpa.
    """
    layer = _active_layer(module, key)
    if (
        layer is not None
        and query.shape[2] == 1
        and dropout == 0.0
        and (attention_mask is None or attention_mask.shape[-1] == layer.get_seq_length())
    ):
        return _cascade_decode(query, layer, attention_mask, scaling), None
    if layer is not None:
        key, value = layer.joined()
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
    )


def _active_layer(module: torch.nn.Module, key: torch.Tensor) -> CascadeLayer | None:
    cache = _ACTIVE.get()
    index = getattr(module, "layer_idx", None)
    if cache is None or index is None or index >= len(cache.layers):
        return None
    layer = cache.layers[index]
    if not isinstance(layer, CascadeLayer) or key is not layer.keys:
        return None
    return layer


def _cascade_decode(
    query: torch.Tensor, layer: CascadeLayer, mask: torch.Tensor | None, scaling: float | None
) -> torch.Tensor:
    """One decoded token per row (``query`` ``[batch, heads, 1, dim]``).

    The prefix scores are computed once per group: the group's rows' queries, GQA-packed
    (the heads sharing a kv head side by side), stacked as ``[groups, kv_heads, slots * rep,
    dim]`` against the group's prefix keys; the suffix scores per row, then moved to the
    same layout. One softmax over both side by side is exactly the log-sum-exp merge of the
    two partial softmaxes (measured a little faster on CPU than merging two separately
    normalised parts: fewer small ops). Its prefix weights multiply the group's prefix
    values, its suffix weights (back in row layout) each row's own values."""
    batch, heads, _, dim = query.shape
    kv_heads = layer.prefix_values.shape[1]
    rep = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    groups, slots = layer.slot_rows.shape
    q = query.reshape(batch, kv_heads, rep, dim)

    def to_groups(
        t: torch.Tensor,
    ) -> torch.Tensor:  # [batch, kv, rep, x] -> [groups, kv, slots * rep, x]
        t = t[layer.slot_rows.reshape(-1)].reshape(groups, slots, kv_heads, rep, t.shape[-1])
        return t.permute(0, 2, 1, 3, 4).reshape(groups, kv_heads, slots * rep, t.shape[-1])

    def to_rows(
        t: torch.Tensor,
    ) -> torch.Tensor:  # [groups, kv, slots * rep, x] -> [batch, kv, rep, x]
        t = t.reshape(groups, kv_heads, slots, rep, t.shape[-1]).permute(0, 2, 1, 3, 4)
        return t[layer.group_of_row, layer.slot_of_row]

    prefix_scores = torch.matmul(to_groups(q), layer.prefix_keys_t)
    suffix_scores = to_groups(torch.matmul(q, layer.keys.transpose(-1, -2)))
    scores = torch.cat([prefix_scores, suffix_scores], dim=-1).float() * scale
    bias = _group_bias(layer, mask, batch, rep)
    if bias is not None:
        scores = scores + bias
    weights = torch.softmax(scores, dim=-1).to(query.dtype)
    prefix_len = layer.prefix_len
    out = to_rows(torch.matmul(weights[..., :prefix_len], layer.prefix_values))
    out = out + torch.matmul(to_rows(weights[..., prefix_len:]), layer.values)
    return out.reshape(batch, 1, heads, dim)


def _group_bias(
    layer: CascadeLayer, mask: torch.Tensor | None, batch: int, rep: int
) -> torch.Tensor | None:
    """The additive float32 mask ``[groups, 1, slots * rep, P + S]`` from transformers' 4D
    mask ``[batch, 1, 1, P + S]`` (bool, True = attend, or additive; None = attend
    everywhere), in the group layout of ``_cascade_decode``: each row's own padding, so
    the prefix's left padding (shared by the group) and the row's suffix mask both hold.
    Masked positions get float32's minimum, not -inf, so a fully masked part gets weight 0
    and a fully masked row no NaN. All layers of a forward get the same mask object and
    share one conversion."""
    if mask is None:
        return None
    shared = layer.shared
    if shared.get("gmask") is not mask:
        full = mask[:, 0, -1, :].expand(batch, -1)
        if full.dtype == torch.bool:
            zero = torch.zeros((), dtype=torch.float32, device=full.device)
            full = torch.where(full, zero, zero + torch.finfo(torch.float32).min)
        full = full.float()
        groups, slots = layer.slot_rows.shape
        bias = full[layer.slot_rows.reshape(-1)].reshape(groups, 1, slots, 1, -1)
        bias = bias.expand(-1, -1, -1, rep, -1).reshape(groups, 1, slots * rep, -1)
        shared.update(gmask=mask, gbias=bias)
    return shared["gbias"]


def _row_slots(group_of_row: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's slot within its group ``[batch]`` and each group's rows by slot
    ``[groups, slots]`` (padding slots repeat the group's last row)."""
    counts = torch.bincount(group_of_row, minlength=groups)
    slot_of_row = torch.zeros_like(group_of_row)
    slot_rows = torch.empty(
        (groups, int(counts.max())), dtype=torch.long, device=group_of_row.device
    )
    seen = [0] * groups
    for row, group in enumerate(group_of_row.tolist()):
        slot_of_row[row] = seen[group]
        slot_rows[group, seen[group] :] = row
        seen[group] += 1
    return slot_of_row, slot_rows


class CascadeLayer(PreallocatedLayer):
    """transformers' ``DynamicLayer`` holding a shared prefix and a per-row suffix.

    Keys and values as prefix ``[groups, kv, P, d]`` (read-only) and suffix
    ``[batch, kv, S, d]`` (the preallocated layer's buffers, written in place).
    ``keys``/``values`` expose the suffix, which is what ``update`` hands attention;
    lengths count both parts, so transformers sizes its masks and positions for the
    whole sequence."""

    def __init__(
        self,
        prefix_keys: torch.Tensor,
        prefix_values: torch.Tensor,
        group_of_row: torch.Tensor,
        capacity: int,
        shared: dict[str, object] | None = None,
    ) -> None:
        super().__init__(capacity)
        self.shared = shared if shared is not None else {}
        # the keys stored transposed ([groups, kv, d, P], contiguous): the per-step
        # q @ k^T then reads them in order (~15% faster than a transposed view on CPU)
        self.prefix_keys_t = prefix_keys.transpose(-1, -2).contiguous()
        self.prefix_values = prefix_values
        self.prefix_len = prefix_keys.shape[-2]
        self.group_of_row = group_of_row
        if "slots" not in self.shared:  # the same for every layer of the cache: once
            self.shared["slots"] = _row_slots(group_of_row, prefix_keys.shape[0])
        self.slot_of_row, self.slot_rows = self.shared["slots"]
        batch, kv_heads = len(group_of_row), prefix_keys.shape[1]
        self.lazy_initialization(  # empty suffix buffers of ``capacity`` positions per row
            prefix_keys.new_empty((batch, kv_heads, 0, prefix_keys.shape[-1])),
            prefix_values.new_empty((batch, kv_heads, 0, prefix_values.shape[-1])),
        )

    def joined(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefix and suffix as one ``[batch, kv, P + S, d]`` pair (the slow fallback)."""
        prefix_keys = self.prefix_keys_t.transpose(-1, -2)
        keys = torch.cat([prefix_keys[self.group_of_row], self.keys], dim=-2)
        values = torch.cat([self.prefix_values[self.group_of_row], self.values], dim=-2)
        return keys, values

    def get_seq_length(self) -> int:
        return self.prefix_len + self.length

    def _unsupported(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError(
            "the cascade KV cache supports plain sampling and greedy decoding only"
        )

    crop = batch_repeat_interleave = batch_select_indices = reorder_cache = _unsupported

    def reset(self) -> None:
        self.length = 0
        self._expose()
