"""A stream's status: ``GET /api/queues/{vhost}/{name}/stream-status``.

RabbitMQ 3.10 reports a stream's offsets and segments only through its CLI
(``rabbitmq-streams stream_status``, i.e. ``rabbit_stream_queue:status/2``), not through its
management API. This Leveret extension answers the same rows, one per member (Leveret has one,
the writer), with the same keys: ``role``, ``node``, ``offset`` (the last written),
``committed_offset`` (the last on disk, -1 for an empty stream), ``first_offset``,
``readers`` and ``segments``; and one more, ``size``, the bytes of the segment files.
A classic queue is answered as ``stream_status`` answers it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.broker.queues import StreamQueue
from leveret.management.context import mgmt
from leveret.management.httputil import bad_request, json_response, not_found

if TYPE_CHECKING:
    from leveret.broker.queues import Queue


def stream_status(q: Queue, node: str) -> dict[str, Any] | None:
    """The writer's row for a stream queue; None for any other queue."""
    if not isinstance(q, StreamQueue):
        return None
    log = q.log
    return {
        "role": "writer",
        "node": node,
        "offset": log.next_offset - 1,
        "committed_offset": log.committed - 1,
        "first_offset": log.first,
        "readers": len(q.consumers),
        "segments": log.segment_count,
        "size": log.total_bytes,
    }


async def stream_status_handler(request: web.Request) -> web.Response:
    m = mgmt(request)
    v = m.vhost(request)
    q = v.queues.get(request.match_info["name"])
    if q is None:
        raise not_found()
    row = stream_status(q, m.broker.node_name)
    if row is None:
        raise bad_request("Cannot get stream status of a classic queue")
    return json_response([row])


def setup(app: web.Application) -> None:
    app.router.add_get("/api/queues/{vhost}/{name}/stream-status", stream_status_handler)
