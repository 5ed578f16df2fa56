"""``pull`` against a stream anyone may have published to.

The stream is shared infrastructure: another machine, a compromised account or a
buggy older sessiond can put anything on it. These tests publish raw messages
with nats-py (no daemon on the sending side) and check that ``pull`` writes only
the session's own transcripts under ``<root>/projects``, never a torn line and
never over a local file, and says what it skipped (one line each, a summary, a
non-zero exit) while still pulling what is sound.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from sessiond.mirror.stream_format import project_key
from sessiond.store.paths import project_dir
from tests.conftest import DaemonProc
from tests.helpers import line, user

from .conftest import headers, publish, tree


def lines(sid: str, n: int, tag: str) -> list[bytes]:
    return [line(user(f"{tag} {i}", sessionId=sid)) + b"\n" for i in range(n)]


def every_file(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def receiver(daemon_factory, mirror_config, short_tmp) -> tuple[Path, str, DaemonProc, str, str, str, str]:
    """The set-up of every test here: the mirror's config, the cwd pulled into
    and the receiving daemon ``b``, its project dir's name, a session id, and
    the subject and file name the stream gives that session's transcript."""
    cfg = mirror_config()
    cwd = str(short_tmp / "work")
    b = daemon_factory(name="b")
    project = project_dir(b.root, cwd).name
    sid = str(uuid.uuid4())
    return cfg, cwd, b, project, sid, f"{project_key(project)}.{sid}", f"{sid}.jsonl"


def test_pull_skips_what_is_not_the_session_s_range_and_pulls_the_rest(daemon_factory, mirror_config, nats_server, short_tmp):
    cfg, cwd, b, project, sid, main_subject, rel = receiver(daemon_factory, mirror_config, short_tmp)
    other, agent_rel = str(uuid.uuid4()), f"{sid}/subagents/agent-a1.jsonl"
    body = lines(sid, 4, "main")
    agent = lines(sid, 2, "agent")
    offsets = [sum(map(len, body[:i])) for i in range(len(body))]
    bad = [
        (main_subject, {}, b"no headers at all\n"),
        (main_subject, headers("victim-project", rel, 0), body[0]),  # the subject's key is not this project's
        (main_subject, headers(project, agent_rel, 0), agent[0]),  # an agent file on the main file's subject
        (main_subject, headers(project, f"{other}.jsonl", 0), body[0]),  # another session's file
        (main_subject, headers(project, "../../../../escape.jsonl", 0), b"x\n"),
        (main_subject, headers(project, rel, "x"), b"not an offset\n"),
        (main_subject, headers(project, rel, -5), b"negative\n"),
        (main_subject, headers(project, rel, "1_0"), b"python int syntax\n"),
        (main_subject, headers(project, rel, 10**15), b"far past the end\n"),
    ]
    good = [(main_subject, headers(project, rel, off), data) for off, data in zip(offsets, body)]
    agent_good = [(f"{main_subject}.agent-a1", headers(project, agent_rel, 0), b"".join(agent))]
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix, [good[0], *bad[:5], *good[1:3], *bad[5:], good[3], *agent_good])

    res = b.cli("pull", sid, "--cwd", cwd, "--config", str(cfg), "--json", check=False)
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert "Traceback" not in err and "invalid literal" not in err and "Errno" not in err, err
    skipped = [x for x in err.splitlines() if ": message " in x and " skipped: " in x]
    assert len(skipped) == len(bad) - 1, err  # one line per message skipped, each with its sequence
    assert f"has a hole at bytes {len(b''.join(body))}-{10**15}" in err, err  # the far range: held, then a hole
    assert "not pulled whole: 8 messages skipped, 1 file with a problem" in err, err
    assert every_file(b.root) == {f"projects/{project}/{rel}", f"projects/{project}/{agent_rel}"}
    assert tree(b.root) == {f"{project}/{rel}": b"".join(body), f"{project}/{agent_rel}": b"".join(agent)}
    out = json.loads(res.stdout)
    assert out["skipped"] == len(bad) - 1 and out["problems"] == 1 and out["files"] == 2


def test_a_torn_tail_from_the_stream_never_reaches_the_local_file(daemon_factory, mirror_config, nats_server, short_tmp):
    cfg, cwd, b, project, sid, subject, rel = receiver(daemon_factory, mirror_config, short_tmp)
    first, second = lines(sid, 2, "whole")
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix,
            [(subject, headers(project, rel, 0), first), (subject, headers(project, rel, len(first)), second[:10])])
    res = b.cli("pull", sid, "--cwd", cwd, "--config", str(cfg), check=False)
    assert res.returncode == 1 and b"ends inside a line" in res.stderr, res.stderr
    main = b.root / "projects" / project / rel
    assert main.read_bytes() == first  # whole lines only: the fragment is not written

    # The rest of the line arrives: the next pull completes the file.
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix, [(subject, headers(project, rel, len(first) + 10), second[10:])])
    b.cli("pull", sid, "--cwd", cwd, "--config", str(cfg))
    assert main.read_bytes() == first + second


