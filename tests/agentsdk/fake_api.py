"""A fake Anthropic Messages API on 127.0.0.1, so Claude Code runs offline in tests.

``POST /v1/messages`` answers as the real API does: with ``stream: true`` the
server-sent events ``message_start``, ``content_block_start/delta/stop``,
``message_delta``, ``message_stop``; otherwise one JSON message. What the
model "says" is scripted from the LAST ``role: user`` message of the request
(Claude Code appends its own system reminders after the prompt, inside that
message or as later blocks, so the prompt is found by its marker, not its place):

- a message carrying a ``tool_result`` block: the turn's final text,
  ``done: <the first 200 characters of the result>``;
- ``SPAWN: <prompt>`` in its text: an ``Agent`` tool call (in the foreground)
  starting a general-purpose subagent on ``<prompt>`` (the rest of the line),
  so Claude Code runs a sidechain and writes its own transcript;
- ``RUN: <command>`` in its text: a ``Bash`` tool call running ``<command>``;
- ``READ: <path>``: a ``Read`` tool call of ``<path>``;
- anything else: the text ``echo: <the prompt's first line>``.

``/v1/messages/count_tokens`` answers a fixed count; any other path is 404.
``FakeAPI.hold()`` keeps every answer to a tool result waiting (``held``
counts them) until ``release()``: a test acts while each agent is mid-turn,
at a point it knows, rather than at a time it guesses.
Each request body is kept (``FakeAPI.requests``) and, with ``--log``, written
as one JSON line to that file.

Run standalone (the TypeScript tests start it this way)::

    python tests/agentsdk/fake_api.py --port 0 [--log requests.jsonl]

prints ``PORT <n>`` on its first line once it listens, and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import sys
import threading
from typing import Any

HOST = "127.0.0.1"
MODEL = "claude-fake-1"
MAX_BODY = 64 << 20
"""The largest request body read (a long session's request is some megabytes)."""

_ids = itertools.count(1)


def last_user_message(body: dict[str, Any]) -> dict[str, Any] | None:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message
    return None


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text_of(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def reply_for(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of the scripted answer to a request."""
    message = last_user_message(body)
    blocks = _blocks(message) if message is not None else []
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        return [{"type": "text", "text": "done: " + _text_of(results[-1])[:200]}]
    text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    spawn = re.search(r"SPAWN: (.+)", text)
    if spawn:
        return [{"type": "tool_use", "id": f"toolu_fake{next(_ids)}", "name": "Agent",
                 "input": {"description": "run a subagent", "prompt": spawn.group(1).strip(),
                           "subagent_type": "general-purpose", "run_in_background": False}}]
    run = re.search(r"RUN: (.+)", text)
    if run:
        return [{"type": "tool_use", "id": f"toolu_fake{next(_ids)}", "name": "Bash",
                 "input": {"command": run.group(1).strip(), "description": "run the command"}}]
    read = re.search(r"READ: (\S+)", text)
    if read:
        return [{"type": "tool_use", "id": f"toolu_fake{next(_ids)}", "name": "Read",
                 "input": {"file_path": read.group(1)}}]
    prompt = next((line for line in text.splitlines() if line.strip() and not line.startswith("<")), "")
    return [{"type": "text", "text": "echo: " + prompt.strip()[:200]}]


def _message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": f"msg_fake{next(_ids)}", "type": "message", "role": "assistant", "model": MODEL,
            "content": content, "stop_reason": _stop_reason(content), "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}


def _stop_reason(content: list[dict[str, Any]]) -> str:
    return "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"


def sse_events(content: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The stream of one answer, as (event, data) pairs."""
    start = _message([])
    start["stop_reason"] = None
    start["usage"]["output_tokens"] = 1
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(content):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {**block, "input": {}}}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": _stop_reason(content), "stop_sequence": None},
                                     "usage": {"output_tokens": 5}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class FakeAPI:
    """The server, on its own event loop in a thread (``start``/``stop``), or
    served by ``main`` in the foreground."""

    def __init__(self, port: int = 0, log: str | None = None) -> None:
        self.port = port
        self.log = log
        self.requests: list[dict[str, Any]] = []
        self.held = 0
        """Answers to a tool result waiting for ``release()`` now."""
        self._open: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._handlers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        """The connections' handlers, ended by ``stop``: a keep-alive connection
        left open (Claude Code keeps its own) would otherwise stay with the closed
        loop and be garbage-collected later as an unclosed transport, a warning
        in whichever test then runs."""

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def serve(self) -> asyncio.AbstractServer:
        self._server = await asyncio.start_server(self._handle, HOST, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self._server

    def start(self) -> FakeAPI:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            loop.run_until_complete(self.serve())
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-api", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake API did not start")
        return self

    def hold(self) -> None:
        """From now on, answers to a tool result wait for ``release()``."""
        assert self._loop is not None, "hold() is for a started server"
        self._open = asyncio.Event()

    def release(self) -> None:
        """Send the held answers, and hold no more."""
        gate, loop = self._open, self._loop
        self._open = None
        if gate is not None and loop is not None:
            loop.call_soon_threadsafe(gate.set)

    def stop(self) -> None:
        self.release()
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            await asyncio.sleep(0)  # a connection accepted just before starts its handler, which registers
            while self._handlers:
                handlers = dict(self._handlers)
                for task in handlers:
                    task.cancel()
                await asyncio.gather(*handlers, return_exceptions=True)
                for writer in handlers.values():
                    writer.transport.abort()  # what a peer left unread is dropped: the socket closes now
                await asyncio.sleep(0)  # the transports' connection_lost callbacks run, and close their sockets
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        if self._thread is not None:
            self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers[task] = writer
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._handlers.pop(task, None)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to be closed."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target = lines[0].split(" ")[:2]
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY:
            raise ValueError("body too large")
        body = await reader.readexactly(length) if length else b""
        path = target.split("?")[0]
        if method == "POST" and path == "/v1/messages":
            request = json.loads(body or b"{}")
            self.requests.append(request)
            if self.log:
                with open(self.log, "a") as f:
                    f.write(json.dumps(request) + "\n")
            content = reply_for(request)
            gate = self._open
            message = last_user_message(request)
            if gate is not None and message is not None and any(b.get("type") == "tool_result" for b in _blocks(message)):
                self.held += 1
                try:
                    await gate.wait()
                finally:
                    self.held -= 1
            if request.get("stream"):
                out = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in sse_events(content)).encode()
                await self._send(writer, 200, "text/event-stream", out)
            else:
                await self._send(writer, 200, "application/json", json.dumps(_message(content)).encode())
        elif method == "POST" and path == "/v1/messages/count_tokens":
            await self._send(writer, 200, "application/json", b'{"input_tokens": 10}')
        else:
            await self._send(writer, 404, "application/json",
                             b'{"type": "error", "error": {"type": "not_found_error", "message": "not here"}}')
        return headers.get("connection", "").lower() != "close"

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, kind: str, body: bytes) -> None:
        reason = {200: "OK", 404: "Not Found"}[status]
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                     f"request-id: req_fake{next(_ids)}\r\n\r\n".encode() + body)
        await writer.drain()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", help="append each request body to this file, one JSON line each")
    args = parser.parse_args(argv)
    api = FakeAPI(args.port, args.log)

    async def run() -> None:
        server = await api.serve()
        print(f"PORT {api.port}", flush=True)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
