"""The FastAPI app of the environment (``server.app:app``): ``spreadrl env serve``'s.

Settings come from the environment: ``SPREADRL_TASKS`` (a task folder or
``builtin:SPLIT``; default ``builtin:demo-test``), ``SPREADRL_TOOLS`` (a preset or tool
names; default ``full``), ``SPREADRL_WORKERS`` (gym worker processes; default 0, the
episode in its session's thread) and ``SPREADRL_MAX_SESSIONS`` (default 64).

    uvicorn server.app:app --host 0.0.0.0 --port 8000
    python -m server.app --port 8000        # or the `server` script
"""

import argparse
import atexit
import os
from contextlib import ExitStack

from spreadrl.env.config import EnvConfig
from spreadrl.integrations.openenv_server import ServeOptions, build_app

_resources = ExitStack()
atexit.register(_resources.close)  # the gym's worker processes stop with the server
app = build_app(
    ServeOptions(
        tasks=os.environ.get("SPREADRL_TASKS", "builtin:demo-test"),
        env=EnvConfig(tools=os.environ.get("SPREADRL_TOOLS", "full")),
        workers=int(os.environ.get("SPREADRL_WORKERS", "0")),
        max_sessions=int(os.environ.get("SPREADRL_MAX_SESSIONS", "64")),
    ),
    _resources,
)


def main() -> None:
    """Serve the app (the package's ``server`` script)."""
    import uvicorn

    parser = argparse.ArgumentParser(description="spreadrl's Spreadsheet Gym (OpenEnv)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