def test_a_local_file_that_differs_is_kept_and_the_other_files_are_pulled(daemon_factory, mirror_config, nats_server, short_tmp):
    cfg, cwd, b, project, sid, subject, rel = receiver(daemon_factory, mirror_config, short_tmp)
    subject, rel, agent_rel = f"{project_key(project)}.{sid}", f"{sid}.jsonl", f"{sid}/subagents/agent-z.jsonl"
    body, agent = b"".join(lines(sid, 3, "remote")), b"".join(lines(sid, 2, "agent"))
    mine = b"".join(lines(sid, 5, "local"))
    main = b.root / "projects" / project / rel
    main.parent.mkdir(parents=True)
    main.write_bytes(mine)
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix, [
        (subject, headers(project, rel, 0), body),
        (f"{subject}.agent-z", headers(project, agent_rel, 0), agent),
        (subject, headers(project, rel, len(body)), b"".join(lines(sid, 1, "more"))),
    ])
    res = b.cli("pull", sid, "--cwd", cwd, "--config", str(cfg), check=False)
    assert res.returncode == 1 and b"differs from the mirror" in res.stderr, res.stderr
    assert main.read_bytes() == mine  # never written over, nor appended to
    assert (b.root / "projects" / project / agent_rel).read_bytes() == agent


def test_ranges_past_a_hole_are_held_only_up_to_a_bound(daemon_factory, mirror_config, nats_server, short_tmp):
    from sessiond.client.cli.mirror_cmds import EARLY_BYTES, HELD_OVERHEAD

    cfg, cwd, b, project, sid, subject, rel = receiver(daemon_factory, mirror_config, short_tmp)
    chunk = line(user("x" * (256 * 1024 - 200), sessionId=sid)) + b"\n"
    n = EARLY_BYTES // len(chunk) + 4
    # Every range one byte past where it should be: none ever joins the file.
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix,
            [(subject, headers(project, rel, 1 + i * len(chunk)), chunk) for i in range(n)])
    res = b.cli("pull", sid, "--cwd", cwd, "--config", str(cfg), "--json", check=False)
    err = res.stderr.decode()
    assert res.returncode == 1, err
    held = EARLY_BYTES // (len(chunk) + HELD_OVERHEAD)
    assert err.count(", past a hole at 0") == n - held, err  # beyond the bound: skipped, each said
    assert f"{rel}: the stream's copy has a hole at bytes 0-1" in err, err
    assert json.loads(res.stdout)["skipped"] == n - held
    assert tree(b.root) == {}  # nothing of it written


def test_a_session_with_more_agent_files_than_open_descriptors_is_pulled(daemon_factory, mirror_config, nats_server, short_tmp):
    import resource
    import subprocess
    import sys

    cfg, cwd, b, project, sid, subject, rel = receiver(daemon_factory, mirror_config, short_tmp)
    agents = 300
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix, [
        (f"{project_key(project)}.{sid}.agent-a{i}", headers(project, f"{sid}/subagents/agent-a{i}.jsonl", 0),
         line(user(f"agent {i}", sessionId=sid)) + b"\n") for i in range(agents)])

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    res = subprocess.run([sys.executable, "-m", "sessiond.client.cli", "--root", str(b.root), "pull", sid, "--cwd", cwd,
                          "--config", str(cfg), "--json"], capture_output=True, timeout=60, preexec_fn=few_descriptors)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["files"] == agents
    assert len(tree(b.root)) == agents


def test_a_write_that_fails_midway_leaves_no_torn_line(daemon_factory, mirror_config, nats_server, short_tmp):
    """A stream larger than the disk: the write that runs out of room (here the
    file size limit, EFBIG) is taken back, the file keeps whole lines only."""
    import resource
    import signal
    import subprocess
    import sys

    cfg, cwd, b, project, sid, subject, rel = receiver(daemon_factory, mirror_config, short_tmp)
    body = [line(user(f"{i} " + "x" * 100_000, sessionId=sid)) + b"\n" for i in range(3)]
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix,
            [(subject, headers(project, rel, sum(map(len, body[:i]))), data) for i, data in enumerate(body)])

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write(2) then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))

    res = subprocess.run([sys.executable, "-m", "sessiond.client.cli", "--root", str(b.root), "pull", sid, "--cwd", cwd,
                          "--config", str(cfg)], capture_output=True, timeout=60, preexec_fn=small_disk)
    assert res.returncode == 1 and b"File too large" in res.stderr, res.stderr
    data = (b.root / "projects" / project / rel).read_bytes()
    assert data == b"".join(body)[: len(data)] and (data == b"" or data.endswith(b"\n")), len(data)

    b.cli("pull", sid, "--cwd", cwd, "--config", str(cfg))  # room again: the rest comes
    assert (b.root / "projects" / project / rel).read_bytes() == b"".join(body)


def test_thousands_of_ranges_in_reverse_order_are_joined(daemon_factory, mirror_config, nats_server, short_tmp):
    """Each range held until the one before it comes, then all joined at once
    (without a call per range on the stack)."""
    cfg, cwd, b, project, sid, subject, rel = receiver(daemon_factory, mirror_config, short_tmp)
    body = line(user("r" * 3000, sessionId=sid)) + b"\n"
    publish(nats_server.url, mirror_config.stream, mirror_config.prefix,
            [(subject, headers(project, rel, i), body[i : i + 1]) for i in reversed(range(len(body)))])
    b.cli("pull", sid, "--cwd", cwd, "--config", str(cfg))
    assert tree(b.root) == {f"{project}/{rel}": body}
