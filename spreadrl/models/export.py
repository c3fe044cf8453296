"""Turn what training leaves behind into a plain Hugging Face model folder.

Training writes three kinds of weights: a full model (``save_pretrained``), a
LoRA adapter (peft's ``adapter_config.json`` + ``adapter_model.safetensors``)
or, under FSDP2, a sharded ``torch.distributed.checkpoint`` (DCP) folder of
``.distcp`` files and a ``.metadata`` index. Serving (vLLM) and evaluation
want one thing: a folder that ``AutoModelForCausalLM.from_pretrained`` reads,
with safetensors weights, ``config.json``, ``generation_config.json`` and the
tokenizer. :func:`export_checkpoint` recognises each input kind and writes
that folder; :func:`merge_lora` folds an adapter into its base.

LoRA merges are done in float32 (``W + scale * B @ A``) and only then cast to
the output dtype, so a bfloat16 base does not lose the small update to
rounding twice. The output is written to a temporary sibling folder and
renamed into place, so a failed export never leaves a half-written model.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from peft import PeftModel
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
)

from spreadrl.errors import ConfigError, SpreadrlError
from spreadrl.models.checkpoint_files import (
    MANIFEST,
    STATE_FILE,
    CheckpointError,
    checkpoint_problem,
    find_resume_point,
    save_weights,
)
from spreadrl.models.compat import peft_wrapping
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.run_folder import check_output_folder, foreign_to_model

log = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "bfloat16", "float16")
ADAPTER_CONFIG = "adapter_config.json"
DCP_METADATA = ".metadata"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# Wrapper names that FSDP, activation checkpointing and torch.compile put into parameter names.
_WRAPPER_PARTS = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


# ---------------------------------------------------------------------------- small helpers


def _torch_dtype(name: str) -> torch.dtype | None:
    if name not in DTYPES:
        raise ConfigError(f"--dtype {name!r} is unknown; choose one of {', '.join(DTYPES)}")
    return None if name == "auto" else getattr(torch, name)


def _config_dtype(folder: Path | None) -> torch.dtype:
    """The dtype a model folder's config.json declares (float32 when it declares none)."""
    name = None
    if folder is not None and (folder / "config.json").is_file():
        cfg = json.loads((folder / "config.json").read_text())
        name = cfg.get("dtype") or cfg.get("torch_dtype")
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


def _has_weights(folder: Path) -> bool:
    patterns = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")
    return any(any(folder.glob(p)) for p in patterns) and not (folder / ADAPTER_CONFIG).exists()


def _is_dcp(folder: Path) -> bool:
    return (folder / DCP_METADATA).is_file()


def _has_tokenizer(folder: Path | None) -> bool:
    return folder is not None and any((folder / f).is_file() for f in TOKENIZER_FILES)


def _describe(folder: Path, limit: int = 12) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    if not names:
        return "an empty folder"
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _prepare_out(out: Path, overwrite: bool, sources: list[Path]) -> Path:
    """Check ``out`` may be written; return the temporary folder to write into."""
    out = Path(out).expanduser().resolve()
    for src in sources:
        src = src.resolve()
        if out == src or src in out.parents or out in src.parents:
            raise SpreadrlError(
                f"--out {out} overlaps the input {src}; choose an output folder outside it"
            )
    check_output_folder(out, overwrite=overwrite, written_by=foreign_to_model)
    tmp = out.parent / f".tmp-{out.name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def _finish_out(tmp: Path, out: Path) -> Path:
    out = Path(out).expanduser().resolve()
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def _save_tokenizer(folders: list[Path | None], dest: Path) -> Path | None:
    """Copy the first tokenizer found in ``folders`` into ``dest``; return where it came from."""
    for folder in folders:
        if _has_tokenizer(folder):
            AutoTokenizer.from_pretrained(str(folder), local_files_only=True).save_pretrained(dest)
            return folder
    log.warning("no tokenizer in %s; the exported model has none", [str(f) for f in folders if f])
    return None


def _resolve_base(base: str | Path) -> tuple[str, Path | None]:
    """``base`` as from_pretrained takes it, and its local folder when it is one."""
    path = Path(base).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise SpreadrlError(
                f"base model {path} is not a Hugging Face model folder (no config.json)"
            )
        return str(path), path
    text = str(base)
    if text.startswith(("/", ".", "~")) or text.count("/") != 1:
        raise SpreadrlError(f"base model {text} not found; pass --base with the base model folder")
    return text, None  # a Hub id, e.g. Qwen/Qwen3-4B-Instruct-2507


