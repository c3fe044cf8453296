"""The LibreOffice service's process: ``python -m spreadrl.env.spreadsheet.recalc.lo_service_main``.

Started by :class:`spreadrl.env.spreadsheet.recalc.lo_service.ServiceClient` when no service answers;
kept apart from :mod:`.lo_service` so that the client (imported by
:mod:`.libreoffice`) does not import :mod:`.libreoffice` back.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeServer
from spreadrl.env.spreadsheet.recalc.lo_service import DEFAULT_IDLE_S, DEFAULT_MAX_PENDING, serve


def main(argv: list[str] | None = None) -> int:
    """Serve one LibreOffice on ``--socket`` until it has been idle ``--idle`` seconds."""
    parser = argparse.ArgumentParser(description="One LibreOffice per machine.")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--soffice", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--max-pending", type=int, default=DEFAULT_MAX_PENDING)
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_S)
    args = parser.parse_args(argv)
    lo = LibreOfficeServer(args.soffice, args.python, args.timeout)
    serve(args.socket, lo, max_pending=args.max_pending, idle_s=args.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
