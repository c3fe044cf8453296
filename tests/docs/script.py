"""One doc file's command blocks as one bash script, run in a folder outside the checkout.

One script per file, because a file's blocks build on each other (the README's
session) and its servers must outlive the block that starts them. Each block
announces itself on stdout (``@@block FILE:LINE``) so a failure names the block.
"""

from __future__ import annotations

import shlex

from tests.docs.blocks import Block, commands

PRELUDE = r"""
set -uo pipefail
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT
wait_ready() {  # wait_ready LOG PID: until the server's printed URL answers
  for _ in $(seq 1200); do  # a hang guard: 10 minutes
    url=$(grep -o 'http://[0-9a-z.:]*/' "$1" | head -1)
    if [ -n "$url" ] && curl -s -o /dev/null "$url"; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then cat "$1"; return 1; fi
    sleep 0.5
  done
  cat "$1"; return 1
}
"""


def file_script(blocks: list[Block]) -> str:
    """The bash script that runs ``blocks`` in order and stops at the first failure."""
    parts = [PRELUDE]
    for n, block in enumerate(blocks):
        parts.append(f"echo {shlex.quote('@@block ' + block.where)}")
        if block.marker == "background":
            for k, command in enumerate(commands(block)):
                log = f".server-{n}-{k}.log"
                # exec: the server is the job (stopped at the end); the newline ends a comment
                parts.append(f"( exec {command}\n) > {log} 2>&1 &")
                parts.append(f"wait_ready {log} $! || {{ echo '@@failed'; exit 1; }}")
        else:
            body = block.text
            parts.append(f'( set -e\n{body}\n) || {{ echo "@@failed rc=$?"; exit 1; }}')
    parts.append("echo '@@done'")
    return "\n".join(parts) + "\n"
