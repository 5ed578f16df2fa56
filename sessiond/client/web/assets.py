"""The view's stylesheet and its one script, served from the server itself
(``/static/...``): the Content-Security-Policy allows no inline script or
style and nothing from another origin, so nothing else can run or load.

The script builds what it shows from text (``textContent``), never from a
transcript's markup; the only HTML it inserts is a conversation body the
server rendered and escaped.
"""

from __future__ import annotations

from .conversation import STYLESHEET

CSS = STYLESHEET + """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:72rem;margin:1rem auto;padding:0 1rem;color:#1d1d1f;background:#fbfbfd}
h1{font-size:1.5rem;margin:.4rem 0}
.top{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;border-bottom:2px solid #d2d2d7;padding-bottom:.6rem;margin-bottom:1rem}
.top .brand{font-weight:700;color:#1d1d1f;text-decoration:none}.top nav a{margin-right:1rem}
#q{flex:1;min-width:14rem;font:inherit;padding:.35rem .6rem;border:1px solid #c7c7cc;border-radius:8px}
#results{margin:0 0 1rem 0;padding:0;list-style:none}
#results li{border:1px solid #e5e5ea;border-radius:8px;padding:.4rem .8rem;margin:.4rem 0;background:#fff}
#results .snippet{color:#3a3a3c;font-size:.9rem}#results mark{background:#ffe58f}#results .where{color:#8e8e93;font-size:.8rem}
#search-note{color:#8e8e93;font-size:.85rem}
table.list{border-collapse:collapse;width:100%;font-size:.9rem}
table.list th{text-align:left;color:#6e6e73;font-weight:600;border-bottom:1px solid #d2d2d7}
table.list td,table.list th{padding:.3rem .5rem;vertical-align:top}table.list tr:nth-child(even) td{background:#f5f5f7}
td.num,th.num{text-align:right;white-space:nowrap}td.when{white-space:nowrap;color:#6e6e73}
.fork-1 .title{padding-left:1.2rem}.fork-2 .title{padding-left:2.4rem}.fork-3 .title{padding-left:3.6rem}
.forkmark{color:#8e8e93}.tag{background:#e5e5ea;border-radius:6px;padding:0 .4rem;font-size:.8rem}
.live{color:#fff;background:#34c759;border-radius:6px;padding:0 .4rem;font-size:.75rem;font-weight:600}
.pager a,.pager span{margin-right:.8rem}.resume code{background:#f2f2f7;padding:.1rem .4rem;border-radius:4px;margin-right:.3rem}
.resume{margin:.3rem 0}button.copy{font:inherit;font-size:.75rem;margin-right:.8rem;cursor:pointer}
.turn:target{outline:3px solid #ffcc00}.session-bar{max-width:60rem;margin:0 auto .5rem auto}
.resume code{overflow-wrap:anywhere}
#live-state{font-size:.8rem;color:#8e8e93}svg.chart{width:100%;height:auto;background:#fff;border:1px solid #e5e5ea;border-radius:8px}
.note{color:#8e8e93}
"""

JS = r"""'use strict';
(function () {
  const q = document.getElementById('q');
  const results = document.getElementById('results');
  const note = document.getElementById('search-note');
  let timer = null, ctrl = null, asked = 0;
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function snippet(text, spans) {
    const p = el('div', 'snippet');
    let pos = 0;
    for (const [a, b] of spans) {
      if (a < pos || b > text.length) continue;
      p.appendChild(document.createTextNode(text.slice(pos, a)));
      p.appendChild(el('mark', null, text.slice(a, b)));
      pos = b;
    }
    p.appendChild(document.createTextNode(text.slice(pos)));
    return p;
  }
  async function search(text, n) {
    if (ctrl) ctrl.abort();
    ctrl = new AbortController();
    let body;
    try {
      const r = await fetch('/api/search?q=' + encodeURIComponent(text), {signal: ctrl.signal, credentials: 'same-origin'});
      body = await r.json();
    } catch (e) { return; }
    if (n !== asked) return;
    results.replaceChildren();
    note.textContent = body.error || body.note || (body.hits.length ? '' : 'no matches');
    for (const h of body.hits || []) {
      const li = el('li', 'hit');
      const a = el('a', null, h.title);
      a.href = '/s/' + encodeURIComponent(h.sessionId) + (h.uuid ? '#m-' + encodeURIComponent(h.uuid) : '');
      li.appendChild(a);
      const at = h.timestamp ? ' · ' + h.timestamp.slice(0, 16).replace('T', ' ') : '';
      li.appendChild(el('span', 'where', ' · ' + h.project + ' · ' + h.role + at));
      li.appendChild(snippet(h.snippet, h.highlights || []));
      li.appendChild(el('code', null, h.resume));
      results.appendChild(li);
    }
    document.body.dataset.searched = String(n);
  }
  if (q) {
    q.addEventListener('input', function () {
      clearTimeout(timer);
      const text = q.value.trimStart();
      asked += 1;
      const n = asked;
      if (!text.trim()) { results.replaceChildren(); note.textContent = ''; return; }
      timer = setTimeout(function () { search(text, n); }, 120);
    });
  }
  document.addEventListener('click', function (ev) {
    const b = ev.target.closest && ev.target.closest('button.copy');
    if (!b) return;
    navigator.clipboard && navigator.clipboard.writeText(b.dataset.copy).then(function () { b.textContent = 'copied'; });
  });
  const conv = document.getElementById('conversation');
  if (conv && conv.dataset.events && window.EventSource) {
    const state = document.getElementById('live-state');
    let busy = false, again = false, updates = 0;
    async function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      try {
        do {
          again = false;
          const atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
          const r = await fetch(conv.dataset.body, {credentials: 'same-origin'});
          if (!r.ok) break;
          const html = await r.text();
          conv.innerHTML = html;  // rendered and escaped by the server: transcript text is never markup
          updates += 1;
          document.body.dataset.updates = String(updates);
          if (atEnd) window.scrollTo(0, document.body.scrollHeight);
        } while (again);
      } finally { busy = false; }
    }
    const source = new EventSource(conv.dataset.events);
    source.addEventListener('ready', function (ev) { state.textContent = 'live (' + ev.data + ')'; document.body.dataset.live = ev.data; });
    source.addEventListener('changed', refresh);
    source.addEventListener('gone', function () { state.textContent = 'the transcript went away'; source.close(); });
    source.addEventListener('busy', function (ev) { state.textContent = ev.data; source.close(); });
    source.onerror = function () {
      state.textContent = source.readyState === EventSource.CLOSED ? 'not live (the server refused the stream)' : 'reconnecting…';
    };
  }
})();
"""
