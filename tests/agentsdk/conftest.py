"""Real Claude Code (the CLI bundled in the Agent SDK's wheel) run offline
against the fake Messages API (``fake_api.py``), mirroring to a real daemon
through ``SessiondSessionStore``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions, query

from sessiond.client.agentsdk import SessiondSessionStore
from sessiond.store.paths import sanitize
from tests.agentsdk.fake_api import FakeAPI
from tests.conftest import DaemonProc

LOCAL_ONLY = frozenset({"api-request-shape", "api-request-blob", "api-request"})
"""Entry types Claude Code writes to its own file and never hands the SDK's
mirror (the API requests it made, kept for its own diagnostics)."""


def wait_for(what: Callable[[], Any], timeout: float = 30.0, pause: float = 0.05) -> Any:
    """``what()``'s first truthy value, tried until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(pause)


def entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


class Agent:
    """One agent process's setting: its own Claude Code config dir and work dir,
    the fake API, and a store on ``daemon``."""

    def __init__(self, base: Path, api: FakeAPI, daemon: DaemonProc) -> None:
        self.daemon = daemon
        self.config = base / "claude"
        self.work = base / "work"
        self.config.mkdir()
        self.work.mkdir()
        self.work = Path(os.path.realpath(self.work))
        self.project = sanitize(str(self.work))
        self.env = {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-dummy",
                    "CLAUDE_CONFIG_DIR": str(self.config), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "DISABLE_AUTOUPDATER": "1"}
        self.store = SessiondSessionStore(socket=daemon.socket, root=daemon.root, autostart=False)

    def options(self, **kw: Any) -> ClaudeAgentOptions:
        kw.setdefault("session_store", self.store)
        kw.setdefault("session_store_flush", "eager")
        # allowed_tools, not bypassPermissions: the CLI refuses bypass mode as root
        return ClaudeAgentOptions(cwd=str(self.work), env=self.env, allowed_tools=["Bash", "Read"], max_turns=4, **kw)

    def run(self, prompt: str, **kw: Any) -> list[Any]:
        """One query to its end: every message the SDK yielded."""
        async def go() -> list[Any]:
            return [msg async for msg in query(prompt=prompt, options=self.options(**kw))]

        return asyncio.run(asyncio.wait_for(go(), 50))

    def local_file(self, sid: str) -> Path:
        return self.config / "projects" / self.project / f"{sid}.jsonl"

    def mirror_file(self, sid: str) -> Path:
        return self.daemon.root / "projects" / self.project / f"{sid}.jsonl"

    def sessiond(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.daemon.cli(*args, "--cwd", str(self.work), check=check, timeout=30)

    def listed(self) -> dict[str, dict[str, Any]]:
        """``sessiond list --json`` of its project, by session id."""
        return {s["sessionId"]: s for s in json.loads(self.sessiond("list", "--json").stdout)}


def session_of(messages: list[Any]) -> str:
    return next(m.session_id for m in messages if type(m).__name__ == "ResultMessage")


class Lines:
    """A subprocess's stdout lines, collected by a thread as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: list[bytes] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def seen(self, needle: bytes) -> bool:
        return any(needle in line for line in list(self.lines))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._thread.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def cli_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "sessiond.client.cli", *args]


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


@pytest.fixture
def agent(short_tmp: Path, api: FakeAPI, daemon: DaemonProc) -> Agent:
    base = short_tmp / "agent"
    base.mkdir()
    return Agent(base, api, daemon)
