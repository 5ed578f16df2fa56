"""The rules of ``sessiond.store.spend`` against figures this test computes
itself from the real corpus files with ``json.loads`` (the dedup of one
response written as several lines, subagent files in their session, a day
boundary in the user's time zone, the 5-hour blocks), and the prices: a
``costUSD`` is used as it is, an unknown model is named, never priced as 0
silently, ``--prices`` replaces the table."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sessiond.store.spend import charges, prices, reports
from tests.spend.tree import CORPUS, build

NEW_YORK = ZoneInfo("America/New_York")


def responses(path: Path) -> dict[tuple[str, str | None], dict]:
    """Independently: the distinct (message.id, requestId) of a file's
    assistant lines with usage, each with the usage of its largest copy."""
    found: dict[tuple[str, str | None], dict] = {}
    for line in path.read_bytes().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("usage"), dict) or not message.get("id"):
            continue
        usage = message["usage"]
        key = (message["id"], entry.get("requestId"))
        tokens = (usage.get("input_tokens", 0), usage.get("output_tokens", 0),
                  usage.get("cache_creation_input_tokens", 0), usage.get("cache_read_input_tokens", 0))
        if key not in found or sum(tokens) > sum(found[key]["tokens"]):
            found[key] = {"tokens": tokens, "ts": entry["timestamp"], "model": message.get("model")}
    return found


def sums(found: dict) -> tuple[int, int, int, int]:
    return tuple(sum(r["tokens"][i] for r in found.values()) for i in range(4))  # type: ignore[return-value]


def row_tokens(row) -> tuple[int, int, int, int]:
    return row.input_tokens, row.output_tokens, row.cache_creation_tokens, row.cache_read_tokens


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("claude"))


@pytest.fixture(scope="module")
def pricer() -> reports.Pricer:
    return reports.Pricer(prices.Prices.load())


def test_each_response_counted_once_though_written_as_several_lines():
    path = CORPUS / "blackgirlbytes__planetfall-seed-signalkit__84-da75cf4015-2-full.jsonl"
    found = responses(path)
    lines = sum(1 for line in path.read_bytes().splitlines() if b'"usage":{' in line)
    assert lines > 2 * len(found) > 0  # the file repeats each response on several lines
    ledger = charges.Ledger()
    ledger.extend(charges.charges_of_file(path, ("p", path.name)))
    assert len(ledger.charges) == len(found)
    assert (sum(c.input for c in ledger.charges), sum(c.output for c in ledger.charges),
            sum(c.cache_creation for c in ledger.charges), sum(c.cache_read for c in ledger.charges)) == sums(found)


def test_a_session_counts_its_subagents(tree, pricer):
    main = CORPUS / "kfischer-okarin__scripts-and-tools__b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl"
    agent = CORPUS / "kfischer-okarin__scripts-and-tools__agent-a434715.jsonl"
    found = {**responses(main), **responses(agent)}
    assert responses(agent)  # the subagent did spend
    rows = reports.sessions(charges.load(tree).charges, pricer, NEW_YORK)
    row = next(r for r in rows if r.key == "b3edadab-bca0-4054-9b41-f7ffa6941260")
    assert row.project == "-kfischer-okarin-scripts-and-tools"
    assert row_tokens(row) == sums(found)


def test_days_are_the_users(tree, pricer):
    """A file whose responses fall between 00:00 and 04:00 UTC: in New York they
    belong to the day before."""
    path = CORPUS / "entireio__cli__d5-99f72ee73a-0-full.jsonl"
    found = responses(path)
    by_day: dict[str, dict] = {}
    by_utc_day: dict[str, dict] = {}
    for key, r in found.items():
        moment = datetime.fromisoformat(r["ts"])
        by_day.setdefault(moment.astimezone(NEW_YORK).date().isoformat(), {})[key] = r
        by_utc_day.setdefault(moment.astimezone(UTC).date().isoformat(), {})[key] = r
    assert set(by_day) != set(by_utc_day)  # the boundary is crossed
    keep = lambda rel: rel[-1] == "d5-99f72ee73a-0-full.jsonl"  # noqa: E731
    ledger = charges.load(tree, progress=True, keep=keep)
    for tz, expected in ((NEW_YORK, by_day), (UTC, by_utc_day)):
        rows = reports.periods(ledger.charges, pricer, tz, month=False)
        assert {r.key: row_tokens(r) for r in rows} == {day: sums(f) for day, f in expected.items()}


def test_blocks_of_five_hours(tree, pricer):
    """Blocks recomputed here from the responses' times: each starts at the UTC
    hour of its first response and holds the responses within 5 hours of that
    start and of the previous response."""
    ledger = charges.load(tree)
    moments = sorted(c.ts for c in ledger.charges)
    expected: list[tuple[int, int]] = []  # (start, count)
    last = None
    for ms in moments:
        if expected and ms - expected[-1][0] <= 5 * 3_600_000 and ms - last <= 5 * 3_600_000:
            expected[-1] = (expected[-1][0], expected[-1][1] + 1)
        else:
            expected.append((ms - ms % 3_600_000, 1))
        last = ms
    got = reports.blocks(ledger.charges, pricer, NEW_YORK, now_ms=moments[-1] + 60_000)
    real = [b for b in got if not b.is_gap]
    assert [(b.start_time, b.entries) for b in real] == [(reports.iso_ms(s), n) for s, n in expected]
    assert sum(b.total_tokens for b in real) == sum(c.total for c in ledger.charges)
    active = real[-1]  # a minute after its last response: the active one, with a rate and a projection
    assert active.is_active and not any(b.is_active for b in real[:-1])
    assert active.burn_rate is not None and active.projection is not None
    assert active.projection.total_tokens >= active.total_tokens
    assert any(b.is_gap for b in got)


def write(path: Path, entries: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries))


def entry(n: int, model: str, cost: float | None = None, **usage) -> dict:
    e = {"type": "assistant", "timestamp": f"2025-03-0{n}T12:00:00.000Z", "sessionId": "s", "requestId": f"r{n}",
         "version": "2.0.1", "message": {"id": f"m{n}", "model": model, "usage": {"input_tokens": 0, "output_tokens": 0, **usage}}}
    if cost is not None:
        e["costUSD"] = cost
    return e


def test_prices_cost_usd_unknown_models_and_another_table(tmp_path):
    projects = tmp_path / "projects"
    write(projects / "p" / "s.jsonl", [
        entry(1, "claude-sonnet-4-5-20250929", input_tokens=1000, output_tokens=100),
        entry(2, "claude-sonnet-4-5-20250929", cost=1.25, input_tokens=1000),
        entry(3, "claude-unheard-of-9", input_tokens=500),
        entry(4, "claude-sonnet-4-5-20250929", input_tokens=300_000),
    ])
    ledger = charges.load(projects)
    rows = {r.key: r for r in reports.periods(ledger.charges, reports.Pricer(prices.Prices.load()), UTC, month=False)}
    assert rows["2025-03-01"].cost == pytest.approx(1000 * 3e-6 + 100 * 15e-6)
    assert rows["2025-03-02"].cost == 1.25  # the entry's own cost
    assert rows["2025-03-03"].unpriced == ["claude-unheard-of-9"] and rows["2025-03-03"].cost == 0
    assert rows["2025-03-03"].input_tokens == 500  # its tokens still count
    assert rows["2025-03-04"].cost == pytest.approx(200_000 * 3e-6 + 100_000 * 6e-6)  # the tier past 200k
    other = tmp_path / "prices.json"
    other.write_text(json.dumps({"source": "test", "date": "2026-01-01", "models": {
        "claude-unheard-of-9": {"input": 1e-3, "output": 0, "cacheCreation": 0, "cacheRead": 0}}}))
    rows = {r.key: r for r in reports.periods(ledger.charges, reports.Pricer(prices.Prices.load(other)), UTC, month=False)}
    assert rows["2025-03-03"].cost == pytest.approx(0.5) and rows["2025-03-03"].unpriced == []
    assert rows["2025-03-01"].unpriced == ["claude-sonnet-4-5-20250929"]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(prices.BadPrices):
        prices.Prices.load(tmp_path / "bad.json")


def test_lines_ccusage_skips(tmp_path):
    """A null id, a version that is not N.N.N, an empty request id, a bad
    timestamp: none counts; the synthetic model counts under no model."""
    good = entry(1, "claude-opus-4-6", input_tokens=7)
    null_id = entry(2, "claude-opus-4-6", input_tokens=11)
    null_id["message"]["id"] = None
    bad_version = {**entry(3, "claude-opus-4-6", input_tokens=13), "version": "beta"}
    empty_request = {**entry(4, "claude-opus-4-6", input_tokens=17), "requestId": ""}
    bad_time = {**entry(5, "claude-opus-4-6", input_tokens=19), "timestamp": "2025-03-05 12:00"}
    synthetic = entry(6, "<synthetic>")
    write(tmp_path / "projects" / "p" / "s.jsonl", [good, null_id, bad_version, empty_request, bad_time, synthetic])
    ledger = charges.load(tmp_path / "projects")
    assert [(c.input, c.model) for c in ledger.charges] == [(7, "claude-opus-4-6"), (0, None)]


def test_the_edges_the_sums_keep_exact(tmp_path, pricer):
    """Reports are made of sums per quarter hour (``cells``): a response at the
    very hour a block ends is in it, one a millisecond later starts the next;
    a day that starts at a quarter hour (Kathmandu, +05:45) splits two responses
    a millisecond apart. Expected figures computed here, response by response."""
    def at(n: int, ts: str, tokens: int) -> dict:
        e = entry(n, "claude-opus-4-6", input_tokens=tokens)
        e["timestamp"] = ts
        return e

    write(tmp_path / "projects" / "p" / "s.jsonl", [
        at(1, "2025-03-01T10:10:00.000Z", 1),
        at(2, "2025-03-01T15:00:00.000Z", 2),  # the block from 10:00 ends here: in it
        at(3, "2025-03-01T15:00:00.001Z", 4),  # past it: a new block, from 15:00
        at(4, "2025-03-01T18:14:59.999Z", 8),  # 23:59:59.999 in Kathmandu
        at(5, "2025-03-01T18:15:00.000Z", 16),  # 00:00 on the 2nd there
    ])
    ledger = charges.load(tmp_path / "projects")
    got = reports.blocks(ledger.charges, pricer, UTC, now_ms=0)
    assert [(b.start_time, b.entries, b.input_tokens) for b in got if not b.is_gap] == [
        ("2025-03-01T10:00:00.000Z", 2, 3), ("2025-03-01T15:00:00.000Z", 3, 28)]
    rows = reports.periods(ledger.charges, pricer, ZoneInfo("Asia/Kathmandu"), month=False)
    assert [(r.key, r.input_tokens) for r in rows] == [("2025-03-01", 15), ("2025-03-02", 16)]
    session = reports.sessions(ledger.charges, pricer, UTC)[0]
    assert (session.first_activity, session.last_activity) == ("2025-03-01T10:10:00.000Z", "2025-03-01T18:15:00.000Z")


READ_BY_WORKERS = """
import sys
from pathlib import Path
from sessiond.store.spend import charges
charges.PARALLEL_FROM = 0
charges.PART = 1 << 20  # many runs: the corpus is some 20 MB
tree, daily = Path(sys.argv[1]), sys.argv[2] == "daily"
keep = lambda rel: not rel[-1].startswith("agent-a")
told = []
one = charges.load(tree, progress=daily, keep=keep)
two = charges.load(tree, progress=daily, keep=keep, workers=2, read=lambda done, total: told.append((done, total)))
assert len(one.charges) > 1000, len(one.charges)
assert two.charges == one.charges
assert len(told) > 5 and told == sorted(told) and told[-1][0] == told[-1][1], told
print(len(told), "runs", len(two.charges), "responses")
"""


@pytest.mark.parametrize("daily", [False, True])
def test_read_by_worker_processes_the_ledger_is_the_same(tree, daily):
    """``load(workers=2)``: the files read in forked processes, a run of files
    each, counted here in path order: the same responses in the same order as
    one reader counts them (a response copied across files merged the same
    way), and the bytes read told as they come. In a process of its own: the
    workers are forked only from a single-threaded one (a test runner's worker
    has threads)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", READ_BY_WORKERS, str(tree), "daily" if daily else "other"],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert b"runs" in done.stdout


def test_a_timestamp_of_a_known_hour_is_read_as_fromisoformat_reads_it():
    """``parse_timestamp`` remembers each hour's start for the usual shape
    (``...T12:34:56.789Z``): once the hour is known, what follows it is still
    checked as ``datetime.fromisoformat`` checks it."""
    from datetime import datetime

    def expected(value: str) -> int | None:
        if value[19] != ".":  # ccusage's shapes: milliseconds after a dot
            return None
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            return None
        return None if dt.tzinfo is None else (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)

    assert charges.parse_timestamp("2031-05-17T09:00:00.000Z") == expected("2031-05-17T09:00:00.000Z")  # the hour known
    for rest in ("34:56.789Z", "59:59.999Z", "00:00.001Z", "60:00.000Z", "00:60.000Z", "3\u0664:56.789Z", "34:56.7a9Z",
                 "34-56.789Z", "34:56,789Z", "34:5 .789Z", "34:+5.789Z", "34:56.789z", "34:56.7890"):
        value = "2031-05-17T09:" + rest
        assert charges.parse_timestamp(value) == expected(value), value
