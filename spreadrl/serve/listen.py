"""Take the port first, then announce it: `spreadrl serve` and `spreadrl view` alike.

uvicorn binds its port only once it starts, so a server used to load its model and
print "open http://..." before finding the port taken by another process.
Here the socket is bound and listening before anything slow or anything printed, a
taken port is one error line naming the flag, and uvicorn serves on that socket.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from spreadrl.errors import SpreadrlError


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one).

    Raises:
        SpreadrlError: the port is taken, or the address is not one of this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SpreadrlError(
                f"port {port} on {host} is taken (another server is listening there); "
                "pass --port with a free one (--port 0 picks one)"
            ) from exc
        raise SpreadrlError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock


def url_of(sock: socket.socket, path: str = "/") -> str:
    """The address a browser opens for ``sock`` (its real port, also after --port 0)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def serve_on(sock: socket.socket, app: Any, **uvicorn_config: Any) -> None:
    """Run ``app`` with uvicorn on the already-bound ``sock`` until it stops."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, **uvicorn_config))
    server.run(sockets=[sock])
