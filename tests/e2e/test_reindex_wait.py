"""`sessiond reindex` on a store whose rebuild outlasts `--timeout`: the answer
comes when the rebuild is done, so the command waits for it as long as the
daemon keeps answering (its status, asked on a second connection, within
`--timeout` each time), and ends with one line when the daemon stops
answering, never a hang."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import REPO, DaemonProc
from tests.helpers import index_status, wait_until

CORPUS = sorted((REPO / "tests" / "corpus" / "claude-code").glob("*.jsonl"))


def filled(d: DaemonProc, copies: int) -> int:
    """``copies`` of the corpus's transcripts under one project of ``d``'s root; their bytes."""
    project = d.root / "projects" / "-work-reindexed"
    project.mkdir(parents=True, exist_ok=True)
    total = 0
    for _ in range(copies):
        for src in CORPUS:
            dst = project / f"{uuid.uuid4()}.jsonl"
            shutil.copyfile(src, dst)
            total += dst.stat().st_size
    return total


def reindexing(d: DaemonProc) -> bool:
    return bool(index_status(d).get("reindexing"))


@pytest.mark.timeout(240)
def test_a_rebuild_longer_than_the_timeout_is_waited_for(daemon_factory):
    """The indexer is stopped (SIGSTOP) for a second in the middle of the
    rebuild, so the rebuild outlasts ``--timeout 0.3`` on any machine: the
    command is still waiting after it, and then reports the whole rebuild."""
    d = daemon_factory()
    size = filled(d, 4)
    d.start()
    proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "--timeout", "0.3", "reindex", "--all", "--json"],
                            env=d.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: reindexing(d) or proc.poll() is not None, "the reindex to start", timeout=60)
        assert proc.poll() is None, "the rebuild was over before the indexer was stopped: nothing shown"
        indexer = int(index_status(d)["pid"])
        os.kill(indexer, signal.SIGSTOP)
        try:
            time.sleep(1.0)  # three times --timeout
            assert proc.poll() is None, proc.communicate()
        finally:
            os.kill(indexer, signal.SIGCONT)
        out, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    done = json.loads(out)
    assert done["bytes"] > 0.9 * size and done["files"] >= 4 * len(CORPUS)


@pytest.mark.timeout(240)
def test_a_daemon_that_stops_answering_ends_the_wait_with_one_line(daemon_factory):
    d = daemon_factory()
    filled(d, 4)
    d.start()
    proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "--timeout", "1", "reindex", "--all"],
                            env=d.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: reindexing(d) or proc.poll() is not None, "the reindex to start", timeout=60)
        assert proc.poll() is None, "the rebuild was over before the daemon was stopped: nothing shown"
        d.signal(signal.SIGSTOP)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, (proc.returncode, err)
        lines = err.decode().strip().splitlines()
        assert len(lines) == 1 and "stopped answering during the reindex" in lines[0], err
        assert b"Traceback" not in err
    finally:
        d.signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()

