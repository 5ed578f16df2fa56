"""An entry over the daemon's frame cap is refused by the client at once, naming
its size and the cap (non-zero exit), and never enters the resend loop; a batch
over the cap is split across frames so every entry that fits is stored."""

import uuid

import pytest

from sessiond.client import Session
from tests.helpers import assistant, line, main_path, read_entries, user

CWD = "/work/project"
CAP = 256 * 1024


@pytest.fixture
def small_cap(daemon_factory):
    return daemon_factory("--max-frame", str(CAP)).start()


def test_the_client_learns_the_cap_from_welcome(small_cap):
    with small_cap.client() as c:
        assert c.max_frame_bytes == CAP


def test_cli_append_refuses_an_oversized_entry_and_stores_the_rest(small_cap):
    sid = str(uuid.uuid4())
    small = [user(f"q{i}") for i in range(3)]
    huge = user("x" * (CAP + 10))
    data = b"\n".join([line(small[0]), line(huge), line(small[1]), line(small[2])]) + b"\n"
    res = small_cap.cli("append", "--cwd", CWD, "--session", sid, "--durability", "written", input=data, check=False, timeout=30)
    assert res.returncode == 1
    err = res.stderr.decode()
    assert "line 2:" in err and f"{len(line(huge)):,} bytes" in err and f"{CAP:,} bytes" in err
    assert "Traceback" not in err and "not delivered" not in err
    stored = read_entries(main_path(small_cap.root, CWD, sid))
    assert [e["uuid"] for e in stored] == [e["uuid"] for e in small]
    assert "exceeds" not in small_cap.log_text()  # no frame over the cap ever reached the daemon


def test_cli_record_refuses_an_oversized_message_with_a_non_zero_exit(small_cap):
    sid = str(uuid.uuid4())
    data = line(user("ok")) + b"\n" + line(user("y" * (2 * CAP))) + b"\n"
    res = small_cap.cli("record", "--cwd", CWD, "--session", sid, input=data, check=False, timeout=30)
    assert res.returncode == 1 and "frame cap" in res.stderr.decode() and "Traceback" not in res.stderr.decode()
    assert "exceeds" not in small_cap.log_text()


def test_session_splits_a_batch_over_the_cap_and_refuses_an_entry_that_cannot_fit(small_cap):
    from sessiond.wire.errors import EntryTooLarge

    sid = str(uuid.uuid4())
    with small_cap.client() as c:
        s = Session(c, sid, CWD)
        msgs = [user("big " + "a" * (CAP // 3))] + [assistant("b" * (CAP // 3)) for _ in range(5)]
        s.record(msgs, durability="written")  # ~2 x the cap in one call: split, all stored
        with pytest.raises(EntryTooLarge) as err:
            s.append(user("z" * CAP))
        assert f"{CAP:,}" in str(err.value)
        assert not s.outbox.unsent and s.accepted == 6  # nothing of the refused call is kept for resending
        s.flush()
        s.close()
    stored = read_entries(main_path(small_cap.root, CWD, sid))
    assert len(stored) == 6
    assert [e["parentUuid"] for e in stored[1:]] == [e["uuid"] for e in stored[:-1]]  # one chain across the frames
    assert "exceeds" not in small_cap.log_text()


@pytest.mark.anyio
async def test_async_client_splits_and_refuses_the_same_way(small_cap):
    from sessiond.client import AsyncClient
    from sessiond.wire.errors import EntryTooLarge

    sid = str(uuid.uuid4())
    entries = [user("e" * (CAP // 3)) for _ in range(5)]
    async with AsyncClient(small_cap.socket, root=small_cap.root, autostart=False) as c:
        assert c.max_frame_bytes == CAP
        r = await c.append(sid, CWD, entries, durability="written")
        assert r.accepted == 5
        with pytest.raises(EntryTooLarge):
            await c.append(sid, CWD, [user("z" * CAP)])
        await c.close_session(sid)
    assert [e["uuid"] for e in read_entries(main_path(small_cap.root, CWD, sid))] == [e["uuid"] for e in entries]
