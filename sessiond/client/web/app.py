"""The web view's Starlette application and the guard in front of it.

Why a guard of its own, outside Starlette's routing: every request, the
static files and the event streams included, must pass the same checks
before anything is read, and every answer, a refusal included, must carry
the same headers:

- the Host header names this server (``127.0.0.1:PORT`` or ``localhost:PORT``),
  else 400: a page of another site that a DNS rebinding points at 127.0.0.1
  still sends its own name;
- the start's random token, given once as ``?token=`` (answered with a
  redirect that sets it as an HttpOnly SameSite=Strict cookie and drops it
  from the address bar) or in that cookie, compared in constant time, else 403;
- only GET and HEAD (the view is read-only), else 405;
- a Content-Security-Policy that lets the page load its own stylesheet and
  script and nothing else (no inline script, no frame, no other origin),
  ``nosniff``, no referrer, no caching.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote_to_bytes, urlencode

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sessiond.client.cli import Context
from sessiond.wire.errors import SessiondError

from . import data, live, pages
from .assets import CSS, JS
from .conversation import Rendered, load

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
MAX_QUERY = 500
"""The longest search a request may ask (characters)."""
MAX_OFFSET = 2**63 - 1
"""The largest offset an event stream may start from (a file's size is an ``off_t``)."""
PATH_SAFE = "/-._~!$&'()*+,;=:@"
"""What a redirect's path keeps as it is (RFC 3986's pchar and ``/``): every
other byte, ``%``, ``\\``, CR, LF and NUL among them, is percent-encoded."""


def query(scope: Scope) -> list[tuple[str, str]]:
    """The request's query as (name, value) pairs. A value's percent-encoded
    bytes that are not UTF-8 come back as lone surrogates (surrogateescape, as
    ``os.fsdecode`` gives a file name that is not UTF-8: ``-proj%FF`` is
    ``-proj\\udcff``), so a project dir's name round-trips through its link
    (``pages.sessions_href``)."""
    return parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True,
                     encoding="utf-8", errors="surrogateescape")


def same_origin(scope: Scope, rest: list[tuple[str, str]]) -> bytes:
    """The Location of the redirect after sign-in: the request's own path and
    query ``rest``, always a path of this server. The path's bytes are
    percent-encoded anew (``PATH_SAFE``) and its leading slashes and
    backslashes made one ``/``: ``//evil.example/`` or ``/%2F%2Fevil.example``
    would be another host's URL to a browser (``/\\evil.example`` too), and a
    CR, LF or NUL is no header at all."""
    raw = scope.get("raw_path")
    asked = unquote_to_bytes(raw.split(b"?", 1)[0]) if raw else (scope.get("path") or "/").encode("utf-8", "surrogateescape")
    path = b"/" + asked.lstrip(b"/\\")
    tail = urlencode(rest, encoding="utf-8", errors="surrogateescape")
    return (quote(path, safe=PATH_SAFE) + (f"?{tail}" if tail else "")).encode("ascii")


def cookie_name(port: int) -> str:
    """The token's cookie: one per port (a cookie is not bound to a port, and
    two views on two ports must not overwrite each other's)."""
    return f"sessiond_web_{port}"


class Guard:
    """The checks every request passes before the application sees it, and
    the headers every answer carries (see the module doc)."""

    def __init__(self, app: ASGIApp, token: str, port: int, on_sign_in: Callable[[], None] | None = None) -> None:
        self.app = app
        self.token = token.encode()
        self.port = port
        self.on_sign_in = on_sign_in
        """Called at each sign-in (the token traded for the cookie): ``web --open`` removes its launch page."""
        self.hosts = {f"127.0.0.1:{port}".encode(), f"localhost:{port}".encode()}
        self.cookie = cookie_name(port)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        headers = scope["headers"]
        hosts = [v for k, v in headers if k == b"host"]
        if len(hosts) != 1 or hosts[0].lower() not in self.hosts:
            await _plain(send_with_headers, 400, "bad Host header: this server answers only to "
                         f"127.0.0.1:{self.port} and localhost:{self.port}")
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _plain(send_with_headers, 405, "read-only: only GET and HEAD", [(b"allow", b"GET, HEAD")])
            return
        asked = query(scope)
        given = [v for k, v in asked if k == "token"]
        if given:
            if len(given) == 1 and self._matches(given[0].encode("utf-8", "surrogateescape")):
                target = same_origin(scope, [(k, v) for k, v in asked if k != "token"])
                if self.on_sign_in is not None:
                    self.on_sign_in()
                cookie = f"{self.cookie}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"
                await _plain(send_with_headers, 303, "signed in", [(b"location", target),
                                                                  (b"set-cookie", cookie.encode())])
                return
        elif self._matches(self._cookie(headers)):
            await self.app(scope, receive, send_with_headers)
            return
        await _plain(send_with_headers, 403, "forbidden: open the URL `sessiond web` printed (it carries the token)")

    def _matches(self, value: bytes | None) -> bool:
        return value is not None and hmac.compare_digest(value, self.token)

    def _cookie(self, headers: list[tuple[bytes, bytes]]) -> bytes | None:
        for k, v in headers:
            if k != b"cookie":
                continue
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(v.decode("latin-1"))
            except CookieError:
                continue
            if self.cookie in jar:
                return jar[self.cookie].value.encode("latin-1")
        return None