def _load_full(source: str, dtype: torch.dtype | None) -> PreTrainedModel:
    try:
        return AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise SpreadrlError(f"cannot load the model {source}: {exc}") from exc


def _save_model(model: nn.Module, dtype: torch.dtype, tmp: Path) -> None:
    model.to(dtype)
    model.config.dtype = dtype
    model.eval()
    save_weights(model, tmp)
    if not (tmp / "generation_config.json").exists():
        GenerationConfig.from_model_config(model.config).save_pretrained(tmp)


# ---------------------------------------------------------------------------- LoRA


def adapter_base(adapter: Path) -> str:
    """The base model an adapter folder names in ``adapter_config.json`` (``base_model_name_or_path``)."""
    cfg_path = Path(adapter).expanduser() / ADAPTER_CONFIG
    if not cfg_path.parent.is_dir():
        raise SpreadrlError(f"LoRA adapter folder {cfg_path.parent} not found")
    if not cfg_path.is_file():
        raise SpreadrlError(f"{adapter}: not a LoRA adapter folder (no {ADAPTER_CONFIG})")
    base = json.loads(cfg_path.read_text()).get("base_model_name_or_path")
    if not base:
        raise SpreadrlError(
            f"{cfg_path}: base_model_name_or_path is empty, so the base model is unknown; "
            "pass --base with the base model folder"
        )
    return str(base)


