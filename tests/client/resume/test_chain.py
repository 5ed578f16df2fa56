"""SPEC 4 steps 4-6: leaf choice, the walk (cycles, dangling parents), parallel tools."""

from __future__ import annotations

from sessiond.client.resume.chain import Bridge, choose_leaf, has_tool_result, recover_parallel_tool_results, walk
from sessiond.client.resume.loader import load_entries
from tests.conftest import CORPUS

from .build import Conv, stamp, text, thinking, tool_use

PLANETFALL_07 = CORPUS / "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl"


def load(conv: Conv, tmp_path):
    return load_entries(conv.write(tmp_path / "t.jsonl"))


def chain_of(loaded, sidechain_only=False):
    e = loaded.entries
    leaf = choose_leaf(e, sidechain_only=sidechain_only)
    chain, bridges, _ = walk(e, leaf, sidechain_only=sidechain_only)
    chain = recover_parallel_tool_results(e, chain, sidechain_only=sidechain_only)
    return [x.uuid for x in chain], bridges


# --- step 4: leaf ---------------------------------------------------------------


def test_leaf_is_latest_by_timestamp_not_file_order(tmp_path):
    conv = Conv()
    conv.user("u1", ts=stamp(10))
    conv.user("u2", ts=stamp(30))
    conv.user("u3", parent="u1", ts=stamp(20))  # another branch, written later, older
    assert choose_leaf(load(conv, tmp_path).entries).uuid == "u2"


def test_leaf_ties_go_to_the_later_line(tmp_path):
    conv = Conv()
    conv.user("u1", ts=stamp(5))
    conv.user("u2", ts=stamp(5))
    assert choose_leaf(load(conv, tmp_path).entries).uuid == "u2"