async def _plain(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


class View:
    """The routes: each reads the store in a worker thread (``data``: the
    daemon first, the files after) and answers a page, a fragment, JSON or
    an event stream."""

    def __init__(self, obj: Context, streams: live.Streams | None = None) -> None:
        self.obj = obj
        self.streams = streams or live.Streams()

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    async def projects(self, request: Request) -> Response:
        sessions = await self._run(data.all_sessions, self.obj)
        return HTMLResponse(pages.projects_page(data.projects(sessions), len(sessions)))

    async def sessions(self, request: Request) -> Response:
        params = dict(query(request.scope))
        project = params.get("project") or None
        try:
            page = int(params.get("page", "1"))
        except ValueError:
            page = 1
        heading = "All sessions"
        if project is None:
            sessions = await self._run(data.all_sessions, self.obj)
        else:
            try:
                sessions = await self._run(data.project_sessions, self.obj, project)
            except SessiondError as exc:
                return HTMLResponse(pages.error_page(404, str(exc)), status_code=404)
            heading = next((s.cwd for s in sessions if s.cwd), None) or project
        found = await self._run(data.session_page, self.obj, sessions, page)
        return HTMLResponse(pages.sessions_page(found, heading, project))

    async def _session(self, request: Request) -> tuple[str, Path, str | None] | Response:
        """(canonical id, main transcript, recorded cwd) of the session the URL
        names (``{ABC…}`` is ``abc…``), or the 404 page."""
        try:
            return await self._run(data.locate, self.obj, request.path_params["sid"])
        except SessiondError as exc:
            status = 404 if exc.code in ("not_found", "bad_request") else 500
            return HTMLResponse(pages.error_page(status, str(exc)), status_code=status)

    async def conversation(self, request: Request) -> Response:
        got = await self._session(request)
        if isinstance(got, Response):
            return got
        sid, path, cwd = got
        offset = data.file_size(path)  # the stream starts where this read may have ended: nothing is missed

        def read() -> tuple[Rendered, str]:
            from sessiond.client.cli.spend_view import spend_line

            return load(path), spend_line(data.spend_of(path))

        view, spend = await self._run(read)
        return HTMLResponse(pages.conversation_page(view, sid, cwd, spend, offset))

    async def body(self, request: Request) -> Response:
        got = await self._session(request)
        if isinstance(got, Response):
            return got
        view = await self._run(load, got[1])
        return HTMLResponse(view.body)

    async def events(self, request: Request) -> Response:
        got = await self._session(request)
        if isinstance(got, Response):
            return got
        sid, path, _ = got
        try:
            offset = max(0, int(request.query_params.get("offset", "")))
        except ValueError:
            offset = data.file_size(path)
        if offset > MAX_OFFSET:
            return Response(f"offset past any file (at most {MAX_OFFSET})\n", status_code=400, media_type="text/plain")
        busy = f"too many live streams (at most {self.streams.limit}): close a tab"
        if self.streams.full:
            return Response(busy + "\n", status_code=503, media_type="text/plain")

        async def stream() -> AsyncIterator[bytes]:
            # The place is taken once the stream runs, and given back when it ends however it
            # ends: a response that never started streaming holds nothing.
            if not self.streams.take():  # the last place went to another stream meanwhile
                yield live.event("busy", busy)
                return
            try:
                async for chunk in live.changes(self.obj.socket, self.obj.root, sid, path, offset):
                    yield chunk
            finally:
                self.streams.give_back()

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def search(self, request: Request) -> Response:
        asked = request.query_params.get("q", "")[:MAX_QUERY]
        text = " ".join(asked.split()) + (" " if asked[-1:].isspace() and asked.strip() else "")
        if not text:
            return JSONResponse({"hits": [], "note": None})
        try:
            hits, note = await self._run(data.search, self.obj, text)
        except (SessiondError, ValueError) as exc:
            return JSONResponse({"hits": [], "error": str(exc)}, status_code=400)
        return Response(json.dumps({"hits": msgspec.to_builtins(hits), "note": note}),
                        media_type="application/json")

    async def usage(self, request: Request) -> Response:
        days = await self._run(data.daily_usage, self.obj)
        return HTMLResponse(pages.usage_page(days))

    async def css(self, request: Request) -> Response:
        return Response(CSS, media_type="text/css")

    async def js(self, request: Request) -> Response:
        return Response(JS, media_type="text/javascript")


def make_app(obj: Context, token: str, port: int, *, max_streams: int | None = None,
             on_sign_in: Callable[[], None] | None = None) -> ASGIApp:
    """The application for ``obj``'s store, behind the guard for ``port``;
    at most ``max_streams`` live streams at once (default ``live.MAX_STREAMS``);
    ``on_sign_in`` called at each sign-in (``Guard.on_sign_in``)."""
    view = View(obj, live.Streams(max_streams or live.MAX_STREAMS))
    app = Starlette(routes=[
        Route("/", view.projects),
        Route("/sessions", view.sessions),
        Route("/s/{sid}", view.conversation),
        Route("/s/{sid}/body", view.body),
        Route("/s/{sid}/events", view.events),
        Route("/api/search", view.search),
        Route("/usage", view.usage),
        Route("/static/style.css", view.css),
        Route("/static/app.js", view.js),
    ])
    return Guard(app, token, port, on_sign_in)
