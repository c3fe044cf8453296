"""Tracking backends: metrics.jsonl always, TensorBoard / wandb (offline) / Trackio on request.

wandb and Trackio run in a subprocess each: both keep process-wide state
(wandb's service process, Trackio's storage folder read at import), which must
not leak into the rest of the suite. Nothing here touches the network.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spreadrl.config import config_to_dict, load_config
from spreadrl.errors import ConfigError, MissingDependencyError
from spreadrl.train.config import GRPOConfig
from spreadrl.train.tracking import build_metrics_log

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from spreadrl.config import config_to_dict, load_config
    from spreadrl.train.config import GRPOConfig
    from spreadrl.train.tracking import build_metrics_log

    out = Path(sys.argv[1])
    cfg = load_config(GRPOConfig, None, [f"output_dir={out}", f"logging.backends=[{sys.argv[2]}]",
                                         "logging.run_name=zebra-run", "optim.lr=0.000123"])
    metrics = build_metrics_log(cfg.logging, out, config_to_dict(cfg))
    for step in (1, 2, 3):
        metrics.log(step, {"reward_mean": step / 10, "pass_rate": 0.5, "note": "text"})
    metrics.close()
    """
)


def _run_script(tmp_path: Path, backend: str, **env: str) -> Path:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), backend],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "", f"a backend printed to the console: {proc.stdout!r}"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3], "metrics.jsonl is written whatever the backends"
    return out


def _cfg(tmp_path: Path, *overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, None, [f"output_dir={tmp_path}", *overrides])


def test_jsonl_only_by_default(tmp_path):
    cfg = _cfg(tmp_path)
    assert cfg.logging.backends == ["jsonl"]
    log = build_metrics_log(cfg.logging, tmp_path, config_to_dict(cfg))
    log.log(1, {"reward_mean": 0.25, "kl": 0.0})
    log.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "reward_mean": 0.25, "kl": 0.0}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_unknown_backend_is_a_config_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"logging\.backends"):
        _cfg(tmp_path, "logging.backends=[jsonl, mlflow]")


def test_a_missing_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` fail
    cfg = _cfg(tmp_path, "logging.backends=[wandb]")
    with pytest.raises(MissingDependencyError, match=r"pip install 'spreadrl\[wandb\]'"):
        build_metrics_log(cfg.logging, tmp_path, config_to_dict(cfg))


def test_tensorboard_writes_scalars_and_the_config(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra (part of dev) is missing")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = _cfg(tmp_path, "logging.backends=[jsonl, tensorboard]", "optim.lr=0.000123")
    log = build_metrics_log(cfg.logging, tmp_path, config_to_dict(cfg))
    for step in (1, 2):
        log.log(step, {"reward_mean": step / 4, "note": "not a scalar"})
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["reward_mean"]
    assert [(e.step, e.value) for e in acc.Scalars("reward_mean")] == [(1, 0.25), (2, 0.5)]
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "0.000123" in text


def test_wandb_offline_writes_a_local_run_with_config_and_metrics(tmp_path):
    out = _run_script(tmp_path, "jsonl, wandb", WANDB_MODE="offline", WANDB_SILENT="true")
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, list((out / "wandb").rglob("*"))
    data = runs[0].read_bytes()
    assert b"zebra-run" in data  # the run name
    assert b"0.000123" in data  # the resolved config (optim.lr) went with the run
    assert b"reward_mean" in data and b"pass_rate" in data


def test_trackio_writes_a_local_database_with_config_and_metrics(tmp_path):
    store = tmp_path / "trackio"
    _run_script(tmp_path, "trackio", TRACKIO_DIR=str(store))
    db = sqlite3.connect(next(store.glob("*.db")))
    rows = db.execute("select run_name, step, metrics from metrics order by step").fetchall()
    assert [(name, step) for name, step, _ in rows] == [("zebra-run", s) for s in (1, 2, 3)]
    assert json.loads(rows[2][2]) == {"reward_mean": 0.3, "pass_rate": 0.5}
    (config,) = db.execute("select config from configs").fetchone()
    assert json.loads(config)["optim"]["lr"] == 0.000123
