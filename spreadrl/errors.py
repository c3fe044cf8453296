"""One exception family for errors a user should see as a single clear line.

The CLI catches :class:`SpreadrlError` and prints its message in red with a
non-zero exit code; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class SpreadrlError(Exception):
    """An error caused by the user's input (a file, a field, a cell), not by a bug."""


class TaskFormatError(SpreadrlError):
    """A task set on disk is malformed: the message names the task and the file."""


class ConfigError(SpreadrlError):
    """A configuration key or value is invalid: the message names the key path."""


class WorkbookError(SpreadrlError):
    """A workbook cannot be read or written: the message names the file."""


class EngineCrashed(SpreadrlError):
    """A recalculation engine process died while working (twice in a row, as retried):
    an engine failure, never a verdict on the workbook. Not a WorkbookError, so no
    caller mistakes it for an unreadable output; an episode that meets it ends with an
    error, and a rerun of the eval runs it again."""


class MissingDependencyError(SpreadrlError):
    """An optional dependency is needed: the message names the extra to install."""


class RunHalted(SpreadrlError):
    """A training run stopped because going on would not train what was asked: too many
    crashed episodes, or no group to learn from for several steps. The message is one
    line that names the step, the figures and the setting that decided."""


class RunStopped(Exception):  # noqa: N818 -- an outcome, not an error
    """A training run stopped on a signal after saving a resumable checkpoint.

    Not a :class:`SpreadrlError`: the run did what was asked, so the CLI prints
    :attr:`message` (where the checkpoint is) and exits 0. Raised on every rank;
    ``announce`` is true on the one rank that should print it.
    """

    def __init__(self, message: str, checkpoint: str, step: int, *, announce: bool) -> None:
        super().__init__(message)
        self.message = message
        self.checkpoint = checkpoint
        self.step = step
        self.announce = announce
