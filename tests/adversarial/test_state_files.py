"""The daemon's own state files, made hostile before it starts or while it runs.

Every file the daemon reads back (the lease table, the spool of held entries,
the config, the root lock) is replaced by what it never wrote: a FIFO (a plain
open blocks forever), a symlink to ``/dev/zero`` (a plain read never ends), a
directory, a 2 GB sparse file, JSON with values out of range. The daemon must
start and serve, or refuse with one clear line and an exit code; never hang,
never grow its memory with the file, never crash on a value; and say in
``status`` which file it set aside, and where.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sessiond.mirror.statefile import STATE_FILE
from sessiond.store.spoolfile import spool_dir
from sessiond.wire import messages as m
from tests.conftest import START_TIMEOUT, DaemonProc
from tests.helpers import line, user, wait_until
from tests.mirror.conftest import mirror_config, nats_server, wait_mirrored  # noqa: F401 (fixtures)

from .attacks import SPARSE, MiB, peak_rss, plant

LEASES = ".sessiond-leases.json"
ADDRESS_SPACE = 1024 * MiB
"""The daemon's RLIMIT_AS: a daemon reading a hostile file whole fails here
(MemoryError) rather than taking the machine's memory."""
PEAK_RSS_BOUND = 200 * MiB
"""A daemon that started (interpreter, uvloop, msgspec, its pools) peaks well
under this; reading a 2 GB file or ``/dev/zero`` whole would not."""
CLI_TIMEOUT = 30.0


def _start(d: DaemonProc) -> DaemonProc:
    return d.start("--log-level", "info", address_space=ADDRESS_SPACE)


def _state_files(d: DaemonProc) -> list[dict]:
    out = json.loads(d.cli("status", "--json", timeout=CLI_TIMEOUT).stdout)
    return out["stateFiles"]


def _set_aside(d: DaemonProc, path: Path) -> Path:
    """The one problem ``status`` reports, about ``path``: where it went."""
    (bad,) = _state_files(d)
    assert bad["file"] == str(path), bad
    assert bad["problem"]
    human = d.cli("status", timeout=CLI_TIMEOUT).stdout.decode()
    assert f"STATE     {path} not used" in human
    return Path(bad["setAside"])


@pytest.fixture
def fresh(daemon_factory) -> DaemonProc:
    """A daemon not started yet, its root made: the test plants a file first."""
    d = daemon_factory()
    d.root.mkdir(mode=0o700)
    return d


