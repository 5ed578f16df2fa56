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

import pytest

from sessiond.wire import messages as m
from sessiond.wire.framing import encode
from tests.conftest import DaemonProc
from tests.helpers import line, user, wait_until

from . import attacks
from .attacks import MiB, peak_rss, raw_conn, read_answers
from .conftest import SLACK, read_pool_held

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


def seeded(d: DaemonProc, entries: int = 20) -> None:
    """A session for the Searches to find, and the index caught up with it."""
    sid = str(uuid.uuid4())
    with d.client(timeout=30.0) as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD,
                        entries=[line(user(f"churn {i}")) for i in range(entries)], durability="durable"))
        wait_until(lambda: c.call(m.Search(id=c.next_id(), query="churn", all=True)).hits,  # type: ignore[union-attr]
                   "the index to have the seeded session", timeout=30)


def workers(d: DaemonProc) -> dict[str, int]:
    with d.client() as c:
        st = c.status()
    assert st.workers is not None and st.budgets is not None and st.index is not None
    return {**st.workers, "expensiveJobs": st.budgets["expensiveJobs"]["used"], "clients": st.clients,
            "rescans": int(st.index["rescansSent"] or 0)}


def churned(d: DaemonProc, before: dict[str, int]) -> int:
    """Searches the daemon took since ``before``: started, dropped or refused ``busy``."""
    now = workers(d)
    return sum(now[k] - before[k] for k in ("jobsStarted", "jobsDropped", "busyRefused"))


@pytest.mark.timeout(120)
def test_searches_of_a_client_gone_are_dropped_not_run(daemon_factory, short_tmp: Path) -> None:
    """Budget: the read pool's threads. 60 Searches pipelined by a client that
    then closes its socket: none is run for an answer nobody reads. The pool's
    one thread is held busy meanwhile (an EmptyTrash waiting for the trash lock,
    held here as a lifecycle command of another process would), so which of
    them run does not depend on how fast this machine is: at most the one the
    pool was handed before the client went (the pool's queue holds it), every
    other one dropped (counted ``jobsDropped``), and still none started once
    the pool is free again."""
    # idle_evict_s: no session evicted during the test, so no memory trim joins the pool's jobs counted here
    d = configured(daemon_factory(), short_tmp, read_threads=1, idle_evict_s=3600)
    seeded(d)
    count = 60
    with read_pool_held(d):
        before = workers(d)
        s = raw_conn(d.socket)
        s.sendall(b"".join(encode(m.Search(id=i + 1, query="churn", all=True)) for i in range(count)))
        s.close()

        def accounted() -> bool:
            now = workers(d)
            return now["jobsStarted"] - before["jobsStarted"] + now["jobsDropped"] - before["jobsDropped"] >= count - 1

        wait_until(accounted, "every Search but the one the pool holds dropped", timeout=60)
        wait_until(lambda: workers(d)["clients"] == 2, "the gone client's connection to close", timeout=30)
    # the pool's thread is free again: the one Search it was handed runs out, the dropped ones never start
    wait_until(lambda: workers(d)["expensiveJobs"] == 0, "the gone client's jobs all accounted for", timeout=30)
    after = workers(d)
    started = after["jobsStarted"] - before["jobsStarted"]
    dropped = after["jobsDropped"] - before["jobsDropped"]
    assert started <= 1, f"{started} of {count} Searches of a gone client were run"
    assert started + dropped == count, (started, dropped)


def test_reusing_a_request_id_runs_one_request(daemon_factory, short_tmp: Path) -> None:
    """Budget: ``max_inflight_requests`` and the read pool. 400 Searches all
    under one request id, pipelined: the first is owed its answer, every other
    is refused ``bad_request`` while it is, so one Search runs and the
    connection owes one answer. (The refusal used to settle the first's debt,
    so every other duplicate was taken as new: half of them ran, past the
    in-flight budget that never counted them.)"""
    d = configured(daemon_factory(), short_tmp, read_threads=1)
    seeded(d)
    before = workers(d)
    count = 400
    s = raw_conn(d.socket, timeout=60)
    try:
        s.sendall(b"".join(encode(m.Search(id=7, query="churn", all=True)) for _ in range(count)))
        answers = read_answers(s, count)
    finally:
        s.close()
    found = [a for a in answers if isinstance(a, m.Searched)]
    refused = [a for a in answers if isinstance(a, m.Error)]
    assert len(found) == 1, f"{len(found)} Searches under one request id were run"
    assert {a.code for a in refused} == {"bad_request"} and len(refused) == count - 1
    after = workers(d)
    assert after["jobsStarted"] - before["jobsStarted"] == 1


