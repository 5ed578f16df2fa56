"""The screenshots of docs/web.md: a small demo store, a real daemon, ``sessiond web`` and a
headless Chromium (the harness of tests/web), each main page saved as a PNG beside this file.

    .venv/bin/python docs/img/web_screenshots.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import benchlib  # noqa: E402

from tests.web.harness import WebServer, browser, wait_for  # noqa: E402

MODEL = "claude-sonnet-4-5-20250929"


def cli(env: dict[str, str], *args: str, data: list[dict] | None = None) -> str:
    lines = "\n".join(json.dumps(e, separators=(",", ":")) for e in data or []).encode()  # as Claude Code writes them
    return subprocess.run([sys.executable, "-m", "sessiond.client.cli", *args], input=lines, env=env, check=True,
                          capture_output=True).stdout.decode()


def user(text: object, ts: str) -> dict:
    return {"type": "user", "timestamp": ts, "message": {"role": "user", "content": text}}


def answer(content: list[dict], ts: str, mid: str, tokens: tuple[int, int] = (1500, 420)) -> dict:
    return {"type": "assistant", "version": "2.0.14", "timestamp": ts, "requestId": f"req_{mid}",
            "message": {"role": "assistant", "id": mid, "model": MODEL, "content": content,
                        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1],
                                  "cache_read_input_tokens": 12000, "cache_creation_input_tokens": 900}}}


def session(env: dict[str, str], cwd: str, entries: list[dict]) -> str:
    sid, parent = str(uuid.uuid4()), None
    for e in entries:
        e.update(uuid=str(uuid.uuid4()), parentUuid=parent, sessionId=sid, cwd=cwd)
        parent = e["uuid"]
    cli(env, "append", "--cwd", cwd, "--session", sid, data=entries)
    return sid


def demo(env: dict[str, str]) -> str:
    """A few sessions in three projects, with usage on six days and a fork; the id of the one shown."""
    main = session(env, "/home/dev/parser", [
        user("Why does the parser choke on `{}` in templates?", "2026-03-01T09:00:00.000Z"),
        answer([{"type": "text", "text": "The lexer drops the closing brace when it follows a string. Let me look:"},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/home/dev/parser/src/lexer.py"}}],
               "2026-03-01T09:00:05.000Z", "m1"),
        user([{"type": "tool_result", "tool_use_id": "toolu_1", "content": "def lex(src):\n    for ch in src:\n        ..."}],
             "2026-03-01T09:00:06.000Z"),
        answer([{"type": "text", "text": "Found it. `lex()` skips `}` after a quote:\n\n```python\n"
                 "if ch == '}' and prev == '\"':\n    continue  # the bug\n```\n\nFixed by tracking string state; "
                 "**all 212 tests pass**."}], "2026-03-01T09:01:00.000Z", "m2")])
    cli(env, "rename", main, "Fix the lexer dropping braces")
    topics = ["Refactor the billing module into three parts", "Flaky socket test in CI", "Write the release notes for 2.1",
              "Add a --json flag to export", "Speed up the listing on 10k sessions"]
    for i, topic in enumerate(topics):
        day = f"2026-03-0{i + 2}"
        session(env, ["/home/dev/billing", "/home/dev/parser", "/home/dev/docs"][i % 3],
                [user(topic, f"{day}T10:00:00.000Z"),
                 answer([{"type": "text", "text": "Done."}], f"{day}T10:00:09.000Z", f"x{i}", (3000 * (i + 1), 800 * (i + 2)))])
    cli(env, "fork", main)
    cli(env, "flush")
    return main


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="sdshot-", dir="/tmp"))
    os.chmod(base, 0o700)
    root, sock = base / "root", base / "run" / "s.sock"
    env = {**os.environ, "SESSIOND_ROOT": str(root), "SESSIOND_SOCKET": str(sock)}
    daemon = benchlib.start_daemon(sock, root)
    server = driver = None
    try:
        shown = demo(env)
        server = WebServer(env)
        driver = browser(base / "profile", 1200, 800)
        driver.get(server.url)
        wait_for(driver, lambda c: c.find_elements("css selector", "table.list"))
        driver.save_screenshot(str(HERE / "web-projects.png"))
        driver.get(server.origin + "/sessions")
        driver.save_screenshot(str(HERE / "web-sessions.png"))
        driver.get(server.origin + f"/s/{shown}")
        wait_for(driver, lambda c: c.execute_script("return document.body.dataset.live"))
        for el in driver.find_elements("css selector", "details"):
            driver.execute_script("arguments[0].open = true", el)
        driver.save_screenshot(str(HERE / "web-conversation.png"))
        driver.get(server.origin + "/")
        driver.find_element("id", "q").send_keys("lexer brace")
        wait_for(driver, lambda c: c.find_elements("css selector", "#results li"))
        driver.save_screenshot(str(HERE / "web-search.png"))
        driver.get(server.origin + "/usage")
        driver.save_screenshot(str(HERE / "web-usage.png"))
    finally:
        if driver is not None:
            driver.quit()
        if server is not None:
            server.stop()
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