def _zero_device(path: Path) -> None:
    """A character device node of /dev/zero's numbers at ``path`` (the file
    "hard-replaced" by /dev/zero); needs CAP_MKNOD."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("no CAP_MKNOD here to make a device node")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_as_the_lease_table_is_set_aside(fresh, kind):
    """Bound: the start (``START_TIMEOUT``) does not wait on a FIFO at the lease
    table's path, nor read a /dev/zero device node there (peak RSS under
    ``PEAK_RSS_BOUND``); either is kept (renamed), never read."""
    path = fresh.root / LEASES
    if kind == "fifo":
        plant(path, "fifo")
    else:
        _zero_device(path)
    _start(fresh)
    aside = _set_aside(fresh, path)
    assert aside.parent == fresh.root and aside.name.startswith(f"{LEASES}.bad-")
    mode = os.lstat(aside).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)
    assert peak_rss(fresh.pid) < PEAK_RSS_BOUND


def test_a_lease_table_linked_to_dev_zero_does_not_grow_memory(fresh):
    """Bound: the daemon's peak RSS (VmHWM) stays under ``PEAK_RSS_BOUND`` with
    its lease table a symlink to ``/dev/zero``; the symlink is set aside."""
    path = fresh.root / LEASES
    plant(path, "dev-zero")
    _start(fresh)
    aside = _set_aside(fresh, path)
    assert os.readlink(aside) == "/dev/zero"
    peak = peak_rss(fresh.pid)
    print(f"peak RSS with the lease table linked to /dev/zero: {peak / MiB:.1f} MiB")
    assert peak < PEAK_RSS_BOUND


def test_a_2gb_sparse_lease_table_is_set_aside_unread(fresh):
    """Bound: ``MAX_LEASE_FILE_BYTES`` read at most; peak RSS under
    ``PEAK_RSS_BOUND`` with a 2 GB (sparse) lease table, kept whole aside."""
    path = fresh.root / LEASES
    plant(path, "sparse")
    _start(fresh)
    aside = _set_aside(fresh, path)
    assert aside.stat().st_size == SPARSE
    assert peak_rss(fresh.pid) < PEAK_RSS_BOUND


def test_a_directory_as_the_lease_table_leaves_room_for_a_real_one(fresh):
    """Bound: one directory set aside (kept, with what it holds); the leases
    granted next are saved to a regular file at the path."""
    path = fresh.root / LEASES
    path.mkdir()
    (path / "keep").write_text("mine")
    _start(fresh)
    aside = _set_aside(fresh, path)
    assert (aside / "keep").read_text() == "mine"
    sid = str(uuid.uuid4())
    with fresh.client() as c:
        c.call(m.Open(id=c.next_id(), session=sid, cwd="/work/leased", lease=True))
        wait_until(lambda: path.is_file() and sid in json.loads(path.read_bytes()), "the lease saved")


def test_temp_files_of_lease_saves_a_kill_cut_short_are_deleted_at_start(fresh, short_tmp):
    """A daemon killed while saving the lease table leaves the temp file of
    the save (``.NAME.<pid>.<hex>.tmp``, never renamed into place), one more
    at every such crash: the next start deletes them, a symlink of that name
    itself (what it points at is untouched), and nothing else."""
    stale = [fresh.root / f".{LEASES}.{n}.{os.urandom(4).hex()}.tmp" for n in (4242, 31337)]
    stale[0].write_text('{"half": ')
    outside = short_tmp / "outside.json"
    outside.write_text("not the daemon's")
    stale[1].symlink_to(outside)
    others = [fresh.root / f"{LEASES}.tmp", fresh.root / f".{LEASES}.1.xyz.tmp"]
    for p in others:
        p.write_text("someone's")
    _start(fresh)
    assert not any(os.path.lexists(p) for p in stale)
    assert outside.read_text() == "not the daemon's"
    assert all(p.read_text() == "someone's" for p in others)
    assert _state_files(fresh) == []


def test_out_of_range_lease_entries_are_skipped_one_by_one(fresh):
    """Bound: each lease entry's pid in 1..2**22 and times in 0..now+1 day;
    every entry outside is skipped with a warning, the one good one is kept."""
    me = os.getpid()  # a live process: each entry would otherwise be restored
    good = str(uuid.uuid4())
    table = {
        str(uuid.uuid4()): {"pid": me, "client": "a", "since": 1e300},
        str(uuid.uuid4()): {"pid": me, "client": "b", "since": -5.0},
        str(uuid.uuid4()): {"pid": me, "client": "c", "since": 1.0, "last_write": 1e300},
        str(uuid.uuid4()): {"pid": -1, "client": "d", "since": 1.0},
        str(uuid.uuid4()): {"pid": 0, "client": "e", "since": 1.0},
        str(uuid.uuid4()): {"pid": 2**40, "client": "f", "since": 1.0},
        str(uuid.uuid4()): {"pid": me, "client": "g" * 10_000, "since": 1.0},
        "../../etc": {"pid": me, "client": "h", "since": 1.0},
        good: {"pid": me, "client": "kept", "since": 1700000000.0},
    }
    text = json.dumps(table)[:-1] + f', "{uuid.uuid4()}": {{"pid": {me}, "client": "i", "since": 1e400}}}}'
    (fresh.root / LEASES).write_text(text)
    _start(fresh)
    with fresh.client() as c:
        live = c.status().live
    assert [(h.session, h.client, h.reconnecting) for h in live] == [(good, "kept", True)]
    assert _state_files(fresh) == []
    assert fresh.log_text().count("ignored:") == len(table)  # one warning each (the good one excepted, 1e400 counted)


def test_a_2gb_sparse_spool_file_is_set_aside_unread(fresh):
    """Bound: a spool file is read up to ``max_pending_bytes`` plus its header
    (``HEADER_SLACK``); a 2 GB sparse one is set aside, peak RSS under
    ``PEAK_RSS_BOUND``."""
    spool = spool_dir(fresh.root)
    spool.mkdir(mode=0o700)
    path = spool / f"{uuid.uuid4()}.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"spool":1,"project":"projects/-x","cwd":"/x"}\n')
        f.truncate(SPARSE)
    _start(fresh)
    aside = _set_aside(fresh, path)
    assert aside.stat().st_size == SPARSE
    assert peak_rss(fresh.pid) < PEAK_RSS_BOUND


def test_a_fifo_in_the_spool_is_named_in_status_and_left_alone(fresh):
    """Bound: the start (``START_TIMEOUT``) never opens a FIFO in the spool for
    reading; it stays where it is (the session may be a foreign writer's),
    and ``status`` names it."""
    spool = spool_dir(fresh.root)
    spool.mkdir(mode=0o700)
    path = spool / f"{uuid.uuid4()}.jsonl"
    os.mkfifo(path)
    _start(fresh)
    (bad,) = _state_files(fresh)
    assert bad["file"] == str(path) and "FIFO" in bad["problem"] and bad["setAside"] is None
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


@pytest.mark.parametrize("project", [".sessiond-spool", ".", ".trash/x", "projects", "projects/-x/sub", "projects/.hidden"])
def test_a_spool_naming_no_project_dir_is_named_in_status_and_left_alone(fresh, project):
    """A spool header's ``project`` is where the held entries, and the session's
    whole transcript after them, are written. One that is not a dir directly
    under ``projects/`` is not a spool sessiond wrote: with ``.sessiond-spool``
    the transcript was written over the spool file itself, where no listing
    finds it. It stays where it is, ``status`` names it, and the session's
    first message goes to its cwd's project dir."""
    sid = str(uuid.uuid4())
    spool = spool_dir(fresh.root)
    spool.mkdir(mode=0o700)
    path = spool / f"{sid}.jsonl"
    held = json.dumps({"type": "custom-title", "customTitle": "held", "sessionId": sid}).encode() + b"\n"
    planted = json.dumps({"spool": 1, "project": project, "cwd": "/work/project"}).encode() + b"\n" + held
    path.write_bytes(planted)
    _start(fresh)
    (bad,) = _state_files(fresh)
    assert bad["file"] == str(path) and bad["setAside"] is None, bad
    fresh.cli("record", "--cwd", "/work/project", "--session", sid, "--durability", "written",
              input=line(user("first")) + b"\n", timeout=CLI_TIMEOUT)
    assert path.read_bytes() == planted
    transcript = fresh.root / "projects" / "-work-project" / f"{sid}.jsonl"
    assert [json.loads(x)["type"] for x in transcript.read_bytes().splitlines()][:1] == ["user"]


# ------------------------------------------------------------------------ config


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sessiond.client.cli", *args], env=env, capture_output=True,
                          timeout=CLI_TIMEOUT, preexec_fn=_limited)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse", "directory"])
