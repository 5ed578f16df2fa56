"""Agents as real processes for the live-session tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).with_name("agent.py")


class Agent:
    def __init__(self, daemon, session: str, cwd: str, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENT), str(daemon.socket), str(daemon.root), session, cwd, *flags],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self.pid = self.read()["ready"]

    def read(self) -> dict:
        line = self.proc.stdout.readline()  # the agent answers every command; the test's timeout bounds it
        if not line:
            raise AssertionError(f"agent {self.proc.pid} ended: {self.proc.stderr.read()}")
        return json.loads(line)

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def ask(self, command: str) -> dict:
        self.send(command)
        return self.read()

    def crash(self) -> None:
        self.send("crash")
        self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=20)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                pipe.close()
            except OSError:  # stdin of a process that is gone
                pass


@pytest.fixture
def agents():
    made: list[Agent] = []

    def start(daemon, session: str, cwd: str, *flags: str) -> Agent:
        agent = Agent(daemon, session, cwd, *flags)
        made.append(agent)
        return agent

    yield start
    for agent in made:
        agent.stop()
