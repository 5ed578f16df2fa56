"""``sessiond web``: the read-only web view (``sessiond/client/web``), served on
127.0.0.1 for as long as the command runs.

Why its own module: it is the one command that serves (an ASGI application on
uvicorn, imported only when it runs); it binds the socket itself, so the port
printed, the port in the Host check and the port listened on are one.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import socket
import sys
from pathlib import Path

import click

from . import Context, cli
from .output import echo

DEFAULT_PORT = 7420
"""The port tried first when ``--port`` is not given (another one when it is taken)."""

HOST = "127.0.0.1"


def bind(port: int | None) -> socket.socket:
    """A listening TCP socket on 127.0.0.1: ``port``, or when none was asked
    ``DEFAULT_PORT``, or any free one when that is taken."""
    for want in ([port] if port is not None else [DEFAULT_PORT, 0]):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, want))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE and port is None:
                continue
            raise OSError(f"cannot listen on {HOST}:{want}: {exc.strerror}") from None
        sock.listen(128)
        sock.setblocking(False)
        return sock
    raise OSError(f"cannot listen on {HOST}")  # not reached: port 0 is always free


@cli.command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=None,
              help=f"Port on 127.0.0.1 (default {DEFAULT_PORT}, or a free one if taken; 0: any free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the view in the default browser.")
@click.option("--max-streams", type=click.IntRange(min=1, max=1024), default=None, hidden=True)
@click.pass_obj
def web(obj: Context, port: int | None, open_browser: bool, max_streams: int | None) -> None:
    """Serve a read-only web view of every conversation on 127.0.0.1.

    Projects, sessions (paged, with tokens and cost), search as you type,
    conversations rendered and updated live as agents write them, usage over
    time. A client of the daemon when one runs (never starts one), else reads
    the files. Only local programs can connect (127.0.0.1), and only with the URL printed:
    it carries a token made for this start. Ctrl-C stops it."""
    import uvicorn

    from sessiond.client.web.app import make_app

    obj.store_root()  # a --root that does not exist: said now, not on the first page
    sock = bind(port)
    bound = sock.getsockname()[1]
    token = secrets.token_urlsafe(24)
    url = f"http://{HOST}:{bound}/?token={token}"
    launch = launch_page(url) if open_browser else None

    def signed_in() -> None:  # the browser came: the page that held the token has done its work
        if launch is not None:
            shutil.rmtree(launch.parent, ignore_errors=True)

    app = make_app(obj, token, bound, max_streams=max_streams, on_sign_in=signed_in)
    echo(f"sessiond web: serving the store read-only on {url}")
    echo("sessiond web: the token in it is this start's; Ctrl-C stops", err=True)
    sys.stdout.flush()
    if launch is not None:
        import webbrowser

        webbrowser.open(launch.as_uri())  # the browser's command line names a file, never the token
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, server_header=False,
                            date_header=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        signed_in()  # or the server stopped first (Ctrl-C)


def launch_page(url: str) -> Path:
    """A page that sends the browser on to ``url``, in a new directory only this
    user can read (0700, the page 0600): what ``--open`` gives the browser. The
    token in the URL is the view's one protection from the machine's other
    users (any of them can reach 127.0.0.1), and a browser's command line is
    theirs to read (``/proc/<pid>/cmdline``, ``ps``); a file's name is not the
    token. Removed at the first sign-in, or when the server stops."""
    import html
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="sessiond-web-"))
    page = where / "open.html"
    target = html.escape(url, quote=True)
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f'<!DOCTYPE html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={target}">'
                f'<title>sessiond web</title><p><a href="{target}">Open the sessiond web view</a></p>\n')
    return page
