"""Following Claude Code's own writes: a foreign writer process appends into
machine A's root, the daemon (only reading) mirrors it, and machine B's
``pull`` rebuilds it byte for byte; shrunk and replaced files are diverged."""

from __future__ import annotations

import uuid
from pathlib import Path

from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from tests.follow.foreign import Foreign, corpus_lines, followed, middle_rewrite
from tests.helpers import line, user

from .conftest import mirror_status, tree, wait_for


def pulled(b, cfg: Path, sid: str) -> dict[str, bytes]:
    b.cli("pull", sid, env={"SESSIOND_CONFIG": str(cfg)}, check=False)
    return {k: v for k, v in tree(b.root).items() if sid in k}


def test_foreign_writes_are_mirrored_live_whole_lines_only(daemon_factory, mirror_config, short_tmp):
    cfg = mirror_config()
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b")
    wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
    lines = corpus_lines(12)
    project = a.root / "projects" / "-home-someone-app"  # a project dir that appears after the daemon started
    s1, s2, s3 = (str(uuid.uuid4()) for _ in range(3))
    main = project / f"{s1}.jsonl"
    agent = project / s1 / "subagents" / "agent-a1b2c3.jsonl"
    w = Foreign()
    try:
        for x in lines[:4]:
            w.do("append", main, data=x)
        half = len(lines[4]) // 2
        w.do("append", main, data=lines[4][:half])  # Claude Code mid-write
        for x in lines[5:8]:
            w.do("append", agent, data=x)

        # B sees the whole lines only: the half line is held back.
        want_main = "".join(lines[:4]).encode()
        rel_main = f"{project.name}/{s1}.jsonl"
        wait_for(lambda: pulled(b, cfg, s1).get(rel_main) == want_main, timeout=20, interval=0.3,
                 what="the first four lines on B")
        assert b"".join([want_main]) == (b.root / "projects" / rel_main).read_bytes()

        w.do("append", main, data=lines[4][half:])  # the rest of the line arrives
        w.do("append", main, data=lines[5])
        wait_for(lambda: pulled(b, cfg, s1) == {k: v for k, v in tree(a.root).items() if s1 in k},
                 timeout=20, interval=0.3, what="B to rebuild the session with its subagent byte for byte")
        copy = pulled(b, cfg, s1)
        assert any("/subagents/agent-" in k for k in copy) and copy[rel_main] == main.read_bytes()

        # One file truncated, one replaced: both marked diverged, never mirrored wrongly.
        p2, p3 = project / f"{s2}.jsonl", project / f"{s3}.jsonl"
        for x in lines[:3]:
            w.do("append", p2, data=x)
            w.do("append", p3, data=x)
        wait_for(lambda: pulled(b, cfg, s2) and pulled(b, cfg, s3), timeout=20, interval=0.3, what="s2 and s3 on B")
        w.do("truncate", p2, size=len(lines[0]))
        w.do("replace", p3, data="".join(lines[6:10]))
        st = wait_for(lambda: (lambda s: s if s["diverged"] >= 2 else None)(mirror_status(a)),
                      what="the truncated and the replaced file to be marked diverged")
        assert "by another writer" in (st["lastError"] or "")
        w.do("append", p3, data=lines[10])
        wait_for(lambda: mirror_status(a)["lagBytes"] == 0, what="nothing left to publish")
        assert pulled(b, cfg, s3)[f"{project.name}/{s3}.jsonl"] == "".join(lines[:3]).encode()
    finally:
        w.close()
    # The daemon only read: the files are exactly what the foreign writer wrote.
    assert main.read_bytes() == "".join(lines[:6]).encode()
    assert agent.read_bytes() == "".join(lines[5:8]).encode()
    assert not list(project.rglob("*.torn"))
    with a.client() as c:
        follow = c.status().follow
    # One watch per dir (root, projects, the project, the session's, subagents), none per file.
    assert follow is not None and 4 <= follow["watches"] <= 6 and follow["files"] >= 4, follow
    a.stop()