def test_connection_churn_keeps_jobs_bounded_and_serves_a_victim(daemon_factory, short_tmp: Path) -> None:
    """Budgets: ``max_expensive_jobs`` (all clients' read-pool jobs, waiting or
    running) and the daemon's memory. Three processes connect, pipeline 8
    Searches and close, over and over; meanwhile a victim's Searches, Lists and
    durable Appends are all answered (none ``busy``), the jobs stay within
    their bound at every sample, and peak RSS within its fresh RSS plus a
    small constant."""
    limit, rounds = 16, 15
    # search_refresh_s: the background re-stat of a scope (one a refresh) happens once here, so the count of
    # messages to the indexer below does not grow with how long a slow machine takes over the rounds
    d = configured(daemon_factory(), short_tmp, read_threads=1, max_expensive_jobs=limit, max_clients=64,
                   search_refresh_s=3600)
    seeded(d)
    fresh = peak_rss(d.pid)
    before = workers(d)
    # the churn lasts until it is stopped (its seconds only a safety bound on the processes), so the victim is
    # measured under it however fast or slow this machine is
    churning = attacks.Churning(d.socket, short_tmp / "stop", processes=3, cycles=10**9, seconds=250)
    samples: list[dict[str, int]] = []
    sid = str(uuid.uuid4())
    try:
        wait_until(lambda: workers(d)["jobsDropped"] > 0, "the churn to start", timeout=60)
        with d.client(timeout=30.0) as c:
            # at least `rounds`, and until the churn made 100 cycles, however slow this machine is: each
            # cycle's 8 Searches are counted once at most (started, dropped or refused), each round's Search
            # and List once
            while len(samples) < rounds or churned(d, before) < 8 * 100 + 2 * len(samples):
                assert isinstance(c.call(m.Search(id=c.next_id(), query="churn", all=True)), m.Searched)
                assert isinstance(c.call(m.List(id=c.next_id(), all=True)), m.Listed)
                assert isinstance(c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(user("victim"))],
                                                  durability="durable")), m.Appended)
                st = c.status()
                assert st.budgets is not None and st.workers is not None
                # the pool's queues themselves, less the daemon's own jobs (the usage book's drain after the
                # victim's write, a memory trim: not a client's, so outside the budget)
                samples.append({"jobs": st.budgets["expensiveJobs"]["used"],
                                "queued": st.workers["jobsWaiting"] + st.workers["jobsRunning"] - st.workers["jobsBackground"],
                                "background": st.workers["jobsBackground"]})
        assert churning.running(), "the churn ended before the victim was served: nothing shown"
    finally:
        cycles = churning.stop()
    assert cycles >= 100, f"only {cycles} churn cycles ran"
    assert max(s["queued"] for s in samples) <= limit, samples
    assert max(s["jobs"] for s in samples) <= limit, samples
    assert max(s["background"] for s in samples) <= 4, samples
    after = workers(d)
    searches = after["jobsStarted"] + after["jobsDropped"] - before["jobsStarted"] - before["jobsDropped"]
    rescans = after["rescans"] - before["rescans"]
    # Searches asking the indexer at once share a question: one message per
    # write the victim made (and one re-stat), not one per Search.
    assert rescans <= 3 * len(samples) + 10, f"{rescans} messages to the indexer for {searches} Searches"
    peak = peak_rss(d.pid)
    assert peak <= fresh + SLACK, f"peak RSS {peak / MiB:.0f} MiB, fresh {fresh / MiB:.0f} MiB"
    wait_until(lambda: workers(d)["clients"] == 1 and workers(d)["expensiveJobs"] == 0, "the churn to be over", timeout=60)


def test_past_the_daemon_wide_job_bound_the_heaviest_client_is_refused(daemon_factory, short_tmp: Path) -> None:
    """Budget: ``max_expensive_jobs``. Four connections pipeline 30 Searches
    each (within their own bound of 64 waiting), 120 against a daemon-wide
    bound of 16: past it they are answered ``busy``, each request answered
    once; a client asking after them, holding no job, takes the place of the
    heaviest one's newest and is answered."""
    limit, hogs, each = 16, 4, 30
    d = configured(daemon_factory(), short_tmp, read_threads=1, max_expensive_jobs=limit)
    seeded(d)
    victim = raw_conn(d.socket, timeout=60)
    socks = [raw_conn(d.socket, timeout=60) for _ in range(hogs)]
    try:
        for s in socks:
            s.sendall(b"".join(encode(m.Search(id=i + 1, query="churn", all=True)) for i in range(each)))
        victim.sendall(encode(m.Search(id=1, query="churn", all=True)))
        (answer,) = read_answers(victim, 1)
        assert isinstance(answer, m.Searched), answer
        answers = [a for s in socks for a in read_answers(s, each)]
    finally:
        for s in [victim, *socks]:
            s.close()
    busy = [a for a in answers if isinstance(a, m.Error)]
    assert {a.code for a in busy} == {"busy"}
    assert busy, "no Search was refused past the daemon-wide bound"
    assert len(answers) == hogs * each
    assert workers(d)["busyRefused"] >= len(busy)
