"""A disk that fills up, faked at the writers' own seams: an appended file whose write
lands its first bytes and then raises ENOSPC naming no file, as ``write(2)`` does, and
safetensors' writer raising its Rust error that names the OS error only in its text."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

NO_SPACE = "Error while serializing: I/O error: No space left on device (os error 28)"
"""What safetensors' writer raises on a full disk (seen on a full tmpfs, safetensors 0.8)."""


class FillsUp:
    """A file opened to append on a disk that fills up after ``room`` writes: the next
    write lands its first bytes (a torn line) and raises ENOSPC naming no file."""

    def __init__(self, fh, room: int = 0):
        self.fh, self.room = fh, room

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.fh.close()

    def flush(self):
        self.fh.flush()

    def write(self, text):
        if self.room == 0:
            self.fh.write(text[:10])
            self.fh.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= 1
        return self.fh.write(text)


def safetensors_fills_the_disk(
    patch: pytest.MonkeyPatch,
    when: Callable[[Path], bool] = lambda path: True,
    message: str = NO_SPACE,
) -> None:
    """safetensors' writer (under ``save_pretrained``) meets a full disk writing a file
    ``when`` picks: a few bytes land, then its SafetensorError."""
    import safetensors.torch
    from safetensors import SafetensorError

    real = safetensors.torch.serialize_file

    def full(tensors, filename, *args, **kwargs):
        path = Path(filename)
        if when(path):
            path.write_bytes(b"\0" * 10)  # what fitted
            raise SafetensorError(message)
        return real(tensors, filename, *args, **kwargs)

    patch.setattr(safetensors.torch, "serialize_file", full)
