"""Write ``expected/<name>.json`` for the fixture files (NOT run by pytest).

The expected results were computed once with this script and then checked by hand
against the files (see each entry's ``why``). Re-running it after a change overwrites
them: only do that for a change meant to alter results, and review the diff line by line.

    .venv/bin/python -m tests.client.resume.make_expected
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec

from sessiond.client.resume.pipeline import load_transcript
from tests.conftest import CORPUS

HERE = Path(__file__).parent
DATA = HERE / "data"
EXPECTED = HERE / "expected"
SUMMARISE_OVER = 200

FIXTURES = {
    "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl": "parallel tools: two message.id groups with a result off the walked branch (SPEC 4 step 6 example); ends on /fast local command after a finished turn",
    "blackgirlbytes__planetfall-seed-signalkit__84-da75cf4015-2-full.jsonl": "real compaction with preservedMessages AND preservedSegment (lines 398-402 kept, relinked after the summary at 409); consistency corrected for compacted history",
    "dagster-io__erk__41140470-f3f6-4945-bf7f-884c4a037ab0.jsonl": "double compaction (boundaries at lines 217 and 531): chain starts at the second",
    "entireio__cli__29-38d5d1ba71-0-full.jsonl": "two dangling parents (progress lines 149, 155 after lost assistant lines) bridged to the thinking entries before them",
    "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl": "1.0.98 inline sidechains (405 isSidechain entries, no agentId) left out of the main chain",
    "kfischer-okarin__scripts-and-tools__agent-a434715.jsonl": "subagent file: every entry a sidechain, resumed with the filter off",
    "daaain__claude-code-log__agent-ea02459f.jsonl": "subagent file with parallel tools",
    "daaain__claude-code-log__b23cbd1d-a39d-4f31-98fd-98f8ff69b816.jsonl": "empty file",
    "kfischer-okarin__scripts-and-tools__be89c3cd-bfbf-4c4f-a515-5af6e13249bf.jsonl": "summary-only file: no chain, latest summary as metadata",
    "daaain__claude-code-log__4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl": "one summary line",
    "kfischer-okarin__scripts-and-tools__6d3dc917-03e0-448d-a7a5-d5e6c1a6dd27.jsonl": "file-history-snapshot only",
    "daaain__claude-code-log__ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl": "parallel Agent calls whose results carry attachments: recovered with them, turn_duration delta 0; ends on /exit",
    "daaain__claude-code-log__03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl": "rewind branch at line 38 (the latest branch wins), whitespace-only assistant entries dropped",
    "entireio__cli__37-995ebed6e4-2-full.jsonl": "one unparseable line (128) skipped and counted",
    "dagster-io__erk__8425536d-8181-4524-9ea2-c2148a31dcb0.jsonl": "ends on a tool_result with an unanswered parallel tool_use: interrupted_turn + synthetic continuation",
    "preserved-segment.jsonl": "synthetic: compaction with preservedSegment only; anchor's other child relinked to the tail; parallel tools after it",
    "snip-and-damage.jsonl": "synthetic: snip removal, a torn message bridged over, a glued line and a torn tail counted",
}


def source(name: str) -> Path:
    return DATA / name if (DATA / name).exists() else CORPUS / name


def line_numbers(path: Path) -> dict[str, int]:
    out = {}
    for n, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        try:
            uuid = msgspec.json.decode(raw).get("uuid")
        except (msgspec.DecodeError, AttributeError):
            continue
        if isinstance(uuid, str):
            out[uuid] = n
    return out


def chain_fields(chain: list[str]) -> dict:
    if len(chain) <= SUMMARISE_OVER:
        return {"chain": chain}
    return {
        "chainLength": len(chain),
        "chainHead": chain[:16],
        "chainTail": chain[-4:],
        "chainSha256": hashlib.sha256("\n".join(chain).encode()).hexdigest(),
    }


def expected(name: str) -> dict:
    path = source(name)
    r = load_transcript(path)
    lines = line_numbers(path)
    return {
        "file": name,
        "why": FIXTURES[name],
        "sessionId": r.sessionId,
        **chain_fields(r.chain),
        "chainLines": [lines.get(u) for u in r.chain],
        "messages": len(r.messages),
        "syntheticLast": bool(r.messages and r.messages[-1].get("synthetic")),
        "interruption": r.interruption,
        "consistencyDelta": r.consistencyDelta,
        "bridges": msgspec.to_builtins(r.bridges),
        "skippedLines": r.skippedLines,
        "metadata": r.metadata,
    }


def main() -> None:
    EXPECTED.mkdir(exist_ok=True)
    for name in FIXTURES:
        target = EXPECTED / (name.removesuffix(".jsonl") + ".json")
        target.write_text(json.dumps(expected(name), indent=1, ensure_ascii=False) + "\n")
        print(target.name)


if __name__ == "__main__":
    main()
