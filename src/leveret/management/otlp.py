"""OpenTelemetry logs into the log system: OTLP/HTTP ``POST /v1/logs`` on the management
listener, as the OpenTelemetry Collector's OTLP receiver serves it.

- Bodies: ``application/x-protobuf`` (an ExportLogsServiceRequest) or ``application/json``
  (OTLP's JSON mapping: lowerCamelCase keys, trace and span ids in hex, enums as numbers);
  ``Content-Encoding`` gzip or deflate. Decoded with the ``opentelemetry-proto`` package.
- Answers, in the request's content type: 200 with an ExportLogsServiceResponse, whose
  ``partial_success`` counts the records the broker refused and says why; 400 with a
  google.rpc.Status for a body that cannot be decoded; 415 for another content type; 401
  without valid credentials; 403 when the user may not write to the exchange (or declare
  it, when it is missing); 503 with Retry-After while the broker has a resource alarm
  (exporters retry it, as AMQP publishers wait while blocked).
- Authentication is the management API's: HTTP Basic, a user with a management tag, the
  loopback rule. The records are published as that user through the broker's operations
  (:class:`~leveret.server.log_intake.LogIntake`, shared with syslog).

How a LogRecord becomes a record (docs/log-sources.md has the table): ``service.name`` ->
app, ``host.name`` -> host, ``process.pid`` -> pid (resource attributes); severity number
(1-8 debug, 9-12 info, 13-16 warning, 17-20 error, 21-24 critical) or, without one, its
text; the body (a string as is, any other value as JSON); time_unix_nano, else
observed_time_unix_nano, else arrival; the scope's name -> logger; ``exception.stacktrace``
(else ``exception.type: exception.message``) -> exc; trace_id, span_id (hex), the
attributes and the resource's other attributes -> extra. Facility: ``user``, as emit-log's
default (OTLP has none)."""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from leveret.broker.operations import Actor
from leveret.logs.record import ALIASES, DEFAULT_FACILITY, SEVERITIES, Record
from leveret.management.context import mgmt
from leveret.management.httputil import MANAGEMENT_TAGS, credentials
from leveret.protocol import spec
from leveret.protocol.errors import AMQPError

SOURCE = "otlp"
PATH = "/v1/logs"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_BODY = 64 * 1024 * 1024  # decompressed, as the management API's client_max_size
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# google.rpc.Code
_INVALID_ARGUMENT, _PERMISSION_DENIED, _UNAUTHENTICATED, _UNAVAILABLE = 3, 7, 16, 14
_NOT_FOUND, _INTERNAL = 5, 13
_TEXT_SEVERITY = {**ALIASES, "trace": "debug", "notice": "info", "emerg": "critical",
                  "alert": "critical", "emergency": "critical"}  # fmt: skip
_MAPPED = ("service.name", "host.name", "process.pid")


class _Refusal(Exception):
    """A request answered with an error status and a google.rpc.Status."""

    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


