"""The detector, measured: recall on a generated set of fake secrets of every
kind embedded as transcripts carry them, precision on the real transcripts of
``tests/corpus`` and on the look-alikes code is full of, and the redaction of
a line: still valid JSON, the secret gone, the fields a resume needs untouched."""

from __future__ import annotations

import collections
import json
import re

import pytest

from sessiond.secrets import find, fingerprint, mask_line, mask_lines, redact_line, redact_text, scan_line
from tests.conftest import CORPUS
from tests.secrets.fakes import KINDS, cases, chunks, entry, fakes, miss


def test_every_kind_is_recalled_in_every_embedding():
    """Recall 100% per kind: every fake is found, as its kind, and redacted out of
    the line, whatever carries it (a tool result, its blocks, JSON escaped twice,
    a tool call's input, a prompt)."""
    total: collections.Counter[str] = collections.Counter()
    missed: list[str] = []
    for fake, how, carrier, text in cases():
        total[fake.kind] += 1
        why = miss(fake, how, carrier, text)
        if why:
            missed.append(why)
    assert set(total) == set(KINDS)
    assert missed == []


def test_every_rule_has_fakes():
    """The generated set covers every kind the rules can report: a rule added
    without its fakes fails here, before its recall is unmeasured."""
    from sessiond.secrets.rules import RULES

    assert {r.kind for r in RULES} == set(KINDS)


def test_a_redacted_line_stays_valid_json_and_keeps_what_a_resume_needs():
    for fake, _how, carrier, text in cases():
        original = entry(text, carrier)
        original["message"]["content"] = [{"type": "thinking", "thinking": "checking the key",
                                           "signature": "Eu" + fake.value.replace("\n", "")[:60] + "=="},
                                          *(original["message"]["content"] if isinstance(original["message"]["content"], list)
                                            else [{"type": "text", "text": original["message"]["content"]}])]
        line = json.dumps(original, separators=(",", ":"), ensure_ascii=False).encode()
        new, found = redact_line(line)
        assert found
        after = json.loads(new)
        assert after["message"]["content"][0]["signature"] == original["message"]["content"][0]["signature"]
        for key in ("uuid", "parentUuid", "sessionId", "timestamp", "type"):
            assert after[key] == original[key]
        assert re.search(rb"\[REDACTED:[a-z0-9-]+:[0-9a-f]{8}\]", new)


def test_masking_keeps_every_line_its_length_and_loses_every_secret():
    """What the mirror sends (``mask_line``): the same recall as redaction, each
    line the same number of bytes (its offsets in the file hold), valid JSON,
    the ids and signatures as written."""
    missed = []
    for fake, how, carrier, text in cases():
        original = entry(text, carrier)
        line = json.dumps(original, separators=(",", ":")).encode()
        masked = mask_line(line)
        after = json.loads(masked)
        left = [c for c in chunks(fake.value) if c in masked.decode() or json.dumps(c)[1:-1] in masked.decode()]
        if len(masked) != len(line) or left or after["uuid"] != original["uuid"]:
            missed.append(f"{fake.kind} in {how} via {carrier}")
    assert missed == []
    for path in sorted(CORPUS.glob("*.jsonl")):  # nothing in the real transcripts: every line as it was
        data = path.read_bytes()
        assert mask_lines(data) == data


def test_a_line_without_secrets_is_returned_as_the_same_bytes():
    for path in sorted(CORPUS.glob("*.jsonl"))[:10]:
        for line in path.read_bytes().splitlines():
            if line:
                assert redact_line(line)[0] is line or redact_line(line)[0] == line


def test_two_mentions_of_one_secret_share_a_fingerprint_and_two_secrets_differ():
    a, b = fakes(1)[3].value, fakes(2)[3].value  # two GitHub tokens
    found = find(f"first {a}, then {b}, and {a} again")
    assert [f.kind for f in found] == ["github-token"] * 3
    assert found[0].fingerprint == found[2].fingerprint == fingerprint(a) != found[1].fingerprint
    assert redact_text(f"token {a}") == f"token [REDACTED:github-token:{fingerprint(a)}]"


