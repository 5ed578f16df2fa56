"""Dedup sets are packed in the background once a session goes quiet, and
dedup works the same before and after (a real daemon, real appends)."""

from __future__ import annotations

import uuid

from sessiond.protocol.wire import messages as m
from tests.helpers import line, main_path, read_entries, user, wait_until

CWD = "/work/compact"


def test_a_quiet_sessions_uuids_are_packed_and_still_deduplicated(daemon_factory, short_tmp):
    cfg = short_tmp / "c.toml"
    cfg.write_text("idle_evict_s = 2\n")  # sweeps every second
    d = daemon_factory("--config", str(cfg)).start()
    sid = str(uuid.uuid4())
    entries = [line(user(f"m{i}")) for i in range(600)]
    legacy = line({"type": "user", "uuid": "MSG-Not-A-Uuid", "message": {"role": "user", "content": "old"}})
    with d.client() as c:
        def append(lines):
            return c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines, durability="written"))

        for i in range(0, 600, 50):
            assert append(entries[i:i + 50]).accepted == 50
        assert append([legacy]).accepted == 1
        assert c.status().memory["uuidsUnpacked"] == 601

        def packed() -> bool:
            mem = c.status().memory
            return mem["uuids"] == 601 and mem["uuidsUnpacked"] == 1 and mem["packedUuidBytes"] > 0
        wait_until(packed, "the quiet session's uuids to be packed", timeout=30)
        again = append([*entries[::7], legacy])
        assert (again.accepted, again.duplicates) == (0, len(entries[::7]) + 1)
        fresh = append([line(user("new"))])
        assert (fresh.accepted, fresh.duplicates) == (1, 0)
        assert c.status().memory["uuids"] == 602
    assert len(read_entries(main_path(d.root, CWD, sid))) == 602
