"""SPEC 4 step 3: compaction relinks (preservedMessages, preservedSegment) and snips."""

from __future__ import annotations

from sessiond.client.resume.loader import load_entries
from sessiond.client.resume.relink import apply_compaction, apply_snips

from .build import Conv, text


def parents(loaded):
    return {u: e.parentUuid for u, e in loaded.entries.items()}


def before_compaction() -> Conv:
    """u1 → a1 → u2 → a2 (thinking) → a3 (text): the last three will be preserved."""
    conv = Conv()
    conv.user("u0")
    conv.assistant("a0")
    conv.user("u2")
    conv.assistant("a2", {"type": "thinking", "thinking": "x"}, mid="m2")
    conv.assistant("a3", text("done"), mid="m2")
    return conv


def after_boundary(conv: Conv, **meta) -> Conv:
    conv.boundary("b", logical="a3", **meta)
    conv.summary_msg("s")  # the anchor
    conv.user("c1", "<local-command-caveat>", parent="s", isMeta=True)  # another child of the anchor
    conv.user("n1", "next question", parent="c1")
    return conv


SEGMENT = {"preservedSegment": {"headUuid": "u2", "anchorUuid": "s", "tailUuid": "a3"}}


def test_without_preserved_messages_everything_before_the_boundary_goes(tmp_path):
    loaded = load_entries(after_boundary(before_compaction()).write(tmp_path / "t.jsonl"))
    comp = apply_compaction(loaded.entries, loaded.boundaries)
    assert list(loaded.entries) == ["b", "s", "c1", "n1"]
    assert (comp.boundary, comp.preserved, comp.zero_usage, comp.missing) == ("b", [], set(), set())


def test_preserved_segment_is_relinked_between_anchor_and_its_other_children(tmp_path):
    loaded = load_entries(after_boundary(before_compaction(), **SEGMENT).write(tmp_path / "t.jsonl"))
    comp = apply_compaction(loaded.entries, loaded.boundaries)
    assert comp.preserved == ["u2", "a2", "a3"]
    assert comp.zero_usage == {"a2", "a3"}
    assert list(loaded.entries) == ["u2", "a2", "a3", "b", "s", "c1", "n1"]
    p = parents(loaded)
    assert (p["u2"], p["a2"], p["a3"], p["c1"], p["n1"]) == ("s", "u2", "a2", "a3", "c1")


def test_preserved_messages_are_preferred_and_chained_in_list_order(tmp_path):
    explicit = {"preservedMessages": {"anchorUuid": "s", "uuids": ["a2", "a3", "gone"]}}
    conv = after_boundary(before_compaction(), **SEGMENT, **explicit)
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    comp = apply_compaction(loaded.entries, loaded.boundaries)
    assert comp.preserved == ["a2", "a3"] and comp.missing == {"gone"}
    assert "u2" not in loaded.entries  # not in the explicit list: pruned
    p = parents(loaded)
    assert (p["a2"], p["a3"], p["c1"]) == ("s", "a2", "a3")


def test_broken_segment_relinks_nothing(tmp_path):
    seg = {"preservedSegment": {"headUuid": "u2", "anchorUuid": "s", "tailUuid": "a3"}}
    conv = before_compaction()
    conv.lines[3]["parentUuid"] = "lost"  # a2's parent is not in the file: tail→head breaks
    loaded = load_entries(after_boundary(conv, **seg).write(tmp_path / "t.jsonl"))
    comp = apply_compaction(loaded.entries, loaded.boundaries)
    assert comp.preserved == [] and comp.missing == {"lost"}
    assert list(loaded.entries) == ["b", "s", "c1", "n1"]
    assert parents(loaded)["c1"] == "s"


def test_segment_that_never_reaches_its_head_relinks_nothing(tmp_path):
    seg = {"preservedSegment": {"headUuid": "nope", "anchorUuid": "s", "tailUuid": "a3"}}
    loaded = load_entries(after_boundary(before_compaction(), **seg).write(tmp_path / "t.jsonl"))
    comp = apply_compaction(loaded.entries, loaded.boundaries)
    assert comp.preserved == [] and comp.missing == set()


def test_missing_anchor_relinks_nothing(tmp_path):
    seg = {"preservedSegment": {"headUuid": "u2", "anchorUuid": "nowhere", "tailUuid": "a3"}}
    loaded = load_entries(after_boundary(before_compaction(), **seg).write(tmp_path / "t.jsonl"))
    comp = apply_compaction(loaded.entries, loaded.boundaries)
    assert comp.preserved == [] and comp.missing == {"nowhere"}


def test_double_compaction_only_the_last_boundary_counts(tmp_path):
    conv = after_boundary(before_compaction(), **SEGMENT)
    conv.assistant("a4", parent="n1")
    conv.boundary("b2", logical="a4")
    conv.summary_msg("s2")
    conv.user("n2")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    comp = apply_compaction(loaded.entries, loaded.boundaries)
    assert comp.boundary == "b2" and comp.preserved == []
    assert list(loaded.entries) == ["b2", "s2", "n2"]


def test_stale_segment_of_an_earlier_boundary_is_ignored(tmp_path):
    conv = after_boundary(before_compaction(), **SEGMENT)
    conv.boundary("b2", logical="n1")
    conv.summary_msg("s2")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    apply_compaction(loaded.entries, loaded.boundaries)
    assert list(loaded.entries) == ["b2", "s2"]


def test_sidechain_boundary_counts_only_in_a_subagent_file(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.boundary("b")["isSidechain"] = True
    conv.user("u2")
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    assert apply_compaction(loaded.entries, loaded.boundaries).boundary is None
    assert apply_compaction(loaded.entries, loaded.boundaries, sidechain_only=True).boundary == "b"
    assert list(loaded.entries) == ["b", "u2"]


def snipped() -> Conv:
    conv = Conv()
    conv.user("u1")
    conv.assistant("a1")
    conv.user("u2")
    conv.assistant("a2")
    conv.user("u3")
    conv.system("snip", "snip_boundary", snipMetadata={"removedUuids": ["a1", "u2", "a2", "never-written"]})
    return conv


def test_snip_removes_and_relinks_to_nearest_survivor(tmp_path):
    loaded = load_entries(snipped().write(tmp_path / "t.jsonl"))
    assert apply_snips(loaded.entries, loaded.snips) == {"a1", "u2", "a2"}
    assert list(loaded.entries) == ["u1", "u3", "snip"]
    assert parents(loaded) == {"u1": None, "u3": "u1", "snip": "u3"}


def test_snip_of_an_absent_uuid_leaves_the_pointer_for_the_walk_to_bridge(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.user("u2", parent="ghost")
    conv.system("snip", "snip_boundary", snipMetadata={"removedUuids": ["ghost"]})
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    assert apply_snips(loaded.entries, loaded.snips) == set()
    assert parents(loaded)["u2"] == "ghost"


def test_snip_cycle_among_removed_entries_ends_at_a_root(tmp_path):
    conv = Conv()
    conv.user("x", parent="y")
    conv.user("y", parent="x")
    conv.user("z", parent="y")
    conv.system("snip", "snip_boundary", snipMetadata={"removedUuids": ["x", "y"]})
    loaded = load_entries(conv.write(tmp_path / "t.jsonl"))
    apply_snips(loaded.entries, loaded.snips)
    assert parents(loaded)["z"] is None
