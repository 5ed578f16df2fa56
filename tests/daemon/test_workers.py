"""The read pool's fair share, on a real event loop and a real thread pool:
jobs go round-robin over their owners, each owner's in its own order, and an
owner past its bound of waiting jobs is refused ``busy``."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from sessiond.daemon.workers import BACKGROUND, FairShare
from sessiond.wire.errors import SessiondError


def run_jobs(submissions: list[str], threads: int = 1, per_owner: int = 1, max_waiting: int = 100) -> list[str]:
    """Submit a job per owner name (the jobs started first wait until all are
    in); the order in which the jobs started (the order they finish in is the
    threads' race)."""
    ran: list[str] = []
    gate = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(threads) as pool:
            fair = FairShare(loop, pool, threads, per_owner, max_waiting, 1024)

            def job(name: str) -> str:
                ran.append(name)
                gate.wait(10)
                return name

            futs = [fair.submit(job, f"{owner}{i}", owner=owner) for i, owner in enumerate(submissions)]
            gate.set()
            assert [await f for f in futs] == [f"{o}{i}" for i, o in enumerate(submissions)]
            assert fair.running == 0 and fair.waiting == 0

    asyncio.run(main())
    return ran


def test_round_robin_over_owners_each_in_order():
    ran = run_jobs(["a"] * 5 + ["b"] * 2 + ["c"])
    assert ran == ["a0", "b5", "c7", "a1", "b6", "a2", "a3", "a4"]


def test_per_owner_share_with_more_threads():
    ran = run_jobs(["a"] * 6 + ["b"], threads=2)
    assert ran.index("b6") <= 2  # b takes the second thread, never a's backlog's turn


def test_past_its_bound_an_owner_is_refused_busy_others_are_not():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            fair = FairShare(loop, pool, 1, 1, 2, 1024)
            futs = [fair.submit(gate.wait, 10, owner="a") for _ in range(3)]  # one running, two waiting
            with pytest.raises(SessiondError) as err:
                fair.submit(gate.wait, 10, owner="a")
            assert err.value.code == "busy" and fair.refused == 1
            futs += [fair.submit(gate.wait, 10, owner="b"), *(fair.submit(gate.wait, 10, owner=BACKGROUND) for _ in range(5))]
            gate.set()
            assert all(await asyncio.gather(*futs))

    asyncio.run(main())


def test_a_failing_job_fails_only_its_future():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1) as pool:
            fair = FairShare(loop, pool, 1, 1, 10, 1024)
            bad = fair.submit(int, "not a number", owner="a")
            good = fair.submit(int, "42", owner="a")
            with pytest.raises(ValueError):
                await bad
            assert await good == 42

    asyncio.run(main())


def test_jobs_waiting_when_the_pool_shuts_down_are_cancelled_not_raised():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate = threading.Event()
        pool = ThreadPoolExecutor(1)
        fair = FairShare(loop, pool, 1, 1, 10, 1024)
        first = fair.submit(gate.wait, 10, owner="a")
        later = [fair.submit(gate.wait, 10, owner="a"), fair.submit(gate.wait, 10, owner="b")]
        pool.shutdown(wait=False)
        gate.set()
        assert await first
        await asyncio.sleep(0.05)
        assert all(f.cancelled() for f in later) and fair.waiting == 0

    asyncio.run(main())


def test_a_gone_owner_s_answers_are_dropped_and_what_others_wait_for_still_runs():
    """``drop``: the answers of a client that went are cancelled unstarted
    (counted), its other jobs (a scan other requests wait for) still run."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            fair = FairShare(loop, pool, 1, 1, 10, 1024)
            running = fair.submit(gate.wait, 10, owner="a", answer=True)
            answers = [fair.submit(gate.wait, 10, owner="a", answer=True) for _ in range(3)]
            scan = fair.submit(gate.wait, 10, owner="a")
            fair.drop("a")
            assert all(f.cancelled() for f in answers) and fair.dropped == 3
            gate.set()
            assert await running and await scan
            assert fair.started == 2 and fair.jobs == 0 and fair.waiting == 0

    asyncio.run(main())


def test_past_the_daemon_wide_bound_a_newcomer_displaces_the_heaviest():
    """``max_jobs``: a newcomer's job takes the place of the newest waiting
    answer of the owner holding the most (that one gets ``busy``); when nobody
    holds more than it would, the newcomer is refused."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            fair = FairShare(loop, pool, 1, 1, 10, 4)
            heavy = [fair.submit(gate.wait, 10, owner="a", answer=True) for _ in range(4)]
            newcomer = fair.submit(gate.wait, 10, owner="b", answer=True)
            assert fair.jobs == 4 and isinstance(heavy[-1].exception(), SessiondError)
            assert heavy[-1].exception().code == "busy"
            other = fair.submit(gate.wait, 10, owner="c", answer=True)  # a holds 3 > 1: a gives way again
            assert heavy[-2].exception().code == "busy"
            with pytest.raises(SessiondError) as err:  # a holds 2, c would hold 2: nobody holds more
                fair.submit(gate.wait, 10, owner="c", answer=True)
            assert err.value.code == "busy" and fair.jobs == 4 and fair.refused == 3
            gate.set()
            assert await newcomer and await other and all(await asyncio.gather(*heavy[:-2]))

    asyncio.run(main())
