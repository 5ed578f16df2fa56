"""The store on disk, and the only safe ways to touch it.

The transcript format shared with Claude Code (``entries``, ``recording``,
``lite`` summaries, ``listing``), where files live (``paths``, ``locations``,
``agents``), opening them without following a planted symlink or blocking on a
FIFO (``safeopen``, ``regular``), whole-line appends under the file lock
(``appendfile``), the root lock, the daemon's state files, the trash and import.
The daemon and the clients both run it; it imports only ``sessiond.wire``.
"""
