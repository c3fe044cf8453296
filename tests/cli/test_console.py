"""The clean console: third-party progress bars and warnings hidden unless --verbose.

Each case runs in a fresh interpreter: what is being tested is process-wide
state (environment variables read at import, warning filters).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LOAD = textwrap.dedent(
    """
    import sys, types, warnings
    if sys.argv[2] == "quiet":
        from spreadrl.cli.console import quiet_third_party
        quiet_third_party()
    from spreadrl.models.init import load_model_and_tokenizer
    model, tok = load_model_and_tokenizer(sys.argv[1])
    model.save_pretrained(sys.argv[1] + "-copy")
    third = types.ModuleType("somelib")
    exec("import warnings\\ndef f():\\n    warnings.warn('somelib will change', FutureWarning)", third.__dict__)
    third.f()
    ours = types.ModuleType("spreadrl.fake")
    exec("import warnings\\ndef f():\\n    warnings.warn('spreadrl says hi', UserWarning)", ours.__dict__)
    ours.f()
    """
)


def _run(model_dir: Path, mode: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", LOAD, str(model_dir), mode],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_quiet_hides_transformers_bars_and_library_warnings_but_not_ours(tiny_model_dir):
    loud = _run(tiny_model_dir, "verbose")
    quiet = _run(tiny_model_dir, "quiet")
    # without quieting the noise is there (so the quiet check below means something)
    assert "Loading weights" in loud and "somelib will change" in loud
    assert "Loading weights" not in quiet
    assert "Writing model shards" not in quiet
    assert "somelib will change" not in quiet
    assert "spreadrl says hi" in quiet


def test_verbose_is_a_global_flag(tmp_path):
    from typer.testing import CliRunner

    from spreadrl.cli.main import app

    result = CliRunner().invoke(app, ["--verbose", "version"])
    assert result.exit_code == 0, result.output
    assert "spreadrl" in result.output


def test_the_demo_ends_with_one_block_and_the_viewer_command():
    from rich.console import Console

    from spreadrl.cli.demo import print_summary

    summary = {
        "settings": {"out": "runs/demo"},
        "sft": {"pass@1": 0.25, "pass@1_ci95": 0.05},
        "grpo": {"pass@1": 0.375, "pass@1_ci95": 0.06},
        "delta_pass@1": 0.125,
        "delta_ci95": 0.05,
        "paired_cases": 64,
        "timings_s": {"sft": 60.0, "grpo": 120.0},
    }
    console = Console(record=True, width=120)
    print_summary(summary, console)
    text = console.export_text()
    assert "SFT 25.0% ± 5.0  ->  GRPO 37.5% ± 6.0" in text
    assert "+12.5 points ± 5.0 over 64 paired cases: GRPO improved on SFT" in text
    assert "3.0 min" in text and "spreadrl view runs/demo" in text
    assert len(text.strip().splitlines()) <= 8  # one short block
