"""``sessiond tail`` reads a transcript from its end: memory and reads are the
lines shown, not the file."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import uuid as uuidlib
from pathlib import Path

from tests.helpers import line, user

ADDRESS_SPACE = 512 << 20
"""The CLI's whole address space in the test: half the transcript's size."""


def _env(base: Path) -> dict[str, str]:
    return {**os.environ, "SESSIOND_ROOT": str(base / "root"), "SESSIOND_SOCKET": str(base / "run" / "s.sock")}


def _tail(base: Path, *args: str, limit: int | None = None) -> subprocess.CompletedProcess:
    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, "-m", "sessiond.client.cli", "--no-autostart", "tail", *args],
                          env=_env(base), capture_output=True, timeout=60, preexec_fn=cap)


def test_tail_of_a_gigabyte_transcript_fits_in_half_a_gigabyte(short_tmp):
    path = short_tmp / f"{uuidlib.uuid4()}.jsonl"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte the tail must not read
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + b"".join(line(user(f"message {i}")) + b"\n" for i in range(20)))
    r = _tail(short_tmp, "-n", "3", "--json", str(path), limit=ADDRESS_SPACE)
    assert r.returncode == 0, r.stderr.decode()[-400:]
    shown = [json.loads(x)["message"]["content"] for x in r.stdout.splitlines()]
    assert shown == ["message 17", "message 18", "message 19"]


def test_unreadable_lines_keep_their_numbers_in_the_file(short_tmp):
    """The window is read from the end, the report still names file line numbers."""
    path = short_tmp / "mixed.jsonl"
    good = [line(user(f"m{i}")) for i in range(1000)]
    path.write_bytes(b"\n".join(good) + b"\n\ngarbage\n" + line(user("after")) + b"\n")
    r = _tail(short_tmp, "-n", "3", str(path))
    assert r.returncode == 1
    assert r.stderr == f"sessiond: 1 line skipped (line 1002) of {path}: unreadable\n".encode()
    assert b"m999" in r.stdout and b"after" in r.stdout


def test_blank_lines_are_not_entries_and_a_blank_file_is_empty(short_tmp):
    path = short_tmp / "spaced.jsonl"
    path.write_bytes(line(user("first")) + b"\n" + line(user("second")) + b"\n" + b"\n \n\n")
    r = _tail(short_tmp, "-n", "2", "--json", str(path))
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["message"]["content"] for x in r.stdout.splitlines()] == ["first", "second"]
    path.write_bytes(b"\n  \n\t\n")
    r = _tail(short_tmp, str(path))
    assert r.returncode == 1 and r.stderr == f"sessiond: {path} is empty: no transcript entries\n".encode()
