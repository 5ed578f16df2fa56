"""SPEC 3.1: which parent each recorded message gets."""

import json

from sessiond.protocol.transcript.entries import decode_header
from sessiond.protocol.transcript.recording import chain_messages, stamp_parent


def msg(uid, type_="assistant", **extra):
    return json.dumps({"type": type_, "uuid": uid, **extra}).encode()


def run(raws, known=(), parent=None):
    res = chain_messages([(decode_header(r), r) for r in raws], set(known).__contains__, parent)
    return [json.loads(l) for _, l in res.lines], res


def test_linear_chain_from_hint_with_parent_first():
    out, res = run([msg("a", "user"), msg("b"), msg("c", "user")], parent="h")
    assert [(e["uuid"], e["parentUuid"]) for e in out] == [("a", "h"), ("b", "a"), ("c", "b")]
    assert all(next(iter(e)) == "parentUuid" for e in out)
    assert res.last == "c" and res.duplicates == 0


def test_leading_known_run_moves_the_starting_parent():
    out, res = run([msg("a", "user"), msg("b"), msg("c", "user")], known={"a", "b"}, parent="h")
    assert [(e["uuid"], e["parentUuid"]) for e in out] == [("c", "b")]
    assert res.duplicates == 2 and res.last == "c"


def test_parallel_tool_results_finishing_in_reverse_order():
    # One response: text, tool_use A, tool_use B (three entries sharing message.id).
    raws = [
        msg("t1"), msg("useA"), msg("useB"),
        msg("resB", "user", sourceToolAssistantUUID="useB"),
        msg("resA", "user", sourceToolAssistantUUID="useA"),
        msg("next"),
    ]
    out, res = run(raws, parent="p0")
    parents = {e["uuid"]: e["parentUuid"] for e in out}
    assert parents == {"t1": "p0", "useA": "t1", "useB": "useA", "resB": "useB", "resA": "useA", "next": "resA"}


def test_compact_boundary_has_null_parent_and_logical_parent():
    out, _ = run([msg("a", "user"), msg("cb", "system", subtype="compact_boundary"), msg("s", "user")])
    cb = out[1]
    assert list(cb)[:2] == ["parentUuid", "logicalParentUuid"]
    assert cb["parentUuid"] is None and cb["logicalParentUuid"] == "a"
    assert out[2]["parentUuid"] == "cb"


def test_metadata_passes_through_and_does_not_move_the_chain():
    raws = [msg("a", "user"), json.dumps({"type": "custom-title", "customTitle": "T"}).encode(), msg("b")]
    out, res = run(raws)
    assert out[1] == {"type": "custom-title", "customTitle": "T"}
    assert out[2]["parentUuid"] == "a"


def test_existing_parent_uuid_is_replaced_and_put_first():
    raw = b'{"type":"user","parentUuid":"old","uuid":"x"}'
    out = json.loads(stamp_parent(raw, "new", has_parent_keys=True))
    assert list(out) == ["parentUuid", "type", "uuid"] and out["parentUuid"] == "new"
    assert json.loads(stamp_parent(b"{}", None)) == {"parentUuid": None}


def test_whitespace_and_escaped_keys_still_give_one_valid_object():
    out, _ = run([b'  {"type":"user","uuid":"a"} ', b'{"type":"assistant","parent\\u0055uid":"old","uuid":"b"}'], parent="p")
    assert out[0] == {"parentUuid": "p", "type": "user", "uuid": "a"}
    assert out[1] == {"parentUuid": "a", "type": "assistant", "uuid": "b"}
