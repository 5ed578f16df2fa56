"""The index never drifts: after any sequence of daemon writes, foreign appends
(torn lines included), truncations, deletes, renames and daemon restarts, every
search answers exactly what a fresh ``reindex --all`` answers."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from sessiond.wire import messages as m
from tests.helpers import assistant, line, main_path, user

CWD = "/work/prop"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
SESSIONS = 3

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
op = st.one_of(
    st.tuples(st.just("write"), st.integers(0, SESSIONS - 1), text, st.booleans()),
    st.tuples(st.just("agent"), st.integers(0, SESSIONS - 1), text),
    st.tuples(st.just("foreign"), st.integers(0, SESSIONS - 1), text, st.booleans()),
    st.tuples(st.just("truncate"), st.integers(0, SESSIONS - 1)),
    st.tuples(st.just("delete"), st.integers(0, SESSIONS - 1)),
    st.tuples(st.just("rename"), st.integers(0, SESSIONS - 1)),
    st.tuples(st.just("restart")),
)


def answers(d) -> list:
    out = []
    for q in [*WORDS, '"alpha bravo"', "ch*"]:
        hits = json.loads(d.cli("search", "--all", "--json", "--limit", "50", "--", q, check=False).stdout)
        out.append([(h["sessionId"], h["file"], h["uuid"], h["role"], h["snippet"], round(h["score"], 4)) for h in hits])
    return out


@pytest.mark.timeout(900)  # several daemons, restarts and reindexes per example, on a loaded 2-core machine
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
@example(ops=[("write", 0, "alpha bravo", True), ("foreign", 0, "charlie", True), ("write", 0, "delta", False),
              ("agent", 1, "alpha echo"), ("restart",), ("foreign", 1, "charlie alpha", False), ("rename", 0),
              ("foreign", 0, "echo", False), ("truncate", 1), ("write", 1, "foxtrot alpha", True), ("delete", 2),
              ("write", 2, "bravo", False), ("restart",), ("foreign", 2, "alpha bravo", False)])
@given(ops=st.lists(op, min_size=3, max_size=12))
def test_search_equals_a_fresh_reindex_after_any_history(ops, daemon_factory, fresh_config):
    d = daemon_factory(name=f"p{uuid.uuid4().hex[:6]}").start()
    sids = [str(uuid.uuid4()) for _ in range(SESSIONS)]
    try:
        for o in ops:
            kind = o[0]
            if kind == "restart":
                with d.client() as c:  # answered once the daemon serves (its signal handlers are set)
                    c.status()
                assert d.stop() == 0
                d.start()
                continue
            sid = sids[o[1]]
            path = main_path(d.root, CWD, sid)
            if kind == "write":
                entry = user(o[2]) if o[3] else assistant(o[2])
                with d.client() as c:
                    c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=[line(entry)]))
            elif kind == "agent":
                entry = {**assistant(o[2]), "isSidechain": True, "agentId": "helper"}
                with d.client() as c:
                    c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", agent="helper",
                                    entries=[line(entry)]))
            elif kind == "foreign" and path.exists():
                data = line(user(o[2])) + b"\n"
                with open(path, "ab") as f:  # o[3]: a torn line that the next foreign append completes
                    f.write(data[: len(data) // 2] if o[3] else data)
            elif kind == "truncate" and path.exists():
                data = path.read_bytes()
                os.truncate(path, data.find(b"\n") + 1 if b"\n" in data else 0)
            elif kind == "delete" and path.exists():
                path.unlink()
            elif kind == "rename" and path.exists():
                sids[o[1]] = str(uuid.uuid4())
                os.rename(path, main_path(d.root, CWD, sids[o[1]]))
        kept = answers(d)
        d.cli("reindex", "--all")
        assert answers(d) == kept
    finally:
        d.stop()
