"""`spreadrl model`: create randomly initialised Qwen3 models offline, and describe a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from spreadrl.errors import ConfigError, SpreadrlError

app = typer.Typer(help="Create and inspect models.", no_args_is_help=True)


@app.command("init")
def init(
    out: Path = typer.Option(..., "--out", help="Folder to write the checkpoint to."),
    arch: str = typer.Option("qwen3", "--arch", help="Architecture (qwen3)."),
    preset: str = typer.Option("tiny", "--preset", help="tiny (~2M), small (~25M) or 4b-shape."),
    tokenizer_name: str = typer.Option(
        "trained",
        "--tokenizer",
        help="trained (a small BPE trained here) or qwen3 (Qwen3's real tokenizer, the qwen extra).",
    ),
    vocab_size: int | None = typer.Option(
        None, "--vocab-size", help="Size of the trained tokenizer (default 512)."
    ),
    corpus: Path | None = typer.Option(
        None, "--corpus", help="Task set folder whose instructions and solutions join the corpus."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the weight initialisation."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Write into a non-empty --out (its model files are replaced)."
    ),
) -> None:
    """Save a randomly initialised model of the real architecture with a tokenizer.

    The default tokenizer is trained here on agent-like text; ``--tokenizer qwen3``
    uses Qwen3's real one (vocabulary, special-token ids, chat template) with
    Qwen3's 151,936 embedding rows.

    Examples:

      spreadrl model init --arch qwen3 --preset tiny --out models/tiny

      spreadrl model init --preset tiny --corpus tasks/ --vocab-size 1024 --out models/tiny

      spreadrl model init --preset tiny --tokenizer qwen3 --out models/tiny-qwen3
    """
    import time

    from spreadrl.models.presets import PRESETS, TOKENIZER_CHOICES
    from spreadrl.run_folder import check_output_folder, foreign_to_model

    # every argument is checked before torch and transformers load (seconds)
    if arch != "qwen3":
        raise ConfigError(f"--arch {arch!r} is not supported; the only architecture is qwen3")
    if preset not in PRESETS:
        raise ConfigError(f"--preset {preset!r} is unknown; choose one of {sorted(PRESETS)}")
    if tokenizer_name not in TOKENIZER_CHOICES:
        raise ConfigError(
            f"--tokenizer {tokenizer_name!r} is unknown; choose one of {TOKENIZER_CHOICES}"
        )
    if tokenizer_name == "qwen3" and (corpus is not None or vocab_size is not None):
        raise ConfigError(
            "--corpus and --vocab-size train a tokenizer; drop them with --tokenizer qwen3"
        )
    # an existing model is never replaced silently, nor anything that is no model
    check_output_folder(out, overwrite=overwrite, written_by=foreign_to_model)
    from spreadrl.cli.console import cli_console
    from spreadrl.models.init import count_parameters, init_model, make_config
    from spreadrl.models.qwen3 import QWEN3_VOCAB_SIZE, load_qwen3_tokenizer
    from spreadrl.models.tokenizer import default_corpus, task_corpus, train_tokenizer

    console = cli_console()
    start = time.perf_counter()
    rows: int | None = None
    if tokenizer_name == "qwen3":
        tokenizer = load_qwen3_tokenizer()
        rows = QWEN3_VOCAB_SIZE
        console.print(f"tokenizer: Qwen3's own, {len(tokenizer)} tokens, {rows} embedding rows")
    else:
        extra = task_corpus(corpus) if corpus is not None else []
        tokenizer = train_tokenizer(default_corpus(extra), vocab_size=vocab_size or 512)
        trained_s = time.perf_counter() - start
        console.print(
            f"tokenizer: {len(tokenizer)} tokens in {trained_s:.1f}s ({len(extra)} texts from {corpus})"
            if corpus
            else f"tokenizer: {len(tokenizer)} tokens in {trained_s:.1f}s"
        )
    n_params = count_parameters(make_config(preset, tokenizer, vocab_size=rows))
    console.print(f"{preset} Qwen3: {n_params / 1e6:.2f}M parameters")
    path = init_model(preset, tokenizer, out, seed=seed, vocab_size=rows)
    console.print(f"saved to {path}", markup=False)


@app.command("info")
def info(path: Path = typer.Argument(..., help="A Hugging Face model folder.")) -> None:
    """Print a checkpoint's parameter count, architecture and vocabulary size.

    Examples:

      spreadrl model info runs/tiny

      spreadrl model info runs/grpo/final
    """
    config_file = path / "config.json"
    if not config_file.is_file():
        raise SpreadrlError(f"{path}: not a Hugging Face model folder (no config.json)")
    try:
        raw = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise SpreadrlError(f"{config_file}: not valid JSON ({exc.msg})") from exc
    from rich.table import Table
    from transformers import AutoConfig, AutoTokenizer

    from spreadrl.cli.console import cli_console
    from spreadrl.models.init import count_parameters  # torch: once the folder was checked

    config = AutoConfig.from_pretrained(path)
    table = Table(title=str(path), show_header=False)
    table.add_row("architecture", ", ".join(raw.get("architectures") or [config.model_type]))
    table.add_row("parameters", f"{count_parameters(config):,}")
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "max_position_embeddings",
        "tie_word_embeddings",
        "dtype",
    ):
        if key in raw:
            table.add_row(key, str(raw[key]))
    table.add_row("config vocab_size", str(raw.get("vocab_size")))
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        table.add_row("tokenizer vocab", str(len(tokenizer)))
        table.add_row("chat template", "yes" if tokenizer.chat_template else "no")
    except (OSError, ValueError) as exc:
        table.add_row("tokenizer", f"unreadable: {exc}")
    cli_console().print(table)
