"""``sessiond web``: a read-only web view of the store, served on 127.0.0.1.

Why a package of its own in the client layer: it is a *client* of the daemon
like the CLI (List, Search, Spend and Subscribe over the socket, files read as
``show`` reads them, the files alone when no daemon runs), never part of the
single writer. ``app`` builds the Starlette application (routes, the guard
every request passes: token, Host, headers), ``data`` reads the store through
the CLI's own readers (daemon first, files after), ``conversation`` is the one
place a transcript becomes HTML, ``live`` turns the daemon's Subscribe stream
into server-sent events, ``pages`` and ``chart`` write the markup, ``assets``
holds the stylesheet and the one same-origin script.
"""
