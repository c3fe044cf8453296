import random

import torch

from spreadrl.train.checkpoint import (
    checkpoint_folder,
    checkpoint_step,
    latest_checkpoint,
    load_trainer_state,
    save_checkpoint,
)


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)

    def save_pretrained(self, folder):
        torch.save(self.state_dict(), folder / "model.pt")


def _setup():
    model = _Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    sched.step()
    return model, opt, sched


def test_save_then_resume_restores_optimizer_scheduler_rng_and_extra(tmp_path):
    model, opt, sched = _setup()
    torch.manual_seed(7)
    random.seed(7)
    folder = save_checkpoint(
        tmp_path, 3, model, None, opt, sched, {"order": {"epoch": 1, "position": 5}}
    )
    expected_torch = torch.rand(3)
    expected_py = random.random()
    assert latest_checkpoint(tmp_path) == folder

    model2, opt2, sched2 = _setup()
    opt2.param_groups[0]["lr"] = 123.0
    state = load_trainer_state(folder, model2, opt2, sched2)
    assert state["step"] == 3 and state["extra"]["order"] == {"epoch": 1, "position": 5}
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert sched2.state_dict()["last_epoch"] == sched.state_dict()["last_epoch"]
    saved = opt.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], saved)
    assert torch.equal(torch.rand(3), expected_torch)
    assert random.random() == expected_py


def test_keep_prunes_old_checkpoints_and_latest_points_at_newest(tmp_path):
    model, opt, sched = _setup()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, None, opt, sched, keep=2)
    names = sorted(p.name for p in tmp_path.glob("step-*"))
    assert names == ["step-000002", "step-000003"]
    assert latest_checkpoint(tmp_path).name == "step-000003"


def test_no_checkpoint_means_none(tmp_path):
    assert latest_checkpoint(tmp_path) is None


def test_checkpoint_step_reads_back_the_step_a_folder_was_named_for(tmp_path):
    for step in (1, 12, 1_234_567):  # past six digits the name just grows
        assert checkpoint_step(checkpoint_folder(tmp_path, step)) == step


def test_a_full_disks_line_says_what_the_same_command_does_next(tmp_path):
    """After a full disk the line names what a rerun resumes from: the newest complete
    checkpoint, nothing (it starts over), or step folders none of which is complete
    (the rerun refuses those, so the line says to move them away)."""
    import errno
    import os

    from spreadrl.train.checkpoint import disk_full_error

    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "runs/a/metrics.jsonl")
    root = tmp_path / "checkpoints"
    line = str(disk_full_error(full, root))
    assert line.startswith("the run stopped: no space left on device writing runs/a/metrics")
    assert "no checkpoint was saved; the same command starts the run over" in line
    (root / "step-000001").mkdir(parents=True)  # cut short: no manifest
    line = str(disk_full_error(full, root))
    assert f"no complete checkpoint is in {root}: move it away" in line
    assert disk_full_error(OSError(errno.EACCES, "denied"), root) is None  # not the disk's