LOOKALIKES = [
    "const apiKeyName = getApiKeyFromEnvironment(config);",
    "private_key = load_private_key(path)",
    "password = os.environ['DB_PASSWORD']",
    "API_KEY=${API_KEY}",
    "OPENAI_API_KEY=your-openai-api-key-here",
    "SECRET_KEY=changeme",
    "token: process.env.GITHUB_TOKEN",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "session 0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0 resumed",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "handleSecretKeyRotationRequest useAuthTokenRefreshCallback getPasswordStrengthMeter",
    "cacheKey = 'user_profile_settings_v2'",
    "primaryKey: 'organizationMembershipId'",
    "postgres://user:password@localhost:5432/db",
    "mysql://root:${MYSQL_PASSWORD}@db/app",
    "https://github.com/anthropics/claude-code/blob/main/README.md",
    "the task-runner uses sk-learn style; desk-top",
    "SKIP_TESTS_FOR_PACKAGES_ABCDEF0123456789ABCDEF01",
    "git@github.com:owner/repo.git",
    "export const TOKEN_EXPIRY_SECONDS = 3600;",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----",
]


@pytest.mark.parametrize("text", LOOKALIKES)
def test_code_hashes_ids_and_placeholders_are_not_secrets(text):
    assert find(text) == []


def test_the_real_transcripts_hold_no_false_positive():
    """Every finding in the corpus is one of those looked at and listed here
    (none: the corpus's own keys were redacted by their publishers, and what
    looks like one there is a hash, an id, base64 or code)."""
    found = []
    lines = 0
    for path in sorted(CORPUS.glob("*.jsonl")):
        for n, line in enumerate(path.read_bytes().splitlines(), 1):
            if line:
                lines += 1
                found += [(path.name, n, f.kind) for f in scan_line(line)]
    assert lines > 5000
    assert found == []


PROBES = ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "gh_", "github_pat_", "github_pa_", "glpat-", "gldt-", "glrt-", "glptt-",
          "glcbt-", "gloas-", "glsoat-", "glft-", "glimt-", "glagent-", "glx-", "xoxb-", "xoxa-", "xoxz-", "xapp-", "xap-",
          "sk_live_", "rk_test_", "k_tst_", "sk-", "s-k", "npm_", "np_", "pypi-AgE", "pypi-Age", "eyJ", "eyj", "-----BEGIN",
          "----BEGIN", "AKIA", "ASIA", "ABIA", "ACCA", "A3T", "AIza", "AKIa", "SK" + "0" * 32, "SK" + "0" * 31,
          "hooks.slack.com", "hooks.slack.co", "://a:b@", "://a@", "key=", "KEY :", "token:", "tok en:", "oken:",
          "secret =", "password:", "passwd=", "pasword=", "pwd=>", "credential=", "credentials:", "credentias:", "auth=",
          "key\\\":", "key     =", "key", "token", "=", ":"]


@pytest.mark.parametrize("probe", PROBES)
def test_the_prefilter_answers_as_its_anchors_do(probe):
    """``maybe_secret`` (its regrouped gates) says yes exactly where one of
    ``ANCHORS``, or of ``NAMES`` in lowercase, matches: a gate that misses an
    anchor would let a secret through unread, one that matches more would
    send ordinary text to the rules."""
    from sessiond.secrets.rules import ANCHORS, NAMES, maybe_secret

    for text in (probe, f"x {probe} y", f"{probe}\n", f"\"{probe}\"", probe.upper(), probe.lower()):
        data = text.encode()
        expected = any(a.search(data) for a in ANCHORS) or any(n.search(data.lower()) for n in NAMES)
        assert maybe_secret(data) == expected, text
        assert maybe_secret(memoryview(data)) == expected, text


def test_the_prefilter_answers_as_its_anchors_do_on_the_corpus_and_the_fakes():
    from sessiond.secrets.rules import ANCHORS, NAMES, maybe_secret

    pieces = [json.dumps(entry(text, carrier)).encode() for _fake, _how, carrier, text in cases(1)]
    for path in sorted(CORPUS.glob("*.jsonl")):
        data = path.read_bytes()
        pieces += [data[i:i + 300] for i in range(0, len(data), 250)]
    hits = 0
    for data in pieces:
        expected = any(a.search(data) for a in ANCHORS) or any(n.search(data.lower()) for n in NAMES)
        assert maybe_secret(data) == expected, data
        hits += expected
    assert 0 < hits < len(pieces)


@pytest.mark.parametrize("key", ["apiKey", "API_KEY", "api-key", "githubToken", "client_secret", "DB_PASSWORD", "passwd",
                                 "pwd", "key", "Key", "private_key", "secret\n", "\u212aey", "\u017fecret", "keys",
                                 "keyboard", "monkey", "tokens", "secretary", "password_hint", "command", "file_path",
                                 "", "_token", "x-api-key"])
def test_a_secret_name_is_what_the_secret_key_pattern_says(key):
    from sessiond.secrets.rules import SECRET_KEY, secret_name

    assert secret_name(key) == (SECRET_KEY.search(key) is not None)
