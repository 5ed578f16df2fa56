"""Work does not outlive the client that asked for it.

Connections come and go: a CLI command per hook, a script that searches and
quits, a client killed mid-request. What each one asked for must end with it
(its connection closed, its queued expensive jobs dropped, its running search
interrupted), and no number of them, nor any one pipelining under a single
request id, may take the daemon past its budgets or starve a client that
stays.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from sessiond.protocol.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import line, user, wait_until

CWD = "/work/churn"


def configured(d: DaemonProc, base: Path, **keys: object) -> DaemonProc:
    """``d`` started with ``keys`` in its config file."""
    cfg = base / "churn.toml"
    cfg.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items()))
    return d.start("--config", str(cfg))


def status_json(d: DaemonProc) -> dict:
    return json.loads(d.cli("status", "--json", timeout=30).stdout)


def test_cli_commands_leave_no_connection_open(daemon_factory, short_tmp: Path) -> None:
    """Budget: ``max_clients`` connections. Every CLI command closes the
    connection it opened when it exits, so more commands than ``max_clients``
    in a row leave ``status`` counting only itself, and ``stop`` is served.
    (A handler that answered from inside its dispatch, as Close does when the
    session's queues are written already, left its request owed for good: the
    exited client's connection, seen as half-closed, was kept open to answer it,
    and after ``max_clients`` forks, renames or tags nobody was served.)"""
    max_clients = 4
    d = configured(daemon_factory(), short_tmp, max_clients=max_clients)
    sid = str(uuid.uuid4())
    d.cli("append", "--session", sid, "--cwd", CWD, "--durability", "durable", input=line(user("first")) + b"\n")
    commands = [
        ("rename", sid, "a title", "--cwd", CWD),
        ("tag", sid, "churn", "--cwd", CWD),
        ("fork", sid, "--cwd", CWD),
        ("show", sid, "--cwd", CWD),
        ("list", "--all"),
        ("search", "first", "--all"),
        ("du", "--all"),
        ("record", "--session", sid, "--cwd", CWD),
        ("append", "--session", sid, "--cwd", CWD),
        ("flush", "--session", sid),
        ("status",),
    ]
    ran = 0
    for round_ in range(2):
        for cmd in commands:
            entry = line(user(f"{cmd[0]} {round_}")) + b"\n" if cmd[0] in ("append", "record") else None
            d.cli(*cmd, input=entry, timeout=30)
            ran += 1
    assert ran > 2 * max_clients
    st = status_json(d)
    assert st["clients"] == 1, f"{st['clients'] - 1} connections left open by {ran} CLI commands"
    assert st["budgets"]["clients"]["used"] == 1
    assert d.cli("stop", timeout=30).returncode == 0
    assert d.wait(timeout=30) == 0
