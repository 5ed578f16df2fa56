"""sessiond: one daemon per user that owns every AI-agent transcript file.

The packages, each importing only those listed before it:

- ``wire``: what the daemon and its clients say on the socket (messages, framing,
  error codes). Imports nothing of sessiond's.
- ``secrets``: the one secret detector and redactor every side uses (export,
  the search index, the mirror, ``sessiond secrets``). Imports nothing of sessiond's.
- ``store``: the store on disk: the transcript format shared with Claude Code,
  paths, safe opens, appends, locks, state files, the trash, import.
- ``search``: full-text search (the index's schema, queries, the scan fallback).
- ``config_keys`` and ``config``: the settings file, read by both sides.
- ``mirror``: the NATS JetStream mirror (the daemon's pump, ``push``/``pull``).
- ``daemon``: the single writer.
- ``client``: the Python clients, the CLI, resume and export. It imports the
  daemon only to run it (``serve``).

``tests/test_layout.py`` holds these directions.
"""

__version__ = "0.1.0"
