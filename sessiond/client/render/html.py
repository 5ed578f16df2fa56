"""A conversation view (``render.conversation``) as HTML: the export's page and
the web view's fragments.

Markdown of the messages is rendered by markdown-it-py (CommonMark, GFM tables
and strikethrough) with raw HTML off, fenced code coloured by Pygments, links
kept only to http(s), mailto and in-page anchors (anything else stays text),
images never loaded (an image becomes a link to it, or its text: nothing of a
transcript reaches the network when the page is opened). Everything else a
transcript holds (names, gists, results, times, ids, titles) is escaped. The
page (:func:`page`) carries a Content-Security-Policy that allows only inline
style: even a mistake here could not run a script or fetch a thing.

Public API: :data:`STYLESHEET`, :func:`conversation_html`, :func:`turns_html`,
:func:`markdown_html`, :func:`page`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import lru_cache
from typing import Any

from .conversation import (
    ConversationView,
    Image,
    Notice,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Turn,
    When,
    agent_anchor,
    hidden_summary,
    input_fields,
    safe_link,
    time_text,
)

_BASE_CSS = """
.conversation{font:15px/1.55 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d1d1f;max-width:60rem;margin:0 auto}
.conversation header{border-bottom:2px solid #d2d2d7;margin-bottom:1.2rem}
.conversation h1.title{font-size:1.6rem;margin:.2rem 0}
.conversation .meta{color:#6e6e73;font-size:.9rem}
.turn{border-radius:10px;padding:.5rem 1rem;margin:.7rem 0;border:1px solid #e5e5ea;background:#fff}
.turn.user{background:#eef5ff;border-color:#bcd7ff}.turn.tool{background:#f6f6f6}
.turn.system,.turn.meta{background:transparent;border-style:dashed}
.turn .role{font-weight:600;font-size:.78rem;text-transform:uppercase;letter-spacing:.05em;color:#3a3a3c}
.turn .role a{color:inherit;text-decoration:none}.turn .role time{font-weight:400;color:#8e8e93;margin-left:.4rem;text-transform:none}
.turn .role .model{font-weight:400;color:#8e8e93;margin-left:.4rem;text-transform:none}
.md{overflow-wrap:anywhere}.md h3{font-size:1.2rem}.md h4{font-size:1.05rem}.md h5,.md h6{font-size:1rem}
.md>:first-child{margin-top:.3rem}.md>:last-child{margin-bottom:.3rem}
.md table{border-collapse:collapse;margin:.5rem 0}.md th,.md td{border:1px solid #d2d2d7;padding:.2rem .5rem}
.md code{background:#f2f2f7;border-radius:4px;padding:0 .2em;font-size:.88em}
.md blockquote{border-left:3px solid #d2d2d7;margin:.4rem 0;padding-left:.8rem;color:#3a3a3c}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f8fa;padding:.5rem .7rem;border-radius:6px;font-size:.85rem;
max-height:40rem;overflow:auto;margin:.3rem 0}
pre code{background:none;padding:0;font-size:inherit}
details{margin:.35rem 0}summary{cursor:pointer}
details.tool>summary .name{font-weight:600;color:#0b5cad}details.tool>summary .gist{color:#3a3a3c}
details.tool.error>summary .name{color:#c0392b}.status{font-size:.8rem;color:#c0392b;margin-left:.4rem}
.tool-body{border-left:3px solid #d2d2d7;padding-left:.7rem}.tool-body .part{font-size:.75rem;margin:.4rem 0 .1rem;
color:#6e6e73;text-transform:uppercase;letter-spacing:.05em}
.tool-body dl{margin:0}.tool-body dt{font-size:.8rem;color:#6e6e73}.tool-body dd{margin:0 0 .3rem}
.result.error pre{background:#fdecea}
details.thinking>summary{color:#8e44ad}
.notice{color:#6e6e73;font-size:.88rem;margin:.2rem 0}.notice .label{font-variant:small-caps;margin-right:.4rem;color:#8e8e93}
details.notice>summary{color:#6e6e73}
.subagent-link{font-size:.88rem}
section.subagent{border-top:2px dashed #d2d2d7;margin-top:2rem}
details.history{border:1px dashed #d2d2d7;border-radius:10px;padding:.4rem 1rem;opacity:.9}
.hidden-count{color:#8e8e93;font-size:.85rem}
"""


@lru_cache(maxsize=1)
def _pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    return str(HtmlFormatter(style="default").get_style_defs(".highlight"))


def _stylesheet() -> str:
    return _BASE_CSS + _pygments_css()


STYLESHEET: str = _stylesheet()
"""The CSS every rendering here needs, Pygments' token classes (``.highlight``) included."""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _highlight(code: str, lang: str, _attrs: str) -> str:
    """A fenced block coloured by Pygments when its info string names a lexer;
    escaped plain text otherwise (no guessing: a guess is slow and often wrong)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    name = (lang or "").split()[0] if lang else ""
    try:
        lexer = get_lexer_by_name(name) if name else None
    except ClassNotFound:
        lexer = None
    if lexer is None:
        return f'<pre class="highlight"><code>{_e(code)}</code></pre>\n'
    body = highlight(code, lexer, HtmlFormatter(nowrap=True))
    return f'<pre class="highlight"><code>{body}</code></pre>\n'


@lru_cache(maxsize=1)
def _markdown() -> Any:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "highlight": _highlight})
    md.enable(["table", "strikethrough"])
    renderer = md.renderer
    assert isinstance(renderer, RendererHTML)
    md.validateLink = safe_link  # type: ignore[method-assign]

    def link_open(_self, tokens, idx, options, env):  # noqa: ANN001 - markdown-it's renderer signature (bound)
        token = tokens[idx]
        if not str(token.attrGet("href") or "").startswith("#"):
            token.attrSet("rel", "nofollow noopener noreferrer")
        return renderer.renderToken(tokens, idx, options, env)

    def image(_self, tokens, idx, options, env):  # noqa: ANN001
        token = tokens[idx]
        alt = renderer.renderInlineAsText(token.children or [], options, env) or "image"
        src = str(token.attrGet("src") or "")
        return (f'<a class="image-link" href="{_e(src)}" rel="nofollow noopener noreferrer">[image: {_e(alt)}]</a>'
                if safe_link(src) and not src.startswith("#") else f"[image: {_e(alt)}]")

    def heading(_self, tokens, idx, options, env):  # noqa: ANN001
        token = tokens[idx]  # a message's heading sits under the turn's, never level with the page's title
        token.tag = f"h{min(6, int(token.tag[1:]) + 2)}"
        return renderer.renderToken(tokens, idx, options, env)

    md.add_render_rule("heading_open", heading)
    md.add_render_rule("heading_close", heading)
    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    return md


def markdown_html(source: str) -> str:
    """Markdown source (a message's text) as safe HTML (see the module's rules)."""
    return str(_markdown().render(source))


def _time(iso: str | None, when: When) -> str:
    if not iso:
        return ""
    return f'<time datetime="{_e(iso)}">{_e(when(iso))}</time>'


def _notice(n: Notice) -> str:
    label = f'<span class="label">{_e(n.label)}</span>'
    if n.text and " ".join(n.text.split()) != n.gist:
        body = (f'<div class="md">{markdown_html(n.text)}</div>' if n.kind in ("meta", "compact-summary")
                else f"<pre>{_e(n.text)}</pre>")
        return f'<details class="notice {n.kind}"><summary>{label}{_e(n.gist)}</summary>{body}</details>'
    return f'<div class="notice {n.kind}">{label}{_e(n.gist)}</div>'


def _result(r: ToolResult, when: When) -> str:
    cls = "result error" if r.is_error else "result"
    images = f'<p class="notice">[{r.images} image{"s" if r.images != 1 else ""}]</p>' if r.images else ""
    text = f"<pre>{_e(r.text)}</pre>" if r.text else '<p class="notice">(empty)</p>'
    head = "Error" if r.is_error else "Result"
    return (f'<div class="{cls}"><div class="part">{head} {_time(r.time, when)}</div>{text}{images}'
            + "".join(_notice(n) for n in r.notices) + "</div>")


def _input(call: ToolCall) -> str:
    fields = input_fields(call.input)
    if not fields:
        return ""
    rows = "".join(f"<dt>{_e(k)}</dt><dd><pre>{_e(v)}</pre></dd>" for k, v in fields)
    return f'<div class="input"><div class="part">Input</div><dl>{rows}</dl></div>'


def _tool(call: ToolCall, when: When, agent_href: Callable[[str], str], agents: Collection[str] | None) -> str:
    error = call.result is not None and call.result.is_error
    status = ' <span class="status">error</span>' if error else ""
    status += "" if call.result is not None else ' <span class="status pending">no result</span>'
    out = (f'<details class="tool{" error" if error else ""}" id="t-{_e(call.id)}"><summary><span class="name">{_e(call.name)}</span> '
           f'<code class="gist">{_e(call.gist)}</code>{status}</summary><div class="tool-body">{_input(call)}'
           + (_result(call.result, when) if call.result is not None else "") + "</div></details>")
    if call.agent and (agents is None or call.agent in agents):
        out += (f'<div class="subagent-link"><a href="{_e(agent_href(call.agent))}">→ subagent {_e(call.agent)}'
                "</a></div>")
    elif call.agent:
        out += f'<div class="subagent-link">subagent {_e(call.agent)} (no transcript of it here)</div>'
    return out


def _block(block: Any, when: When, agent_href: Callable[[str], str], agents: Collection[str] | None) -> str:
    if isinstance(block, Text):
        return f'<div class="md">{markdown_html(block.text)}</div>'
    if isinstance(block, Thinking):
        return f'<details class="thinking"><summary>Thinking</summary><div class="md">{markdown_html(block.text)}</div></details>'
    if isinstance(block, ToolCall):
        return _tool(block, when, agent_href, agents)
    if isinstance(block, ToolResult):
        return (f'<details class="tool orphan"><summary><span class="name">Result</span> '
                f'<code class="gist">{_e(block.tool_use_id)}</code></summary><div class="tool-body">{_result(block, when)}</div></details>')
    if isinstance(block, Image):
        return f'<p class="notice">[image: {_e(block.media_type)}]</p>'
    if isinstance(block, Notice):
        return _notice(block)
    return ""


_ROLE = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool result"}


def _turn(turn: Turn, when: When, agent_href: Callable[[str], str], agents: Collection[str] | None) -> str:
    ident = f' id="m-{_e(turn.uuid)}"' if turn.uuid else ""
    role = _ROLE.get(turn.role, turn.role)
    stamp = _time(turn.time, when)
    link = f'<a href="#m-{_e(turn.uuid)}">{_e(role)}{stamp}</a>' if turn.uuid else f"{_e(role)}{stamp}"
    model = f'<span class="model">{_e(turn.model)}</span>' if turn.model else ""
    body = "".join(_block(b, when, agent_href, agents) for b in turn.blocks)
    return (f'<div class="turn {_e(turn.role)}{" meta" if turn.meta else ""}"{ident}><div class="role">{link}{model}</div>'
            f"{body}</div>")


def _default_href(agent: str) -> str:
    return "#" + agent_anchor(agent)


def turns_html(turns: Iterable[Turn], *, agent_href: Callable[[str], str] | None = None, when: When | None = None,
               agents: Collection[str] | None = None) -> str:
    """Turns as HTML ``<div class="turn">`` elements (each ``id="m-<uuid>"``):
    for a caller that pages or streams them (the web view). A call's subagent
    is linked when it is in ``agents`` (None: every one)."""
    href = agent_href or _default_href
    shown = when or time_text
    return "\n".join(_turn(t, shown, href, agents) for t in turns)


def _hidden(hidden: dict[str, int]) -> str:
    text = hidden_summary(hidden)
    return f'<p class="hidden-count">{_e(text)}</p>' if text else ""


def conversation_html(view: ConversationView, *, agent_href: Callable[[str], str] | None = None,
                      when: When | None = None) -> str:
    """The whole view as one ``<article>`` fragment: a header (title, id,
    times, counts, the subagents), the pre-compaction turns collapsed, the
    turns, what was hidden, then each subagent's conversation in a section
    (``id="subagent-<id>"``) that the call which started it links to.
    ``agent_href``: where a subagent link points (default: its section here,
    and only subagents with a section are linked; with ``agent_href``, those
    with a transcript, ``view.agents``)."""
    href = agent_href or _default_href
    shown = when or time_text
    # a link lands: on a section here, or (the web view's href) on a transcript that exists
    known = {s.agent for s in view.subagents} if agent_href is None else {*view.agents, *(s.agent for s in view.subagents)}
    out = ['<article class="conversation">', f'<header><h1 class="title">{_e(view.title)}</h1>',
           f'<p class="meta">Session <code>{_e(view.session_id or "?")}</code> · started {_time(view.first, shown) or "?"}'
           f" · last message {_time(view.last, shown) or '?'} · {view.messages} message{'s' if view.messages != 1 else ''}"
           + (" · secrets redacted" if view.redacted else "") + "</p>"]
    if view.subagents:
        out.append("<nav>Subagents: " + " ".join(f'<a href="{_e(href(s.agent))}">{_e(s.agent)}</a>' for s in view.subagents)
                   + "</nav>")
    out.append("</header>")
    if view.history:
        out.append(f'<details class="history"><summary>Before compaction: {len(view.history)} turn'
                   f"{'s' if len(view.history) != 1 else ''} (not what a resume restores)</summary>")
        out.append(turns_html(view.history, agent_href=href, when=shown, agents=known))
        out.append('</details><h2 class="after">After compaction</h2>')
    out.append(turns_html(view.turns, agent_href=href, when=shown, agents=known))
    out.append(_hidden(view.hidden))
    for sub in view.subagents:
        out.append(f'<section class="subagent" id="{_e(agent_anchor(sub.agent))}"><h2>Subagent {_e(sub.agent)}</h2>')
        out.append(turns_html(sub.turns, agent_href=href, when=shown, agents=known))
        out.append(_hidden(sub.hidden))
        out.append("</section>")
    out.append("</article>")
    return "\n".join(out)


CSP = "default-src 'none'; style-src 'unsafe-inline'"


def page(title: str, body_html: str, *, extra_css: Sequence[str] = ()) -> str:
    """A self-contained HTML document: ``title`` (escaped), :data:`STYLESHEET`
    inline, ``body_html`` (trusted: made here) as the body; a CSP that allows
    inline style and nothing else (no script, no fetch of any kind)."""
    css = STYLESHEET + "".join(extra_css)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{_e(title)}</title><style>{css}\nbody{{margin:2rem auto;padding:0 1rem;background:#fbfbfd}}</style>"
            f"</head><body>\n{body_html}\n</body></html>\n")
