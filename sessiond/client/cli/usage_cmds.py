"""``sessiond usage``: tokens and USD spent, per day, month, session or 5-hour
billing block (not bytes on disk: that is ``du``).

The figures are ccusage's, by its rules (``sessiond.store.spend``): from the
daemon serving the store when one runs (the sums it keeps), else computed
here from the transcript files, which the command says on stderr. It never
starts a daemon.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import click

from . import Context, cli
from .group import Day
from .output import cells, clip, echo, echo_json, pad, printable_name

REPORTS = ("daily", "monthly", "session", "blocks")  # wire.spend.REPORTS, without importing the wire at start-up


def _timezone(name: str | None):
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(f"no such time zone: {name!r} (an IANA name, e.g. Europe/Paris)",
                                 param_hint="--timezone") from None


def _number(n: int) -> str:
    return f"{n:,}"


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _table(head: list[str], rows: list[list[str]], right: set[int]) -> None:
    widths = [max([cells(head[i])] + [cells(printable_name(r[i])) for r in rows]) for i in range(len(head))]
    for r in [head, *rows]:
        echo("  ".join(pad(c, widths[i], i in right) for i, c in enumerate(r)).rstrip())


def _token_cells(r) -> list[str]:
    return [_number(r.input_tokens), _number(r.output_tokens), _number(r.cache_creation_tokens),
            _number(r.cache_read_tokens), _number(r.total_tokens), _money(r.cost)]


TOKEN_HEAD = ["INPUT", "OUTPUT", "CACHE WRITE", "CACHE READ", "TOTAL", "COST"]


@cli.command("usage")
@click.argument("report", type=click.Choice(REPORTS), default="daily", required=False)
@click.option("--since", type=Day(), default=None, help="From this day (YYYY-MM-DD, or an age: 7d, 3mo, 1y), inclusive.")
@click.option("--until", type=Day(), default=None, help="To this day (YYYY-MM-DD, or an age: 7d, 3mo, 1y), inclusive.")
@click.option("--cwd", default=None, help="The project (default: the current directory's).")
@click.option("--all", "all_projects", is_flag=True, help="Every project.")
@click.option("--by", "by", type=click.Choice(["model"]), default=None, help="A breakdown per model under each row.")
@click.option("--timezone", "tz_name", default=None, help="IANA time zone of the days (default: the system's).")
@click.option("--prices", "prices_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A price table to use instead of the shipped one (same JSON shape).")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.pass_obj
def usage(obj: Context, report: str, since: datetime | None, until: datetime | None, cwd: str | None,
          all_projects: bool, by: str | None, tz_name: str | None, prices_file: Path | None, as_json: bool) -> None:
    """Tokens (input, output, cache write, cache read) and cost in USD per day,
    month, session or 5-hour billing block (REPORT: daily, monthly, session,
    blocks), counted as ccusage counts them, subagents included."""
    tz = _timezone(tz_name)
    first: date | None = since.date() if since else None
    last: date | None = until.date() if until else None
    out = spend_report(obj, report, cwd, all_projects, first, last, tz_name, by == "model", prices_file)
    if as_json:
        echo_json(out)
    elif report == "blocks":
        _blocks(out.blocks, tz)
    else:
        _rows(report, out.rows, out.totals, by == "model", obj.store_root())
    if out.unpriced:
        echo(f"sessiond: no price for {', '.join(map(printable_name, out.unpriced))}: their tokens are counted, their cost is not "
             "(--prices FILE to price them)", err=True)


def spend_report(obj: Context, report: str, cwd: str | None, all_projects: bool, first: date | None = None,
                 last: date | None = None, tz_name: str | None = None, by_model: bool = False,
                 prices_file: Path | None = None):
    """The report (a ``wire.spend.Spent``): from the daemon serving the root
    when one runs (never started for it) and ``prices_file`` is None, else
    computed from the files (said on stderr). What ``usage`` prints and the
    web view charts."""
    out = None
    if prices_file is None:
        out = _from_daemon(obj, report, cwd, all_projects, first, last, tz_name, by_model)
    if out is None:
        out = _from_files(obj, report, cwd, all_projects, first, last, _timezone(tz_name), tz_name, by_model, prices_file)
    return out


def _named_local_zone() -> str | None:
    """This process's zone by its IANA name, so the daemon (whose own zone may
    be another) counts days in it: ``TZ`` (a leading ``:`` allowed), else the
    zone ``/etc/localtime`` links to when ``TZ`` is unset. None: no name found;
    the daemon's local zone is used. Not looked up here (zoneinfo is a few ms
    of every run's start): a name the daemon knows no zone by is asked again
    without it (``_from_daemon``), as if none was found."""
    import os

    name = os.environ.get("TZ")
    if name is None:
        try:
            target = os.readlink("/etc/localtime")
        except OSError:
            return None
        name = target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else ""
    if name == "":
        return "UTC"  # TZ set and empty: UTC, as the C library reads it
    return name.removeprefix(":") or None


def _from_daemon(obj: Context, report: str, cwd: str | None, all_projects: bool, first: date | None,
                 last: date | None, tz_name: str | None, by_model: bool):
    """The report from the daemon serving the root (None: none runs; never started for this)."""
    import msgspec

    from sessiond.client.connection import Client
    from sessiond.store.locations import default_root
    from sessiond.wire import messages as m
    from sessiond.wire.errors import DaemonUnavailable, RemoteError

    from .locate import project_scope

    root = obj.store_root()
    try:  # a read: no daemon is started for it, and without one nothing is locked or recovered
        client = Client(obj.socket, root=obj.root or default_root(), autostart=False, timeout=obj.timeout or 120.0,
                        name="sessiond-cli", other_root_ok=True).connect()
    except DaemonUnavailable:
        return None
    with client:
        if not client.serves_own_root():
            return None
        dirs = project_scope(root, cwd, all_projects)  # [] (no project here yet): the daemon answers nothing
        req = m.Spend(id=client.next_id(), report=report, dirs=[str(d) for d in dirs or []],  # type: ignore[arg-type]
                      all=dirs is None, since=first.isoformat() if first else None,
                      until=last.isoformat() if last else None, timezone=tz_name or _named_local_zone(),
                      byModel=by_model)
        try:
            try:
                return client.call(req).spend  # type: ignore[union-attr]  # the answer to a Spend: Spent
            except RemoteError as exc:
                if tz_name is not None or req.timezone is None or exc.code != "bad_request" or "time zone" not in exc.message:
                    raise
                # this process's zone names none the daemon knows: its own local zone, as when no name is found
                req = msgspec.structs.replace(req, id=client.next_id(), timezone=None)
                return client.call(req).spend  # type: ignore[union-attr]
        except RemoteError as exc:
            if exc.code != "too_large":
                raise
            echo(f"sessiond: the daemon keeps no usage figures here: {exc.message}", err=True)
            return None


def _from_files(obj: Context, report: str, cwd: str | None, all_projects: bool, first: date | None,
                last: date | None, tz, tz_name: str | None, by_model: bool, prices_file: Path | None):
    """The report computed here from the transcript files, saying so on stderr."""
    from sessiond.store.spend import charges, prices, reports

    from .locate import project_scope

    try:
        table = prices.Prices.load(prices_file)
    except prices.BadPrices as exc:
        raise click.BadParameter(str(exc), param_hint="--prices") from None
    root = obj.store_root()
    dirs = project_scope(root, cwd, all_projects)
    names = None if dirs is None else {d.name for d in dirs}
    keep = None if names is None else (lambda rel: bool(rel) and rel[0] in names)
    from .output import Progress

    shown = Progress(0, "reading transcripts (MB)")
    shown.THRESHOLD = 256  # MB: a second or more of reading
    # the idle cores (the workers cost a quarter more CPU in all: on a busy machine they only slow it)
    ledger = charges.load(root / "projects", progress=report == "daily", keep=keep, workers=idle_cores(),
                          read=lambda done, total: shown.update(done >> 20, total >> 20))
    shown.done()
    why = "--prices names another table" if prices_file is not None else "no daemon serves this root"
    echo(f"sessiond: usage computed from the transcript files under {root} ({why}; "
         f"{len(ledger.charges):,} API responses)", err=True)
    return reports.report(report, ledger.charges, reports.Pricer(table), tz, tz_name or "local", "files",
                          first, last, by_model)

def idle_cores() -> int:
    """How many cores are idle now, this process's own counted as idle (at
    least 1): the cores it may run on less the other tasks runnable at this
    instant (``/proc/loadavg``'s fourth field, which counts this one). The load
    average would be a minute's mean: right after a build, or ccusage, it still
    says the machine is busy."""
    import os

    cores = len(os.sched_getaffinity(0))
    try:
        with open("/proc/loadavg", "rb") as f:
            runnable = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):  # not Linux: the minute's mean it is
        runnable = int(os.getloadavg()[0]) + 1
    return max(1, cores - (runnable - 1))


def _rows(report: str, rows: list, total, by_model: bool, root: Path) -> None:
    """The daily, monthly or session table; a session's row names it as every
    listing does (its title, its project's cwd: ``naming``)."""
    if not rows:
        echo("no usage", err=True)
        return
    key = {"daily": "DAY", "monthly": "MONTH", "session": "SESSION"}[report]
    lines = []
    for r in rows:
        extra: list[str] = []
        if report == "session":
            from sessiond.store.paths import projects_dir

            from .naming import named

            name = named(projects_dir(root) / r.project / f"{r.key}.jsonl" if r.project else None, r.project)
            extra = [clip(name.title, 40), name.project]
        lines.append([r.key, ", ".join(r.models) or "-", *_token_cells(r), *extra])
        for m in r.breakdown or ():
            lines.append(["  " + m.model, "", *_token_cells(m)] + (["", ""] if report == "session" else []))
    lines.append(["total", "", *_token_cells(total)] + (["", ""] if report == "session" else []))
    _table([key, "MODELS", *TOKEN_HEAD] + (["TITLE", "PROJECT"] if report == "session" else []), lines, set(range(2, 8)))


def _blocks(found: list, tz) -> None:
    from .output import local_time

    real = [b for b in found if not b.is_gap]
    if not real:
        echo("no usage", err=True)
        return
    lines = []
    for b in found:
        if b.is_gap:
            lines.append([local_time(b.start_time), "gap", "", "", ""])
            continue
        status = "ACTIVE" if b.is_active else f"until {local_time(b.actual_end_time)}"
        lines.append([local_time(b.start_time), status, ", ".join(b.models) or "-", _number(b.total_tokens), _money(b.cost)])
    _table(["BLOCK START", "STATUS", "MODELS", "TOKENS", "COST"], lines, {3, 4})
    active = next((b for b in found if b.is_active), None)
    if active is not None and active.burn_rate is not None and active.projection is not None:
        echo(f"active block: {_number(round(active.burn_rate.tokens_per_minute))} tokens/min, "
             f"{_money(active.burn_rate.cost_per_hour)}/h; projected to its end "
             f"({active.projection.remaining_minutes} min left): {_number(active.projection.total_tokens)} tokens, "
             f"{_money(active.projection.total_cost)}")
