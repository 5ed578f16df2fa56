"""Usage over time as an SVG bar chart, written on the server.

Why SVG from the server: the page loads nothing from the network and runs
no charting library; a chart is a few hundred rectangles, each with its
figures as a tooltip (``<title>``, escaped text).
"""

from __future__ import annotations

import html

WIDTH = 960
HEIGHT = 260
PAD_LEFT = 64
PAD_BOTTOM = 28
PAD_TOP = 12


def _money(x: float) -> str:
    return f"${x:,.2f}"


def daily_chart(days: list[tuple[str, int, float]], *, last: int = 120) -> str:
    """Bars of USD per day (the last ``last`` days with usage), tokens in each
    bar's tooltip; an empty string when there is no usage."""
    days = days[-last:]
    if not days:
        return ""
    top = max(cost for _, _, cost in days) or 1.0
    if top == 0:
        top = 1.0
    inner_w = WIDTH - PAD_LEFT - 8
    inner_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    step = inner_w / len(days)
    bar = max(1.0, step * 0.8)
    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
           f'aria-label="USD per day">']
    for frac in (0.0, 0.5, 1.0):
        y = PAD_TOP + inner_h * (1 - frac)
        out.append(f'<line x1="{PAD_LEFT}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5ea"/>'
                   f'<text x="{PAD_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#6e6e73">'
                   f'{html.escape(_money(top * frac))}</text>')
    label_every = max(1, len(days) // 8)
    for i, (day, tokens, cost) in enumerate(days):
        h = inner_h * (cost / top)
        x = PAD_LEFT + i * step + (step - bar) / 2
        tip = html.escape(f"{day}: {_money(cost)}, {tokens:,} tokens")
        out.append(f'<rect x="{x:.1f}" y="{PAD_TOP + inner_h - h:.1f}" width="{bar:.1f}" height="{max(h, 0.5):.1f}" '
                   f'fill="#0a84ff"><title>{tip}</title></rect>')
        if i % label_every == 0:
            out.append(f'<text x="{x + bar / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11" '
                       f'fill="#6e6e73">{html.escape(day[5:] if len(day) >= 10 else day)}</text>')
    out.append("</svg>")
    return "".join(out)