def merge_lora(
    base: str | Path,
    adapter: str | Path,
    out: Path,
    *,
    dtype: str = "auto",
    overwrite: bool = False,
) -> Path:
    """Merge the LoRA ``adapter`` into ``base`` and save a plain model folder at ``out``.

    ``dtype="auto"`` keeps the base's dtype (its config.json); the merge itself
    runs in float32. The tokenizer comes from the adapter folder when it has
    one (training saves it there), else from the base. Returns ``out``.
    """
    out_dtype = _torch_dtype(dtype)
    adapter = Path(adapter).expanduser()
    if not adapter.is_dir():
        raise SpreadrlError(f"LoRA adapter folder {adapter} not found")
    if not (adapter / ADAPTER_CONFIG).is_file():
        raise SpreadrlError(
            f"{adapter}: not a LoRA adapter folder (expected {ADAPTER_CONFIG} and "
            f"adapter_model.safetensors; found {_describe(adapter)})"
        )
    source, base_dir = _resolve_base(base)
    if out_dtype is None:
        out_dtype = _config_dtype(base_dir)
    tmp = _prepare_out(out, overwrite, [adapter] + ([base_dir] if base_dir else []))
    try:
        model = _load_full(source, torch.float32)
        try:
            with peft_wrapping():
                peft_model = PeftModel.from_pretrained(model, str(adapter))
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise SpreadrlError(f"{adapter}: cannot apply the adapter to {source}: {exc}") from exc
        merged = peft_model.merge_and_unload()
        _save_model(merged, out_dtype, tmp)
        _save_tokenizer([adapter, base_dir], tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("merged adapter %s into %s -> %s (%s)", adapter, source, out, out_dtype)
    return _finish_out(tmp, out)


# ---------------------------------------------------------------------------- full models and DCP


def _copy_full_model(model_dir: Path, out: Path, dtype: str, overwrite: bool) -> Path:
    """Re-save a full Hugging Face folder: drops training extras, sets the dtype."""
    out_dtype = _torch_dtype(dtype) or _config_dtype(model_dir)
    tmp = _prepare_out(out, overwrite, [model_dir])
    try:
        model = _load_full(str(model_dir), out_dtype)
        _save_model(model, out_dtype, tmp)
        _save_tokenizer([model_dir], tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _finish_out(tmp, out)


def _strip_wrappers(key: str) -> str:
    for part in _WRAPPER_PARTS:
        key = key.replace(part, "")
    return key


def _dcp_key_map(folder: Path, expected: set[str]) -> dict[str, str]:
    """Map the DCP tensor keys holding model weights to the model's parameter names.

    A DCP folder may hold ``{"model": ..., "optim": ...}`` or a bare state dict,
    with FSDP/compile wrapper names inside; the prefix that matches the most
    model parameter names wins, and only tensors under it are loaded.
    """
    meta = dcp.FileSystemReader(str(folder)).read_metadata()
    keys = [k for k, v in meta.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)]
    by_prefix: dict[str, dict[str, str]] = {}
    for key in keys:
        clean = _strip_wrappers(key)
        parts = clean.split(".")
        for i in range(len(parts)):
            name = ".".join(parts[i:])
            if name in expected:
                by_prefix.setdefault(".".join(parts[:i]), {})[key] = name
                break
    if not by_prefix:
        lora = any("lora_A" in k for k in keys)
        hint = (
            "it holds LoRA weights; export the adapter folder (save_pretrained) instead"
            if lora
            else f"its tensors are e.g. {keys[:3]}; is --base the model that was trained?"
        )
        raise SpreadrlError(f"{folder}: no weights of the --base model's parameters found ({hint})")
    return max(by_prefix.values(), key=len)


def _load_dcp_tensors(folder: Path, keys: set[str]) -> dict[str, torch.Tensor]:
    """Read ``keys`` (flattened DCP names) from a DCP folder in this one process."""
    with warnings.catch_warnings():  # "no process group: loading in a single process" is the intent
        warnings.filterwarnings("ignore", message="torch.distributed is", category=UserWarning)
        try:
            from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
        except ImportError:  # a torch without the private helper: go through torch.save
            import tempfile

            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

            with tempfile.TemporaryDirectory() as tmp:
                dcp_to_torch_save(str(folder), f"{tmp}/full.pt")
                nested = torch.load(f"{tmp}/full.pt", weights_only=False)
        else:
            nested = _load_state_dict_from_keys(keys=keys, checkpoint_id=str(folder))
    flat: dict[str, torch.Tensor] = {}

    def walk(prefix: str, node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif prefix in keys:
            flat[prefix] = node

    walk("", nested)
    return flat


def _export_dcp(dcp_dir: Path, out: Path, base: str | Path, dtype: str, overwrite: bool) -> Path:
    """Build the base's architecture on the meta device and fill it from the DCP tensors."""
    source, base_dir = _resolve_base(base)
    tmp = _prepare_out(out, overwrite, [dcp_dir] + ([base_dir] if base_dir else []))
    try:
        model = _model_from_dcp(dcp_dir, source)
        stored = next(iter(model.state_dict().values())).dtype
        if base_dir is not None and (base_dir / "generation_config.json").is_file():
            model.generation_config = GenerationConfig.from_pretrained(str(base_dir))
        _save_model(model, _torch_dtype(dtype) or stored, tmp)
        _save_tokenizer([dcp_dir, dcp_dir.parent, base_dir], tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("exported DCP checkpoint %s with the architecture of %s -> %s", dcp_dir, source, out)
    return _finish_out(tmp, out)


def _model_from_dcp(dcp_dir: Path, source: str) -> PreTrainedModel:
    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise SpreadrlError(f"cannot read the config of base model {source}: {exc}") from exc
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    key_map = _dcp_key_map(dcp_dir, set(model.state_dict()))
    flat = _load_dcp_tensors(dcp_dir, set(key_map))
    state = {key_map[k]: v.detach().cpu() for k, v in flat.items()}
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    missing = sorted(n for n, t in model.state_dict().items() if t.is_meta)
    if missing:
        raise SpreadrlError(
            f"{dcp_dir}: {len(missing)} parameters of the --base model are not in the "
            f"checkpoint, e.g. {missing[:3]}; is --base the model that was trained?"
        )
    return model.eval()


# ---------------------------------------------------------------------------- dispatch


def resolve_checkpoint(checkpoint: Path, reporter: Reporter | None = None) -> Path:
    """The folder to export for ``checkpoint``, complete by the rule resume applies
    (:mod:`spreadrl.models.checkpoint_files`).

    A run's checkpoint root resolves to its newest complete ``step-*`` folder: a newer one
    cut short is skipped with one line to ``reporter`` (``latest`` is not trusted over the
    folders, as on resume). A step folder, or a folder inside one, that is incomplete is
    refused with one line naming the previous complete checkpoint. Anything else (a
    final model, an adapter, a sharded folder) is returned as it is.
    """
    folder = Path(checkpoint).expanduser()
    if not folder.exists():
        raise SpreadrlError(f"checkpoint folder {folder} not found")
    if not folder.is_dir():
        raise SpreadrlError(f"checkpoint {folder} is a file; pass the folder that holds it")
    if _is_checkpoint_root(folder):
        step, skipped = find_resume_point(folder)  # CheckpointError: none is complete
        if step is None:
            raise CheckpointError(f"{folder}/latest names no checkpoint: it holds no step-* folder")
        reporter = reporter or LogReporter()
        for line in skipped:
            reporter.line(line, level="warning")
        if skipped:
            reporter.line(f"exporting the newest complete checkpoint, {step}")
        return step
    for step in (folder, folder.parent):  # a step folder, or the sharded model inside one
        if _is_step_folder(step) and (problem := checkpoint_problem(step)) is not None:
            raise CheckpointError(f"checkpoint {step} is incomplete ({problem}); {_before(step)}")
    return folder


def _is_checkpoint_root(folder: Path) -> bool:
    """A run's checkpoint folder: ``latest`` or ``step-*`` folders, and no model of its own."""
    if (folder / "config.json").exists() or (folder / ADAPTER_CONFIG).exists():
        return False
    return (folder / "latest").is_file() or any(p.is_dir() for p in folder.glob("step-*"))


def _is_step_folder(folder: Path) -> bool:
    """One checkpoint of a run (spreadrl.train.checkpoint.save_checkpoint's ``step-N``)."""
    named = re.fullmatch(r"step-\d+", folder.name) is not None
    return named or (folder / STATE_FILE).exists() or (folder / MANIFEST).exists()


def _before(step: Path) -> str:
    """Where the previous complete checkpoint beside ``step`` is, as the refusal's advice."""
    older = sorted(
        (p for p in step.parent.glob("step-*") if p.is_dir() and p.name < step.name), reverse=True
    )
    complete = next((p for p in older if checkpoint_problem(p) is None), None)
    if complete is None:
        return "no earlier complete checkpoint is beside it"
    return f"the previous complete checkpoint is {complete}"


def _dcp_inside(folder: Path) -> Path | None:
    """A sharded model folder inside a step folder (its ``optim/`` DCP holds no weights)."""
    found = [p for p in sorted(folder.iterdir()) if p.is_dir() and p.name != "optim" and _is_dcp(p)]
    return found[0] if found else None


def export_checkpoint(
    checkpoint: Path,
    out: Path,
    *,
    base: str | Path | None = None,
    dtype: str = "auto",
    overwrite: bool = False,
    reporter: Reporter | None = None,
) -> Path:
    """Write ``checkpoint`` as a plain Hugging Face model folder at ``out``; return ``out``.

    ``checkpoint`` may be a run's checkpoint root (its newest complete step is taken), a
    ``step-N`` folder, a final model folder, a LoRA adapter folder (merged into
    ``base``, which defaults to the adapter's ``base_model_name_or_path``), or a
    sharded DCP folder (``base`` required: it gives the architecture, and its
    generation config and tokenizer when the checkpoint has none). A checkpoint cut
    short is never exported (see :func:`resolve_checkpoint`; ``reporter`` gets its line).
    """
    _torch_dtype(dtype)
    folder = resolve_checkpoint(checkpoint, reporter)
    if (folder / ADAPTER_CONFIG).is_file():
        return merge_lora(
            base if base is not None else adapter_base(folder),
            folder,
            out,
            dtype=dtype,
            overwrite=overwrite,
        )
    if (folder / "config.json").is_file() and _has_weights(folder):
        return _copy_full_model(folder, out, dtype, overwrite)
    dcp_dir = folder if _is_dcp(folder) else _dcp_inside(folder)
    if dcp_dir is not None:
        if base is None:
            raise SpreadrlError(
                f"{dcp_dir} is a sharded (torch.distributed.checkpoint) checkpoint, which holds "
                "weights only; pass --base with the model folder it was trained from"
            )
        return _export_dcp(dcp_dir, out, base, dtype, overwrite)
    raise SpreadrlError(
        f"{folder}: not a recognised checkpoint; found {_describe(folder)}; expected a run folder "
        "(latest + step-N/), a Hugging Face model (config.json + *.safetensors), a LoRA adapter "
        f"({ADAPTER_CONFIG} + adapter_model.safetensors) or a sharded checkpoint ({DCP_METADATA} "
        "+ *.distcp)"
    )
