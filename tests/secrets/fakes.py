"""Valid-format fake secrets of every kind the detector knows, built at run time.

None is a real key: each is a provider's prefix and length around characters
drawn from a seeded generator, assembled here from parts (so no file of the
repository holds a string a secret scanner would flag), and embedded the ways
secrets reach a transcript: a tool's result, a JSON-escaped string, a ``.env``
dump, a URL, a line of code. The tests measure recall per kind on them.
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid as uuidlib
from collections.abc import Iterator
from typing import NamedTuple

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
B64 = string.ascii_letters + string.digits + "+/"


class Fake(NamedTuple):
    """One fake secret: the kind it must be found as, and its text."""

    kind: str
    value: str
    name: str
    """The variable name it is assigned to in the embeddings that assign it."""


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _jwt(rng: random.Random) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    sig = base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip("=")
    return ".".join([part({"alg": "HS256", "typ": "JWT"}), part({"sub": str(rng.randrange(10**9)), "iat": 1700000000}), sig])


def _pem(rng: random.Random, label: str) -> str:
    body = base64.b64encode(rng.randbytes(600)).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    dashes = "-" * 5
    return "\n".join([f"{dashes}BEGIN {label}{dashes}", *lines, f"{dashes}END {label}{dashes}"])


def fakes(seed: int) -> list[Fake]:
    """One fake of every supported kind (several formats of some), from ``seed``."""
    rng = random.Random(seed)
    hexd = string.digits + "abcdef"
    return [
        Fake("aws-access-key-id", "AK" + "IA" + _r(rng, string.ascii_uppercase + "234567", 16), "AWS_ACCESS_KEY_ID"),
        Fake("aws-access-key-id", "AS" + "IA" + _r(rng, string.ascii_uppercase + "234567", 16), "AWS_ACCESS_KEY_ID"),
        Fake("aws-secret-access-key", _r(rng, B64, 40), "AWS_SECRET_ACCESS_KEY"),
        Fake("github-token", "gh" + "p_" + _r(rng, ALNUM, 36), "GITHUB_TOKEN"),
        Fake("github-token", "gh" + "o_" + _r(rng, ALNUM, 36), "GH_OAUTH_TOKEN"),
        Fake("github-token", "gh" + "s_" + _r(rng, ALNUM, 36), "GH_APP_TOKEN"),
        Fake("github-token", "gh" + "u_" + _r(rng, ALNUM, 36), "GH_USER_TOKEN"),
        Fake("github-fine-grained-token", "github" + "_pat_" + _r(rng, ALNUM, 22) + "_" + _r(rng, ALNUM, 59), "GH_PAT"),
        Fake("gitlab-token", "gl" + "pat-" + _r(rng, ALNUM + "_-", 20), "GITLAB_TOKEN"),
        Fake("slack-token", "xo" + "xb-" + _r(rng, string.digits, 12) + "-" + _r(rng, string.digits, 13) + "-" + _r(rng, ALNUM, 24),
             "SLACK_BOT_TOKEN"),
        Fake("slack-token", "xo" + "xp-" + _r(rng, string.digits, 12) + "-" + _r(rng, string.digits, 12) + "-" + _r(rng, hexd, 32),
             "SLACK_USER_TOKEN"),
        Fake("slack-webhook", "https://hooks." + "slack.com/services/T" + _r(rng, UPPER, 8) + "/B" + _r(rng, UPPER, 10) + "/"
             + _r(rng, ALNUM, 24), "SLACK_WEBHOOK_URL"),
        Fake("stripe-secret-key", "sk" + "_live_" + _r(rng, ALNUM, 99), "STRIPE_SECRET_KEY"),
        Fake("stripe-secret-key", "sk" + "_test_" + _r(rng, ALNUM, 24), "STRIPE_TEST_KEY"),
        Fake("stripe-restricted-key", "rk" + "_live_" + _r(rng, ALNUM, 24), "STRIPE_RESTRICTED_KEY"),
        Fake("anthropic-api-key", "sk-" + "ant-api03-" + _r(rng, ALNUM + "_-", 93) + "AA", "ANTHROPIC_API_KEY"),
        Fake("openai-api-key", "sk-" + "proj-" + _r(rng, ALNUM + "_-", 74) + "T3Blbk" + "FJ" + _r(rng, ALNUM + "_-", 74),
             "OPENAI_API_KEY"),
        Fake("openai-api-key", "sk-" + _r(rng, ALNUM, 20) + "T3Blbk" + "FJ" + _r(rng, ALNUM, 20), "OPENAI_KEY"),
        Fake("google-api-key", "AI" + "za" + _r(rng, ALNUM + "_-", 35), "GOOGLE_API_KEY"),
        Fake("google-service-account-key", _pem(rng, "PRIVATE KEY"), "private_key"),
        Fake("private-key", _pem(rng, "RSA PRIVATE KEY"), "SSH_KEY"),
        Fake("private-key", _pem(rng, "OPENSSH PRIVATE KEY"), "DEPLOY_KEY"),
        Fake("private-key", _pem(rng, "EC PRIVATE KEY"), "EC_KEY"),
        Fake("azure-storage-key", base64.b64encode(rng.randbytes(64)).decode(), "AZURE_STORAGE_KEY"),
        Fake("azure-shared-access-key", base64.b64encode(rng.randbytes(32)).decode(), "SERVICEBUS_CONNECTION"),
        Fake("npm-token", str(uuidlib.UUID(int=rng.getrandbits(128))), "NPMRC"),
        Fake("twilio-api-key", "S" + "K" + _r(rng, hexd, 32), "TWILIO_API_KEY"),
        Fake("npm-token", "np" + "m_" + _r(rng, ALNUM, 36), "NPM_TOKEN"),
        Fake("pypi-token", "pyp" + "i-AgEIcHlwaS5vcmc" + _r(rng, ALNUM + "_-", 70), "PYPI_TOKEN"),
        Fake("jwt", _jwt(rng), "SESSION_JWT"),
        Fake("url-credentials", _r(rng, ALNUM, 18), "DATABASE_URL"),
        Fake("connection-string-password", _r(rng, ALNUM + "!#%", 16), "SQL_CONNECTION"),
        Fake("secret-assignment", _r(rng, ALNUM, 32), "DJANGO_SECRET_KEY"),
        Fake("secret-assignment", _r(rng, hexd, 40), "WEBHOOK_SIGNING_SECRET"),
        Fake("secret-assignment", _r(rng, ALNUM + "!@#", 20), "DB_PASSWORD"),
        Fake("secret-assignment", _r(rng, ALNUM, 32), "TWILIO_AUTH_TOKEN"),
    ]


KINDS = sorted({f.kind for f in fakes(0)})
"""Every kind the test set covers."""


def mention(fake: Fake) -> str:
    """How the secret is written where it is used: a URL holds a password, a
    connection string its ``Password=``, an Azure key its connection string,
    a service account key its JSON file; the others are the value itself."""
    if fake.kind == "url-credentials":
        return f"postgres://app_user:{fake.value}@db.internal.example:5432/app"
    if fake.kind == "connection-string-password":
        return f"Server=tcp:sql.example.net,1433;Database=app;User ID=app;Password={fake.value};Encrypt=true"
    if fake.kind == "azure-shared-access-key":
        return (f"Endpoint=sb://app.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
                f"SharedAccessKey={fake.value}")
    if fake.name == "NPMRC":
        return f"//registry.npmjs.org/:_authToken={fake.value}"
    if fake.kind == "azure-storage-key":
        return f"DefaultEndpointsProtocol=https;AccountName=appstore;AccountKey={fake.value};EndpointSuffix=core.windows.net"
    if fake.kind == "google-service-account-key":
        return json.dumps({"type": "service_account", "project_id": "demo-project", "private_key_id": "0" * 40,
                           "private_key": fake.value + "\n", "client_email": "svc@demo-project.iam.gserviceaccount.com"}, indent=2)
    return fake.value


def embeddings(fake: Fake) -> Iterator[tuple[str, str]]:
    """(how, text) for each way the secret appears in what an agent saw."""
    m = mention(fake)
    multiline = "\n" in m
    if not multiline:
        yield "env-file", f"# local settings\nDEBUG=true\n{fake.name}={m}\nPORT=8080\n"
        yield "export", f"$ export {fake.name}=\"{m}\"\n"
        yield "python", f"client = Client(\n    api_key=\"{m}\",\n    timeout=30,\n)\n"
        yield "json-config", json.dumps({"settings": {"name": "app", fake.name: m}}, indent=2)
        yield "yaml", f"service:\n  name: app\n  {fake.name.lower()}: {m}\n"
        yield "curl", f"curl -H 'Authorization: Bearer {m}' https://api.example.com/v1/items"
        yield "prose", f"I found the key {m} in your config; rotate it."
    else:
        yield "file", m
        yield "cat", f"$ cat creds\n{m}\n$ echo done"
    yield "assignment", f"{fake.name}={json.dumps(m) if multiline else m}"


def entry(text: str, how: str) -> dict:
    """A transcript entry carrying ``text`` the way Claude Code writes one: a
    tool's result (string or blocks), a prompt, a tool's input."""
    base = {"parentUuid": "3f0f6a8e-2c1b-4d5e-9f00-6b7c8d9e0a1b", "isSidechain": False, "userType": "external",
            "cwd": "/home/dev/app", "sessionId": "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", "version": "2.0.0",
            "uuid": "9a8b7c6d-5e4f-4301-8a2b-1c0d9e8f7a6b", "timestamp": "2026-01-01T00:00:00.000Z"}
    if how == "tool_result":
        return {**base, "type": "user", "message": {"role": "user", "content": [
            {"tool_use_id": "toolu_01ABCDEFGHIJKLMNOPQRSTUV", "type": "tool_result", "content": text}]},
            "toolUseResult": {"stdout": text, "stderr": "", "interrupted": False}}
    if how == "tool_result_blocks":
        return {**base, "type": "user", "message": {"role": "user", "content": [
            {"tool_use_id": "toolu_01ABCDEFGHIJKLMNOPQRSTUV", "type": "tool_result",
             "content": [{"type": "text", "text": text}]}]}}
    if how == "nested_json":  # a tool result that is itself JSON holding the text: escaped twice in the line
        return {**base, "type": "user", "message": {"role": "user", "content": [
            {"tool_use_id": "toolu_01ABCDEFGHIJKLMNOPQRSTUV", "type": "tool_result", "content": json.dumps({"output": text})}]}}
    if how == "tool_use":
        return {**base, "type": "assistant", "message": {"id": "msg_01XYZ", "role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_01ABCDEFGHIJKLMNOPQRSTUV", "name": "Bash", "input": {"command": text}}]}}
    return {**base, "type": "user", "message": {"role": "user", "content": text}}


CARRIERS = ("tool_result", "tool_result_blocks", "nested_json", "tool_use", "prompt")


CONTEXTUAL = {"aws-secret-access-key", "secret-assignment"}
"""Kinds a value is only known by from its name: found as the generic
``secret-assignment`` where the name it carries is another (``api_key=``)."""

ALSO = {"aws-secret-access-key": {"secret-assignment"}, "secret-assignment": set(),
        "google-service-account-key": {"private-key"}}
"""Another kind a fake may be found as where its embedding hides what it is:
an AWS secret under another name (``api_key=``), a service account's key in
JSON escaped three times (still a private key)."""

NAMELESS = {"prose", "curl"}
"""Embeddings that give a value no name: a contextual kind cannot be found there (entropy alone is no rule)."""


def chunks(value: str) -> list[str]:
    """The pieces of a secret that must not survive a redaction (each line of a PEM)."""
    return [line for line in value.splitlines() if len(line) >= 8]


def cases(seeds: int = 3) -> Iterator[tuple[Fake, str, str, str]]:
    """(fake, how, carrier, text): every fake of ``seeds`` seeds in every embedding
    that can name it, in every carrier: the generated set recall is measured on."""
    for seed in range(seeds):
        for fake in fakes(seed):
            for how, text in embeddings(fake):
                if fake.kind in CONTEXTUAL and how in NAMELESS:
                    continue
                for carrier in CARRIERS:
                    yield fake, how, carrier, text


def miss(fake: Fake, how: str, carrier: str, text: str) -> str | None:
    """Why ``redact_line`` fails on one case (not found as its kind, or a piece of
    it left in the redacted line), or None when it is recalled."""
    from sessiond.secrets import redact_line

    line = json.dumps(entry(text, carrier), separators=(",", ":")).encode()
    new, found = redact_line(line)
    kinds = {f.kind for f in found}
    expected = {fake.kind, *ALSO.get(fake.kind, ())}
    left = [c for c in chunks(fake.value) if c in new.decode()]
    if kinds & expected and not left:
        return None
    return f"{fake.kind} in {how} via {carrier}: found {sorted(kinds)}, left {len(left)} piece(s)"