# ---------------------------------------------------------------------- the mapping
def severity_of(number: int, text: str) -> str:
    """The record's severity from OTLP's SeverityNumber, else from its text (info when
    neither says)."""
    if number > 0:
        if number <= 8:
            return "debug"
        return SEVERITIES[min((number - 9) // 4 + 1, 4)]
    word = text.strip().lower()
    word = _TEXT_SEVERITY.get(word, word)
    return word if word in SEVERITIES else "info"


def value_of(v: AnyValue) -> Any:
    """An AnyValue as the JSON value it stands for (bytes as base64, as OTLP/JSON)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(v.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, kind)


def attributes_of(items: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in items}


def _time(nanos: int) -> str:
    return (_EPOCH + timedelta(microseconds=nanos // 1000)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def records_of(request: ExportLogsServiceRequest, arrival: float) -> list[Record]:
    """Every LogRecord of a request as a log record (see the module's mapping)."""
    out: list[Record] = []
    arrived = int(arrival * 1e9)
    for rl in request.resource_logs:
        resource = attributes_of(rl.resource.attributes)
        app = resource.get("service.name")
        host = resource.get("host.name")
        pid = resource.get("process.pid")
        others = {k: v for k, v in resource.items() if k not in _MAPPED}
        for sl in rl.scope_logs:
            scope = sl.scope.name or None
            for lr in sl.log_records:
                out.append(
                    _record(lr, scope, str(app or ""), str(host or ""), pid, others, arrived)
                )
    return out


def _record(
    lr: LogRecord,
    scope: str | None,
    app: str,
    host: str,
    pid: Any,
    resource: dict[str, Any],
    arrived: int,
) -> Record:
    attributes = attributes_of(lr.attributes)
    exc = attributes.pop("exception.stacktrace", None)
    if exc is None and ("exception.type" in attributes or "exception.message" in attributes):
        exc = f"{attributes.get('exception.type', '')}: {attributes.get('exception.message', '')}"
    extra: dict[str, Any] = {}
    if lr.trace_id:
        extra["trace_id"] = lr.trace_id.hex()
    if lr.span_id:
        extra["span_id"] = lr.span_id.hex()
    if lr.flags:
        extra["trace_flags"] = lr.flags & 0xFF
    if lr.severity_text:
        extra["severity_text"] = lr.severity_text
    if lr.severity_number:
        extra["severity_number"] = int(lr.severity_number)
    if lr.event_name:
        extra["event_name"] = lr.event_name
    if attributes:
        extra["attributes"] = attributes
    if resource:
        extra["resource"] = resource
    kind = lr.body.WhichOneof("value")
    if kind == "string_value":
        message = lr.body.string_value
    elif kind is None:
        message = ""
    else:
        message = json.dumps(value_of(lr.body), ensure_ascii=False, separators=(",", ":"))
    return Record(
        ts=_time(lr.time_unix_nano or lr.observed_time_unix_nano or arrived),
        severity=severity_of(int(lr.severity_number), lr.severity_text),
        facility=DEFAULT_FACILITY,
        host=host,
        app=app,
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else 0,
        message=message,
        logger=scope,
        exc=str(exc) if exc is not None else None,
        extra=extra or None,
    )


# ----------------------------------------------------------------------- decoding
def decode(body: bytes, content_type: str) -> ExportLogsServiceRequest:
    """The request a body holds (_Refusal 400 naming what is wrong)."""
    if content_type == PROTOBUF:
        try:
            request = ExportLogsServiceRequest()
            request.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise _Refusal(
                400, _INVALID_ARGUMENT, f"cannot decode the protobuf body: {exc}"
            ) from None
        _check_ids(request)
        return request
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Refusal(400, _INVALID_ARGUMENT, f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _Refusal(400, _INVALID_ARGUMENT, "the body is not a JSON object")
    _hex_ids_to_base64(doc)
    request = ExportLogsServiceRequest()
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise _Refusal(400, _INVALID_ARGUMENT, f"not an OTLP logs request: {exc}") from None
    _check_ids(request)
    return request


def _hex_ids_to_base64(doc: dict[str, Any]) -> None:
    """OTLP/JSON writes trace and span ids in hex where protobuf's JSON has base64."""
    for rl in _list(doc, "resourceLogs", "resource_logs"):
        for sl in _list(rl, "scopeLogs", "scope_logs"):
            for lr in _list(sl, "logRecords", "log_records"):
                if not isinstance(lr, dict):
                    continue
                for key in ("traceId", "trace_id", "spanId", "span_id"):
                    value = lr.get(key)
                    if isinstance(value, str):
                        try:
                            lr[key] = base64.b64encode(bytes.fromhex(value)).decode()
                        except ValueError:
                            raise _Refusal(
                                400, _INVALID_ARGUMENT, f"{key} {value!r} is not hexadecimal"
                            ) from None


def _list(doc: Any, *keys: str) -> list[Any]:
    if not isinstance(doc, dict):
        return []
    for key in keys:
        value = doc.get(key)
        if isinstance(value, list):
            return value
    return []


def _check_ids(request: ExportLogsServiceRequest) -> None:
    for rl in request.resource_logs:
        for sl in rl.scope_logs:
            for lr in sl.log_records:
                if len(lr.trace_id) not in (0, 16):
                    raise _Refusal(
                        400, _INVALID_ARGUMENT, f"trace_id of {len(lr.trace_id)} bytes (16)"
                    )
                if len(lr.span_id) not in (0, 8):
                    raise _Refusal(
                        400, _INVALID_ARGUMENT, f"span_id of {len(lr.span_id)} bytes (8)"
                    )


def _decompress(body: bytes, encoding: str) -> bytes:
    """The body without its Content-Encoding (gzip, deflate; none or identity)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate", "x-gzip"):
        raise _Refusal(
            400, _INVALID_ARGUMENT, f"unsupported Content-Encoding {encoding!r} (gzip, deflate)"
        )
    # gzip: a gzip header (wbits 16+); deflate: zlib's, or raw deflate as some send it
    attempts = (31,) if encoding != "deflate" else (15, -15)
    for wbits in attempts:
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(body, MAX_BODY + 1)
        except zlib.error as exc:
            reason = str(exc)
            continue
        if len(out) > MAX_BODY:
            raise _Refusal(400, _INVALID_ARGUMENT, f"the body is over {MAX_BODY} bytes")
        if not d.eof:
            reason = "the compressed body is cut short"
            continue
        return out
    raise _Refusal(400, _INVALID_ARGUMENT, f"cannot decompress the {encoding} body: {reason}")


# -------------------------------------------------------------------------- answers
def _answer(message: Any, content_type: str, status: int = 200, **headers: str) -> web.Response:
    if content_type == JSON:
        body = json.dumps(json_format.MessageToDict(message), separators=(",", ":")).encode()
    else:
        body = message.SerializeToString()
    return web.Response(body=body, status=status, content_type=content_type, headers=headers)


def _status(refusal: _Refusal, content_type: str) -> web.Response:
    status = status_pb2.Status(code=refusal.code, message=refusal.message)
    return _answer(status, content_type, refusal.status, **refusal.headers)


def _authenticate(request: web.Request) -> str:
    """The user name, as the management API's middleware authenticates (_Refusal 401)."""
    m = mgmt(request)
    creds = credentials(request)
    challenge = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'}
    if creds is None:
        raise _Refusal(401, _UNAUTHENTICATED, "credentials are required", challenge)
    user = m.broker.users.check_credentials(creds[0], creds[1])
    if user is None:
        raise _Refusal(401, _UNAUTHENTICATED, "Login failed", challenge)
    if m.broker.users.loopback_only(user.name, request.remote):
        raise _Refusal(401, _UNAUTHENTICATED, "User can only log in via localhost")
    if not MANAGEMENT_TAGS.intersection(user.tags):
        raise _Refusal(401, _UNAUTHENTICATED, "Not management user")
    return user.name


async def export_logs(request: web.Request) -> web.Response:
    """``POST /v1/logs``."""
    m = mgmt(request)
    content_type = request.content_type
    if content_type not in (PROTOBUF, JSON):
        return web.Response(
            status=415,
            text=f"{content_type or 'no'} content type is not supported: use {PROTOBUF} or {JSON}",
        )
    intake = m.server.log_intake
    try:
        name = _authenticate(request)
        if m.server.state.alarms:
            alarms = ", ".join(sorted(m.server.state.alarms))
            raise _Refusal(
                503,
                _UNAVAILABLE,
                f"resource alarm ({alarms}): try again later",
                {"Retry-After": "1"},
            )
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _Refusal(400, _INVALID_ARGUMENT, "the body is too large") from None
        try:
            export = decode(
                _decompress(raw, request.headers.get("Content-Encoding", "")), content_type
            )
        except _Refusal as exc:
            intake.received(SOURCE)
            intake.refuse(SOURCE, exc.message, str(request.remote or ""))
            raise
        records = records_of(export, time.time())
        intake.received(SOURCE, len(records))
        try:
            reasons = _publish(request, name, records)
        except _Refusal as exc:
            intake.refuse(SOURCE, exc.message, str(request.remote or ""), n=len(records))
            raise
    except _Refusal as exc:
        return _status(exc, content_type)
    response = ExportLogsServiceResponse()
    refused = [r for r in reasons if r is not None]
    if refused:
        response.partial_success.rejected_log_records = len(refused)
        response.partial_success.error_message = "; ".join(dict.fromkeys(refused))
    return _answer(response, content_type)


def _publish(request: web.Request, name: str, records: list[Record]) -> list[str | None]:
    """Publish as the user; the AMQP error that refuses them all as a _Refusal."""
    m = mgmt(request)
    intake = m.server.log_intake
    vhost = intake.vhost
    permission = m.broker.users.permission(name, vhost)
    if permission is None:
        raise _Refusal(
            403, _PERMISSION_DENIED, f"access to vhost '{vhost}' refused for user '{name}'"
        )
    if not records:
        return []
    try:
        return intake.publish(SOURCE, records, Actor(name, permission))
    except AMQPError as exc:
        status, code = {
            spec.ACCESS_REFUSED: (403, _PERMISSION_DENIED),
            spec.NOT_FOUND: (404, _NOT_FOUND),
        }.get(exc.code, (500, _INTERNAL))
        raise _Refusal(status, code, exc.reply_text) from None


def routes(app: web.Application) -> None:
    app.router.add_post(PATH, export_logs)
