"""Request dispatch: one ``match`` handing each request type to its handler.

A handler returns the response Struct, or ``None`` when it has arranged to call
``conn.reply`` later (an append waiting for its write, a flush barrier). Handlers
raise ``SessiondError`` for anything the client did wrong; the connection turns
that into an ``Error`` frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiond.wire import messages as m
from sessiond.wire.errors import ProtocolError

from . import admin, append, flush, lifecycle, listing, search, session, spend, watch

if TYPE_CHECKING:
    from ..connection import Connection


def dispatch(conn: Connection, req: m.Request) -> m.Response | None:
    match req:
        case m.Append():
            return append.handle_append(conn, req)
        case m.Record():
            return append.handle_record(conn, req)
        case m.Flush():
            return flush.handle_flush(conn, req)
        case m.Open():
            return session.handle_open(conn, req)
        case m.Close():
            return session.handle_close(conn, req)
        case m.SetAgentMeta():
            return session.handle_agent_meta(conn, req)
        case m.Adopt():
            return session.handle_adopt(conn, req)
        case m.List():
            listing.handle_list(conn, req)  # answers when its work is done
            return None
        case m.Status():
            return admin.handle_status(conn, req)
        case m.Shutdown():
            return admin.handle_shutdown(conn, req)
        case m.Trash():
            lifecycle.handle_trash(conn, req)  # answers when its work is done
            return None
        case m.Restore():
            lifecycle.handle_restore(conn, req)  # answers when its work is done
            return None
        case m.EmptyTrash():
            lifecycle.handle_empty_trash(conn, req)  # answers when its work is done
            return None
        case m.Import():
            return lifecycle.handle_import(conn, req)
        case m.Usage():
            lifecycle.handle_usage(conn, req)  # answers when its work is done
            return None
        case m.Spend():
            spend.handle_spend(conn, req)  # answers when its work is done
            return None
        case m.Search():
            search.handle_search(conn, req)  # answers when its work is done
            return None
        case m.Reindex():
            search.handle_reindex(conn, req)  # answers when its work is done
            return None
        case m.Subscribe():
            return watch.handle_subscribe(conn, req)
        case m.Unsubscribe():
            return watch.handle_unsubscribe(conn, req)
        case m.Hello():
            raise ProtocolError("Hello may only be sent once, first")
    raise ProtocolError(f"unsupported request {type(req).__name__}")
