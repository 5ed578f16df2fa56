"""The daemon's mirror against a stream someone else wrote to.

When the stream's last message of a file is not the range the daemon expected,
the daemon asks the stream where its copy of the file ends, reading that last
message's headers. Another machine, a compromised account or an older sessiond
may have put anything there: the file it names is marked diverged (and no
longer mirrored), and every other session goes on being mirrored.
"""

from __future__ import annotations

import uuid

import pytest

from sessiond.mirror.stream_format import project_key
from sessiond.store.paths import project_dir
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import line, user

from .conftest import headers, mirror_status, publish, tree, wait_for, wait_mirrored


@pytest.mark.parametrize("offset", ["x", "-100", "1_0", ""])
@pytest.mark.parametrize("required", [False, True])
def test_a_foreign_last_range_diverges_its_file_and_nothing_else(daemon_factory, mirror_config, nats_server, short_tmp,
                                                                 offset, required):
    cfg = mirror_config(required=required)
    a = daemon_factory(name="a").start("--config", str(cfg))
    cwd = str(short_tmp / "work")
    project = project_dir(a.root, cwd).name
    victim, other = str(uuid.uuid4()), str(uuid.uuid4())
    with a.client() as c:
        wait_for(lambda: mirror_status(a)["connected"], what="the mirror to connect")
        c.call(m.Append(id=c.next_id(), session=victim, cwd=cwd, entries=[line(user("first"))], durability="written"))
        wait_mirrored(a)
        publish(nats_server.url, mirror_config.stream, mirror_config.prefix,
                [(f"{project_key(project)}.{victim}", headers(project, f"{victim}.jsonl", offset), b"foreign\n")])
        try:  # refused by JetStream (the expected sequence): the daemon reads the foreign message
            c.call(m.Append(id=c.next_id(), session=victim, cwd=cwd, entries=[line(user("second"))], durability="durable"))
        except RemoteError as exc:
            assert exc.code == "mirror_unavailable"
        wait_for(lambda: mirror_status(a)["diverged"] == 1, what="the file to be marked diverged")
        c.call(m.Append(id=c.next_id(), session=other, cwd=cwd, entries=[line(user("elsewhere"))], durability="durable"))
        st = wait_for(lambda: (lambda s: s if s["lagFiles"] <= 1 and s["connected"] else None)(mirror_status(a)),
                      what="the other session to be mirrored")
        assert st["diverged"] == 1, st
    b = daemon_factory(name="b")
    b.cli("pull", other, "--cwd", cwd, "--config", str(cfg))
    assert tree(b.root) == {k: v for k, v in tree(a.root).items() if other in k}


def test_a_stream_with_a_small_message_limit_gets_ranges_that_fit(daemon_factory, mirror_config, nats_server, short_tmp):
    """An existing stream is used as it is: its ``max_msg_size`` bounds the
    ranges (a longer line is split, as for the server's max_payload)."""
    import asyncio

    import nats
    from nats.js import api

    async def small_stream() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            await nc.jetstream().add_stream(api.StreamConfig(
                name=mirror_config.stream, subjects=[f"{mirror_config.prefix}.>"], max_msg_size=16 * 1024, allow_direct=True))
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(small_stream(), 30))
    cfg = mirror_config()
    a = daemon_factory(name="a").start("--config", str(cfg))
    cwd = str(short_tmp / "work")
    sids = [str(uuid.uuid4()), str(uuid.uuid4())]
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sids[0], cwd=cwd, durability="written",
                        entries=[line(user("long " + "z" * 40_000)), line(user("short"))]))
        c.call(m.Append(id=c.next_id(), session=sids[1], cwd=cwd, durability="written", entries=[line(user("other"))]))
    st = wait_mirrored(a)
    assert st["diverged"] == 0 and st["lastError"] is None, st
    b = daemon_factory(name="b")
    b.cli("pull", *sids, "--cwd", cwd, "--config", str(cfg))
    assert tree(b.root) == tree(a.root)
