"""Randomly initialised Qwen3 models of the real architecture, and one loader for all checkpoints.

The presets are transformers' own ``Qwen3Config``: ``tiny`` (~2M parameters,
the CPU demo's calibration model, reference section 9), ``small`` (~25M) and
``4b-shape`` (Qwen3-4B's dimensions, for memory and throughput work on a GPU).
:func:`init_model` writes a checkpoint in the Hugging Face format (safetensors,
config, generation config, tokenizer), and :func:`load_model_and_tokenizer`
reads it through ``AutoModelForCausalLM`` / ``AutoTokenizer`` — the same path
a real local Qwen3 checkpoint takes, so nothing downstream can tell them apart.
"""

from __future__ import annotations

import logging
import shutil
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from huggingface_hub import constants
from huggingface_hub.errors import StrictDataclassError
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from spreadrl.errors import ConfigError, SpreadrlError
from spreadrl.models.checkpoint_files import save_weights
from spreadrl.models.presets import PRESETS

log = logging.getLogger(__name__)


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int | None:
    tid = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(tid, int) or tid == tokenizer.unk_token_id:
        return None
    return tid


def make_config(
    preset: str,
    tokenizer: PreTrainedTokenizerBase,
    overrides: dict[str, Any] | None = None,
    *,
    vocab_size: int | None = None,
) -> Qwen3Config:
    """The ``Qwen3Config`` of ``preset`` sized to ``tokenizer``; ``overrides`` win over the preset.

    ``vocab_size``: embedding rows, at least ``len(tokenizer)`` (default: exactly
    that). Real checkpoints pad past the tokenizer, e.g. Qwen3's 151,936 rows for
    151,669 tokens, and a model built to stand in for one must match.
    """
    if preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}; choose one of {sorted(PRESETS)}")
    if vocab_size is not None and vocab_size < len(tokenizer):
        raise ConfigError(
            f"vocab_size={vocab_size} is smaller than the tokenizer ({len(tokenizer)} tokens)"
        )
    kwargs = dict(PRESETS[preset])
    im_end = _token_id(tokenizer, "<|im_end|>")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else im_end
    kwargs.update(
        vocab_size=vocab_size or len(tokenizer),
        bos_token_id=_token_id(tokenizer, "<|endoftext|>"),
        eos_token_id=im_end if im_end is not None else tokenizer.eos_token_id,
        pad_token_id=pad,
    )
    known = set(Qwen3Config().to_dict())
    unknown = sorted(set(overrides or {}) - known)
    if unknown:
        raise ConfigError(f"model overrides {unknown} are not Qwen3Config fields")
    kwargs.update(overrides or {})
    layers = kwargs["num_hidden_layers"]
    kwargs["layer_types"] = ["full_attention"] * layers
    kwargs["max_window_layers"] = layers
    try:
        return Qwen3Config(**kwargs)
    except (TypeError, ValueError, StrictDataclassError) as exc:
        raise ConfigError(f"model preset {preset!r} with overrides {overrides}: {exc}") from exc


def count_parameters(config: PretrainedConfig) -> int:
    """Parameters of a model built from ``config``, counted on the meta device (no memory used)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


# presets built on the meta device and materialised where they run by default: building
# Qwen3-4B's shape eagerly on the CPU took 146 s (16 cores; 12.5 s on a GPU), 2026-11-26
META_PRESETS = frozenset({"4b-shape"})


def _default_device(preset: str) -> str | None:
    if preset not in META_PRESETS:
        return None  # eager on the CPU: the small presets' weights stay what they were
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_random_model(
    config: Qwen3Config, dtype: torch.dtype, *, seed: int, device: str | None = None
) -> Qwen3ForCausalLM:
    """A randomly initialised ``Qwen3ForCausalLM`` of ``config`` in ``dtype``.

    ``device`` None: built eagerly on the CPU (every module initialised as it is
    constructed, then transformers' own initialisation again). Else built on the
    meta device (no memory, no work), materialised empty on ``device`` and
    initialised there once by transformers' ``init_weights`` (the same
    distributions: normal(0, initializer_range) for linear and embedding
    weights, ones for the norms), with the rotary buffers recomputed and the
    output layer tied back to the embeddings. Deterministic for a given seed and
    device; the two paths draw different numbers from the same distributions."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        torch.manual_seed(seed)
        if device is None:
            return Qwen3ForCausalLM(config)
        with torch.device("meta"):
            model = Qwen3ForCausalLM(config)
        return materialise(model, device, seed=seed)
    finally:
        torch.set_default_dtype(previous)


