"""A search that would rank too much is stopped at the daemon's CPU budget
(``search_cpu_s``) and answered with a typed error, not a thread held for
seconds; the CLI says so in one line, with a daemon and without one."""

from __future__ import annotations

import time
import uuid

import pytest

from sessiond.wire import messages as m
from tests.conftest import DaemonProc
from tests.helpers import assistant, line

CWD = "/work/budget"


@pytest.mark.timeout(180)
def test_a_query_past_the_cpu_budget_is_a_typed_error(short_tmp, monkeypatch):
    cfg = short_tmp / "config.toml"
    cfg.write_text("search_cpu_s = 0.001\nsearch_refresh_s = 0\n")
    monkeypatch.setenv("SESSIOND_CONFIG", str(cfg))
    d = DaemonProc(short_tmp).start()
    try:
        with d.client(timeout=60) as c:
            c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=CWD, durability="written",
                            entries=[line(assistant(f"w{i:05d} and a few more words", cwd=CWD)) for i in range(20_000)]))
            deadline = time.monotonic() + 120
            while True:  # wait for the indexer (nice 19), not for a time
                try:
                    if c.call(m.Search(id=c.next_id(), query="w00001", all=True)).caughtUp:
                        break
                except Exception:  # this tiny query may itself be stopped at 1 ms on a loaded machine
                    pass
                assert time.monotonic() < deadline, "the indexer did not catch up"
            r = c.send(m.Search(id=(rid := c.next_id()), query="w*", all=True)) or c.receive(rid)
            assert isinstance(r, m.Error) and r.code == "bad_request" and "stopped after 0.001 s of CPU" in r.message
            assert c.status().pid == d.proc.pid  # still serving
        cli = d.cli("search", "w*", "--all", check=False)
        err = cli.stderr.decode()
        assert cli.returncode != 0 and err.count("\n") == 1 and "stopped after 0.001 s of CPU" in err, err
    finally:
        d.stop()
    # without the daemon the CLI reads the index itself, under the default budget: w* completes
    out = d.cli("search", "w*", "--all", "--json", check=False)
    assert out.returncode == 0, out.stderr
