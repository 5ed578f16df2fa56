"""The clients' sans-IO core driven in-process: no socket, no daemon, a fake clock.

A scripted driver plays the daemon: it answers each ``Call`` the way a test
says, counts connects, and advances the fake clock by each ``Sleep`` instead of
sleeping, so a 10 s reconnect budget is checked in no time.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest

from sessiond.client.core import CONNECT, Backoff, Call, Channel, Outbox, Sleep, confirming, deliver
from sessiond.wire import messages as m
from sessiond.wire.errors import DaemonUnavailable, LeaseLost, RemoteError, SessionBusy
from sessiond.wire.framing import encode
from tests.helpers import line, user

SID = "0b3c2a58-8d51-4d4e-9a63-3f1f4b3f7a10"
CWD = "/work/project"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Daemon:
    """Plays the daemon and the driver: ``answer(req)`` returns an answer or
    raises; ``down`` makes every connect and call fail as a lost daemon does."""

    def __init__(self, channel: Channel, clock: FakeClock) -> None:
        self.channel = channel
        self.clock = clock
        self.sent: list[m.Request] = []
        self.sleeps: list[float] = []
        self.connected = False
        self.stale = False
        self.down = False
        self.answer: Callable[[m.Request], m.Response] = self.ack

    def ack(self, req: m.Request) -> m.Response:
        if isinstance(req, (m.Append, m.Record)):
            entries = req.entries if isinstance(req, m.Append) else req.messages
            return m.Appended(id=req.id, accepted=len(entries), last=f"last-{req.id}" if isinstance(req, m.Record) else None)
        if isinstance(req, m.Flush):
            return m.Flushed(id=req.id)
        return m.Done(id=req.id)

    def lose(self) -> None:
        """The daemon died: the client learns it at its next call."""
        self.stale = True

    def run(self, steps: Generator[Any, Any, Any]) -> Any:
        answer: Any = None
        failed: Exception | None = None
        while True:
            try:
                op = steps.send(answer) if failed is None else steps.throw(failed)
            except StopIteration as done:
                return done.value
            answer = failed = None
            try:
                if op is CONNECT:
                    if self.down:
                        raise DaemonUnavailable("no daemon")
                    if not self.connected:
                        self.connected = True
                        self.channel.opened()
                elif isinstance(op, Sleep):
                    self.sleeps.append(op.seconds)
                    self.clock.now += op.seconds
                else:
                    assert isinstance(op, Call)
                    if self.down or self.stale or not self.connected:
                        self.connected = self.stale = False
                        raise DaemonUnavailable("lost the daemon")
                    self.sent.append(op.request)
                    answer = self.answer(op.request)
            except Exception as exc:  # noqa: BLE001 (thrown in, as the real drivers do)
                failed = exc


@pytest.fixture
def rig() -> tuple[Channel, Daemon, FakeClock]:
    clock = FakeClock()
    channel = Channel()
    return channel, Daemon(channel, clock), clock


def add(outbox: Outbox, texts: list[str], durability: m.Durability = "queued", record: bool = False) -> None:
    outbox.add(outbox.batches(record, [line(user(t)) for t in texts], 1 << 20, cwd=CWD, durability=durability))


def texts(req: m.Request) -> list[str]:
    import json

    entries = req.entries if isinstance(req, m.Append) else req.messages  # type: ignore[union-attr]
    return [json.loads(e)["message"]["content"] for e in entries]


def test_queued_batches_are_resent_in_order_before_new_ones_after_a_reconnect(rig):
    channel, d, clock = rig
    outbox = Outbox(SID, m)
    for t in ("a", "b"):
        add(outbox, [t])
        d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert [r.resend for r in d.sent] == [False, False] and len(outbox.unconfirmed) == 2
    d.lose()  # the daemon was SIGKILLed: what it held queued may be gone
    d.sent.clear()
    add(outbox, ["c"])
    d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert [texts(r) for r in d.sent] == [["a"], ["b"], ["c"]]
    assert [r.resend for r in d.sent] == [True, True, True]
    assert d.sleeps == [0.05]  # the first send found the connection lost, then one reconnect
    d.sent.clear()
    add(outbox, ["d"], durability="written")
    d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert [(texts(r), r.resend) for r in d.sent] == [(["d"], False)]
    assert outbox.empty  # the written ack confirms every earlier batch of the session


def test_a_session_resends_after_another_session_reconnected_the_client(rig):
    """The client reconnected for session B: session A's queued entries went
    with the lost daemon all the same, and A's next delivery resends them."""
    channel, d, clock = rig
    a, b = Outbox(SID, m), Outbox("5f0c1e0a-1111-4222-8333-444455556666", m)
    add(a, ["a1"])
    d.run(deliver(a, channel, Backoff(10, clock)))
    d.lose()
    add(b, ["b1"])
    d.run(deliver(b, channel, Backoff(10, clock)))  # B reconnects
    d.sent.clear()
    add(a, ["a2"])
    d.run(deliver(a, channel, Backoff(10, clock)))
    assert [(texts(r), r.resend) for r in d.sent] == [(["a1"], True), (["a2"], True)]


