"""The dashboard's own routes: its pages (one HTML page; the script draws each path), the
Logs view's stream (:mod:`leveret.management.logsview`), the lake's numbers
(:mod:`leveret.management.lakeview`) and the last report's files.

Everything else the dashboard shows comes from the management API's RabbitMQ paths, as
``leveret ctl`` gets it. The lake and the report are found under the broker's data
directory, where ``leveret up`` puts them (``<data-dir>/lake``, ``<data-dir>/report``), or
at ``LEVERET_LAKE`` / ``LEVERET_REPORT``; the stream whose lag is shown is ``logs`` in
vhost ``/`` (``LEVERET_LAKE_STREAM``, ``LEVERET_LAKE_VHOST``)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.logs.search import Filters, LakeSearch, SearchError
from leveret.management import logsview, streams
from leveret.management.context import mgmt
from leveret.management.httputil import bad_request, json_response, not_found
from leveret.management.lakeview import Lake, LakeWatcher

if TYPE_CHECKING:
    from leveret.management.context import Management

#: Paths the page answers (the script routes on them; the server always sends the page).
PAGES = ("/logs", "/report", "/connections", "/channels")
PAGE_TREES = ("/exchanges", "/queues", "/admin")


async def index(request: web.Request) -> web.StreamResponse:
    """The dashboard's page, whatever its path: the script shows the page for the path."""
    data = resources.files("leveret.management").joinpath("static", "index.html").read_bytes()
    return web.Response(body=data, content_type="text/html", headers={"Cache-Control": "no-cache"})


REPORT_TYPES = {
    ".html": "text/html",
    ".md": "text/markdown",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}


class LakeSettings:
    """Where the lake and the report are, and which stream feeds the lake."""

    def __init__(self, management: Management) -> None:
        # a broker without a data directory (in-process) has neither unless told
        data_dir = management.server.config.data_dir
        lake = os.environ.get("LEVERET_LAKE")
        report = os.environ.get("LEVERET_REPORT")
        self.lake = Path(lake) if lake else (data_dir / "lake" if data_dir else None)
        self.report = Path(report) if report else (data_dir / "report" if data_dir else None)
        self.stream = os.environ.get("LEVERET_LAKE_STREAM") or "logs"
        self.vhost = os.environ.get("LEVERET_LAKE_VHOST") or "/"
        self.watcher = LakeWatcher(Lake(self.lake))
        self.search = LakeSearch(self.lake) if self.lake is not None else None


SETTINGS: web.AppKey[LakeSettings] = web.AppKey("lake_settings", LakeSettings)


def report_info(report: Path | None) -> dict[str, Any]:
    if report is None:
        return {"available": False, "path": None}
    for name in ("report.html", "report.md"):
        doc = report / name
        if doc.is_file():
            return {
                "available": True,
                "path": str(report),
                "document": name,
                "modified": int(doc.stat().st_mtime * 1000),
                "url": f"/api/logs/report/{name}",
            }
    return {"available": False, "path": str(report)}


async def lake(request: web.Request) -> web.Response:
    """``GET /api/logs/lake``: the lake's tables (records per minute by severity, error
    rate), the ingest's lag behind the stream, the live view's counts and the last report."""
    m = mgmt(request)
    settings = request.app[SETTINGS]
    state = await settings.watcher.snapshot()
    stream: dict[str, Any] | None = None
    lag: int | None = None
    v = m.broker.vhosts.get(settings.vhost)
    q = v.queues.get(settings.stream) if v is not None else None
    if q is not None and m.can_see(request, settings.vhost):
        status = streams.stream_status(q, m.broker.node_name)
        if status is not None:
            end = status["committed_offset"] + 1
            stream = {
                "vhost": settings.vhost,
                "name": settings.stream,
                "first_offset": status["first_offset"],
                "end": end,
            }
            top = state.get("max_offset")
            if state["available"] or (settings.lake is not None and not settings.lake.exists()):
                # offsets not yet in the lake: past its newest, or all of them without one
                lag = max(0, end - (top + 1 if top is not None else status["first_offset"]))
    return json_response(
        {
            "lake": state,
            "stream": stream,
            "ingest_lag": lag,
            "live": await logsview.live(request),
            "report": report_info(settings.report),
        }
    )


