"""`spreadrl merge`: merge a LoRA adapter, or export a training checkpoint, as a plain HF model."""

from __future__ import annotations

from pathlib import Path

import typer

from spreadrl.cli.console import plain
from spreadrl.errors import ConfigError

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""``--dtype``'s choices (as :mod:`spreadrl.models.export` takes them)."""


def merge(
    out: Path = typer.Option(..., "--out", help="Folder to write the plain Hugging Face model to."),
    adapter: Path | None = typer.Option(
        None,
        "--adapter",
        help="LoRA adapter folder (adapter_config.json + adapter_model.safetensors).",
    ),
    checkpoint: Path | None = typer.Option(
        None,
        "--checkpoint",
        help="Run checkpoint folder (its newest complete step), a step-N folder, a final "
        "model, an adapter or a sharded (DCP) folder.",
    ),
    base: str | None = typer.Option(
        None,
        "--base",
        help="Base model folder (or Hub id). Required with --adapter when the adapter names "
        "no base, and with sharded checkpoints.",
    ),
    dtype: str = typer.Option(
        "auto",
        "--dtype",
        help="Output dtype: auto (the checkpoint's own), bfloat16, float32, float16.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
) -> None:
    """Write a model folder that transformers and vLLM load: safetensors, config, tokenizer.

    Give exactly one of --adapter or --checkpoint.

    Examples:

      spreadrl merge --base models/tiny --adapter runs/sft/final --out models/tiny-sft

      spreadrl merge --checkpoint runs/grpo/ckpt --out models/tiny-grpo

      spreadrl merge --checkpoint runs/grpo/ckpt/step-000040 --out models/step40 --dtype bfloat16

      spreadrl merge --checkpoint runs/fsdp/ckpt/step-000060/model --base models/4b --out models/4b-rl
    """
    from spreadrl.run_folder import check_output_folder, foreign_to_model

    # the arguments are checked before torch and transformers load (seconds)
    check_output_folder(out, overwrite=overwrite, written_by=foreign_to_model)
    if (adapter is None) == (checkpoint is None):
        raise ConfigError(
            "give exactly one of --adapter or --checkpoint (see spreadrl merge --help)"
        )
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is unknown; choose one of {', '.join(DTYPES)}")
    source = adapter if adapter is not None else checkpoint
    if source is not None and not source.exists():
        flag = "--adapter" if adapter is not None else "--checkpoint"
        raise ConfigError(f"{flag} {source}: no such folder")
    from spreadrl.cli.console import RichReporter, cli_console
    from spreadrl.models.export import adapter_base, export_checkpoint, merge_lora

    console = cli_console()
    if adapter is not None:
        path = merge_lora(
            base if base is not None else adapter_base(adapter),
            adapter,
            out,
            dtype=dtype,
            overwrite=overwrite,
        )
    else:
        reporter = RichReporter(console)  # a checkpoint cut short: skipped, said in one line
        path = export_checkpoint(
            checkpoint, out, base=base, dtype=dtype, overwrite=overwrite, reporter=reporter
        )
    console.print(f"[green]saved[/] a Hugging Face model folder to {plain(path)}", highlight=False)
