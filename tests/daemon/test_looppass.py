"""The end of a loop pass, in process: one callback runs the writer's stage
(drains, then coalescing timers) before the answers stage (one write per
connection), whatever asked for the pass first. A real Writer on real files
under a temp root, on a real event loop; the connection is a recorder of what
the outbox hands it (the answers stage's only call into a connection)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiond.config import Settings
from sessiond.daemon.filequeue import Stats
from sessiond.daemon.looppass import ANSWERS, WRITES, EndOfPass
from sessiond.daemon.outbox import Outbox
from sessiond.daemon.writer import Writer


class Recorder:
    """Stands for a connection: records each time its answers are sent, with
    the transcript's content at that moment."""

    peer = "recorder"

    def __init__(self, events: list[tuple[str, bytes]], path: Path) -> None:
        self.events = events
        self.path = path

    def send_answers(self) -> None:
        self.events.append(("sent", self.path.read_bytes()))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def one_pass(loop: asyncio.AbstractEventLoop) -> None:
    """Run what is scheduled now (the end of the pass among it), then stop."""
    loop.call_soon(loop.stop)
    loop.run_forever()


def setup(loop: asyncio.AbstractEventLoop, root: Path) -> tuple[EndOfPass, Writer, Outbox, Path]:
    end = EndOfPass(loop)
    writer = Writer(loop, Settings(root=root, flush_interval=60.0), Stats(), end)
    outbox = Outbox(end)
    path = root / "projects" / "p" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # an existing file: the drain writes it on the loop, no file-thread creation
    return end, writer, outbox, path


@pytest.mark.parametrize("answer_first", [False, True])
def test_a_drains_answers_leave_in_the_same_pass_after_the_write(tmp_path, loop, answer_first):
    """The written ack a drain makes is sent by the same end of pass, after
    the write; an answer queued before anything asked for a write (a queued
    ack, another request's answer) goes out in that pass too, after the
    writer's stage, not before it."""
    end, writer, outbox, path = setup(loop, tmp_path)
    events: list[tuple[str, bytes]] = []
    conn = Recorder(events, path)
    if answer_first:
        outbox.add(conn)  # the outbox only calls send_answers
    q = writer.queue(path)
    writer.enqueue(q, [b'{"a":1}'])
    writer.when_written(q, lambda err: (events.append(("acked", path.read_bytes())), outbox.add(conn)))
    assert events == []  # nothing before the end of the pass
    try:
        one_pass(loop)
        assert ("acked", b'{"a":1}\n') in events
        sends = [content for what, content in events if what == "sent"]
        assert sends and all(content == b'{"a":1}\n' for content in sends)  # every send after the write
        assert events[-1][0] == "sent"  # the drain's ack left in this pass, no later iteration needed
    finally:
        writer.drain_everything()
        writer.close()


def test_stages_run_in_rank_order_once_per_requested_pass(loop):
    end = EndOfPass(loop)
    ran: list[str] = []
    end.register(ANSWERS, lambda: ran.append("answers"))
    end.register(WRITES, lambda: ran.append("writes"))  # registered later, still first
    one_pass(loop)
    assert ran == []  # nobody asked: no pass
    end.request()
    end.request()
    one_pass(loop)
    assert ran == ["writes", "answers"]


def test_a_request_made_by_a_stage_asks_for_the_next_pass(loop):
    """A stage that produces work for an earlier stage (a drain's answer
    arrives after the answers stage ran, a sync round's callback) is not lost:
    the end of the next pass runs it."""
    end = EndOfPass(loop)
    ran: list[str] = []
    end.register(WRITES, lambda: ran.append("writes"))

    def answers() -> None:
        ran.append("answers")
        if len(ran) == 2:
            end.request()

    end.register(ANSWERS, answers)
    end.request()
    one_pass(loop)
    assert ran == ["writes", "answers"]
    one_pass(loop)
    assert ran == ["writes", "answers", "writes", "answers"]


def test_a_failing_stage_does_not_keep_the_answers_in(loop, caplog):
    end = EndOfPass(loop)
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("a bug")

    end.register(WRITES, broken)
    end.register(ANSWERS, lambda: ran.append("answers"))
    end.request()
    one_pass(loop)
    assert ran == ["answers"]
    assert "internal error at the end of a loop pass" in caplog.text


def test_a_request_for_a_later_stage_is_served_by_the_run_going_on(loop):
    """The writer's stage answering a drain's waiter hands the answers stage
    work: that stage runs later in the same run, so no second end-of-pass
    callback is scheduled for it (an empty run per ``written`` ack)."""
    end = EndOfPass(loop)
    ran: list[str] = []

    def writes() -> None:
        ran.append("writes")
        end.request(ANSWERS)

    end.register(WRITES, writes)
    end.register(ANSWERS, lambda: ran.append("answers"))
    end.request(WRITES)
    one_pass(loop)
    assert ran == ["writes", "answers"]
    one_pass(loop)
    assert ran == ["writes", "answers"]  # no run asked for by the first one
