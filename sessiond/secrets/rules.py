"""The rule set: which text is a secret, one high-specificity format per rule.

Every rule is a known format (a provider's key prefix and length, a PEM
private key block, a JWT, credentials in a URL or a connection string) or a
secret-named assignment whose value also passes an entropy gate. Entropy alone
is never a rule: random-looking text is everywhere in code (hashes, uuids,
base64, camelCase), and a format is what tells a key from a hash.

Each rule names the group that holds the secret itself (what is redacted and
fingerprinted: ``AccountKey=`` stays, its value goes). Rules are tried in
order; where two match the same text, the earlier (more specific) one wins.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import NamedTuple


class Rule(NamedTuple):
    """One format: its kind (the name a redaction shows), the compiled pattern,
    the group holding the secret (0: the whole match), and the checks that make
    it cheap and specific: ``bounded`` (no letter, digit or ``_`` just before
    the match: a prefix inside a longer word is not one), ``lowered`` (the
    pattern is run on the lowercased text, so it starts with a literal and the
    engine skips to it; the value is taken from the original text), ``context``
    (the lowercased text must also hold this somewhere: a connection string's
    other keys), ``named`` and ``gate`` (what a matched value must pass: placeholders and
    identifiers fail it)."""

    kind: str
    pattern: re.Pattern[str]
    group: int = 0
    gate: Callable[[str], bool] | None = None
    bounded: bool = False
    lowered: bool = False
    context: re.Pattern[str] | None = None
    named: bool = False
    """The name the match starts with must be a compound (``api_key``,
    ``db-password``) or upper case (``PASSWORD=``): a bare lower-case ``key:``
    names a cache entry or a dict's field far more often than a secret."""


_END = r"(?![A-Za-z0-9_])"
"""No letter, digit or underscore just after: a key is not the head of a longer word."""

PLACEHOLDER = re.compile(
    r"(?i)x{4,}|\*{3,}|\.{3}|<[^>]*>|\$\{|\{\{|%\(|^\$|^%|^\{|^\[|your[_-]?|example|changeme|placeholder|dummy|"
    r"redacted|secret[_-]?here|here$|^(?:pass(?:word)?|secret|token|test|none|null|true|false|undefined)$")
"""Values that are a template or a stand-in, not a credential."""


def entropy(value: str) -> float:
    """Shannon entropy of ``value``'s characters, in bits per character."""
    n = len(value)
    if not n:
        return 0.0
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    return -sum(k / n * math.log2(k / n) for k in counts.values())