def test_a_hostile_config_file_is_one_line_never_a_hang(fresh, kind):
    """Bound: ``MAX_CONFIG_BYTES`` read at most, within ``CLI_TIMEOUT``: ``serve``
    refuses a config that is a FIFO, a link to /dev/zero, 2 GB or a directory
    with one line and exit 2; a client command (which reads it for the root and
    socket) goes on with its defaults."""
    cfg = fresh.base / "config.toml"
    plant(cfg, kind)
    env = {**fresh.env, "SESSIOND_CONFIG": str(cfg)}
    served = _run(["serve"], env)
    assert served.returncode == 2, served.stderr
    (said,) = served.stderr.decode().strip().splitlines()
    assert "config" in said and str(cfg) in said and "Traceback" not in said
    env.pop("SESSIOND_ROOT")
    status = _run(["status"], env)
    assert status.returncode == 1 and b"not running" in status.stderr and b"Traceback" not in status.stderr


def test_sighup_with_a_fifo_as_the_config_keeps_serving(fresh):
    """Bound: the SIGHUP's read of the config runs off the loop and never waits
    on a FIFO: ``status`` answers within ``CLI_TIMEOUT`` right after it."""
    cfg = fresh.base / "config.toml"
    cfg.write_text("log_level = \"info\"\n")
    fresh.start("--config", str(cfg))
    cfg.unlink()
    os.mkfifo(cfg)
    fresh.signal(signal.SIGHUP)
    wait_until(lambda: "config not reloaded" in fresh.log_text(), "the reload refused")
    assert json.loads(fresh.cli("status", "--json", timeout=CLI_TIMEOUT).stdout)["running"]
    with fresh.client() as c:
        c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd="/work/after",
                        entries=[line(user("after the SIGHUP"))], durability="durable"))