def test_the_backoff_doubles_to_a_cap_and_gives_up_at_the_budget_keeping_everything(rig):
    channel, d, clock = rig
    outbox = Outbox(SID, m)
    d.down = True
    add(outbox, ["x"])
    start = clock.now
    with pytest.raises(DaemonUnavailable):
        d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert d.sleeps[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0] and set(d.sleeps[5:]) == {1.0}
    assert clock.now - start <= 10 and clock.now - start + 1.0 > 10  # waited out the budget, not past it
    assert len(outbox.unsent) == 1 and not outbox.unsent[0].sent
    d.down = False  # the daemon is back: the kept batch goes first, never sent before: not a resend
    d.sleeps.clear()
    d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert [(texts(r), r.resend) for r in d.sent] == [(["x"], False)] and not d.sleeps


def test_a_record_resent_keeps_the_parent_it_was_first_sent_with(rig):
    channel, d, clock = rig
    outbox = Outbox(SID, m)
    outbox.hint = "tip-0"
    add(outbox, ["q"], record=True)
    d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert outbox.hint == f"last-{d.sent[0].id}"
    d.lose()
    outbox.hint = "moved-on"
    add(outbox, ["q2"], record=True)
    d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert [(texts(r), r.parent, r.resend) for r in d.sent] == [
        (["q"], "tip-0", False), (["q"], "tip-0", True), (["q2"], "moved-on", True)]
    # q2 keeps the hint of its first (lost) send too: a resend chains as that send did


def test_error_answers_lease_refusals_drop_io_errors_keep_shutting_down_waits(rig):
    channel, d, clock = rig
    outbox = Outbox(SID, m)

    def refuse(code: str) -> Callable[[m.Request], m.Response]:
        def answer(req: m.Request) -> m.Response:
            if isinstance(req, m.Append):
                raise {"session_busy": SessionBusy, "lease_lost": LeaseLost}.get(code, RemoteError)("no", code=code)
            return d.ack(req)
        return answer

    d.answer = refuse("session_busy")
    add(outbox, ["busy"])
    with pytest.raises(SessionBusy):
        d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert outbox.empty  # never to be written: not resent, not by the fallback
    d.answer = refuse("io_error")
    add(outbox, ["disk full"], durability="written")
    with pytest.raises(RemoteError):
        d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert not outbox.unsent and len(outbox.unconfirmed) == 1  # the daemon holds it queued: kept for a lost daemon
    calls = []

    def stopping_then_back(req: m.Request) -> m.Response:
        calls.append(req)
        if len(calls) == 1:
            raise RemoteError("the daemon is shutting down", code="shutting_down")
        return d.ack(req)

    d.answer = stopping_then_back
    add(outbox, ["during a restart"])
    d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert len(calls) == 2 and d.sleeps == [0.05] and not outbox.unsent
    d.answer = refuse("lease_lost")
    add(outbox, ["taken over"])
    with pytest.raises(LeaseLost):
        d.run(deliver(outbox, channel, Backoff(10, clock)))
    assert outbox.empty and outbox.lease_lost is not None
    with pytest.raises(LeaseLost):  # refused here from now on, before anything is sent
        add(outbox, ["more"], record=True)


def test_over_the_unconfirmed_budget_the_outbox_flushes_and_lets_go(rig):
    channel, d, clock = rig
    outbox = Outbox(SID, m, max_unconfirmed=1000)
    for i in range(5):
        add(outbox, ["x" * 300 + str(i)])
        d.run(deliver(outbox, channel, Backoff(10, clock)))
    flushes = [r for r in d.sent if isinstance(r, m.Flush)]
    assert len(flushes) == 1 and outbox.unconfirmed_bytes <= 1000


def test_a_flush_or_close_confirms_and_its_answer_is_returned(rig):
    channel, d, clock = rig
    outbox = Outbox(SID, m)
    add(outbox, ["a", "b"])
    resp = d.run(confirming(outbox, channel, Backoff(10, clock), lambda rid: m.Close(id=rid, session=SID)))
    assert isinstance(resp, m.Done) and outbox.empty
    assert [type(r).__name__ for r in d.sent] == ["Append", "Close"]


def test_the_fallback_takes_everything_unconfirmed_and_chains_records_from_their_first_hint(rig):
    channel, d, clock = rig
    outbox = Outbox(SID, m)
    outbox.hint = "tip-0"
    add(outbox, ["r1"], record=True)
    d.run(deliver(outbox, channel, Backoff(10, clock)))
    d.down = True
    add(outbox, ["r2"], record=True)
    with pytest.raises(DaemonUnavailable):
        d.run(deliver(outbox, channel, Backoff(0.2, clock)))
    runs = outbox.take_for_fallback()
    import json

    [(cwd, agent, run, lines)] = runs
    parents = [json.loads(x)["parentUuid"] for x in lines]
    uuids = [json.loads(x)["uuid"] for x in lines]
    assert (cwd, agent, run) == (CWD, None, None)
    assert parents == ["tip-0", uuids[0]]  # the unconfirmed r1 first, then r2 chained onto it
    assert outbox.empty


def test_the_channel_files_answers_by_id_and_a_refusal_answers_all(rig):
    channel, _, _ = rig
    channel.opened()
    first, second = channel.next_id(), channel.next_id()
    data = encode(m.Done(id=second)) + encode(m.Done(id=first))
    assert channel.feed(data[:7]) == []  # a frame split anywhere
    assert channel.feed(data[7:]) == [second, first]
    assert channel.answer(first).id == first and channel.answer(first) is None
    channel.opened()  # a new connection: an answer of the old one is not taken for a new request
    assert channel.answer(second) is None
    third = channel.next_id()
    assert third > second  # ids are never reused across connections
    channel.feed(encode(m.Error(id=0, code="busy", message="full")))
    assert channel.answer(third).code == "busy" and channel.answer(12345).code == "busy"