def materialise(model: PreTrainedModel, device: str, *, seed: int) -> PreTrainedModel:
    """Give a model built on the meta device storage on ``device`` and initialise it there."""
    model.to_empty(device=device)
    torch.manual_seed(seed)
    with torch.no_grad():
        model.init_weights()  # transformers' _init_weights, then tie_weights
        _recompute_rotary(model, device)
    meta = [name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if meta:
        raise SpreadrlError(f"tensors left on the meta device after materialising: {meta[:5]}")
    return model


def _recompute_rotary(model: PreTrainedModel, device: str) -> None:
    """Rotary position buffers are computed, not drawn, at construction: on the meta device
    they were not. Recomputed from a fresh module on ``device`` (whether or not this
    transformers' ``init_weights`` already did)."""
    for module in model.modules():
        if not type(module).__name__.endswith("RotaryEmbedding"):
            continue
        with torch.device(device):
            fresh = type(module)(config=model.config)
        buffers = dict(fresh.named_buffers(recurse=False))
        for name, buffer in buffers.items():
            getattr(module, name).copy_(buffer)
        if "original_inv_freq" not in buffers and hasattr(fresh, "original_inv_freq"):
            module.original_inv_freq = fresh.original_inv_freq  # a plain attribute here


def init_model(
    preset: str,
    tokenizer: PreTrainedTokenizerBase,
    out: Path,
    *,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    vocab_size: int | None = None,
    device: str | None = None,
) -> Path:
    """Save a randomly initialised ``Qwen3ForCausalLM`` with ``tokenizer`` to ``out``; return ``out``.

    Deterministic for a given ``seed`` (and device). The generation config stops on
    ``<|im_end|>`` (then ``<|endoftext|>``) and pads with the tokenizer's pad
    token, as Qwen3's instruct checkpoints do. ``vocab_size``: see :func:`make_config`.
    ``device``: where the model is built through the meta device
    (:func:`build_random_model`); default: the GPU (else the CPU) for the 4b-shape
    preset, an eager CPU build for the others.
    """
    config = make_config(preset, tokenizer, overrides, vocab_size=vocab_size)
    out = Path(out)
    existed = out.exists()
    out.mkdir(parents=True, exist_ok=True)
    dtype = config.dtype if isinstance(config.dtype, torch.dtype) else torch.float32
    if isinstance(config.dtype, str):
        dtype = getattr(torch, config.dtype)
    target = device if device is not None else _default_device(preset)
    model = build_random_model(config, dtype, seed=seed, device=target)
    model.eval()
    stops = [t for t in (config.eos_token_id, config.bos_token_id) if t is not None]
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=list(dict.fromkeys(stops)),
        pad_token_id=config.pad_token_id,
        do_sample=True,
        temperature=1.0,
    )
    try:
        save_weights(model, out)
        tokenizer.save_pretrained(out)
    except BaseException:  # a full disk, a Ctrl-C: no half-written model folder is left
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        raise
    n = sum(p.numel() for p in model.parameters())
    log.info(
        "saved a %s Qwen3 (%.2fM parameters, %d tokens, %d embedding rows) to %s",
        preset,
        n / 1e6,
        len(tokenizer),
        config.vocab_size,
        out,
    )
    return out


def _looks_local(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or name.count("/") != 1 or "\\" in name


def _hub_reachable() -> bool:
    """Whether the Hub's host resolves: fails in a second offline, where from_pretrained retries for ~45 s."""
    if constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname or "huggingface.co", 443)
    except OSError:
        return False
    return True


def _from_pretrained(
    source: str, torch_dtype: torch.dtype | str, local_only: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=torch_dtype, local_files_only=local_only
    )
    return model, tokenizer


def load_model_and_tokenizer(
    name_or_path: str, *, dtype: str = "auto", device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local directory (or a Hub id when online).

    ``dtype``: ``"auto"`` (the checkpoint's own), or a torch dtype name such as
    ``"bfloat16"``. The tokenizer gets a pad token (its eos) if it has none.
    """
    path = Path(name_or_path).expanduser()
    if not path.exists() and _looks_local(name_or_path):
        raise SpreadrlError(
            f"{name_or_path}: model directory not found "
            "(create one with `spreadrl model init --arch qwen3 --preset tiny --out DIR`)"
        )
    source = str(path) if path.exists() else name_or_path
    if path.exists() and not (path / "config.json").exists():
        raise SpreadrlError(f"{path}: not a Hugging Face model directory (no config.json)")
    torch_dtype: torch.dtype | str = dtype
    if dtype != "auto":
        found = getattr(torch, dtype, None)
        if not isinstance(found, torch.dtype):
            raise ConfigError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
        torch_dtype = found
    try:
        model, tokenizer = _from_pretrained(source, torch_dtype, local_only=True)
    except (OSError, ValueError) as exc:
        if path.exists():
            raise SpreadrlError(f"{path}: cannot load the model: {exc}") from exc
        if not _hub_reachable():
            raise SpreadrlError(
                f"{name_or_path}: no such local directory, not in the Hugging Face cache, and the "
                "Hub is unreachable (offline); pass the path of a downloaded checkpoint"
            ) from exc
        try:
            model, tokenizer = _from_pretrained(source, torch_dtype, local_only=False)
        except (OSError, ValueError) as exc2:
            raise SpreadrlError(f"{name_or_path}: cannot load the model: {exc2}") from exc2
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer
