"""Secrets in transcripts: the one detector the daemon and the client share.

Agent transcripts hold whatever the agent saw (``.env`` files it read, tokens
in command output, keys pasted into prompts). ``rules`` is a curated set of
high-specificity formats, ``scan`` finds them in text and in transcript lines
and redacts them as ``[REDACTED:<kind>:<fingerprint>]``. Export, the search
index, the mirror and ``sessiond secrets`` all use it. No network, no
validation call: a finding is a format match, never a check that a key works.
Imports nothing of sessiond's, so every layer may use it.
"""

from .scan import (
    Finding,
    find,
    fingerprint,
    marker,
    mask_line,
    mask_lines,
    redact_line,
    redact_text,
    redact_value,
    scan_line,
)

__all__ = ["Finding", "find", "fingerprint", "marker", "mask_line", "mask_lines", "redact_line", "redact_text", "redact_value", "scan_line"]
