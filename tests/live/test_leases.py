"""The lease (SPEC 7): one writing client per conversation, with real agent processes."""

from __future__ import annotations

import json
import re
import uuid

from sessiond.wire import messages as m
from tests.helpers import main_path, read_entries, wait_until

CWD = "/work/proj"


def _chain_uuids(path) -> list[str]:
    return [e["uuid"] for e in read_entries(path) if e.get("type") == "user"]


def test_second_agent_is_refused_and_told_who_holds_it(daemon, agents):
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    b = agents(daemon, sid, CWD)
    first = a.ask("record hello")["ok"]
    refused = b.ask("record me too")
    assert refused["busy"]["pid"] == a.pid
    assert refused["busy"]["client"] == "test-agent"
    assert refused["busy"]["since"] and refused["busy"]["lastWrite"]
    assert f"pid {a.pid}" in refused["message"]
    assert b.ask("title Renamed while live") == {"ok": None}  # metadata from a non-holder is accepted
    second = a.ask("record still mine")["ok"]
    entries = read_entries(main_path(daemon.root, CWD, sid))
    assert [e["uuid"] for e in entries if e["type"] == "user"] == [first, second]
    assert any(e.get("customTitle") == "Renamed while live" for e in entries)


def test_writers_without_the_lease_work_together_while_nobody_holds(daemon, agents):
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD, "--no-lease")
    b = agents(daemon, sid, CWD, "--no-lease")
    got = [a.ask("record one")["ok"], b.ask("record two")["ok"], a.ask("record three")["ok"]]
    assert _chain_uuids(main_path(daemon.root, CWD, sid)) == got
    # ... and once an agent holds it, they are refused like anyone else.
    holder = agents(daemon, sid, CWD)
    holder.ask("record held now")
    assert a.ask("record late")["busy"]["pid"] == holder.pid


def test_sidechain_entries_are_never_blocked(daemon, agents):
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    a.ask("record hello")
    with daemon.client() as c:
        side = json.dumps({"type": "assistant", "isSidechain": True, "agentId": "helper", "uuid": str(uuid.uuid4()),
                           "message": {"role": "assistant", "content": "sub"}}).encode()
        resp = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[side], durability="written", lease=True))
        assert resp.accepted == 1
        chain = json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "x"}}).encode()
        err = c.pipeline([m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[chain])])[0]
        assert isinstance(err, m.Error) and err.code == "session_busy" and err.holder.pid == a.pid


def test_holder_crash_releases_the_lease(daemon, agents):
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    b = agents(daemon, sid, CWD)
    a.ask("record hello")
    assert "busy" in b.ask("record refused")
    a.crash()

    def b_writes() -> bool:
        return "ok" in b.ask("record after the crash")

    wait_until(b_writes, "the crashed holder's lease to be released")
    with daemon.client() as c:
        assert [h.pid for h in c.status().live] == [b.pid]


def test_takeover_under_load(daemon, agents):
    sid = str(uuid.uuid4())
    old = agents(daemon, sid, CWD)
    new = agents(daemon, sid, CWD)
    old.ask("record start")
    old.send("burst 3000")
    acked = [old.read()["ok"] for _ in range(200)]  # well under way
    taken = new.ask("takeover")["ok"]
    assert taken["pid"] == new.pid
    # Everything acknowledged before the take-over answered is in the file now,
    # before the new holder reads it.
    in_file = set(_chain_uuids(main_path(daemon.root, CWD, sid)))
    assert set(acked) <= in_file
    lost = None
    while lost is None:
        answer = old.read()
        if "ok" in answer:
            acked.append(answer["ok"])
        else:
            lost = answer
    assert lost["lost"]["pid"] == new.pid
    assert "lost" in old.ask("record once more")  # and from then on
    mine = [new.ask(f"record new {i}")["ok"] for i in range(3)]
    chain = _chain_uuids(main_path(daemon.root, CWD, sid))
    assert set(acked) <= set(chain)  # no acknowledged entry lost
    first_new = chain.index(mine[0])
    assert chain[first_new:] == mine  # nothing of the old holder after the take-over
    assert len(chain) == len(set(chain))


def _held_across_a_restart(daemon, agents):
    """Agent ``a`` holds a new session and has written to it; the daemon is
    killed and started again; agent ``b`` comes for the same session."""
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    a.ask("record before the restart")
    daemon.kill()
    daemon.start()
    return sid, a, agents(daemon, sid, CWD)


