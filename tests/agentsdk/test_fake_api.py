"""The fake Messages API run standalone, as the TypeScript tests start it:
``--port 0`` prints the port it listens on, and a streamed answer is the
event sequence the real API sends."""

from __future__ import annotations

import gc
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from pathlib import Path

from tests.agentsdk.fake_api import FakeAPI, reply_for

FAKE_API = Path(__file__).with_name("fake_api.py")


def _events(body: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in body.decode().strip().split("\n\n"):
        event, data = block.split("\n")
        out.append((event.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_standalone_streams_a_scripted_tool_call(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, str(FAKE_API), "--port", "0", "--log", str(log)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        # the prompt is the LAST user message, with the system message Claude Code puts after it
        request = {"model": "m", "stream": True, "max_tokens": 10,
                   "messages": [{"role": "user", "content": "old: RUN: false"},
                                {"role": "assistant", "content": "ok"},
                                {"role": "user", "content": [{"type": "text", "text": "READ: /etc/hostname"}]},
                                {"role": "system", "content": "reminder RUN: rm -rf /"}]}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/messages", data=json.dumps(request).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.headers["content-type"] == "text/event-stream"
            events = _events(resp.read())
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]
    assert [e for e, _ in events] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"]
    block = events[1][1]["content_block"]
    assert block["type"] == "tool_use" and block["name"] == "Read"
    assert json.loads(events[2][1]["delta"]["partial_json"]) == {"file_path": "/etc/hostname"}
    assert events[4][1]["delta"]["stop_reason"] == "tool_use"
    assert [json.loads(line) for line in log.read_text().splitlines()] == [request]


def test_a_tool_result_ends_the_turn_with_text() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "42"}]}]}
    assert reply_for(body) == [{"type": "text", "text": "done: 42"}]
    assert reply_for({"messages": [{"role": "user", "content": "hello\nthere"}]}) == [{"type": "text", "text": "echo: hello"}]


def test_spawn_calls_a_foreground_subagent_on_the_rest_of_the_line() -> None:
    body = {"messages": [{"role": "user", "content": "SPAWN: look RUN: echo hi\nmore"}]}
    [call] = reply_for(body)
    assert call["name"] == "Agent" and call["input"]["prompt"] == "look RUN: echo hi"  # the subagent runs the command
    assert call["input"]["run_in_background"] is False


def _post(api: FakeAPI, body: dict) -> bytes:
    req = urllib.request.Request(f"{api.url}/v1/messages", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=20) as resp:
        return resp.read()


def test_hold_keeps_answers_to_tool_results_until_release() -> None:
    api = FakeAPI().start()
    try:
        api.hold()
        result = {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "7"}]}]}
        answers: list[bytes] = []
        waiting = threading.Thread(target=lambda: answers.append(_post(api, result)))
        waiting.start()
        deadline = time.monotonic() + 20
        while api.held != 1:
            assert time.monotonic() < deadline, "the request never arrived"
            time.sleep(0.01)
        assert b"echo: hi" in _post(api, {"messages": [{"role": "user", "content": "hi"}]})  # a prompt is not held
        assert not answers and waiting.is_alive()
        api.release()
        waiting.join(20)
        assert b"done: 7" in answers[0] and api.held == 0
    finally:
        api.stop()


def test_stop_closes_a_keep_alive_connection_left_open() -> None:
    """A client that keeps its connection open past ``stop`` (as Claude Code
    does): the server's side is closed by ``stop``, not left to the garbage
    collector as an unclosed transport (a ResourceWarning raised in whatever
    test runs next)."""
    api = FakeAPI().start()
    client = socket.create_connection(("127.0.0.1", api.port), timeout=20)
    try:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        client.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        answer = b""
        while b"echo: hi" not in answer:
            chunk = client.recv(65536)
            assert chunk, answer
            answer += chunk
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            api.stop()
            assert client.recv(1) == b""  # the server's end is closed
            gc.collect()
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
    finally:
        client.close()
