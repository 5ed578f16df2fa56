"""A real daemon under a memory bound, small budgets, and what every attack checks.

Each attack runs against a daemon process started with RLIMIT_AS (a backstop:
past it an allocation fails instead of the machine swapping) and budgets small
enough that growing past them shows in its peak RSS (VmHWM in /proc). After the
attack a well-behaved client must still get its durable appends and its status
answered within a generous timeout, the daemon must still run, every budget in
``status --json`` must hold, and its peak RSS must stay under its fresh RSS plus
the sum of its budgets plus a small constant.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessiond.store.trash import trash_lock, trash_root
from sessiond.wire import messages as m
from sessiond.wire.framing import encode
from tests.conftest import DaemonProc, short_dir, stopped_after
from tests.helpers import line, main_path, read_entries, user, wait_until

from .attacks import MiB, peak_rss, raw_conn, read_answers

CWD = "/work/adversary"
BUDGETS = {
    "max_frame_bytes": 4 * MiB,
    "max_partial_bytes": 16 * MiB,
    "max_output_bytes": 1 * MiB,
    "max_pending_bytes": 1 * MiB,
    "max_pending_total_bytes": 8 * MiB,
    "max_queued_bytes": 16 * MiB,
    "max_inflight_bytes": 8 * MiB,
}
GLOBAL_BUDGETS = ("max_partial_bytes", "max_pending_total_bytes", "max_queued_bytes")
SLACK = 48 * MiB
"""The small constant: the interpreter's own growth under load (connection
objects, answers being encoded, one frame's decoded copy, allocator slack)."""
ADDRESS_SPACE = 1024 * MiB


class Bounded:
    """A daemon under a memory bound, and the checks every attack ends with."""

    def __init__(self, d: DaemonProc) -> None:
        self.d = d
        self.fresh_rss = peak_rss(d.pid)
        self.kept: list[tuple[str, dict]] = []  # (session, entry) acknowledged as durable

    @property
    def rss_bound(self) -> int:
        return self.fresh_rss + sum(BUDGETS[k] for k in GLOBAL_BUDGETS) + BUDGETS["max_frame_bytes"] + SLACK

    def status(self) -> m.StatusResult:
        with self.d.client() as c:
            return c.status()

    def victim_appends(self, n: int = 3) -> None:
        """A well-behaved client: durable appends acknowledged (the client's
        timeout is the bound on how long that may take)."""
        sid = str(uuid.uuid4())
        with self.d.client(timeout=30.0) as c:
            for i in range(n):
                entry = user(f"victim {i}")
                c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[line(entry)], durability="durable"))
                self.kept.append((sid, entry))

    def check(self) -> m.StatusResult:
        """Alive, serving, inside every budget, nothing acknowledged lost."""
        assert self.d.proc is not None and self.d.proc.poll() is None, f"daemon died: {self.d.log_text()[-2000:]}"
        self.victim_appends()
        st = self.status()
        assert st.budgets is not None
        for name, use in st.budgets.items():
            if name in ("outputBytes", "frameBytes"):  # one answer or read may pass a per-connection budget
                assert use["used"] <= use["limit"] + MiB, (name, use)
            elif name == "partialBytes":  # a waiting frame holds what it had read when it was stopped
                assert use["used"] <= use["limit"] + use.get("waiting", 0) * MiB, (name, use)
            else:
                assert use["used"] <= use["limit"], (name, use)
        peak = peak_rss(self.d.pid)
        assert peak <= self.rss_bound, f"peak RSS {peak / MiB:.0f} MiB over the bound {self.rss_bound / MiB:.0f} MiB"
        by_session: dict[str, list[dict]] = {}
        for sid, entry in self.kept:
            by_session.setdefault(sid, []).append(entry)
        for sid, entries in by_session.items():
            written = read_entries(main_path(self.d.root, CWD, sid))
            assert [e for e in written if e.get("uuid") in {x["uuid"] for x in entries}] == entries
        return st


def start_bounded(d: DaemonProc, base: Path) -> Bounded:
    """``d`` started under the small budgets and the address-space backstop."""
    cfg = base / "budgets.toml"
    cfg.write_text("".join(f"{k} = {v}\n" for k, v in BUDGETS.items()) + "frame_timeout_s = 20\nlog_level = \"info\"\n")
    d.start("--config", str(cfg), "--log-level", "info", address_space=ADDRESS_SPACE)
    return Bounded(d)


@pytest.fixture
def bounded(daemon_factory, short_tmp: Path) -> Iterator[Bounded]:
    b = start_bounded(daemon_factory(), short_tmp)
    d = b.d
    yield b
    assert d.proc is not None and d.proc.poll() is None, "the daemon did not survive the attack"


@pytest.fixture(scope="module")
def shared_bounded() -> Iterator[Bounded]:
    """One bounded daemon for a module whose attacks each end in ``check`` (alive,
    serving, every budget held, everything acknowledged so far still there), so
    the next attack starts from a daemon known sound. Peak RSS is a high-water
    mark: each attack is checked against the bound with all before it counted."""
    with short_dir() as base, stopped_after(DaemonProc(base)) as d:
        yield start_bounded(d, base)


def waiting_for_flock(pid: int, path: Path) -> bool:
    """Is process ``pid`` blocked waiting for an flock on ``path``? (A waiter
    is listed in /proc/locks with ``->`` before its lock type.)"""
    ino = str(path.stat().st_ino)
    for row in Path("/proc/locks").read_text().splitlines():
        fields = row.split()
        if (len(fields) >= 8 and fields[1] == "->" and fields[2] == "FLOCK" and fields[5] == str(pid)
                and fields[6].rsplit(":", 1)[-1] == ino):
            return True
    return False


@contextmanager
def read_pool_held(d: DaemonProc) -> Iterator[None]:
    """The read pool of a daemon started with ``read_threads = 1`` kept busy
    for the block, so what a test queues meanwhile waits and none of it runs
    however fast the machine is: its one thread runs an EmptyTrash that waits
    for the trash lock, held here as another process's lifecycle command
    (``sessiond rm`` without a daemon) would hold it. On leaving, the lock is
    let go and the EmptyTrash answered: the pool runs what waits, in its order.
    Jobs submitted meanwhile are still counted ``jobsStarted`` when handed to
    the pool: at most one (its thread is taken), its run waits for the lock."""
    assert d.proc is not None
    with trash_lock(d.root):
        s = raw_conn(d.socket, timeout=60)
        try:
            s.sendall(encode(m.EmptyTrash(id=1)))
            lock = trash_root(d.root) / ".lock"
            wait_until(lambda: waiting_for_flock(d.proc.pid, lock), "the read pool's thread to wait for the trash lock",
                       timeout=30)
            yield
        except BaseException:
            s.close()
            raise
    try:
        emptied = read_answers(s, 1)[0]
    finally:
        s.close()
    assert isinstance(emptied, m.TrashChanged), emptied


def settled_non_readers(d: DaemonProc) -> dict[str, int]:
    """The ``unreadOutputBytes`` budget once the daemon has served what its
    non-readers sent: each one still connected is held (counted there), the
    rest were disconnected. Read at once after they stop sending, a slow
    daemon still serving the last one's bytes would count it neither way."""
    seen: dict[str, int] = {}

    def settled() -> bool:
        with d.client() as c:
            st = c.status()
        assert st.budgets is not None
        seen.clear()
        seen.update(st.budgets["unreadOutputBytes"])
        return st.clients - 1 == seen["clients"]  # the status call's own connection aside

    wait_until(settled, "every non-reader held or disconnected", timeout=60)
    return seen
