"""The blocking and async clients against a real daemon: concurrency, autostart."""

import contextlib
import os
import signal
import subprocess
import sys
import uuid

import anyio
import pytest

from sessiond.client import AsyncClient, Client, Session
from sessiond.wire.errors import DaemonUnavailable, RemoteError
from tests.helpers import main_path, read_entries, user

CWD = "/work/project"


def test_two_client_processes_write_one_session_concurrently(daemon):
    sid = str(uuid.uuid4())
    script = """
import sys, uuid
from sessiond.client import Client, Session
tag, n, sid, cwd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
with Client() as c:
    s = Session(c, sid, cwd, lease=False)  # two holders would be refused (tests/live): opted out
    for i in range(n):
        s.record([{"type": "user", "message": {"content": f"{tag}-{i}"}}], durability="queued" if i % 3 else "written")
    s.close()
"""
    procs = [subprocess.Popen([sys.executable, "-c", script, tag, "300", sid, CWD], env=daemon.env) for tag in ("A", "B")]
    for p in procs:
        assert p.wait(timeout=60) == 0
    with daemon.client() as c:
        c.flush()
    entries = read_entries(main_path(daemon.root, CWD, sid))
    contents = [e["message"]["content"] for e in entries]
    for tag in ("A", "B"):
        mine = [x for x in contents if x.startswith(tag + "-")]
        assert mine == [f"{tag}-{i}" for i in range(300)]  # all there, in each writer's order
    # One chain: every parent is an earlier entry of the file.
    seen = set()
    for e in entries:
        assert e["parentUuid"] is None or e["parentUuid"] in seen
        seen.add(e["uuid"])
    assert sum(e["parentUuid"] is None for e in entries) == 1


def test_library_autostarts_the_daemon(daemon_factory):
    d = daemon_factory()
    sid = str(uuid.uuid4())
    with Client(d.socket, root=d.root, timeout=20) as c:
        assert c.daemon_pid
        s = Session(c, sid, CWD)
        s.record([{"type": "user", "message": {"content": "auto"}}], durability="written")
        pid = c.status().pid
    assert read_entries(main_path(d.root, CWD, sid))[0]["message"]["content"] == "auto"
    assert d.cli("stop").returncode == 0
    with pytest.raises(DaemonUnavailable):
        Client(d.socket, autostart=False).connect()
    assert pid


@pytest.mark.anyio
async def test_async_client_pipelines_from_many_tasks(daemon):
    sid = str(uuid.uuid4())
    async with AsyncClient(daemon.socket, autostart=False, timeout=20) as c:
        async def one(i: int) -> None:
            r = await c.append(sid, CWD, [user(f"t{i}")], durability="written")
            assert r.accepted == 1

        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(one, i)
        with pytest.raises(RemoteError):
            await c.append("not-a-uuid", CWD, [user("x")])
        st = await c.status()
        assert st.clients >= 1
        await c.close_session(sid)
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert sorted(e["message"]["content"] for e in entries) == sorted(f"t{i}" for i in range(100))


@pytest.mark.anyio
async def test_async_client_whose_hello_fails_leaves_no_connection_open(daemon):
    """A daemon that takes the connection but never answers the Hello (frozen
    here; killed or starting in life): whether entering the client fails or
    not, the socket it dialed is closed, not left for the garbage collector."""
    fds = len(os.listdir("/proc/self/fd"))
    daemon.signal(signal.SIGSTOP)  # the kernel still accepts connections into the backlog
    try:
        client = AsyncClient(daemon.socket, autostart=False, timeout=0.5)
        with contextlib.suppress(DaemonUnavailable):
            async with client:
                pass
        assert len(os.listdir("/proc/self/fd")) == fds  # client is still referenced: nothing else closes it
    finally:
        daemon.signal(signal.SIGCONT)
