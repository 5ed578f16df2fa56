"""List answers kept per scope (sessiond/daemon/pages.py), against a real daemon: each
List after a change answers what a fresh daemon reading the files answers,
pages slice the same order, and the scopes kept are bounded."""

from __future__ import annotations

import json
import uuid

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.helpers import line, user

CWD = "/work/pages"
OTHER = "/work/pages-other"


def listing(c, **kw) -> list[tuple[str, int, str | None]]:
    listed = c.call(m.List(id=c.next_id(), **kw))
    return [(s.sessionId, s.size, s.firstPrompt) for s in listed.sessions]


def test_kept_answers_follow_every_change_and_match_a_fresh_daemon(daemon_factory, short_tmp):
    cfg = short_tmp / "pages.toml"
    cfg.write_text("max_list_views = 2\n")
    d = daemon_factory().start("--config", str(cfg))
    sids = [str(uuid.uuid4()) for _ in range(30)]
    with d.client() as c:
        for i, sid in enumerate(sids):
            c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD if i % 3 else OTHER, durability="written",
                            entries=[line(user(f"prompt {i}"))]))
        first = listing(c, all=True)
        assert {s for s, _, _ in first} == set(sids)
        # An old session written again moves to the front, grown; a new one appears;
        # a metadata-only session is not listed.
        c.call(m.Append(id=c.next_id(), session=sids[0], cwd=OTHER, durability="written",
                        entries=[line(user("again"))]))
        new = str(uuid.uuid4())
        c.call(m.Append(id=c.next_id(), session=new, cwd=CWD, durability="written", entries=[line(user("new one"))]))
        c.call(m.Append(id=c.next_id(), session=str(uuid.uuid4()), cwd=CWD, durability="written",
                        entries=[json.dumps({"type": "custom-title", "customTitle": "t"}).encode()]))
        after = listing(c, all=True)
        assert after[0][0] == new and after[1][0] == sids[0] and after[1][1] > first[-1][1] > 0
        assert len(after) == 31
        pages = [listing(c, all=True, limit=7, offset=o) for o in range(0, 35, 7)]
        assert [x for page in pages for x in page] == after
        mine = listing(c, dirs=[str(project_dir(d.root, CWD))])
        assert mine == [x for x in after if x[0] in {new, *sids[1::3], *sids[2::3]}]
        listing(c, dirs=[str(project_dir(d.root, OTHER))])  # a third scope: one is dropped
        views = c.status().budgets["listViews"]
        assert views["used"] == 2 == views["limit"]
        assert listing(c, all=True) == after  # made anew, the same
    d.stop()
    d.start("--config", str(cfg))
    with d.client() as c:  # a fresh daemon reads the files: the same answer
        assert listing(c, all=True) == after