def test_daemon_restart_gives_the_lease_back_to_its_holder(daemon, agents):
    sid, a, b = _held_across_a_restart(daemon, agents)
    refused = b.ask("record grab it")
    assert refused.get("busy", {}).get("pid") == a.pid and refused["busy"]["reconnecting"], (refused, daemon.log_text())
    assert "ok" in a.ask("record after the restart")  # its resend path reclaims it
    refused = b.ask("record grab it again")
    assert refused["busy"]["pid"] == a.pid and not refused["busy"].get("reconnecting")
    assert len(_chain_uuids(main_path(daemon.root, CWD, sid))) == 2


def test_a_clean_stop_saves_the_lease_table_for_the_next_daemon(daemon, agents):
    """``stop`` with a holder connected writes the table as it stands (freeze)
    before the writer lets go of the root: the next daemon gives the lease back
    to that holder, and the stop logs no failed save."""
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    a.ask("record before the stop")
    assert daemon.stop() == 0
    assert "saving leases" not in daemon.log_text(), daemon.log_text()
    daemon.start()
    refused = agents(daemon, sid, CWD).ask("record grab it")
    assert refused.get("busy", {}).get("pid") == a.pid, (refused, daemon.log_text())


def test_status_and_list_show_live_sessions(daemon, agents):
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    a.ask("record hello")
    status = json.loads(daemon.cli("status", "--json").stdout)
    assert [(h["session"], h["pid"]) for h in status["live"]] == [(sid, a.pid)]
    listed = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)
    assert listed[0]["live"]["pid"] == a.pid and listed[0]["live"]["client"] == "test-agent"
    human = daemon.cli("list", "--cwd", CWD).stdout.decode()
    assert "LIVE" in human.splitlines()[0] and f"pid {a.pid}" in human
    a.ask("close")
    listed = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)
    assert listed[0]["live"] is None


def test_cli_resume_exit_4_take_over_and_fork(daemon, agents):
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    first = a.ask("record hello")["ok"]
    busy = daemon.cli("resume", sid, "--cwd", CWD, check=False)
    assert busy.returncode == 4
    err = busy.stderr.decode()
    assert f"pid {a.pid}" in err and "--take-over" in err and "--fork" in err
    forked = daemon.cli("resume", sid, "--cwd", CWD, "--fork").stdout.decode().strip()
    assert forked != sid and "ok" in a.ask("record the live one goes on")  # left alone
    assert [e["uuid"] for e in read_entries(main_path(daemon.root, CWD, forked))] == [first]
    out = json.loads(daemon.cli("resume", sid, "--cwd", CWD, "--take-over", "--json").stdout)
    assert first in out["chain"]
    assert a.ask("record refused now")["lost"] is None  # nobody holds it now: the CLI left it free
    b = agents(daemon, sid, CWD)
    assert "ok" in b.ask("record the next agent claims it")
    assert "lost" in a.ask("record still refused")
    chain = _chain_uuids(main_path(daemon.root, CWD, sid))
    assert len(chain) == 3 and chain[:2] == [first, chain[1]]  # hello, "goes on", then b's: nothing of a after


def test_a_take_over_during_the_restart_grace_wins_over_the_returning_holder(daemon, agents):
    sid, a, b = _held_across_a_restart(daemon, agents)
    assert b.ask("takeover")["ok"]["pid"] == b.pid  # on purpose: allowed while the lease waits for its holder
    assert b.ask("record mine now")["ok"]
    assert a.ask("record back again")["busy"]["pid"] == b.pid  # the returning holder is refused, nothing written
    assert len(_chain_uuids(main_path(daemon.root, CWD, sid))) == 2


def test_cli_names_the_holder_with_local_times(daemon, agents):
    """The exit-4 message says since when as list says a time (the holder's
    ISO-8601 UTC stays in --json)."""
    sid = str(uuid.uuid4())
    a = agents(daemon, sid, CWD)
    a.ask("record hello")
    since = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)
    since = next(s for s in since if s["sessionId"] == sid)["live"]["since"]
    assert since.endswith("Z")
    busy = daemon.cli("resume", sid, "--cwd", CWD, check=False, env={"TZ": "Asia/Tokyo"})
    err = busy.stderr.decode()  # held a moment ago: said as every listing says a recent time (output.when)
    assert busy.returncode == 4 and ("since just now" in err or re.search(r"since \d+m ago", err)), err
    a.ask("close")
