"""One comparison for every "2 ranks take the step 1 process takes" test.

Two ranks and one process compute the same gradient in a different order: other
micro-batch packings and paddings (so other matmul shapes and kernel blockings),
a gloo all-reduce adding the ranks' halves. In float32 the results agree up to
rounding, and which elements differ in their last bits depends on the CPU and its
math library. What can be compared on any machine is therefore fixed here:

* the **update** each path made (weights after minus weights before), not the
  weights: here a tensor's weights are tens to hundreds of times its update, so
  a tolerance on weights hides a wrong update;
* under **plain SGD**, where the update is ``-lr * gradient`` and a rounding-level
  difference in the gradient stays rounding-level. Adam divides each element by
  its own gradient's magnitude: an element whose gradient is near zero takes a
  step of up to ``lr`` in a direction set by rounding, so Adam's weights after a
  step cannot be compared tightly on every CPU (issue 21), and Adam is blind to a
  wrong loss scale anyway. Adam is elementwise on each shard, so it adds nothing
  to what "2 ranks = 1 process" has to prove;
* **per tensor, in norm**. Elementwise relative error is unbounded where an
  update element cancels to near zero; the norm of the difference is not.

The tolerance comes from the arithmetic, not from one machine's measurements. A
float32 sum of ``n`` terms in any order is within ``n * u`` (``u = 2**-24``, the
unit roundoff) of the exact one, relative to the sum of the terms' magnitudes
(Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 3: ``gamma_n``).
The longest reduction in these tests is the weight gradient's sum over the
step's tokens (6,126 in the torchrun GRPO test's largest step; the tiny model's
widths are 192 and 512), so ``n = 8192`` bounds it: ``RTOL = 8192 * 2**-24 =
2**-11``, about 4.9e-4, of the update's norm. On top, each path rounds
``w - lr * g`` once, ``u * |w|`` per element: ``2u * ||w||`` for the two paths.
This is the worst-case bound of one sum used as the yardstick, not a proof for a
whole network (cancellation can make the terms' magnitudes exceed their sum), so
``tests/train/test_equivalence.py`` shows where both ends fall: a float64
reference, one-ulp noise on every gradient and another packing pass (at most 0.06
of the allowance on the AMD EPYC of 2026-11-24; the torchrun runs at most 0.1),
while a dropped micro-batch and a doubled loss scale fail (hundreds to thousands
of times the allowance: dropping one of k micro-batches changes the update by
about 1/k, a wrong loss scale by 100%).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

UNIT_ROUNDOFF = 2.0**-24  # float32
LONGEST_REDUCTION = 8192
RTOL = LONGEST_REDUCTION * UNIT_ROUNDOFF


def update_gaps(
    got: Mapping[str, torch.Tensor],
    want: Mapping[str, torch.Tensor],
    before: Mapping[str, torch.Tensor],
    *,
    rtol: float = RTOL,
) -> dict[str, float]:
    """Per tensor of ``want``: the update gap over its allowance (at most 1 passes).

    gap = ||(got - before) - (want - before)|| / (rtol * ||want - before|| + 2u * ||want||)
    """
    gaps = {}
    for name, value in want.items():
        assert name in got, f"{name}: missing from the compared weights"
        ref = value.detach().double()
        start = before[name].detach().double()
        other = got[name].detach().double()
        assert other.shape == ref.shape, (name, other.shape, ref.shape)
        diff = float(torch.linalg.vector_norm(other - ref))
        allowance = rtol * float(torch.linalg.vector_norm(ref - start)) + 2 * UNIT_ROUNDOFF * float(
            torch.linalg.vector_norm(ref)
        )
        gaps[name] = diff / allowance if allowance > 0 else (0.0 if diff == 0 else float("inf"))
    return gaps


def assert_same_update(
    got: Mapping[str, torch.Tensor],
    want: Mapping[str, torch.Tensor],
    before: Mapping[str, torch.Tensor],
    *,
    rtol: float = RTOL,
) -> None:
    """``got`` took the step ``want`` took from ``before``, up to float32 rounding.

    Also asserts that the step moved the weights (two unchanged models agree
    trivially).
    """
    moved = [n for n, v in want.items() if not torch.equal(v, before[n])]
    assert moved, "the step did not change the weights: nothing was compared"
    gaps = update_gaps(got, want, before, rtol=rtol)
    worst = max(gaps, key=gaps.__getitem__)
    assert gaps[worst] <= 1.0, (
        f"{worst}: the updates differ by {gaps[worst]:.3g}x what float32 rounding allows "
        f"({sum(g > 1 for g in gaps.values())} of {len(gaps)} tensors beyond)"
    )


def saved_weights(folder: Any) -> dict[str, torch.Tensor]:
    """The float32 state dict of a saved Hugging Face model folder (same names for all)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return {k: v.detach() for k, v in model.state_dict().items()}


# the equivalence runs' recipe: plain SGD (see sgd_optimizer); no gradient clipping,
# which would scale a wrong-sized gradient back to the same step (the runs' metrics
# compare the gradient norm itself); at this rate step 1 changes the weights step 2
# samples from by about a percent (the tiny model's first gradients have norm ~3)
SGD_OVERRIDES = ("optim.lr=0.2", "optim.grad_clip=1e6")


def sgd_optimizer(model: Any, optim_cfg: Any) -> torch.optim.Optimizer:
    """Plain SGD at the recipe's ``optim.lr``: stands in for AdamW in the equivalence runs.

    Same signature as ``spreadrl.train.optimizer.build_optimizer``; runs patch the name
    the recipe's trained side calls, ``spreadrl.train.trained_model.build_optimizer`` (in process with
    monkeypatch, launched ranks through ``tests/train/sgd_spreadrl.py``).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.SGD(params, lr=optim_cfg.lr)