# -------------------------------------------------------------------- root lock


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_hostile_root_lock_is_a_clear_refusal(fresh, kind):
    """Bound: ``serve`` exits within ``START_TIMEOUT`` with one line naming the
    lock, never opening a FIFO for a writer, following a link, or hanging."""
    lock = fresh.root / ".sessiond.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "symlink":
        lock.symlink_to(fresh.base / "elsewhere")
    else:
        lock.mkdir()
    fresh.socket.parent.mkdir(mode=0o700)
    proc = subprocess.run([sys.executable, "-m", "sessiond.client.cli", "serve"], env=fresh.env,
                          capture_output=True, timeout=START_TIMEOUT, preexec_fn=_limited)
    assert proc.returncode != 0
    (said,) = proc.stderr.decode().strip().splitlines()
    assert ".sessiond.lock" in said and "Traceback" not in said
    assert not (fresh.base / "elsewhere").exists()


# ------------------------------------------------------------------------ mirror


def test_a_2gb_sparse_mirror_state_file_is_set_aside_unread(fresh, mirror_config):
    """Bound: ``MAX_STATE_BYTES`` of the mirror's state file read at most; a 2 GB
    sparse one is set aside, peak RSS under ``PEAK_RSS_BOUND``."""
    path = fresh.root / STATE_FILE
    plant(path, "sparse")
    fresh.start("--config", str(mirror_config()), "--log-level", "info", address_space=ADDRESS_SPACE)
    aside = _set_aside(fresh, path)
    assert aside.stat().st_size == SPARSE
    assert peak_rss(fresh.pid) < PEAK_RSS_BOUND


def test_mirror_records_naming_files_out_of_the_root_are_ignored(fresh, mirror_config, short_tmp):
    """Bound: a mirror record is used only for a transcript under
    ``<root>/projects`` that resolves inside the root: nothing outside it is
    published (one message: the one session written after the start)."""
    outside = short_tmp / "outside"
    outside.mkdir()
    secret = outside / f"{uuid.uuid4()}.jsonl"
    secret.write_bytes(line(user("not the store's")) + b"\n")
    projects = fresh.root / "projects"
    projects.mkdir()
    (projects / "-out").symlink_to(outside)
    (fresh.root / STATE_FILE).write_text(json.dumps({"clean": True, "savedAt": 1e300, "files": {
        str(projects / "-out" / secret.name): 0,
        str(projects / "-x" / ".." / ".." / ".." / "outside" / secret.name): 0,
        str(secret): 0,
        secret.name: 0,
    }}))
    fresh.start("--config", str(mirror_config()), "--log-level", "info")
    with fresh.client() as c:
        c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd="/work/mirrored", durability="written",
                        entries=[line(user("the one message"))]))
    st = wait_mirrored(fresh)
    assert st["published"] == 1, st
    assert fresh.log_text().count("ignored") >= 4
    assert _state_files(fresh) == []
