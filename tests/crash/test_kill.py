"""A few fast rounds of the crash harness (bench/crash_soak.py runs hundreds)."""

from __future__ import annotations

import pytest

from tests.crash.harness import Harness


@pytest.mark.timeout(180)
def test_sigkill_the_daemon_under_load_loses_and_duplicates_nothing(short_tmp):
    h = Harness(short_tmp, clients=4, seed=7)
    try:
        h.start_daemon()
        for i in range(4):
            h.start_worker(i)
        h.daemon_kill_rounds(8)
        h.stop_workers()
        assert h.stop_daemon() == 0
        figures = h.verify()
    finally:
        h.close()
    assert figures["daemon_kills"] == 8 and figures["acked"] > 100


@pytest.mark.timeout(180)
def test_sigkill_clients_loses_nothing_the_daemon_acknowledged(short_tmp):
    h = Harness(short_tmp, clients=4, seed=11)
    try:
        h.start_daemon()
        for i in range(4):
            h.start_worker(i)
        h.client_kill_rounds(8)
        h.stop_workers()
        assert h.stop_daemon() == 0  # drains: queued acks reach the disk
        figures = h.verify()
    finally:
        h.close()
    assert figures["client_kills"] == 8 and figures["acked"] > 100