def test_daemon_writes_between_foreign_ones_are_mirrored_once(daemon_factory, mirror_config, short_tmp):
    """A client writes through the daemon into a session the foreign writer also
    appends to: the follower skips the daemon's own lines (the writer reported
    them) and passes on the foreign ones; a double report would fork the stream
    copy, which the mirror refuses as a divergence."""
    cfg = mirror_config()
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b")
    wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
    cwd = str(short_tmp / "work")
    sid = str(uuid.uuid4())
    path = project_dir(a.root, cwd) / f"{sid}.jsonl"
    lines = corpus_lines(20)
    w = Foreign()
    try:
        with a.client() as c:
            for k in range(8):
                ans = c.pipeline([m.Append(id=c.next_id(), session=sid, cwd=cwd, durability="written",
                                           entries=[line(user(f"through the daemon {k}"))])])
                assert isinstance(ans[0], m.Appended)
                w.do("append", path, data=lines[2 * k])
                w.do("append", path, data=lines[2 * k + 1])
    finally:
        w.close()
    wait_for(lambda: pulled(b, cfg, sid) == {k: v for k, v in tree(a.root).items() if sid in k},
             timeout=20, interval=0.3, what="B to hold exactly A's interleaved file")
    st = mirror_status(a)
    assert st["diverged"] == 0 and st["errors"] == 0, st
    data = path.read_bytes()
    assert data.count(b"through the daemon") == 8 and all(x.encode() in data for x in lines[:16])


def test_without_watches_the_restat_follows_and_a_rewrite_in_place_diverges(daemon_factory, mirror_config, short_tmp):
    """``follow_max_watches = 0``: no inotify watch at all, every dir is
    re-stat'ed; new project dirs, sessions and subagent dirs are still found,
    and a file rewritten in place (same inode, same size) is not mirrored."""
    cfg = mirror_config()
    cfg.write_text("follow_max_watches = 0\n" + cfg.read_text())
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b")
    wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
    lines = corpus_lines(10)
    project = a.root / "projects" / "-srv-polled"
    sid, other = str(uuid.uuid4()), str(uuid.uuid4())
    main, agent = project / f"{sid}.jsonl", project / sid / "subagents" / "agent-77.jsonl"
    w = Foreign()
    try:
        for x in lines[:3]:
            w.do("append", main, data=x)
        w.do("append", agent, data=lines[3])
        w.do("append", main, data=lines[4][:10])
        wait_for(lambda: pulled(b, cfg, sid) == {f"{project.name}/{sid}.jsonl": "".join(lines[:3]).encode(),
                                                 f"{project.name}/{sid}/subagents/agent-77.jsonl": lines[3].encode()},
                 timeout=20, interval=0.3, what="B to hold the whole lines found by the re-stat")
        w.do("append", main, data=lines[4][10:])
        wait_for(lambda: pulled(b, cfg, sid)[f"{project.name}/{sid}.jsonl"] == main.read_bytes(),
                 timeout=20, interval=0.3, what="the completed line on B")

        p = project / f"{other}.jsonl"
        w.do("append", p, data=lines[5] + lines[6])
        wait_for(lambda: pulled(b, cfg, other), timeout=20, interval=0.3, what="the second session on B")
        w.do("overwrite", p, data=lines[6][: len(lines[5])] if len(lines[6]) >= len(lines[5]) else "X" * len(lines[5]))
        w.do("append", p, data=lines[7])
        st = wait_for(lambda: (lambda s: s if s["diverged"] >= 1 else None)(mirror_status(a)),
                      what="the rewritten file to be marked diverged")
        assert "rewritten" in (st["lastError"] or "")
        assert pulled(b, cfg, other)[f"{project.name}/{other}.jsonl"] == (lines[5] + lines[6]).encode()
    finally:
        w.close()
    with a.client() as c:
        follow = c.status().follow
    assert follow is not None and follow["watches"] == 0 and follow["polled_dirs"] >= 3, follow


def test_a_same_size_rewrite_in_the_middle_diverges(daemon_factory, mirror_config, short_tmp):
    """The change no fingerprint of the edges shows (found by the running hash):
    the file is marked diverged and B keeps the copy that was true."""
    cfg = mirror_config()
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b")
    wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
    lines = corpus_lines(4, skip=3)
    sid = str(uuid.uuid4())
    project = a.root / "projects" / "-home-someone-mid"
    path = project / f"{sid}.jsonl"
    rel = f"{project.name}/{sid}.jsonl"
    with Foreign() as w:
        for x in lines[:3]:
            w.do("append", path, data=x)
        good = path.read_bytes()
        wait_for(lambda: pulled(b, cfg, sid).get(rel) == good, timeout=20, interval=0.3, what="the session on B")
        followed(a, path)
        at, data = middle_rewrite(lines)
        w.do("overwrite", path, data=data, offset=at)
        st = wait_for(lambda: (lambda s: s if s["diverged"] >= 1 else None)(mirror_status(a)),
                      what="the rewritten file to be marked diverged")
        assert "rewritten" in (st["lastError"] or "")
        w.do("append", path, data=lines[3])
        wait_for(lambda: mirror_status(a)["lagBytes"] == 0, what="nothing left to publish")
    assert pulled(b, cfg, sid)[rel] == good
