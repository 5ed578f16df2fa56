"""SPEC 3.1: which parent each recorded message gets."""

import json

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sessiond.store.entries import decode_header
from sessiond.store.recording import chain_messages, stamp_parent
from tests.client.resume.test_api_rule import streamed


def msg(uid, type_="assistant", **extra):
    return json.dumps({"type": type_, "uuid": uid, **extra}).encode()


def run(raws, known=(), parent=None, cursor=None):
    res = chain_messages([(decode_header(r), r) for r in raws], set(known).__contains__, parent, cursor)
    return [json.loads(ln) for _, ln in res.lines], res


def test_linear_chain_from_hint_with_parent_first():
    out, res = run([msg("a", "user"), msg("b"), msg("c", "user")], parent="h")
    assert [(e["uuid"], e["parentUuid"]) for e in out] == [("a", "h"), ("b", "a"), ("c", "b")]
    assert all(next(iter(e)) == "parentUuid" for e in out)
    assert res.last == "c" and res.duplicates == 0


def test_leading_known_run_moves_the_starting_parent():
    out, res = run([msg("a", "user"), msg("b"), msg("c", "user")], known={"a", "b"}, parent="h")
    assert [(e["uuid"], e["parentUuid"]) for e in out] == [("c", "b")]
    assert res.duplicates == 2 and res.last == "c"


def block(uid, response="m1"):
    """One content block of the response ``response`` (Claude Code: one entry each)."""
    return msg(uid, message={"id": response, "role": "assistant", "content": []})


def result(uid, call):
    return msg(uid, "user", sourceToolAssistantUUID=call)


def links(raws, **kw):
    out, res = run(raws, **kw)
    return {e["uuid"]: e["parentUuid"] for e in out}, res


def test_parallel_tool_results_finishing_in_reverse_order():
    # One response: text, tool_use A, tool_use B (three entries sharing message.id),
    # results in reverse order, then the next response.
    parents, res = links([block("t1"), block("useA"), block("useB"), result("resB", "useB"),
                          result("resA", "useA"), block("next", "m2")], parent="p0")
    # each result hangs off its call; the next response off the last result written
    assert parents == {"t1": "p0", "useA": "t1", "useB": "useA", "resB": "useB", "resA": "useA", "next": "resA"}
    assert res.last == "next"


def test_a_later_block_of_a_streamed_response_continues_from_the_tip():
    """Issue 16 item 4: tools run while the response streams. tool_use A, tool_use B,
    result A (an earlier call: the tip stays at B), tool_use C: C continues from B,
    never from result A (a tree viewer would otherwise see B's branch as a dead end)."""
    parents, res = links([block("useA"), block("useB"), result("resA", "useA"), block("useC"),
                          result("resC", "useC"), result("resB", "useB"), block("next", "m2")], parent="p0")
    assert parents == {"useA": "p0", "useB": "useA", "resA": "useA", "useC": "useB", "resC": "useC",
                       "resB": "useB", "next": "resB"}
    assert res.last == "next"


def test_a_result_of_the_tip_moves_it():
    """tool_use A, result A, tool_use B: the result answered the tip, B hangs off it."""
    parents, res = links([block("useA"), result("resA", "useA"), block("useB"), result("resB", "useB")], parent="p0")
    assert parents == {"useA": "p0", "resA": "useA", "useB": "resA", "resB": "useB"}
    assert res.last == "resB"


def test_the_cursor_survives_a_call_boundary():
    """The daemon keeps the cursor between calls: a later block recorded in the next
    call still continues from the tip, though a side result was written last."""
    _, res1 = run([block("useA"), block("useB"), result("resA", "useA")], parent="p0")
    assert res1.last == "useB" and res1.cursor.previous == "resA" and res1.cursor.response == "m1"
    out, res2 = run([block("useC"), block("next", "m2")], parent=res1.last, cursor=res1.cursor)
    assert [(e["uuid"], e["parentUuid"]) for e in out] == [("useC", "useB"), ("next", "useC")]
    # without the state (another hint), recording starts plainly from the hint
    out, _ = run([block("useC")], parent="elsewhere", cursor=res1.cursor)
    assert out[0]["parentUuid"] == "elsewhere"


def test_a_leading_known_run_moves_the_cursor_as_it_would_have():
    parents, _ = links([block("useA"), block("useB"), result("resA", "useA"), block("useC")],
                       known={"useA", "useB", "resA"}, parent="p0")
    assert parents == {"useC": "useB"}


def test_a_boundary_after_a_side_result_names_the_previous_participant():
    raws = [block("useA"), block("useB"), result("resB", "useB"), result("resA", "useA"),
            msg("cb", "system", subtype="compact_boundary"), msg("s", "user")]
    out, _ = run(raws, parent="p0")
    cb = next(e for e in out if e["uuid"] == "cb")
    assert cb["parentUuid"] is None and cb["logicalParentUuid"] == "resA"
    assert out[-1]["parentUuid"] == "cb"


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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(conv=streamed(), cut=st.integers(1, 9))
def test_recording_a_generated_stream_gives_its_links(conv, cut):
    """Claude Code-like streams (tests/client/resume/test_api_rule.py's generator,
    which writes Claude Code's links) stripped of their links and recorded in calls
    of ``cut`` messages: every link comes back (through the progress entries)."""
    lines = [x for x in conv.lines if isinstance(x, dict)]
    # a result without sourceToolAssistantUUID (older versions) cannot say its call
    assume(all("sourceToolAssistantUUID" in e for e in lines if "toolUseResult" in e))
    progress = {e["uuid"]: e["parentUuid"] for e in lines if e["type"] == "progress"}
    chain = [e for e in lines if e["type"] != "progress"]
    stripped = [json.dumps({k: v for k, v in e.items() if k not in ("parentUuid", "logicalParentUuid")}).encode()
                for e in chain]
    got: dict = {}
    parent, cursor = chain[0]["parentUuid"], None
    for i in range(0, len(stripped), cut):
        res = chain_messages([(decode_header(r), r) for r in stripped[i : i + cut]], lambda _u: False, parent, cursor)
        got.update((h.uuid, json.loads(line)) for h, line in res.lines)
        parent, cursor = res.last, res.cursor
    for e in chain:
        want = e["parentUuid"]
        while want in progress:
            want = progress[want]
        if e.get("subtype") == "compact_boundary":
            assert got[e["uuid"]]["parentUuid"] is None
            assert got[e["uuid"]]["logicalParentUuid"] == e["logicalParentUuid"] or e is chain[0]
        elif e is not chain[0]:
            assert got[e["uuid"]]["parentUuid"] == want, e["uuid"]


def test_a_half_emoji_in_a_block_does_not_hide_its_response():
    """The next block of the response in flight holds a lone surrogate (JavaScript cut
    an emoji): its message.id is still read, so it continues from the tip."""
    half = b'{"type":"assistant","uuid":"useC","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"\\ud83d"}]}}'
    parents, _ = links([block("useA"), block("useB"), result("resA", "useA"), half], parent="p0")
    assert parents["useC"] == "useB"
