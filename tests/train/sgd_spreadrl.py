"""``python -m tests.train.sgd_spreadrl ARGS``: ``python -m spreadrl ARGS`` training with SGD.

The torchrun equivalence tests launch their ranks with this module instead of
``spreadrl`` so that the two-rank run and the single-process reference both take
plain SGD steps (why: ``tests/train/equivalence.py``); everything else is the
real command line.
"""

from __future__ import annotations

import spreadrl.train.trained_model as trained_model
from spreadrl.cli.main import main
from tests.train.equivalence import sgd_optimizer

# the name the GRPO recipe's trained side calls (imported from optimizer.py at module level)
trained_model.build_optimizer = sgd_optimizer

if __name__ == "__main__":
    main()
