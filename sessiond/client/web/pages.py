"""The view's pages as HTML strings: every value from the store goes through
``_e`` (``printable``, then ``html.escape``), every URL is built from ids,
numbers and project names here.

Why no template engine: a handful of small pages, and one rule that is easy
to check by reading: no transcript text reaches the page unescaped.
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote, urlencode

from sessiond.client.export import redacted_title
from sessiond.store.listing import last_activity

from .chart import daily_chart
from .conversation import Rendered
from .data import Page, Project


def _e(text: Any) -> str:
    """``text`` as the page shows it: its controls shown as the CLI shows them
    (``output.printable``: ESC as ``^[``, a bidi override as ``\\u202e``, a byte
    of a name that is not UTF-8 as ``\\xff``), then escaped for HTML."""
    from sessiond.client.cli.output import printable

    return html.escape(printable(str(text)), quote=True)


def sessions_href(project: str | None = None, page: int | None = None) -> str:
    """The listing of ``project`` (all: None), page ``page``. A project dir's
    name that is not UTF-8 (lone surrogates, ``os.fsdecode``'s surrogateescape)
    is percent-encoded as its bytes (``-proj%FF``), as ``app.query`` reads it back."""
    query = {**({"project": project} if project else {}), **({"page": page} if page is not None else {})}
    return "/sessions" + (f"?{urlencode(query, encoding='utf-8', errors='surrogateescape')}" if query else "")


def when(ts: str | None) -> str:
    """A time as every listing shows it (``output.when``: how long ago within
    a day, else the local date and time), so the page and the CLI agree."""
    from sessiond.client.cli.output import when as listed

    return listed(ts)


def tokens(n: int | None) -> str:
    if n is None:
        return "–"
    from sessiond.client.cli.spend_view import compact

    return compact(n)


def money(x: float | None, unpriced: bool = False) -> str:
    return "–" if x is None else f"${x:,.2f}" + ("?" if unpriced else "")


def session_href(session_id: str, uuid: str | None = None) -> str:
    return f"/s/{quote(session_id, safe='')}" + (f"#m-{quote(uuid, safe='')}" if uuid else "")


def layout(title: str, body: str, query: str = "") -> str:
    """The page around ``body``: the header with the search box, the
    stylesheet and the script (both from this server)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            "<meta name=\"referrer\" content=\"no-referrer\">"
            f"<title>{_e(title)} · sessiond</title><link rel=\"stylesheet\" href=\"/static/style.css\">"
            "<script src=\"/static/app.js\" defer></script></head><body>"
            "<div class=\"top\"><a class=\"brand\" href=\"/\">sessiond</a><nav><a href=\"/\">Projects</a>"
            "<a href=\"/sessions\">All sessions</a><a href=\"/usage\">Usage</a></nav>"
            f"<input id=\"q\" type=\"search\" placeholder=\"Search every conversation…\" autocomplete=\"off\" "
            f"value=\"{_e(query)}\" aria-label=\"search\"></div>"
            "<div id=\"search-note\"></div><ul id=\"results\"></ul>"
            f"{body}</body></html>\n")


def projects_page(found: list[Project], total: int) -> str:
    rows = "".join(
        f'<tr><td class="title"><a href="{sessions_href(p.name)}">{_e(p.cwd or p.name)}</a></td>'
        f'<td class="num">{p.sessions}</td><td class="when">{_e(when(p.last))}</td></tr>' for p in found)
    body = (f"<h1>Projects</h1><p class=\"meta\">{len(found)} projects, {total} sessions</p>"
            + ('<table class="list"><thead><tr><th>Project</th><th class="num">Sessions</th><th>Last active</th></tr>'
               f"</thead><tbody>{rows}</tbody></table>" if found else '<p class="note">No sessions in this store yet.</p>'))
    return layout("Projects", body)


def sessions_page(page: Page, heading: str, project: str | None) -> str:
    rows = []
    for r in page.rows:
        s = r.info
        depth = min(r.fork_depth, 3)
        fork = '<span class="forkmark" title="a fork">↳ fork · </span>' if s.forkedFrom else ""
        tag = f' <span class="tag">{_e(s.tag)}</span>' if s.tag else ""
        live = ' <span class="live">live</span>' if s.live else ""
        rows.append(
            f'<tr class="fork-{depth}"><td class="title">{fork}<a href="{session_href(s.sessionId)}">'
            f'{_e(redacted_title(s.title))}</a>{tag}{live}</td>'
            f'<td class="when">{_e(when(last_activity(s)))}</td>'
            f'<td class="num">{"–" if s.messageCount is None else s.messageCount}</td>'
            f'<td class="num">{tokens(r.tokens)}</td><td class="num">{money(r.cost, r.unpriced)}</td>'
            f'<td><code>{_e(s.sessionId[:8])}</code></td></tr>')
    pager = []
    if page.page > 1:
        pager.append(f'<a rel="prev" href="{sessions_href(project, page.page - 1)}">← newer</a>')
    pager.append(f"<span>page {page.page} of {page.pages}</span>")
    if page.page < page.pages:
        pager.append(f'<a rel="next" href="{sessions_href(project, page.page + 1)}">older →</a>')
    table = ('<table class="list"><thead><tr><th>Title</th><th>Last active</th><th class="num">Messages</th>'
             '<th class="num">Tokens</th><th class="num">Cost</th><th>Id</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>') if rows else '<p class="note">No sessions.</p>'
    body = (f"<h1>{_e(heading)}</h1><p class=\"meta\">{page.total} sessions</p>{table}"
            f'<p class="pager">{"".join(pager)}</p>')
    return layout(heading, body)


def resume_commands(session_id: str, cwd: str | None) -> str:
    """The commands that resume it (``session_id``: the canonical id), each with
    a copy button: Claude Code's (in the session's own directory) and sessiond's.
    The directory is one shell word that shows as itself (``shell_word``: a
    control, a bidi override or a byte that is not UTF-8 written ``\\xNN``), so
    what is copied is what is read and names that directory; a command that
    ``_e`` would still show otherwise than it is gets no button."""
    from sessiond.client.cli.output import printable, shell_word

    cd = f"cd {shell_word(cwd)} && " if cwd else ""
    out = []
    for cmd in (f"{cd}claude --resume {session_id}", f"sessiond resume {session_id}"):
        copy = (f'<button class="copy" type="button" data-copy="{_e(cmd)}">copy</button>' if printable(cmd) == cmd
                else '<span class="note">(not offered to copy: it holds control characters)</span>')
        out.append(f"<code>{_e(cmd)}</code>{copy}")
    return f'<p class="resume">Resume: {"".join(out)}</p>'


def conversation_page(view: Rendered, session_id: str, cwd: str | None, spend: str, offset: int) -> str:
    """The conversation (its own header: title, id, times, counts), and above
    it what the view adds: tokens and cost, whether it is followed live, the
    commands that resume it. ``offset``: where the live stream starts."""
    sid = quote(session_id, safe="")
    body = (f'<div class="session-bar"><p class="meta">{_e(spend)} · <span id="live-state">not live</span></p>'
            f"{resume_commands(session_id, cwd)}</div>"
            f'<main id="conversation" data-body="/s/{sid}/body" data-events="/s/{sid}/events?offset={offset}">'
            f"{view.body}</main>")
    return layout(view.title, body)


def usage_page(days: list[tuple[str, int, float]]) -> str:
    chart = daily_chart(days)
    total_cost = sum(c for _, _, c in days)
    total_tokens = sum(t for _, t, _ in days)
    rows = "".join(f'<tr><td>{_e(d)}</td><td class="num">{t:,}</td><td class="num">{money(c)}</td></tr>'
                   for d, t, c in reversed(days[-60:]))
    body = (f"<h1>Usage</h1><p class=\"meta\">{len(days)} days with usage · {total_tokens:,} tokens · "
            f"{money(total_cost)} (ccusage's rules, as <code>sessiond usage</code>)</p>"
            + (chart or '<p class="note">No usage recorded.</p>')
            + ('<h2>Last 60 days</h2><table class="list"><thead><tr><th>Day</th><th class="num">Tokens</th>'
               f'<th class="num">Cost</th></tr></thead><tbody>{rows}</tbody></table>' if rows else ""))
    return layout("Usage", body)


def error_page(status: int, message: str) -> str:
    return layout(f"{status}", f"<h1>{status}</h1><p>{_e(message)}</p>")


__all__ = ["conversation_page", "error_page", "layout", "projects_page", "resume_commands", "sessions_href",
           "sessions_page", "usage_page"]
