"""Two machines through a real JetStream: write on A, pull on B, byte for byte.

Daemon A and daemon B have different roots (two "machines") and the same
``[mirror]`` settings; the NATS server is killed and restarted under them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import assistant, line, main_path, user

from .conftest import mirror_status, tree, wait_for, wait_mirrored

SESSIONS = 20
ROUNDS = 25
PER_BATCH = 20  # 20 sessions x 25 rounds x 20 entries = 10,000 entries


@pytest.fixture(autouse=True)
def server_up(nats_server):
    """Whatever a test did to the server, the next one finds it running."""
    if nats_server.proc is None or nats_server.proc.poll() is not None:
        nats_server.start()
    yield
    if nats_server.proc is None or nats_server.proc.poll() is not None:
        nats_server.start()


def batch_for(rng: random.Random, sid: int, rnd: int) -> list[tuple[list[bytes], dict]]:
    """One round of a session: (lines, Append options) groups. Main messages with
    uuids, metadata without, sidechain entries routed by agentId, a workflow agent
    batch, and now and then a line larger than a JetStream message (split mid-line)."""
    main: list[bytes] = []
    groups: list[tuple[list[bytes], dict]] = []
    for i in range(PER_BATCH):
        n = rng.randrange(40, 1500)
        text = f"s{sid} r{rnd} e{i} é ✓ " + "".join(rng.choice("abcdefghij \"\\\t") for _ in range(n))
        kind = rng.random()
        if rnd == 3 and i == 0 and sid % 7 == 0:
            main.append(line(assistant("big " + "x" * 600_000)))
        elif kind < 0.08:
            main.append(line({"type": "summary", "summary": text[:80], "leafUuid": str(uuid.uuid4())}))
        elif kind < 0.25:
            main.append(line(user(text, isSidechain=True, agentId=f"a{rng.randrange(2)}")))
        elif kind < 0.30 and i % 2:
            groups.append(([line(assistant(text, isSidechain=True))], {"agent": "w1", "run": "run-1"}))
        else:
            main.append(line((user if i % 2 == 0 else assistant)(text)))
    return [(main, {}), *groups]


def write_rounds(client, sids: list[str], cwd: str, rounds: range, rng: random.Random) -> int:
    reqs = []
    for rnd in rounds:
        for k, sid in enumerate(sids):
            for lines, opts in batch_for(rng, k, rnd):
                reqs.append(m.Append(id=client.next_id(), session=sid, cwd=cwd, entries=lines, durability="written", **opts))
    answers = client.pipeline(reqs)
    assert all(isinstance(a, m.Appended) for a in answers), [a for a in answers if not isinstance(a, m.Appended)][:1]
    return sum(len(r.entries) for r in reqs)


def test_ten_thousand_entries_across_a_nats_restart_are_identical_after_pull(daemon_factory, mirror_config, nats_server, short_tmp):
    cfg = mirror_config()
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b")
    cwd = str(short_tmp)
    sids = [str(uuid.uuid4()) for _ in range(SESSIONS)]
    rng = random.Random(9)
    written = 0
    with a.client() as c:
        wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
        written += write_rounds(c, sids, cwd, range(0, 8), rng)
        # Mid-stream: the server dies while the mirror has ranges in flight.
        nats_server.kill()
        written += write_rounds(c, sids, cwd, range(8, 16), rng)
        down = wait_for(lambda: (lambda st: st if not st["connected"] and st["lagBytes"] > 0 else None)(mirror_status(a)),
                        what="status to show the lag")
        assert down["lagFiles"] >= 1 and down["lastError"]
        nats_server.start()
        written += write_rounds(c, sids, cwd, range(16, ROUNDS), rng)
    assert written == SESSIONS * ROUNDS * PER_BATCH
    st = wait_mirrored(a, timeout=30)
    assert st["published"] > 0 and st["errors"] >= 1  # the outage was seen, then caught up

    out = b.cli("pull", *sids, "--json", env={"SESSIOND_CONFIG": str(cfg)})
    results = [json.loads(x) for x in out.stdout.splitlines()]
    assert [r["sessionId"] for r in results] == sids
    source, copy = tree(a.root), tree(b.root)
    assert sorted(copy) == sorted(source)
    assert any("/subagents/agent-" in k for k in copy) and any("/workflows/run-1/" in k for k in copy)
    for name, data in source.items():
        assert copy[name] == data, f"{name} differs"
    assert sum(data.count(b"\n") for data in copy.values()) == written

    # Pulling again adds nothing and finds every byte equal.
    again = b.cli("pull", *sids[:3], "--json", env={"SESSIOND_CONFIG": str(cfg)})
    assert all(json.loads(x)["bytesAdded"] == 0 for x in again.stdout.splitlines())


def test_required_mirror_refuses_appends_while_down_and_durable_waits_for_jetstream(daemon_factory, mirror_config, nats_server, short_tmp):
    cfg = mirror_config(required=True)
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b")
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    env = {"SESSIOND_CONFIG": str(cfg)}
    with a.client() as c:
        wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(user("one")), line(assistant("two"))], durability="durable"))
        # The durable ack came after JetStream's: B can pull it right away.
        b.cli("pull", sid, env=env)
        assert tree(b.root) == tree(a.root)

        nats_server.kill()
        wait_for(lambda: not mirror_status(a)["connected"], what="the mirror to notice")
        with pytest.raises(RemoteError) as refused:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(user("three"))]))
        assert refused.value.code == "mirror_unavailable"
        assert "diverge" in str(refused.value)
        with pytest.raises(RemoteError) as refused_record:
            c.call(m.Record(id=c.next_id(), session=sid, cwd=cwd, messages=[line(user("three"))]))
        assert refused_record.value.code == "mirror_unavailable"

        nats_server.start()
        wait_for(lambda: mirror_status(a)["connected"], timeout=20, what="the mirror to reconnect")
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(user("four"))], durability="durable"))
    b.cli("pull", sid, env=env)
    assert tree(b.root) == tree(a.root)
    assert b"three" not in next(iter(tree(a.root).values()))


def test_a_session_written_on_two_machines_is_flagged_not_mirrored_over(daemon_factory, mirror_config, short_tmp):
    cfg = mirror_config(required=True)
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b").start("--config", str(cfg))
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    env = {"SESSIOND_CONFIG": str(cfg)}
    with a.client() as ca:
        wait_for(lambda: mirror_status(a)["connected"], what="A's mirror to connect")
        ca.call(m.Append(id=ca.next_id(), session=sid, cwd=cwd, entries=[line(user("from A"))], durability="durable"))
        b.cli("pull", sid, env=env)
        ca.call(m.Append(id=ca.next_id(), session=sid, cwd=cwd, entries=[line(assistant("A goes on"))], durability="durable"))
    with b.client() as cb:
        wait_for(lambda: mirror_status(b)["connected"], what="B's mirror to connect")
        with pytest.raises(RemoteError) as diverged:  # written locally, but never over A's copy
            cb.call(m.Append(id=cb.next_id(), session=sid, cwd=cwd, entries=[line(assistant("B goes on"))], durability="durable"))
        assert diverged.value.code == "mirror_unavailable"
        with pytest.raises(RemoteError) as refused:
            cb.call(m.Append(id=cb.next_id(), session=sid, cwd=cwd, entries=[line(user("again"))]))
        assert "diverged" in str(refused.value)
    assert mirror_status(b)["diverged"] == 1
    # The stream still holds A's session, intact.
    c = daemon_factory(name="c")
    c.cli("pull", sid, env=env)
    assert tree(c.root) == tree(a.root)


def test_the_first_writer_is_flagged_when_another_machine_took_the_session_over(daemon_factory, mirror_config, short_tmp):
    cfg = mirror_config()
    env = {"SESSIOND_CONFIG": str(cfg)}
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b").start("--config", str(cfg))
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    with a.client() as ca, b.client() as cb:
        ca.call(m.Append(id=ca.next_id(), session=sid, cwd=cwd, entries=[line(user("from A"))], durability="written"))
        wait_mirrored(a)
        b.cli("pull", sid, env=env)
        cb.call(m.Append(id=cb.next_id(), session=sid, cwd=cwd, entries=[line(assistant("B takes over"))], durability="written"))
        wait_mirrored(b)
        # A still believes it owns the file: its next range expects a sequence
        # that B's range replaced, the server refuses it, and A finds B's bytes.
        ca.call(m.Append(id=ca.next_id(), session=sid, cwd=cwd, entries=[line(assistant("A goes on"))], durability="written"))
        wait_for(lambda: mirror_status(a)["diverged"] == 1, what="A to see the fork")
    assert "written on another machine" in a.log_text() or "differs from the stream" in a.log_text()
    c = daemon_factory(name="c")
    c.cli("pull", sid, env=env)
    assert tree(c.root) == tree(b.root)  # the stream follows the machine that took over, unmixed


def _written_without_the_mirror(daemon_factory, short_tmp, entries: list[dict]):
    """A session written by a daemon with no mirror (stopped again): the daemon, its cwd and id."""
    a = daemon_factory(name="a").start()
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written", entries=[line(e) for e in entries]))
    a.stop()
    return a, cwd, sid


def test_push_backfills_a_session_written_without_the_mirror(daemon_factory, mirror_config, short_tmp):
    env = {"SESSIOND_CONFIG": str(mirror_config())}
    a, cwd, sid = _written_without_the_mirror(
        daemon_factory, short_tmp, [user("hello"), assistant("hi"), user("side", isSidechain=True, agentId="x1")])
    pushed = json.loads(a.cli("push", sid, "--cwd", cwd, "--json", env=env).stdout)
    assert pushed["files"] == 2 and pushed["bytesPublished"] == sum(len(v) for v in tree(a.root).values())
    again = json.loads(a.cli("push", sid, "--cwd", cwd, "--json", env=env).stdout)
    assert again["bytesPublished"] == 0  # only what the stream lacks

    b = daemon_factory(name="b")
    other = short_tmp / "elsewhere"
    other.mkdir()
    res = json.loads(b.cli("pull", sid, "--cwd", str(other), "--json", env=env).stdout)
    assert res["files"] == 2
    def by_rel(root: Path) -> dict[str, bytes]:  # relative to the project dir
        return {k.split("/", 1)[1]: v for k, v in tree(root).items()}

    assert by_rel(b.root) == by_rel(a.root)
    assert {k.split("/", 1)[0] for k in tree(b.root)} == {project_dir(b.root, str(other)).name}  # under --cwd's project

    # A local copy that differs from the stream is an error, never overwritten.
    main = next(p for p in (b.root / "projects").rglob(f"{sid}.jsonl"))
    main.write_bytes(main.read_bytes().replace(b"hello", b"HELLO"))
    bad = b.cli("pull", sid, "--cwd", str(other), env=env, check=False)
    assert bad.returncode == 1 and b"differs from the mirror" in bad.stderr


@pytest.mark.parametrize("end", ["stop", "crash"])
def test_lag_left_by_a_daemon_is_caught_up_on_its_next_start(daemon_factory, mirror_config, nats_server, short_tmp, end):
    cfg = mirror_config(shutdown_flush_s=0.3)
    env = {"SESSIOND_CONFIG": str(cfg)}
    a = daemon_factory(name="a").start("--config", str(cfg))
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
    nats_server.kill()
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written",
                        entries=[line(user("while down")), line(assistant("still local"))]))
    st = mirror_status(a)
    assert not st["connected"] and st["lagBytes"] > 0 and st["queuedLines"] == 2
    state_file = a.root / ".sessiond-mirror.json"
    # The daemon saves its state at start too (with nothing lagging): wait for the save that names the file.
    state = wait_for(lambda: state_file.exists() and (st := json.loads(state_file.read_text()))["files"] and st,
                     what="the state file")
    assert state["clean"] is False and len(state["files"]) == 1
    sid2 = str(uuid.uuid4())  # written just after a save: not in the state file yet
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid2, cwd=cwd, durability="written", entries=[line(user("later"))]))
    if end == "stop":
        assert a.stop() == 0
        assert "not yet mirrored" in a.log_text()
        state = json.loads(state_file.read_text())
        assert state["clean"] is True and len(state["files"]) == 2  # names every lagging file
    else:
        a.kill()  # SIGKILL: the next start also looks at every file written since the last save

    nats_server.start()
    a.start("--config", str(cfg))
    wait_mirrored(a)  # with no new write
    assert ("did not stop cleanly" in a.log_text()) == (end == "crash")
    b = daemon_factory(name="b")
    b.cli("pull", sid, sid2, env=env)
    assert tree(b.root) == tree(a.root) and len(tree(b.root)) == 2


def test_mirror_config_errors_name_the_key(daemon_factory, short_tmp):
    cfg = short_tmp / "bad.toml"
    cfg.write_text('[mirror]\nservers = ["nats://127.0.0.1:1"]\nstreem = "X"\n')
    d = daemon_factory(name="bad")
    d.socket.parent.mkdir(mode=0o700, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "sessiond.client.cli", "serve", "--config", str(cfg)],
                          env=d.env, capture_output=True, timeout=30)
    assert proc.returncode == 2 and b"mirror.streem: unknown key" in proc.stderr
    cfg.write_text('[mirror]\nrequired = true\n')
    proc = subprocess.run([sys.executable, "-m", "sessiond.client.cli", "serve", "--config", str(cfg)],
                          env=d.env, capture_output=True, timeout=30)
    assert proc.returncode == 2 and b"mirror.servers" in proc.stderr


def test_show_and_resume_pull_a_session_that_is_not_local(daemon_factory, mirror_config, short_tmp):
    cfg = mirror_config()
    env = {"SESSIOND_CONFIG": str(cfg)}
    a = daemon_factory(name="a").start("--config", str(cfg))
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    q = user("asked on machine A", parentUuid=None)
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written",
                        entries=[line(q), line(assistant("answered on A", parentUuid=q["uuid"]))]))
    a.stop()  # drains the mirror
    b = daemon_factory(name="b")
    shown = b.cli("show", sid, "--cwd", cwd, "--json", env=env)
    assert b"pulled" in shown.stderr
    out = json.loads(shown.stdout)
    assert [x["message"]["content"] for x in out["messages"]][0] == "asked on machine A"
    assert tree(b.root) == tree(a.root)
    missing = b.cli("show", str(uuid.uuid4()), "--cwd", cwd, env=env, check=False)
    assert missing.returncode == 1 and b"no session" in missing.stderr


def test_sighup_applies_what_the_running_mirror_reads_and_names_the_rest(daemon_factory, mirror_config, nats_server, short_tmp):
    cfg = mirror_config(required=False)
    a = daemon_factory(name="a").start("--config", str(cfg))
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    stream = mirror_status(a)["stream"]
    with a.client() as c:
        wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
        mirror_config(required=True, stream="ElsewhereStream")  # rewrites the same file
        a.signal(signal.SIGHUP)
        wait_for(lambda: mirror_status(a)["required"] is True, what="the reload")
        assert mirror_status(a)["stream"] == stream  # where it publishes changes only at restart
        assert "only applied at the next start: mirror.stream" in a.log_text()
        assert "mirror.required False -> True" in a.log_text()
        nats_server.kill()  # required now holds for appends at once
        wait_for(lambda: not mirror_status(a)["connected"], what="the mirror to notice")
        with pytest.raises(RemoteError) as refused:
            c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(user("one"))]))
        assert refused.value.code == "mirror_unavailable"


def test_a_session_trashed_while_the_mirror_lags_is_mirrored_whole_after_its_restore(daemon_factory, mirror_config, nats_server, short_tmp):
    cfg = mirror_config(queue_bytes=4096)  # the lag is beyond memory: the mirror would read it back from the file
    env = {"SESSIOND_CONFIG": str(cfg)}
    a = daemon_factory(name="a").start("--config", str(cfg))
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written",
                        entries=[line(user("hello")), line(user("side", isSidechain=True, agentId="x1"))]))
        wait_mirrored(a)
        nats_server.kill()  # the mirror now lags behind what follows
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written", entries=[line(assistant("while down " + "x" * 20_000))]))
    a.cli("rm", sid, "--cwd", cwd)
    nats_server.start()
    wait_mirrored(a)  # back, with the session's files in the trash: nothing to read back
    a.cli("restore", sid)
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written", entries=[line(user("after"))]))
    wait_mirrored(a)
    assert mirror_status(a)["diverged"] == 0
    b = daemon_factory(name="b")
    b.cli("pull", sid, "--cwd", cwd, env=env)
    assert tree(b.root) == tree(a.root)  # nothing the trash held back is missing remotely


def test_push_skips_an_agent_file_that_is_a_fifo(daemon_factory, mirror_config, short_tmp):
    """The mirror read files with a blocking open: a FIFO named like an agent
    file hung ``push`` (and the daemon's catch-up of lagging files) forever."""
    env = {"SESSIOND_CONFIG": str(mirror_config())}
    a, cwd, sid = _written_without_the_mirror(daemon_factory, short_tmp, [user("hello"), user("side", isSidechain=True, agentId="x1")])
    agents = main_path(a.root, cwd, sid).parent / sid / "subagents"
    os.mkfifo(agents / "agent-fifo.jsonl", 0o600)
    pushed = a.cli("push", sid, "--cwd", cwd, "--json", env=env, timeout=60)
    assert json.loads(pushed.stdout)["files"] == 2
    assert b"agent-fifo.jsonl" in pushed.stderr and b"not a regular file" in pushed.stderr
