"""A real agent process for the lease tests: a ``Session`` driven by commands on stdin.

    python tests/live/agent.py SOCKET ROOT SESSION CWD [--no-lease]

Commands, one a line: ``record TEXT`` (a user message, acknowledged ``written``),
``burst N`` (N messages as fast as it can, ``queued``, each acknowledged line
printed), ``title TEXT``, ``claim``, ``takeover``, ``close``, ``crash`` (exit
without closing). Each answer is one JSON line on stdout: ``{"ok": uuid}``,
``{"busy": holder}``, ``{"lost": holder}``.
"""

from __future__ import annotations

import json
import os
import sys
import uuid

import msgspec

from sessiond.client import Client, LeaseLost, Session, SessionBusy


def say(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def holder(exc) -> dict | None:
    return msgspec.to_builtins(exc.holder) if exc.holder is not None else None


def main() -> None:
    sock, root, session, cwd, *flags = sys.argv[1:]
    client = Client(sock, root=root, autostart=False, timeout=20, name="test-agent").connect()
    s = Session(client, session_id=session, cwd=cwd, lease="--no-lease" not in flags, reconnect_timeout=20)
    say({"ready": os.getpid()})
    for raw in sys.stdin:
        cmd, _, arg = raw.strip().partition(" ")
        try:
            if cmd == "record":
                uid = str(uuid.uuid4())
                s.record([{"type": "user", "message": {"role": "user", "content": arg}, "uuid": uid}], durability="written")
                say({"ok": uid})
            elif cmd == "burst":
                for i in range(int(arg)):
                    uid = str(uuid.uuid4())
                    s.record([{"type": "user", "message": {"role": "user", "content": f"burst {i}"}, "uuid": uid}])
                    say({"ok": uid})
            elif cmd == "title":
                s.set_title(arg)
                say({"ok": None})
            elif cmd in ("claim", "takeover"):
                got = s.claim(take_over=cmd == "takeover")
                say({"ok": msgspec.to_builtins(got)})
            elif cmd == "close":
                s.close()
                say({"ok": "closed"})
                return
            elif cmd == "crash":
                os._exit(9)
        except LeaseLost as exc:
            say({"lost": holder(exc), "message": str(exc)})
        except SessionBusy as exc:
            say({"busy": holder(exc), "message": str(exc)})


if __name__ == "__main__":
    main()