_CODE_LIKE = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[\w$]+)*(?:\(.*)?$|^[a-z]+(?:[A-Z][a-z]+)+\d*$|^[a-z0-9]+(?:[_-][a-z0-9]+)+$|/")


_SEGMENT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[A-Z]")


def wordy(value: str) -> bool:
    """Whether ``value``'s letters read as words run together (camelCase,
    PascalCase, snake_case): its case-delimited segments average 4 letters or
    more, where a random mix of cases averages about 2."""
    segments = _SEGMENT.findall(value)
    return bool(segments) and sum(map(len, segments)) / len(segments) >= 4


def strong_value(value: str) -> bool:
    """The entropy gate of a secret-named assignment: long enough, random enough,
    letters and digits mixed (or a long mixed-case run of random letters), and not a placeholder, an expression, a path or an
    identifier (``os.environ``, ``getToken()``, ``some_setting_name``, camelCase)."""
    if len(value) < 12 or PLACEHOLDER.search(value):
        return False
    if not any(c.isalpha() for c in value):
        return False
    if not any(c.isdigit() for c in value) and (
            len(value) < 16 or value.islower() or value.isupper() or wordy(value) or entropy(value) < 3.5):
        return False  # no digit: only a long, mixed-case, random run of letters (not words in camelCase)
    segments = re.split(r"[-_.]", value)
    if len(segments) >= 3 and sum(1 for w in segments if len(w) >= 3 and w.isalpha()) >= 2:
        return False  # words joined by dashes or dots: a cache key, a package or a platform name
    if _CODE_LIKE.search(value) and not re.fullmatch(r"[A-Za-z0-9+/=_\-]{20,}", value):
        return False
    return entropy(value) >= 3.0


def real_password(value: str) -> bool:
    """The gate of a password in a URL or a connection string: not a placeholder
    or a variable; a literal password there is a credential whatever its entropy."""
    return len(value) >= 3 and not PLACEHOLDER.search(value) and not value.startswith(("$", "%", "{", "<"))


_B64 = r"[A-Za-z0-9+/]"
_ASSIGN = r"[\"'\\]*\s*(?:=>|:=|=|:(?!:))\s*"
"""What joins a name to its value: ``=``, ``:``, ``=>``, ``:=``, with the
quotes and escapes of the name's own string before it (``"apiKey": ``)."""

_CODE_VALUE = r"\\*[\"']([^\s\"'\\]{12,})\\*[\"']"
"""A quoted literal value (code, JSON, YAML): a call or an expression is not one."""

RULES: tuple[Rule, ...] = (
    Rule("google-service-account-key", re.compile(
        r"private_key\\?\"\s*:\s*\\?\"(-----BEGIN PRIVATE KEY-----(?:[A-Za-z0-9+/=\s]|\\+[nr])+?-----END PRIVATE KEY-----)"), 1),
    Rule("private-key", re.compile(
        r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----(?:[A-Za-z0-9+/=:,\- \t\r\n]|\\+[nr])+?-----END \1-----")),
    Rule("private-key", re.compile(  # cut off before its END line (a truncated tool output)
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:\s|\\+[nr])*(?:[A-Za-z0-9+/=]{16,}(?:\s|\\+[nr])*){4,}")),
    Rule("aws-access-key-id", re.compile(r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}" + _END), bounded=True),
    Rule("aws-secret-access-key", re.compile(
        r"secret_?(?:access_?)?key" + _ASSIGN + r"[\"'\\]*(" + r"[a-z0-9+/]" + r"{40})(?![a-z0-9+/=])"), 1, lowered=True),
    Rule("github-token", re.compile(r"gh[pousr]_[A-Za-z0-9]{36,251}" + _END), bounded=True),
    Rule("github-fine-grained-token", re.compile(r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}" + _END), bounded=True),
    Rule("gitlab-token", re.compile(
        r"gl(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt|agent)-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9_\-]+)*" + _END), bounded=True),
    Rule("slack-webhook", re.compile(
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/T[A-Z0-9]{6,}/[AB][A-Z0-9]{6,}/[A-Za-z0-9]{20,}")),
    Rule("slack-token", re.compile(r"x(?:ox[abposr]|app)-[0-9]{1,}-[A-Za-z0-9-]{10,}" + _END), bounded=True),
    Rule("stripe-secret-key", re.compile(r"sk_(?:live|test)_[A-Za-z0-9]{20,247}" + _END), bounded=True),
    Rule("stripe-restricted-key", re.compile(r"rk_(?:live|test)_[A-Za-z0-9]{20,247}" + _END), bounded=True),
    Rule("anthropic-api-key", re.compile(r"sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_\-]{32,}" + _END), bounded=True),
    Rule("openai-api-key", re.compile(
        r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}|[A-Za-z0-9_\-]{0,80}T3BlbkFJ[A-Za-z0-9_\-]{16,})" + _END), bounded=True),
    Rule("google-api-key", re.compile(r"AIza[0-9A-Za-z_\-]{35}" + _END), bounded=True),
    Rule("azure-storage-key", re.compile(r"accountkey=(" + r"[a-z0-9+/]" + r"{86}==)"), 1, lowered=True),
    Rule("azure-shared-access-key", re.compile(r"sharedaccesskey=(" + r"[a-z0-9+/]" + r"{42,43}=)"), 1, lowered=True),
    Rule("twilio-api-key", re.compile(r"SK[0-9a-fA-F]{32}" + _END), bounded=True),
    Rule("npm-token", re.compile(r"npm_[A-Za-z0-9]{36}" + _END), bounded=True),
    Rule("npm-token", re.compile(r"_authToken\s*=\s*([A-Za-z0-9_\-.=+/]{20,})"), 1),
    Rule("pypi-token", re.compile(r"pypi-AgE[A-Za-z0-9_\-]{50,}"), bounded=True),
    Rule("jwt", re.compile(r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}" + _END), bounded=True),
    Rule("url-credentials", re.compile(r"://[^\s:/?#@\"'<>\\]{1,128}:([^\s/?#@\"'<>\\]{1,256})@[A-Za-z0-9\[]"), 1, real_password),
    *(Rule("connection-string-password", re.compile(word + r"\s*=\s*([^;\"'\s\\]{3,})"), 1, real_password, True, True,
           re.compile(r"(?:server|data source|host|address|user id|uid|username|database|initial catalog)\s*=[^;\n]*;"))
      for word in ("password", "pwd")),
    *(Rule("secret-assignment", re.compile(word + r"\s*(?:=|:(?!:))\s*\\*[\"']?([^\s\"'`,;)}\]\\]{12,})(?=[\s\"'`,;)}\]\\]|$)"), 1,
           strong_value, lowered=True, named=True)
      for word in ("key", "token", "secret", "password", "passwd", "pass", "pwd", "auth", "credentials")),
    *(Rule("secret-assignment", re.compile(word + _ASSIGN + _CODE_VALUE), 1, strong_value, lowered=True)
      for word in ("key", "token", "secret", "password", "passwd")),
)
"""Every rule, most specific first. An assignment matches ``*_KEY=``,
``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD`` and their kin (``.env``, shell,
YAML, ``apiKey: "..."``, ``client_secret = '...'``) by the name's last word in
any case; the second form takes a value quoted inside an escaped string."""

SECRET_KEY = re.compile(
    r"(?i)(?:^|[_\-])(?:key|token|secret|password|passwd|pwd)$|(?i:api[_-]?key|access[_-]?key|secret[_-]?key|auth[_-]?token|"
    r"access[_-]?token|refresh[_-]?token|api[_-]?token|private[_-]?key|client[_-]?secret|password|passwd)$")
"""A JSON object key whose string value is a secret when it is strong (``"apiKey": "..."``
in a tool's input, where the name and the value are two separate strings)."""

_SECRET_KEY_ENDS = ("key", "token", "secret", "password", "passwd", "pwd", "\n")
"""How every name ``SECRET_KEY`` matches ends, casefolded (its ``$`` also
matches before a final line break)."""


def secret_name(key: str) -> bool:
    """Whether ``key`` names a secret (``SECRET_KEY``). Most keys (``command``,
    ``file_path``) are told apart by their last letters alone, without a regex
    search that would try the name at every character."""
    return key.casefold().endswith(_SECRET_KEY_ENDS) and SECRET_KEY.search(key) is not None

ANCHORS: tuple[re.Pattern[bytes], ...] = tuple(re.compile(p) for p in (
    rb"-----BEGIN", rb"A(?:KIA|SIA|BIA|CCA|3T|Iza)", rb"g(?:h[pousr]_|ithub_pat_|l(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt|agent)-)",
    rb"x(?:ox[abposr]|app)-", rb"k_(?:live|test)_", rb"sk-", rb"SK[0-9a-fA-F]{32}", rb"npm_", rb"pypi-AgE", rb"eyJ",
    rb"hooks\.slack\.com", rb"://[^\s/?#@\"'<>\\]+:[^\s/?#@\"'<>\\]+@"))
"""The case-sensitive anchors of the format rules: a key's prefix, ``user:pass@``.
Each one a pattern that starts with a literal (the regex engine then skips to
that literal's occurrences instead of trying every alternative at every byte)."""

NAMES: tuple[re.Pattern[bytes], ...] = tuple(re.compile(p + rb"[\s\"'\\]{0,4}(?:[:=]|=>)") for p in (
    rb"key", rb"token", rb"secret", rb"passw(?:or)?d", rb"pwd", rb"credentials?", rb"auth"))
"""A secret-ish name followed by an assignment, matched on the lowercased text
(``AccountKey=``, ``API_TOKEN=``, ``"password":``, ``client_secret =``)."""


_SEP = rb"[\s\"'\\]{0,4}(?:[:=]|=>)"

GATES: tuple[re.Pattern[bytes], ...] = tuple(re.compile(p) for p in (
    rb"A(?:KIA|SIA|BIA|CCA|3T|Iza)", rb"SK[0-9a-fA-F]{32}", rb"J(?<=eyJ)",
    rb"-(?:----BEGIN|AgE(?<=pypi-AgE)|(?<=[kpabosrt]-)(?:(?<=sk-)|(?<=xapp-)|(?<=xox[abposr]-)"
    rb"|(?<=gl(?:pat|ptt|cbt|oas|imt)-)|(?<=gl(?:dt|rt|ft)-)|(?<=glsoat-)|(?<=glagent-)))",
    rb"_(?:(?<=gh[pousr]_)|(?<=npm_)|(?<=github_pat_)|(?:live|test)_(?<=k_(?:live|test)_))",
    rb"hooks\.slack\.com", rb"://[^\s/?#@\"'<>\\]+:[^\s/?#@\"'<>\\]+@"))
"""``ANCHORS`` regrouped for a yes/no answer in fewer passes: each pattern
starts with the rarest character of what it looks for (``eyJ`` is found from
its ``J``, a key prefix from its ``-`` or ``_``, the rest checked behind it:
first the one letter before a ``-`` that any of them can end with),
since the engine stops at every occurrence of a pattern's first character and
``e``, ``s`` or ``g`` are everywhere. Matches where an anchor does, and only there."""

NAME_GATES: tuple[re.Pattern[bytes], ...] = tuple(re.compile(p + _SEP) for p in (
    rb"k(?:ey|(?<=tok)en)", rb"cret(?<=secret)", rb"w(?:(?<=passw)(?:or)?d|(?<=pw)d)", rb"dential(?<=credential)s?",
    rb"uth(?<=auth)"))
"""``NAMES`` the same way, over the lowercased text: ``key`` and ``token`` in one pass from their ``k``."""


def maybe_secret(data: bytes | memoryview) -> bool:
    """Whether ``data`` may hold a secret: one of ``ANCHORS`` in it, or one of
    ``NAMES`` in its lowercased text (tested as ``GATES`` and ``NAME_GATES``).
    False means no rule can match, so text without any is never looked at
    further (most lines of a transcript, most strings an entry gives the index)."""
    data = data if isinstance(data, bytes) else bytes(data)
    for gate in GATES:
        if gate.search(data):
            return True
    if b":" not in data and b"=" not in data:
        return False  # a name is one only where a ``:`` or ``=`` follows it (half of an entry's strings have neither)
    lowered = data.lower()
    for gate in NAME_GATES:
        if gate.search(lowered):
            return True
    return False


def hit_positions(data: bytes) -> list[int]:
    """Where in ``data`` the prefilter matches (``ANCHORS`` and ``NAMES``), sorted:
    the only places a rule can match, so only the strings around them are read further."""
    found = [m.start() for anchor in ANCHORS for m in anchor.finditer(data)]
    lowered = data.lower()
    found += [m.start() for name in NAMES for m in name.finditer(lowered)]
    found.sort()
    return found
