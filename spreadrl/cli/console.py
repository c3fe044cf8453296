"""A clean console: spreadrl's own rich output, and third-party noise only with ``--verbose``.

transformers prints a progress bar for every model load and save ("Loading
weights", "Writing model shards"), huggingface_hub and datasets one per file,
and several libraries emit FutureWarnings on every run; in ``make run`` they
buried the demo's own lines. ``quiet_third_party`` silences them for this
process and the worker processes it starts (through environment variables,
which children inherit). Variables the user set are left alone.

Not silenced: errors, spreadrl's own warnings and log records, and anything a
library writes straight to the terminal from native code.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

# environment variables read by the libraries when they are imported (here or in workers)
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # huggingface_hub, and transformers' own bars
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",  # its fork warning
    "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning,ignore::UserWarning",
    "WANDB_SILENT": "true",
}
NOISY_LOGGERS = ("transformers", "huggingface_hub", "datasets", "peft", "accelerate", "torch")
NOISY_WARNINGS = (FutureWarning, DeprecationWarning, UserWarning)


def quiet_third_party() -> None:
    """Silence third-party progress bars, warnings and info logs (see the module docstring)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    for category in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", module=r"spreadrl\.")  # ours stay visible
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    # libraries imported before this call read their settings already: tell them directly
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
