"""A line longer than a read or than a frame carries, in a followed file (a
foreign writer's, or a corrupt one): ``sessiond watch`` (the daemon's stream)
and ``sessiond tail -f`` (polling, no daemon) skip it, say so in one line, and
go on with the lines after it; the daemon holds it at most once."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from sessiond.store.linecap import MAX_LINE
from sessiond.store.paths import project_dir
from tests.adversarial.attacks import MiB, peak_rss
from tests.helpers import CliProcess, wait_until

pytestmark = pytest.mark.timeout(300)
CWD = "/work/long-lines"


def entry(text: str) -> bytes:
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "sessionId": "s",
                       "message": {"role": "user", "content": text}}).encode() + b"\n"


def huge(size: int) -> bytes:
    """A line of ``size`` bytes (its newline included) that starts like an entry."""
    head = b'{"type":"user","message":{"role":"user","content":"'
    return head + b"z" * (size - len(head) - 4) + b"\"}}\n"


def append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)


def printed_content(line: bytes) -> str:
    return json.loads(line)["message"]["content"]


def test_watch_skips_a_line_over_the_daemons_frame_cap_and_goes_on(daemon_factory, short_tmp):
    """A 32 MB line (under the shared cap, over this daemon's 4 MiB frames) a
    foreign writer appends between two entries: the watcher gets the entries
    on both sides of it and one note of the bytes skipped; the daemon's peak
    RSS grows by the line once plus a constant (the follower reads it once and
    passes it on uncopied; the watcher passes over it a scan chunk at a time;
    before, the follower held it four times over and the watch printed nothing
    after it)."""
    cfg = short_tmp / "small-frames.toml"
    cfg.write_text(f"max_frame_bytes = {4 * MiB}\nmax_partial_bytes = {16 * MiB}\n")
    d = daemon_factory().start("--config", str(cfg))
    sid = str(uuid.uuid4())
    main = project_dir(d.root, CWD) / f"{sid}.jsonl"
    append(main, entry("before anyone watched"))
    fresh = peak_rss(d.pid)
    with CliProcess("watch", sid, "--cwd", CWD, "--json", "-n", "0", env=d.env) as watch:
        with d.client() as c:
            wait_until(lambda: c.status().watchers == 1, "sessiond watch to subscribe", timeout=30)
        line = huge(32 * 1000 * 1000)
        append(main, entry("first") + line + entry("second"))
        assert printed_content(watch.line()) == "first"
        assert printed_content(watch.line()) == "second"
        append(main, entry("third"))  # and it goes on with what comes after
        assert printed_content(watch.line()) == "third"
        watch.proc.kill()
        err = watch.proc.stderr.read().decode()
    assert f"skipped {len(line):,} bytes of {sid}.jsonl" in err, err
    assert err.count("skipped") == 1, err
    grown = peak_rss(d.pid) - fresh
    assert grown < len(line) + 16 * MiB, f"the daemon's peak RSS grew {grown / MiB:.1f} MiB for a {len(line) / MiB:.1f} MiB line"


def test_watch_sends_a_line_longer_than_a_read_but_within_the_cap_whole(daemon):
    sid = str(uuid.uuid4())
    main = project_dir(daemon.root, CWD) / f"{sid}.jsonl"
    append(main, entry("start"))
    with CliProcess("watch", sid, "--cwd", CWD, "--json", "-n", "0", env=daemon.env) as watch:
        with daemon.client() as c:
            wait_until(lambda: c.status().watchers == 1, "sessiond watch to subscribe", timeout=30)
        line = huge(3 * MiB)
        append(main, entry("first") + line + entry("second"))
        assert printed_content(watch.line()) == "first"
        assert watch.line() == line
        assert printed_content(watch.line()) == "second"


def test_tail_f_without_a_daemon_skips_a_line_over_the_cap(short_tmp):
    """No daemon: ``tail -f`` polls the file; a line over the shared cap is
    skipped (one note), the entries around it and after it are printed."""
    path = short_tmp / f"{uuid.uuid4()}.jsonl"
    append(path, entry("zero"))
    env = {"SESSIOND_ROOT": str(short_tmp / "root"), "SESSIOND_SOCKET": str(short_tmp / "none.sock"),
           "SESSIOND_NO_AUTOSTART": "1", "PATH": "/usr/bin:/bin"}
    with CliProcess("tail", "-f", "-n", "1", "--json", str(path), env=env) as tail:
        assert printed_content(tail.line()) == "zero"
        line = huge(MAX_LINE + 2 * MiB)
        append(path, entry("first") + line + entry("second"))
        assert printed_content(tail.line(timeout=60)) == "first"
        assert printed_content(tail.line(timeout=60)) == "second"
        tail.proc.kill()
        err = tail.proc.stderr.read().decode()
    assert f"skipped {len(line):,} bytes of {path.name}" in err, err
