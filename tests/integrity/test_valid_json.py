"""Valid JavaScript JSON is stored byte for byte and read everywhere: lone
surrogate escapes (JSON.stringify of a string cut inside an emoji), numbers out
of msgspec's range. What cannot be checked (nesting beyond the decoder's depth)
is a ``bad_request`` naming why: never ``internal``, never a traceback."""

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.store.entries import decode_header, decode_object, mask_lone_surrogates
from sessiond.wire import messages as m
from sessiond.wire.errors import RemoteError
from tests.helpers import main_path

CWD = "/work/project"


def raw_user(text_json: str, uid: str, parent: str | None = None, extra: str = "") -> bytes:
    p = "null" if parent is None else f'"{parent}"'
    return (f'{{"parentUuid":{p},"type":"user","uuid":"{uid}","message":{{"role":"user","content":"{text_json}"}}'
            f'{extra}}}').encode()


def raw_assistant(text_json: str, uid: str, parent: str) -> bytes:
    return (f'{{"parentUuid":"{parent}","type":"assistant","uuid":"{uid}","message":{{"role":"assistant",'
            f'"content":[{{"type":"text","text":"{text_json}"}}]}}}}').encode()


def test_lone_surrogates_are_stored_byte_for_byte_and_read_everywhere(daemon):
    sid, u1, a1, u2 = (str(uuid.uuid4()) for _ in range(4))
    lines = [
        b'{"type":"custom-title","customTitle":"emoji cut \\ud83d"}',
        raw_user("first \\ud83d", u1),
        raw_assistant("half \\udc00 and whole \\ud83d\\ude00 and escaped \\\\ud83d", a1, u1),
        raw_user("again \\ud83d", u2, a1),
    ]
    with daemon.client() as c:
        r = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines, durability="written"))
        assert (r.accepted, r.duplicates) == (4, 0)
    path = main_path(daemon.root, CWD, sid)
    assert path.read_bytes() == b"\n".join(lines) + b"\n"
    check = json.loads(daemon.cli("check", str(path), "--json").stdout)["files"][0]
    assert check["healthy"] and check["unparseableLines"] == [] and check["danglingParents"] == []
    shown = json.loads(daemon.cli("show", sid, "--cwd", CWD, "--json").stdout)
    assert [x["uuid"] for x in shown["messages"]] == [u1, a1, u2]
    assert shown["bridges"] == [] and shown["skippedLines"] == 0
    listed = json.loads(daemon.cli("list", "--cwd", CWD, "--json").stdout)
    assert [s["sessionId"] for s in listed] == [sid]
    assert "emoji cut" in json.dumps(listed)
    offline = json.loads(daemon.cli("--no-autostart", "list", "--cwd", CWD, "--json", env={"SESSIOND_SOCKET": "/nonexistent/s"}).stdout)
    assert [s["sessionId"] for s in offline] == [sid]
    tail = daemon.cli("tail", sid, "--cwd", CWD).stdout.decode()
    assert "unreadable" not in tail and "again" in tail


def test_record_keeps_lone_surrogates_and_big_numbers_as_written(daemon):
    sid = str(uuid.uuid4())
    given = [
        b'{"type":"user","message":{"role":"user","content":"cut \\ud83d"},"n":1e400,"big":123456789012345678901234567890}',
        b'{"type":"assistant","parentUuid":"ignored","message":{"role":"assistant","content":[{"type":"text","text":"x \\udc00"}]},'
        b'"f":1.00000000000000000001,"m":-1e400}',
    ]
    out = daemon.cli("record", "--cwd", CWD, "--session", sid, "--json", input=b"\n".join(given) + b"\n")
    assert json.loads(out.stdout)["recorded"] == 2
    daemon.cli("flush")
    data = main_path(daemon.root, CWD, sid).read_bytes()
    for fragment in [b'"cut \\ud83d"', b'"n":1e400', b'"big":123456789012345678901234567890', b'"x \\udc00"',
                     b'"f":1.00000000000000000001', b'"m":-1e400']:
        assert fragment in data
    first, second = data.splitlines()
    assert json.loads(second)["parentUuid"] == json.loads(first)["uuid"]  # rebuilt with the chained parent
    forked = daemon.cli("fork", sid, "--cwd", CWD).stdout.decode().strip()
    fork_data = main_path(daemon.root, CWD, forked).read_bytes()
    assert b'"cut \\ud83d"' in fork_data and b'"n":1e400' in fork_data


@pytest.mark.parametrize("request_kind", ["append", "record"])
def test_deep_nesting_is_a_bad_request_never_internal(daemon, request_kind):
    sid = str(uuid.uuid4())
    deep = b'{"type":"user","uuid":"' + str(uuid.uuid4()).encode() + b'","x":' + b"[" * 2000 + b"]" * 2000 + b"}"
    with daemon.client() as c:
        if request_kind == "append":
            req = m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[deep], durability="written")
        else:
            req = m.Record(id=c.next_id(), session=sid, cwd=CWD, messages=[deep], durability="written")
        with pytest.raises(RemoteError) as err:
            c.call(req)
        assert err.value.code == "bad_request" and "nested too deeply" in str(err.value)
        ok = c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[raw_user("fine", str(uuid.uuid4()))], durability="written"))
        assert ok.accepted == 1  # the connection and the daemon carry on
    assert "Traceback" not in daemon.log_text() and "internal" not in daemon.log_text()
    cli = daemon.cli(request_kind, "--cwd", CWD, "--session", sid, input=deep + b"\n", check=False)
    assert b"Traceback" not in cli.stderr and b"nested too deeply" in cli.stderr


def test_a_reader_skips_a_too_deep_line_without_a_traceback(daemon):
    sid, u1 = str(uuid.uuid4()), str(uuid.uuid4())
    path = main_path(daemon.root, CWD, sid)
    path.parent.mkdir(parents=True)
    path.write_bytes(raw_user("ok", u1) + b"\n" + b'{"x":' + b"[" * 3000 + b"]" * 3000 + b"}\n")
    for args in (["check", str(path)], ["show", str(path)], ["tail", str(path)], ["list", "--cwd", CWD]):
        res = daemon.cli("--no-autostart", *args, check=False, env={"SESSIOND_SOCKET": "/nonexistent/s"})
        assert b"Traceback" not in res.stderr, args


SURROGATE_TEXT = st.lists(
    st.one_of(st.characters(codec="utf-8"), st.sampled_from(["\ud83d", "\ude00", "\udbff", "\\", '"', "\\ud83d"])),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(SURROGATE_TEXT)
def test_any_string_json_stringify_writes_is_read_with_u_fffd_for_lone_halves(text):
    """json.dumps (ensure_ascii) escapes like JSON.stringify: lone halves as \\uXXXX."""
    raw = json.dumps({"type": "user", "uuid": "u", "message": {"content": text}}, separators=(",", ":")).encode()
    assert decode_header(raw).uuid == "u"
    expected = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # pairs joined, halves U+FFFD
    assert decode_object(raw)["message"]["content"] == expected
    masked = mask_lone_surrogates(raw)
    assert masked is None or len(masked) == len(raw)
