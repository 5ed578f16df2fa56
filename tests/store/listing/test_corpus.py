"""The real corpus, laid out as a Claude Code store, lists as a person reading it expects.

Every expectation below was written by reading the transcript files (first real
user text, last metadata entries in the last 64 KB), not computed by the code
under test. Prompts are shown the way Claude Code shows them: newlines become
spaces and anything over 200 characters is cut with an ellipsis.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from sessiond.store.listing import ListStats, list_all_sessions, list_sessions
from sessiond.store.lite import read_lite

PLANETFALL = "/Users/goose-guest/Documents/work/planetfall-seed-signalkit"
DAAAIN = "/Users/dain/workspace/"

# sessionId: (title, firstPrompt, lastPrompt, customTitle, aiTitle, summary, gitBranch, cwd, createdAt);
# gitBranch is the last one of the last 64 KB (the branch the session ended on), else the head's first
EXPECTED = {
    "cb77ee11-31c9-4f9a-9dc3-3cf520a35d40": (
        "Review project checkpoints and level 1 status",
        "can you take a look around this project and look at the checkpoints to get an understanding of what's going on in this project and where we're at now esp level 1",
        "can you take a look around this project and look at the checkpoints to get an understanding of what's going on in this project and where we're at now esp level 1",
        None, "Review project checkpoints and level 1 status", None,
        "main", PLANETFALL, "2026-06-09T20:21:40.710Z"),
    "754b1f58-72f6-44bc-97ce-6c28037848e3": (
        "Resume previous coding session", "where did we leave off", "i think you can go for it",
        None, "Resume previous coding session", None, "main", PLANETFALL, "2026-06-10T17:16:59.306Z"),
    "d43002f0-2256-4a4e-8abe-ae97243b5906": (
        "Design level 2 checkpoint architecture",
        "lets pick back up and start thinking about what level 2 should look like..use entire checkpoints to learn about the repo and you can learn about entire cli here : Documents/work/cli",
        "for level 2 does it teach delegate review accept..i feel like it's more showing you can have multiple agents working in parallel..see what work they did..and then get a summary in the end",
        None, "Design level 2 checkpoint architecture", None, "main", PLANETFALL, "2026-06-09T20:33:44.973Z"),
    # Only slash commands and tool results: the command stands in for a prompt.
    "1af7fc5e-8455-4414-9ccd-011d40f70b2a": (
        "/init", "/init", None, None, None, None, None, "/path/to/Demo", "2025-09-03T00:47:19.293Z"),
    # The later user texts are inline (1.0.x) sidechain Task prompts; the picker
    # (and the SDK's list_sessions) take the first of them over the command.
    "5c0375b4-57a5-4f26-b12d-d022ee4e51b7": (
        'Examine the package.json file(s) in /path/to/Demo and any subdirectories. Focus on: 1. Dependencies (both dependencies and devDependencies) 2. Scripts available for development, build, lint, etc. 3. V…',
        'Examine the package.json file(s) in /path/to/Demo and any subdirectories. Focus on: 1. Dependencies (both dependencies and devDependencies) 2. Scripts available for development, build, lint, etc. 3. V…',
        None, None, None, None, "main", "/path/to/Demo", "2025-09-07T09:52:03.071Z"),
    # Its one summary sits in the head of a 774 KB file, outside the tail window.
    "fe5e1c67-53e7-4862-81ae-d0e013e3270b": (
        'Create React components for the TODO app in a components/ directory: 1. TodoItem component - displays individual todo with checkbox, text, delete button 2. TodoList component - renders list of TodoIte…',
        'Create React components for the TODO app in a components/ directory: 1. TodoItem component - displays individual todo with checkbox, text, delete button 2. TodoList component - renders list of TodoIte…',
        None, None, None, None, None, "/path/to/Demo", "2025-09-03T00:52:31.217Z"),
    "03eb5929-52b3-4b13-ada3-b93ae35806b8": (
        "Ok, so there's isn't much to see here, mostly one idea about how to organize the work Markdown documents generated during a Claude Code session.",
        "Ok, so there's isn't much to see here, mostly one idea about how to organize the work Markdown documents generated during a Claude Code session.",
        None, None, None, None, "HEAD", "/home/user/project", "2026-02-16T18:46:55.028Z"),
    "0d3a8e6f-290f-4105-a327-a2496e5e2a83": (
        "Hey Claude, I'd like your help with refactoring the timeline filtering so that we hide the group instead of all items that belong to a group as that would also collapse the row in the timeline. Find `…",
        "Hey Claude, I'd like your help with refactoring the timeline filtering so that we hide the group instead of all items that belong to a group as that would also collapse the row in the timeline. Find `…",
        None, None, None, None, None, DAAAIN + "claude-code-log", "2025-07-05T19:39:53.126Z"),
    "29ccd257-68b1-427f-ae5f-6524b7cb6f20": (
        "Use the Explore task in sub-agents with Haiku model to give me an overview of the code organization in the /workspace/claude-code-log project",
        "Use the Explore task in sub-agents with Haiku model to give me an overview of the code organization in the /workspace/claude-code-log project",
        None, None, None, None, None, "/src/experiments/claude_p", "2026-01-23T17:34:42.719Z"),
    # Small file: three summaries (the last wins) and a /model command.
    "3680252d-d4e3-4416-bddd-8f5b5b4fdb7f": (
        "HTML Ruby Tokenizer Conversion for Better Browser Support", "/model", None, None, None,
        "HTML Ruby Tokenizer Conversion for Better Browser Support",
        "main", DAAAIN + "danieldemmel.me-next", "2025-09-29T19:36:50.541Z"),
    "37f83ec9-f2ea-42a9-925e-0d5c105cb6e8": (
        "Hey Claude, please have a look at the git diff of claude_code_log/renderer.py and explain what does _get_enhanced_session_navigation and _generate_html_with_navigation do",
        "Hey Claude, please have a look at the git diff of claude_code_log/renderer.py and explain what does _get_enhanced_session_navigation and _generate_html_with_navigation do",
        None, None, None, None, None, DAAAIN + "claude-code-log", "2025-07-14T22:59:30.699Z"),
    # First text block is an <ide_opened_file> note; the prompt is the second block.
    "9e953218-585f-4692-89df-9e0747a31c68": (
        "I have @public/tokenizer.css, @public/tokenizer.html and @public/tokenizer.html running on my website, but the deep link in the website's repo is a bit awkward and not very inviting for other people t…",
        "I have @public/tokenizer.css, @public/tokenizer.html and @public/tokenizer.html running on my website, but the deep link in the website's repo is a bit awkward and not very inviting for other people t…",
        None, None, None, None, "main", DAAAIN + "danieldemmel.me-next", "2025-10-03T23:51:51.369Z"),
    # /context and /model (with their caveats and stdout) come first.
    "a7da6a22-facc-4fcd-8bab-f83c87862004": (
        "It's been a while - I see that I have pending changes, examine them, add and commit (i.e., including unknown files).",
        "It's been a while - I see that I have pending changes, examine them, add and commit (i.e., including unknown files).",
        None, None, None, None, "master", "/src/deep-manifest", "2025-11-29T15:16:58.435Z"),
    "cb2e607c-c758-415a-8b45-c49e4631906a": (
        "How can I make this possible to install as a library with `uv` so I can run from any directory?",
        "How can I make this possible to install as a library with `uv` so I can run from any directory?",
        None, None, None, None, "fix/comment-attribution-and-pagination",
        DAAAIN + "coderabbit-review-helper", "2025-11-17T11:23:23.498Z"),
    # Its tail's last-prompt entry names it before the first prompt does.
    "ef958aa1-0e93-49f0-bb71-150f63befcd1": (
        "Well, the subagents seem to be either stuck or done... can you check?",
        "OK, we're going to make a little experiment here. Pretend we have a list of tasks (say, first would be \"research the capacity for Claude Code to handle tasks with a plan\", second would be \"research ho…",
        "Well, the subagents seem to be either stuck or done... can you check?",
        None, None, None, "master", "-experiments/worktrees", "2026-04-18T13:10:51.686Z"),
    # Starts with a /clear command and its empty stdout.
    "f852ad25-1024-47da-964e-5eaae5bd6e6a": (
        "Can you please read @public/tokenizer.css, @public/tokenizer.js, @public/tokenizer.html and do a thorough code review with ultrathink and while keeping it simple and dependency free (except for transf…",
        "Can you please read @public/tokenizer.css, @public/tokenizer.js, @public/tokenizer.html and do a thorough code review with ultrathink and while keeping it simple and dependency free (except for transf…",
        None, None, None, None, "main", DAAAIN + "danieldemmel.me-next", "2025-09-29T17:53:31.625Z"),
    # Fifteen summaries, all in the head of a 460 KB file: none in the tail window.
    "fe869ecb-c176-478f-9734-7e4b8ef12cff": (
        "Hey Claude, can you please add a Github Action to run tests and linting? You can test it with `act`.",
        "Hey Claude, can you please add a Github Action to run tests and linting? You can test it with `act`.",
        None, None, None, None, None, DAAAIN + "claude-code-log", "2025-06-14T23:45:12.148Z"),
    "393e5f27-e608-4173-adcc-fcef1abcc750": (
        "/erk:plan-implement", "/erk:plan-implement", None, None, None, None,
        "plnd/http-dash-fetch-02-25-0823", "/Users/schrockn/.erk/repos/erk/worktrees/erk-slot-48",
        "2026-02-25T16:28:38.028Z"),
    # A slash command stands in for the prompt as typed (name and arguments), as the picker shows it.
    "41140470-f3f6-4945-bf7f-884c4a037ab0": (
        "/erk:plan-implement 8107", "/erk:plan-implement 8107", None, None, None, None,
        "plnd/O7911-migrate-plan-test-he-02-24-2211", "/home/runner/work/erk/erk", "2026-02-24T22:24:34.084Z"),
    "8425536d-8181-4524-9ea2-c2148a31dcb0": (
        "/erk:plan-implement 8491", "/erk:plan-implement 8491", None, None, None, None,
        "plnd/i-can-t-search-broadly-thr-02-28-1640", "/home/runner/work/erk/erk", "2026-02-28T21:43:20.344Z"),
    "dc2f576f-81dd-4f52-8708-126e301daf57": (
        "/erk:plan-implement", "/erk:plan-implement", None, None, None, None,
        "plnd/fix-duplicate-gt-submit-03-01-0813", "/Users/schrockn/.erk/repos/erk/worktrees/erk-slot-55",
        "2026-03-01T13:15:57.120Z"),
    # A command, an interrupt, /model, then the first typed prompt: "continue".
    "ef0fcd06-4c4d-4b87-9001-41d5f0f00a11": (
        "continue", "continue", None, None, None, None,
        "plnd/eliminate-pr-sync-dead-cod-02-26-0312", "/Users/schrockn/.erk/repos/erk/worktrees/erk-slot-51",
        "2026-02-26T11:14:56.011Z"),
    "a318ad73-17a2-4575-845d-8952a1e5958b": (
        "Can you read docs/architecture/shadow-branch-suffixes.md, I'd like to modify this approach: I don't think we need suffixes but instead we just use one branch, is there overlap in files we continue, if…",
        "Can you read docs/architecture/shadow-branch-suffixes.md, I'd like to modify this approach: I don't think we need suffixes but instead we just use one branch, is there overlap in files we continue, if…",
        None, None, None, None, "main", "/Users/soph/Work/entire/devenv/cli",
        "2026-01-31T07:15:51.765Z"),
    "5e231473-1e70-45c5-9c18-6510ac844c99": (
        "The comment on lines 212-213 is outdated. It still refers to the old function name SessionMetadataDirFromEntireID and mentions \"date prefix like 2026-01-12-abc123\". Based on the PR changes and the fun…",
        "The comment on lines 212-213 is outdated. It still refers to the old function name SessionMetadataDirFromEntireID and mentions \"date prefix like 2026-01-12-abc123\". Based on the PR changes and the fun…",
        None, None, None, None, "gtrrz-victor/alt-better-multi-session-flow",
        "/Users/gtrrz-victor/wks/test-cli/cli", "2026-02-03T04:51:04.843Z"),
    # Its summary (line 129 of 170) is more than 64 KB from the end.
    "130d7b7e-5801-4345-9bd6-f32fd9b8429b": (
        "We should add the agent name to any logging", "We should add the agent name to any logging",
        None, None, None, None, "soph/add-agent-to-logging", "/Users/soph/Work/entire/devenv/cli", "2026-01-20T14:57:02.445Z"),
    "53ea1606-cf60-417b-928a-068324ecc7b3": (
        "/github-pr-review", "/github-pr-review", None, None, None, None,
        "alex/rename-last-interaction-time", "/Users/alex/workspace/cli/.worktrees/2", "2026-02-08T05:29:05.461Z"),
    "0cd9edf7-459c-4900-af40-cf2c64dea525": (
        "debug: manual commit strategy isn't producing transcript line numbers and token usage - we believe PR#60 should have added this",
        "debug: manual commit strategy isn't producing transcript line numbers and token usage - we believe PR#60 should have added this",
        None, None, None, None, "gtrrz-victor/add-token-usage-manual-commit", "/Users/alex/workspace/cli",
        "2026-01-21T01:08:10.171Z"),
    "4606c3cc-379e-49e0-ae0e-8a393cf85de5": (
        'Update README.md to say "this is a test"', 'Update README.md to say "this is a test"',
        'Update README.md to say "this is a test"', None, None, None,
        "test", "/Users/ninawork/entire/external-agents", "2026-04-24T19:03:50.387Z"),
    # The user named it (custom-title); Claude Code clipped lastPrompt the same way.
    "130c7a5b-784a-46b4-a59d-fb6d5f519045": (
        "code-quality-dedup-review",
        "Implement the following plan:  # Simplify: Whole-Repo Code Review  ## Context Full-repo code quality review of the external-agents project (Kiro agent + E2E harness). The codebase is generally well-st…",
        "Implement the following plan:  # Simplify: Whole-Repo Code Review  ## Context Full-repo code quality review of the external-agents project (Kiro agent + E2E harness). The codebase is generally well-st…",
        "code-quality-dedup-review", None, None, "code-review",
        "/Users/alisha/Projects/wt/external-agents-code-review", "2026-03-19T17:27:15.277Z"),
    "b3edadab-bca0-4054-9b41-f7ffa6941260": (
        "Test file creation and agent thread handling",
        "Hello I want to have some test conversation with you create some file for me",
        None, None, None, "Test file creation and agent thread handling",
        "main", "/Users/user/project", "2025-12-20T08:57:00.189Z"),
}

NOT_SESSIONS = {
    "4e27c414-a885-46a0-b5c8-d58e1417377d",  # one summary line: metadata only
    "be89c3cd-bfbf-4c4f-a515-5af6e13249bf",  # three summary lines: metadata only
    "6d3dc917-03e0-448d-a7a5-d5e6c1a6dd27",  # file-history-snapshots only
    "a95fea4a-b88a-4e49-ac07-4cc323d8700c",  # file-history-snapshots only
    "b23cbd1d-a39d-4f31-98fd-98f8ff69b816",  # 0 bytes
    "00000000-0000-4000-8000-00000000a86d",  # a subagent transcript under a UUID name
}
JSON_KEYS = ["sessionId", "path", "title", "firstPrompt", "lastPrompt", "customTitle", "aiTitle",
             "summary", "tag", "createdAt", "modifiedAt", "size", "cwd", "gitBranch", "lastEntryAt", "messageCount", "live", "forkedFrom"]


@pytest.fixture(scope="module")
def listed(corpus_store):
    stats = ListStats()
    sessions = list_all_sessions(corpus_store.root, stats=stats)
    return sessions, stats


def test_every_session_is_listed_once_and_nothing_else(listed):
    sessions, stats = listed
    ids = [s.sessionId for s in sessions]
    assert sorted(ids) == sorted(EXPECTED)
    assert not NOT_SESSIONS & set(ids)
    assert stats.skipped == {"metadata-only": 4, "empty": 1, "sidechain": 1}
    assert stats.errors == 0


@pytest.mark.parametrize("sid", sorted(EXPECTED))
def test_titles_prompts_and_head_fields(listed, corpus_store, sid):
    by_id = {s.sessionId: s for s in listed[0]}
    s = by_id[sid]
    title, first, last, custom, ai, summary, branch, cwd, created = EXPECTED[sid]
    got = (s.title, s.firstPrompt, s.lastPrompt, s.customTitle, s.aiTitle, s.summary, s.gitBranch, s.cwd, s.createdAt)
    assert got == (title, first, last, custom, ai, summary, branch, cwd, created)
    assert s.tag is None
    assert s.path == str(corpus_store.sessions[sid])
    assert s.size == corpus_store.sessions[sid].stat().st_size


def _when(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_most_recently_active_first(listed, corpus_store):
    """By the newest entry's time, never later than the file's mtime (the
    builder sets mtimes unrelated to the entries: some older, some newer)."""
    ids = [s.sessionId for s in listed[0]]
    by_id = {s.sessionId: s for s in listed[0]}

    def active(sid: str) -> float:
        s = by_id[sid]
        mtime = corpus_store.mtimes[sid]
        return min(_when(s.lastEntryAt), mtime) if s.lastEntryAt else mtime

    assert sorted(ids) == sorted(EXPECTED)
    assert ids == sorted(EXPECTED, key=lambda sid: (-active(sid), -corpus_store.mtimes[sid]))
    assert ids != sorted(EXPECTED, key=lambda sid: -corpus_store.mtimes[sid])  # not the mtime order
    first = listed[0][0]
    assert first.modifiedAt.endswith("Z") and first.modifiedAt[:4] == "2025"


def test_json_object_has_exactly_the_list_json_keys(listed):
    obj = msgspec.to_builtins(listed[0][0])
    assert list(obj) == JSON_KEYS
    assert msgspec.json.decode(msgspec.json.encode(listed[0])) == [msgspec.to_builtins(s) for s in listed[0]]


def test_agent_files_are_never_candidates(corpus_store):
    for agent in corpus_store.agents:
        assert read_lite(agent).state == "sidechain"
        sessions = list_sessions(agent.parent)
        assert sessions == []


def test_one_project_dir(corpus_store):
    proj = corpus_store.sessions["b3edadab-bca0-4054-9b41-f7ffa6941260"].parent
    stats = ListStats()
    sessions = list_sessions(proj, limit=10, stats=stats)
    # The newest file there is the sidechain decoy, then the flat agent file is
    # not even a candidate; two metadata-only files are read and skipped.
    assert [s.sessionId for s in sessions] == ["b3edadab-bca0-4054-9b41-f7ffa6941260"]
    assert stats.files_seen == 4
    assert stats.skipped == {"sidechain": 1, "metadata-only": 2}


def test_pages_of_the_corpus_join_up(corpus_store, listed):
    everything = [s.sessionId for s in listed[0]]
    pages = []
    for offset in range(0, len(everything) + 7, 7):
        pages += [s.sessionId for s in list_all_sessions(corpus_store.root, limit=7, offset=offset)]
    assert pages == everything


def test_the_git_branch_is_the_one_claude_codes_lite_reader_takes(listed, corpus_store):
    """The branch a listing shows is what Claude Code's lite reader takes, as the
    Agent SDK ports it: the tail window's last ``gitBranch``, else the head's
    first (the branch the session ended on; the head's first was shown)."""
    from claude_agent_sdk._internal import sessions as sdk

    for s in listed[0]:
        lite = sdk._read_session_lite(Path(s.path))
        assert lite is not None
        expected = (sdk._extract_last_json_string_field(lite.tail, "gitBranch")
                    or sdk._extract_json_string_field(lite.head, "gitBranch") or None)
        assert s.gitBranch == expected, s.sessionId

