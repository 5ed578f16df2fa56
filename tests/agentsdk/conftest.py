"""Real Claude Code (the CLI bundled in the Agent SDK's wheel) run offline
against the fake Messages API (``fake_api.py``), mirroring to a real daemon
through ``SessiondSessionStore``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import ClaudeAgentOptions, query

from sessiond.client.agentsdk import SessiondSessionStore
from sessiond.store.paths import sanitize
from tests.agentsdk.fake_api import FakeAPI
from tests.conftest import DaemonProc

CLAUDE = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
"""The Claude Code CLI the Python SDK's wheel bundles. The npm SDK is given it
too (``pathToClaudeCodeExecutable``): ``make node`` leaves out the npm SDK's
own copy (an optional platform package of some 400 MB), and it is the same
Claude Code release (the wheel's ``claude.version`` and the npm SDK's
``claudeCodeVersion`` move together)."""

NODE_AGENT = Path(__file__).resolve().parents[2] / "client" / "node" / "dist" / "test" / "agent.js"
"""client/node/test/agent.ts built by ``make node``: one TypeScript SDK agent process."""

def versions() -> str:
    """The Claude Code release given to the npm SDK and the one that SDK
    expects: said when a Node agent fails, as they may drift apart when one
    SDK is upgraded without the other."""
    sdk = NODE_AGENT.parents[2] / "node_modules" / "@anthropic-ai" / "claude-agent-sdk" / "package.json"
    try:
        wanted = json.loads(sdk.read_text()).get("claudeCodeVersion", "?")
        given = (CLAUDE.parent / "claude.version").read_text().split()[0]
    except (OSError, ValueError, IndexError) as exc:
        return f"versions unknown: {exc}"
    return f"Claude Code {given} given, the npm SDK expects {wanted}"


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


def entries_so_far(path: Path) -> list[dict[str, Any]]:
    """``entries`` of a file a process may be appending to right now: its
    complete lines only (a read can see the first bytes of a write before the
    rest, and a waiting test's poll must not take that for a torn line)."""
    data = path.read_bytes()
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines() if line.strip()]


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
        kw.setdefault("allowed_tools", ["Bash", "Read"])
        return ClaudeAgentOptions(cwd=str(self.work), env=self.env, max_turns=4, **kw)

    def run(self, prompt: str, timeout: float = 50.0, **kw: Any) -> list[Any]:
        """One query to its end: every message the SDK yielded."""
        async def go() -> list[Any]:
            return [msg async for msg in query(prompt=prompt, options=self.options(**kw))]

        return asyncio.run(asyncio.wait_for(go(), timeout))

    def local_file(self, sid: str) -> Path:
        return self.config / "projects" / self.project / f"{sid}.jsonl"

    def mirror_file(self, sid: str) -> Path:
        return self.daemon.root / "projects" / self.project / f"{sid}.jsonl"

    def sessiond(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.daemon.cli(*args, "--cwd", str(self.work), check=check, timeout=30)

    def listed(self) -> dict[str, dict[str, Any]]:
        """``sessiond list --json`` of its project, by session id."""
        return {s["sessionId"]: s for s in json.loads(self.sessiond("list", "--json").stdout)}


class NodeAgent:
    """One run of the TypeScript SDK agent (``client/node/test/agent.ts``) in
    ``agent``'s setting (its config dir, work dir, fake API and daemon):
    ``steps`` done in order, each answered by one JSON line, collected as
    they come so a test can act while a step runs."""

    def __init__(self, agent: Agent, steps: list[dict[str, Any]]) -> None:
        node = shutil.which("node")
        assert node is not None, "node is not installed (.ci/run installs it)"
        assert NODE_AGENT.exists(), f"the TypeScript client is not built: run `make node` ({NODE_AGENT} is missing)"
        spec = {"cwd": str(agent.work), "claude": str(CLAUDE), "steps": steps}
        self.proc = subprocess.Popen([node, str(NODE_AGENT), json.dumps(spec)], env={**agent.daemon.env, **agent.env},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[dict[str, Any]] = []
        self.stderr = b""
        self._threads = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def wait(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Every step's answer, once the process has exited (killed after ``timeout``)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"the Node agent did not finish in {timeout}s: {self.lines} {self.stderr[-3000:]!r}") from None
        finally:
            for t in self._threads:
                t.join(10)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
        assert code == 0, (f"the Node agent failed ({code}; {versions()}): {self.lines} "
                           f"{self.stderr[-3000:].decode(errors='replace')}")
        return self.lines

    @classmethod
    def run(cls, agent: Agent, *steps: dict[str, Any], timeout: float = 60.0) -> list[dict[str, Any]]:
        return cls(agent, list(steps)).wait(timeout)


def mirrored(local: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What of a local file the SDK mirrors: all but the ``LOCAL_ONLY`` types."""
    return [e for e in local if e["type"] not in LOCAL_ONLY]


def waiting_prompt(agent: Agent, word: str) -> tuple[str, Any]:
    """A prompt whose Bash call waits for the file ``go`` (so the test acts
    mid-turn), and that file."""
    go = agent.work / "go"
    return f"look for {word} RUN: while [ ! -e {go} ]; do sleep 0.05; done; echo finished-{word}", go


def search_hit(agent: Agent, word: str) -> dict[str, Any] | None:
    hits = json.loads(agent.sessiond("search", word, "--json", check=False).stdout)  # none: exit 1, as grep
    return hits[0] if hits else None


def assert_turn_mirrored(agent: Agent, sid: str, word: str) -> None:
    """Session ``sid`` of ``agent``, one turn with the Bash call of
    ``waiting_prompt(agent, word)``, is in sessiond as Claude Code wrote it:
    entry for entry, but for the ``LOCAL_ONLY`` types (which were written)."""
    local, mirror = entries(agent.local_file(sid)), entries(agent.mirror_file(sid))
    assert mirror == mirrored(local)  # nothing held back, nothing added
    tool_uses = [b for e in mirror if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"]
    results = [b for e in mirror if e["type"] == "user" for b in e["message"]["content"]
               if isinstance(b, dict) and b["type"] == "tool_result"]
    assert [t["name"] for t in tool_uses] == ["Bash"] and f"finished-{word}" in json.dumps(results)
    assert set(e["type"] for e in local) & LOCAL_ONLY  # the exception is real: those types were written locally


def chained_onto(before: list[dict[str, Any]], after: list[dict[str, Any]], prompt: str) -> bool:
    """Whether, in ``after`` (a file that was ``before`` and grew), the new
    user entry carrying ``prompt`` descends by ``parentUuid`` from an
    assistant entry of ``before``: the next turn went on from the old one."""
    new = after[len(before):]
    entry = next(e for e in new if e["type"] == "user" and prompt in json.dumps(e["message"]))
    chain = {e["uuid"]: e for e in after if "uuid" in e}
    ancestors = set()
    parent = entry.get("parentUuid")
    while parent in chain and parent not in ancestors:
        ancestors.add(parent)
        parent = chain[parent].get("parentUuid")
    return bool(ancestors & {e["uuid"] for e in before if e["type"] == "assistant"})


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