def test_leaf_is_never_progress_unknown_or_sidechain(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.attachment("att")
    conv.progress("p1")
    conv.entry("future-type", "f1")
    conv.user("side", isSidechain=True)
    loaded = load(conv, tmp_path)
    assert choose_leaf(loaded.entries).uuid == "att"
    assert choose_leaf(loaded.entries, sidechain_only=True).uuid == "side"


def test_no_leaf_in_a_file_without_messages(tmp_path):
    conv = Conv()
    conv.meta("summary", summary="s")
    assert choose_leaf(load(conv, tmp_path).entries) is None
    assert walk({}, None) == ([], [], [])


# --- step 5: walk ---------------------------------------------------------------


def test_walk_passes_through_progress(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.assistant("a1")
    conv.progress("p1")
    conv.system("s1", "stop_hook_summary")
    assert chain_of(load(conv, tmp_path)) == (["u1", "a1", "p1", "s1"], [])


def test_walk_stops_on_a_cycle(tmp_path):
    conv = Conv()
    conv.user("x", parent="z")
    conv.user("y", parent="x")
    conv.user("z", parent="y")
    assert chain_of(load(conv, tmp_path)) == (["x", "y", "z"], [])


def test_dangling_parent_bridges_to_nearest_earlier_main_entry(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.assistant("a1")
    conv.user("side", isSidechain=True)  # never a bridge target in a main file
    conv.progress("p1", parent="lost-1")  # as in entireio__cli__29: progress after a lost line
    conv.system("s1", "stop_hook_summary")
    chain, bridges = chain_of(load(conv, tmp_path))
    assert chain == ["u1", "a1", "p1", "s1"]
    assert bridges == [Bridge(at="p1", missingParent="lost-1")]


def test_bridge_skips_entries_already_walked(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.user("late", parent="u2", ts=stamp(100))  # the leaf, written before its parent
    conv.user("u2", parent="gap")
    chain, bridges = chain_of(load(conv, tmp_path))
    assert chain == ["u1", "u2", "late"]
    assert bridges == [Bridge(at="u2", missingParent="gap")]


def test_dangling_parent_with_nothing_earlier_just_ends(tmp_path):
    conv = Conv()
    conv.user("u1", parent="lost")
    conv.assistant("a1")
    assert chain_of(load(conv, tmp_path)) == (["u1", "a1"], [])


def test_subagent_file_walks_sidechain_entries(tmp_path):
    conv = Conv()
    conv.user("u1", isSidechain=True, agentId="ag")
    conv.assistant("a1", isSidechain=True, agentId="ag", parent="gone")
    chain, bridges = chain_of(load(conv, tmp_path), sidechain_only=True)
    assert chain == ["u1", "a1"] and bridges == [Bridge(at="a1", missingParent="gone")]


# --- step 6: orphaned parallel tool results ---------------------------------------------


def test_spec_example_planetfall_07_lines_14_to_21(tmp_path):
    lines = PLANETFALL_07.read_bytes().split(b"\n")[13:21]  # b1c1 ... 9716
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    chain, bridges = chain_of(load_entries(p))
    assert [u[:4] for u in chain] == ["b1c1", "9022", "a3b6", "77c3", "1df3", "9716"]
    assert chain == [
        "b1c14461-2e3d-4f97-aba0-ff233e080605",  # text
        "902277dd-26f5-444b-adc0-489133d0fc14",  # tool_use A
        "a3b6b6cc-ec4b-4b13-88f2-dc21bd29794c",  # tool_use B
        "77c373ac-16d6-457a-a16e-65ff58b0ad44",  # result A: off the walked chain, recovered
        "1df3ae10-e6c1-4c99-ab4f-d8fd071bad7d",  # result B
        "971675e0-2a51-4e32-a507-ea5da030ee8c",  # attachment (the leaf)
    ]
    assert bridges == []  # b1c1's parent (line 13) is not in the slice and nothing precedes it


def parallel() -> Conv:
    """One response: text + tool_use A + tool_use B; results finish B first, then A."""
    conv = Conv()
    conv.user("u1")
    conv.assistant("txt", text("I'll run two"), mid="m1")
    conv.assistant("tA", tool_use("A"), mid="m1")
    conv.assistant("tB", tool_use("B"), mid="m1")
    conv.result("rB", "B", "tB")
    conv.result("rA", "A", "tA")
    conv.attachment("attA", parent="rA")
    conv.assistant("next", text("both done"), mid="m2", parent="rB")
    return conv


def test_parallel_results_are_spliced_after_the_group(tmp_path):
    chain, _ = chain_of(load(parallel(), tmp_path))
    # walked: u1 txt tA tB rB next; rA (and the attachment hanging off it) come back
    assert chain == ["u1", "txt", "tA", "tB", "rA", "attA", "rB", "next"]


def test_off_chain_siblings_of_the_group_come_back(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.assistant("t1", tool_use("A"), mid="m1")
    conv.assistant("t2", tool_use("B"), mid="m1")
    conv.result("r2", "B", "t2")
    conv.result("r1", "A", "t1")
    conv.assistant("t3", tool_use("C"), mid="m1", parent="r1")  # same response, chained after r1
    conv.result("r3", "C", "t3")
    chain, _ = chain_of(load(conv, tmp_path))
    assert chain == ["u1", "t1", "r1", "t3", "t2", "r2", "r3"]


def test_off_chain_user_text_is_not_a_tool_result(tmp_path):
    conv = parallel()
    conv.user("branch", "an edited prompt", parent="tA", ts=stamp(0))
    chain, _ = chain_of(load(conv, tmp_path))
    assert "branch" not in chain


def test_has_tool_result_probes_only_block_types(tmp_path):
    loaded = load(parallel(), tmp_path)
    assert has_tool_result(loaded.entries["rA"])
    assert not has_tool_result(loaded.entries["u1"])
    assert not has_tool_result(loaded.entries["txt"])


def test_recovery_without_message_ids_is_a_no_op(tmp_path):
    conv = Conv()
    conv.user("u1")
    conv.entry("assistant", "a1", message={"role": "assistant", "content": [thinking()]})
    loaded = load(conv, tmp_path)
    chain, _, _ = walk(loaded.entries, loaded.entries["a1"])
    assert recover_parallel_tool_results(loaded.entries, chain) == chain


def test_planetfall_07_second_parallel_group_comes_back_in_file_order():
    loaded = load_entries(PLANETFALL_07)
    chain, _ = chain_of(loaded)
    short = [u[:4] for u in chain]
    # lines 27-32: 8670 3d94 5d19 on the walk; a1f7 (tool_use) and ff17 (its result) off it
    i = short.index("5d19")
    assert short[i - 2 : i + 4] == ["8670", "3d94", "5d19", "a1f7", "ff17", "4d92"]