SEARCH_PAGE = 100
SEARCH_MAX_PAGE = 1000


async def search(request: web.Request) -> web.Response:
    """``GET /api/logs/search``: records of the lake, newest first, a page at a time.
    Parameters: ``since``, ``until`` (ISO times or durations ago: ``15m``, ``2h``),
    ``severity`` (comma-separated), ``app``, ``host``, ``facility``, ``q`` (free text),
    ``limit`` (≤ 1000), ``offset``. Only the files the ingest committed are read."""
    import asyncio

    settings = request.app[SETTINGS]
    q = request.query
    if settings.search is None:
        raise bad_request("the broker runs without a data directory: set LEVERET_LAKE")
    try:
        limit = int(q.get("limit", SEARCH_PAGE))
        offset = int(q.get("offset", 0))
    except ValueError:
        raise bad_request("limit and offset must be whole numbers") from None
    if not 1 <= limit <= SEARCH_MAX_PAGE or offset < 0:
        raise bad_request(f"limit must be 1 to {SEARCH_MAX_PAGE}, offset 0 or more")
    try:
        f = Filters.of(
            since=q.get("since") or None,
            until=q.get("until") or None,
            severities=[s for s in q.get("severity", "").split(",") if s],
            apps=[q["app"]] if q.get("app") else [],
            hosts=[q["host"]] if q.get("host") else [],
            facilities=[q["facility"]] if q.get("facility") else [],
            text=q.get("q", ""),
        )
        if not settings.search.lake.is_dir():
            raise SearchError(f"no log lake at {settings.search.lake} yet")
        page = await asyncio.to_thread(settings.search.search, f, limit, offset)
    except SearchError as exc:
        raise bad_request(str(exc)) from None
    return json_response(
        {
            "records": page.records,
            "offset": page.offset,
            "limit": page.limit,
            "more": page.more,
            "files": page.files,
            "took_ms": round(page.took_ms, 1),
        }
    )


async def report_index(request: web.Request) -> web.Response:
    """``GET /api/logs/report``: whether there is a report, where, and when it was made."""
    return json_response(report_info(request.app[SETTINGS].report))


async def report_file(request: web.Request) -> web.StreamResponse:
    """``GET /api/logs/report/{path}``: a file of the last report (its page and charts)."""
    report = request.app[SETTINGS].report
    if report is None:
        raise not_found()
    root = report.resolve()
    try:
        wanted = (root / request.match_info["path"]).resolve()
        found = wanted.is_relative_to(root) and wanted.is_file()
    except (ValueError, OSError) as exc:  # a NUL byte, a name too long for the system
        raise not_found() from exc
    if not found:
        raise not_found()
    kind = REPORT_TYPES.get(wanted.suffix)
    if kind is None:
        raise not_found()
    return web.Response(
        body=wanted.read_bytes(), content_type=kind, headers={"Cache-Control": "no-cache"}
    )


def setup(app: web.Application, management: Management) -> None:
    """Add the dashboard's routes to the management app."""
    app[SETTINGS] = LakeSettings(management)

    async def on_cleanup(_: web.Application) -> None:
        await app[SETTINGS].watcher.close()

    app.on_cleanup.append(on_cleanup)
    r = app.router
    for page in PAGES:
        r.add_get(page, index)
    for tree in PAGE_TREES:
        r.add_get(tree, index)
        r.add_get(tree + "/{tail:.*}", index)
    r.add_get("/api/logs/lake", lake)
    r.add_get("/api/logs/search", search)
    r.add_get("/api/logs/report", report_index)
    r.add_get("/api/logs/report/{path:.+}", report_file)
    logsview.setup(app, management)
    streams.setup(app)
