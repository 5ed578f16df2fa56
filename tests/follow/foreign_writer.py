"""A stand-in for Claude Code writing its own transcripts: its own process,
plain ``O_APPEND`` writes, no lock, no daemon.

Reads one JSON command per stdin line and answers "ok" on stdout once done:
  {"op": "append", "path": P, "data": TEXT}   one plain write (may end mid-line)
  {"op": "truncate", "path": P, "size": N}
  {"op": "replace", "path": P, "data": TEXT}   a new file renamed over P (new inode)
  {"op": "overwrite", "path": P, "data": TEXT, "offset": N}  written at offset N (default 0) of the same inode
  {"op": "hold", "path": P, "data": TEXT}     opened for appending, written, kept open (a writer mid-line)
  {"op": "release", "path": P, "data": TEXT}  the rest written through the descriptor ``hold`` kept, then closed
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    held: dict[str, int] = {}
    for raw in sys.stdin:
        cmd = json.loads(raw)
        path = cmd["path"]
        if cmd["op"] == "append":
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, cmd["data"].encode())
            finally:
                os.close(fd)
        elif cmd["op"] == "truncate":
            os.truncate(path, cmd["size"])
        elif cmd["op"] == "replace":
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(cmd["data"])
            os.rename(tmp, path)
        elif cmd["op"] == "overwrite":
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, cmd["data"].encode(), cmd.get("offset", 0))
            finally:
                os.close(fd)
        elif cmd["op"] == "hold":
            held[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(held[path], cmd["data"].encode())
        elif cmd["op"] == "release":
            fd = held.pop(path)
            try:
                os.write(fd, cmd["data"].encode())
            finally:
                os.close(fd)
        print("ok", flush=True)


if __name__ == "__main__":
    main()
