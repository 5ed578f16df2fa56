"""The daemon: the single writer of every transcript file.

Its settings live in ``sessiond.common.config`` (the CLI reads them too); the
old name ``sessiond.daemon.config`` stays an alias of that very module so code
written against it keeps importing.
"""

import sys as _sys

from sessiond.common import config as _config

_sys.modules.setdefault(__name__ + ".config", _config)
