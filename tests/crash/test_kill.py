"""A few fast rounds of the crash harness (bench/crash_soak.py runs hundreds)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.crash.harness import Harness
from tests.helpers import wait_until


def run(h: Harness, rounds: Callable[[], None], **more_than: int) -> dict:
    """Start the daemon and every client, run ``rounds``, let the clients go on
    until ``verify`` will count more than ``more_than`` of each figure (how
    many acks the rounds' kills leave room for is the machine's speed), stop
    cleanly, verify."""
    try:
        h.start_all()
        rounds()
        wait_until(lambda: all(h.acked_so_far()[k] > n for k, n in more_than.items()),
                   f"more than {more_than} acknowledged", timeout=60)
        h.stop_workers()
        assert h.stop_daemon() == 0  # drains: queued acks reach the disk
        return h.verify()
    finally:
        h.close()


@pytest.mark.timeout(180)
def test_sigkill_the_daemon_under_load_loses_and_duplicates_nothing(short_tmp):
    h = Harness(short_tmp, clients=4, seed=7)
    figures = run(h, lambda: h.daemon_kill_rounds(8), acked=100)
    assert figures["daemon_kills"] == 8 and figures["acked"] > 100


@pytest.mark.timeout(180)
def test_sigkill_clients_loses_nothing_the_daemon_acknowledged(short_tmp):
    h = Harness(short_tmp, clients=4, seed=11)
    figures = run(h, lambda: h.client_kill_rounds(8), acked=100)
    assert figures["client_kills"] == 8 and figures["acked"] > 100


@pytest.mark.timeout(240)
def test_sigkill_around_materialization_loses_no_held_entry(short_tmp):
    """Clients that start session after session (pre-message entries at every
    durability, then the first message): daemon kills land before, during and
    after materialization, and some right before a client that is resending is
    killed too."""
    h = Harness(short_tmp, clients=1, session_clients=3, seed=5)

    def rounds() -> None:
        h.daemon_kill_rounds(8)
        h.resend_kill_rounds(4)

    figures = run(h, rounds, sessions=10, acked_held_durable=10, acked_held_queued=10)
    assert figures["sessions"] > 10 and figures["acked_held_durable"] > 10 and figures["acked_held_queued"] > 10
    assert figures["resend_kills"] == 4


@pytest.mark.timeout(240)
def test_sigstop_longer_than_the_client_timeout_loses_and_doubles_nothing(short_tmp):
    h = Harness(short_tmp, clients=2, session_clients=2, seed=3, client_timeout=1.0)
    figures = run(h, lambda: h.sigstop_rounds(3, stopped_for=1.6), acked=100)
    assert figures["daemon_stops"] == 3 and figures["acked"] > 100
