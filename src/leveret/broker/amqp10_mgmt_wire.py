"""The wire of RabbitMQ 4.2's AMQP management node ("HTTP over AMQP", its
rabbit_amqp_management): the request and response messages, the request target as the
Erlang libraries RabbitMQ calls read it (``uri_string:normalize`` and ``dissect_query``,
cowlib's ``urldecode``), a binding's path segment and its arguments' hash, the arguments'
conversion between AMQP 1.0 and AMQP 0-9-1 types (``mc_amqpl:to_091`` / ``from_091``), and
AMQP 1.0 values as ``~tp`` prints the terms RabbitMQ decodes them to, for its error texts.

Values are the tagged view of :mod:`leveret.protocol.amqp10.types` (``("string", "x")``).
What RabbitMQ's code does not expect (a clause that does not match) crashes its session:
:class:`Crash`, whose description is the Erlang reason the session ends with (RabbitMQ
adds its stack trace, which Leveret has no equivalent of). What it answers with an error
status is :class:`Refusal`."""

from __future__ import annotations

import base64
import re
import string
from dataclasses import dataclass
from typing import Any

from leveret.broker.erlterms import atom, binary, binary_term, erlang_float
from leveret.broker.errors import type_name
from leveret.broker.exchanges.erlhash import Atom, make_hash2
from leveret.protocol.amqp10 import types as t
from leveret.protocol.amqp10.types import DecodeError, Value
from leveret.protocol.spec import TypedTable, type_of

#: the body of a request without an amqp-value section (RabbitMQ's ``undefined``, which
#: is not ``null``)
MISSING: Value = ("missing", None)
NULL: Value = ("null", None)


class Crash(Exception):
    """RabbitMQ's session process crashes on the request: the session ends with
    amqp:internal-error; ``reason`` is the Erlang term it crashed with."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Refusal(Exception):
    """The request is answered with an error ``status`` and ``text`` as its body."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


# ================================================================== the messages
@dataclass(frozen=True, slots=True)
class Request:
    """What rabbit_amqp_management:handle_request reads of a request message."""

    message_id: Value
    target: str  # the HTTP request target (properties' ``to``)
    method: str  # properties' ``subject``
    body: Value  # the amqp-value section's value, or MISSING


def decode_request(payload: bytes) -> Request:
    """A request message. RabbitMQ matches ``to`` and ``subject`` as strings and
    ``reply-to`` as exactly ``$me`` (Link Pair CS01 2.1), taking the last properties and
    amqp-value sections: anything else is a badmatch."""
    try:
        sections = t.sections(payload)
    except DecodeError as exc:
        raise Crash(f"{{decode_error,{exc}}}") from None
    properties: list[Value] | None = None
    body = MISSING
    for code, value in sections:
        if code == t.PROPERTIES and value[0] == "list":
            properties = value[1]
        elif code == t.AMQP_VALUE:
            body = value
    fields = list(properties or []) + [NULL] * 5
    message_id, to, subject, reply_to = fields[0], fields[2], fields[3], fields[4]
    if (
        properties is None
        or to[0] != "string"
        or subject[0] != "string"
        or reply_to != ("string", "$me")
    ):
        raise Crash("{badmatch,{'v1_0.properties',...}}")
    return Request(message_id, to[1], subject[1], body)


def encode_response(message_id: Value, status: str, body: Value) -> bytes:
    """The response: properties (subject the status, correlation-id the request's
    message-id, HTTP over AMQP WD06 5.1), application-properties ``http:response`` 1.1,
    and the body as an amqp-value."""
    properties: list[Value] = [NULL, NULL, NULL, ("string", status)]
    if message_id[0] not in ("null", "missing"):
        properties += [NULL, message_id]
    app = ("map", [(("string", "http:response"), ("string", "1.1"))])
    return (
        t.section(t.PROPERTIES, ("list", properties))
        + t.section(t.APPLICATION_PROPERTIES, app)
        + t.section(t.AMQP_VALUE, body)
    )


# ============================================================ the request target
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_SUB_DELIMS = frozenset("!$&'()*+,;=")
_PCHAR = _UNRESERVED | _SUB_DELIMS | frozenset(":@%")
_PATH_CHARS = _PCHAR | frozenset("/")
_QUERY_CHARS = _PCHAR | frozenset("/?")
_AUTHORITY_CHARS = _UNRESERVED | _SUB_DELIMS | frozenset(":@%[]")
_HEX = frozenset(string.hexdigits)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _charlist(chars: str) -> str:
    """``~tp`` of a charlist (RabbitMQ runs with ``+pc unicode``): a string when every
    character is printable, else its code points."""
    escapes = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\b": "\\b", "\f": "\\f"}
    escapes |= {"\x1b": "\\e", '"': '\\"', "\\": "\\\\"}
    if all(c in escapes or (c.isprintable() and not 0x7F <= ord(c) <= 0x9F) for c in chars):
        return '"' + "".join(escapes.get(c, c) for c in chars) + '"'
    return "[" + ",".join(str(ord(c)) for c in chars) + "]"


def _invalid(uri: str, char: str) -> Refusal:
    return Refusal("400", f"failed to normalize URI '{uri}': invalid_uri {_charlist(char)}")


def _check_chars(uri: str, part: str, allowed: frozenset[str]) -> None:
    for c in part:
        if c not in allowed:
            raise _invalid(uri, c)


def _normalize_percent(uri: str, part: str) -> str:
    """Percent-encodings normalized as uri_string does: an unreserved character's decoded,
    the others' hex upper-cased; a ``%`` with fewer than two characters after it in its
    component is kept, one followed by two that are not hex digits is refused."""
    out: list[str] = []
    i = 0
    n = len(part)
    while i < n:
        c = part[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if n - i < 3:
            out.append(part[i:])
            break
        digits = part[i + 1 : i + 3]
        if not (digits[0] in _HEX and digits[1] in _HEX):
            raise Refusal(
                "400",
                f"failed to normalize URI '{uri}': invalid_percent_encoding "
                f"{binary(part[i : i + 3])}",
            )
        decoded = chr(int(digits, 16))
        out.append(decoded if decoded in _UNRESERVED else "%" + digits.upper())
        i += 3
    return "".join(out)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4."""
    out: list[str] = []
    rest = path
    while rest:
        if rest.startswith("../"):
            rest = rest[3:]
        elif rest.startswith(("./", "/./")):
            rest = rest[2:]
        elif rest == "/.":
            rest = "/"
        elif rest.startswith("/../"):
            rest = rest[3:]
            if out:
                out.pop()
        elif rest == "/..":
            rest = "/"
            if out:
                out.pop()
        elif rest in (".", ".."):
            rest = ""
        else:
            start = 1 if rest.startswith("/") else 0
            end = rest.find("/", start)
            end = len(rest) if end < 0 else end
            out.append(rest[:end])
            rest = rest[end:]
    return "".join(out)


def parse_target(uri: str) -> tuple[list[str], dict[str, str | bool]]:
    """The path segments (still percent-encoded) and the query of a request target, as
    rabbit_amqp_management:parse_uri gets them: Refusal 400 where ``uri_string`` refuses
    the URI or its query, Crash where the path does not start with ``/``."""
    rest = uri
    scheme = _SCHEME.match(rest)
    if scheme is not None:
        rest = rest[scheme.end() :]
    fragment_at = rest.find("#")
    fragment = None
    if fragment_at >= 0:
        rest, fragment = rest[:fragment_at], rest[fragment_at + 1 :]
    query_at = rest.find("?")
    query: str | None = None
    if query_at >= 0:
        rest, query = rest[:query_at], rest[query_at + 1 :]
    if rest.startswith("//"):
        end = rest.find("/", 2)
        end = len(rest) if end < 0 else end
        _check_chars(uri, rest[2:end], _AUTHORITY_CHARS)
        rest = rest[end:]
    _check_chars(uri, rest, _PATH_CHARS)
    if query is not None:
        _check_chars(uri, query, _QUERY_CHARS)
    if fragment is not None:
        _check_chars(uri, fragment, _QUERY_CHARS)
    path = _remove_dot_segments(_normalize_percent(uri, rest))
    if query is not None:
        query = _normalize_percent(uri, query)
    if fragment is not None:
        _normalize_percent(uri, fragment)
    if path == "":
        return [], {}  # no handler takes it: a function_clause
    if not path.startswith("/"):
        raise Crash("{badmatch,[" + ",".join(binary(s) for s in path.split("/")) + "]}")
    segments = path.split("/")[1:]
    return segments, _dissect_query(query) if query is not None else {}


def _dissect_query(query: str) -> dict[str, str | bool]:
    """uri_string:dissect_query into a map (a repeated key: the last one): ``+`` is a
    space, a key without ``=`` is ``true``."""
    out: dict[str, str | bool] = {}
    if not query:
        return out
    for pair in query.split("&"):
        key, sep, value = pair.partition("=")
        try:
            k = _form_decode(key)
            out[k] = _form_decode(value) if sep else True
        except UnicodeDecodeError as exc:
            bad = exc.object[exc.start :].decode("latin-1")
            raise Refusal(
                "400", f"failed to dissect query '{query}': invalid_input {_charlist(bad)}"
            ) from None
    return out


def _form_decode(text: str) -> str:
    raw = bytearray()
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "%" and n - i >= 3:
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
            continue
        raw.extend(b" " if c == "+" else c.encode())
        i += 1
    return bytes(raw).decode("utf-8", "strict")


def urldecode(segment: str) -> str:
    """cowlib's ``cow_uri:urldecode`` of a path segment: ``%XX`` decoded, nothing else
    (``+`` stays); a ``%`` without two hex digits crashes. A name that decodes to bytes
    that are not UTF-8 is refused: RabbitMQ would take it as a binary, Leveret's names
    are text."""
    if "%" not in segment:
        return segment
    raw = bytearray()
    i = 0
    n = len(segment)
    while i < n:
        c = segment[i]
        if c == "%":
            digits = segment[i + 1 : i + 3]
            if len(digits) < 2 or not (digits[0] in _HEX and digits[1] in _HEX):
                raise Crash("badarg")
            raw.append(int(digits, 16))
            i += 3
            continue
        raw.extend(c.encode())
        i += 1
    try:
        return bytes(raw).decode("utf-8", "strict")
    except UnicodeDecodeError:
        raise Refusal("400", f"Bad name '{segment}': not UTF-8 once percent-decoded") from None


def quote(text: str) -> str:
    """``uri_string:quote``: every byte but the unreserved characters percent-encoded."""
    return "".join(
        c if c in _UNRESERVED else "".join(f"%{b:02X}" for b in c.encode()) for c in text
    )


# ============================================================= binding paths
_BINDING_SEGMENT = re.compile(
    r"src=([0-9A-Za-z\-._~%]+);dst([eq])=([0-9A-Za-z\-._~%]+);"
    r"key=([0-9A-Za-z\-._~%]*);args=([0-9A-Za-z\-_]*)"
)


def binding_segment(segment: str) -> tuple[str, str, str, str, str]:
    """``src=…;dstq=…;key=…;args=…``: source, destination kind ("queue" or "exchange"),
    destination, binding key (percent-decoded) and the arguments' hash."""
    m = _BINDING_SEGMENT.fullmatch(segment)
    if m is None:
        raise Refusal("400", f"bad binding path segment '{segment}'")
    src, kind, dst, key, args = m.groups()
    return (
        urldecode(src),
        "exchange" if kind == "e" else "queue",
        urldecode(dst),
        urldecode(key),
        args,
    )


def binding_location(source: str, kind: str, destination: str, key: str, args: Any) -> str:
    """A binding's path (rabbit_amqp_management:compose_binding_uri)."""
    return (
        f"/bindings/src={quote(source)};dst{kind[0]}={quote(destination)};"
        f"key={quote(key)};args={args_hash(args)}"
    )


def args_hash(arguments: Any) -> str:
    """The hash a binding's path names its arguments by: ``erlang:phash2`` of the sorted
    AMQP 0-9-1 table, in 32 bits, URL-safe base64 without padding; empty for none."""
    if not arguments:
        return ""
    h = make_hash2(erlang_table(arguments)) & 0xFFFFFFFF
    return base64.urlsafe_b64encode(h.to_bytes(4, "big")).rstrip(b"=").decode()


def erlang_table(arguments: Any, sort: bool = True) -> list[tuple[Any, ...]]:
    """A field table as the Erlang term RabbitMQ keeps: ``[{Key, Type, Value}]``, sorted
    by key (rabbit_misc:sort_field_table) at the top level."""
    items = [
        (k.encode(), Atom(_type_091(arguments, k)), _erlang_value(v, _type_091(arguments, k)))
        for k, v in arguments.items()
    ]
    return sorted(items, key=lambda item: item[0]) if sort else items


def _type_091(table: Any, key: str) -> str:
    return type_of(table, key) or type_name(table[key])


def _erlang_value(value: Any, kind: str) -> Any:
    if kind == "void" or value is None:
        return Atom("undefined")
    if kind == "table":
        return erlang_table(value, sort=False)
    if kind == "array":
        return [(Atom(type_name(v)), _erlang_value(v, type_name(v))) for v in value]
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return value


# ================================================================= arguments
# mc_amqpl:to_091, an AMQP 1.0 type to its AMQP 0-9-1 one
_TO_091 = {
    "string": "longstr",
    "symbol": "longstr",
    "binary": "longstr",
    "long": "long",
    "ulong": "long",
    "byte": "byte",
    "ubyte": "unsignedbyte",
    "short": "short",
    "ushort": "unsignedshort",
    "uint": "unsignedint",
    "int": "signedint",
    "double": "double",
    "float": "float",
    "timestamp": "timestamp",
    "bool": "bool",
    "null": "void",
}
# mc_amqpl:from_091, back
_FROM_091 = {
    "long": "long",
    "unsignedbyte": "ubyte",
    "short": "short",
    "unsignedshort": "ushort",
    "unsignedint": "uint",
    "signedint": "int",
    "double": "double",
    "float": "float",
    "bool": "bool",
    "binary": "binary",
    "byte": "byte",
}


def args_from_amqp(value: Value) -> TypedTable:
    """rabbit_amqp_management:args_amqp_to_amqpl: a map of arguments (string or symbol
    keys) as an AMQP 0-9-1 table keeping each value's type."""
    if value[0] != "map":
        raise Crash("function_clause")
    out = TypedTable({})
    for k, v in value[1]:
        if k[0] not in ("string", "symbol"):
            raise Refusal("400", f"unsupported argument {term(('list', [k, v]), tuple_=True)}")
        kind, python = _to_091(v)
        if k[1] not in out:  # rabbit_misc:table_lookup finds the first
            out[k[1]] = python
            out.types[k[1]] = kind
    return out


def _to_091(value: Value) -> tuple[str, Any]:
    kind, v = value
    if kind == "map":
        # what the parser keeps as_is (decimals, NaN and infinite floats) is left out
        table = TypedTable({})
        for k, item in v:
            if _as_is(k) or _as_is(item):
                continue
            inner_kind, inner = _to_091(item)
            table[str(k[1])] = inner
            table.types[str(k[1])] = inner_kind
        return "table", table
    if kind in ("list", "array"):
        return "array", [_to_091(item)[1] for item in v]
    mapped = _TO_091.get(kind)
    if mapped is None or (kind in ("float", "double") and v != v):
        raise Crash("function_clause")
    if kind == "timestamp":
        return mapped, v // 1000
    if kind == "null":
        return mapped, None
    return mapped, v


def _as_is(value: Value) -> bool:
    """amqp10_binary_parser's ``{as_is, Code, Bytes}``: decimals, NaN and infinities."""
    kind, v = value
    if kind in ("float", "double"):
        return bool(v != v or v in (float("inf"), float("-inf")))
    return kind in ("decimal32", "decimal64", "decimal128")


def args_to_amqp(arguments: Any) -> Value:
    """rabbit_amqp_management:args_amqpl_to_amqp: an AMQP 0-9-1 table as an AMQP 1.0
    map with string keys (nested tables' keys are symbols)."""
    return (
        "map",
        [(("string", k), _from_091(v, _type_091(arguments, k))) for k, v in arguments.items()],
    )


def _from_091(value: Any, kind: str) -> Value:
    if kind == "longstr":
        raw = value.encode() if isinstance(value, str) else bytes(value)
        if len(raw) <= 4096 and b"\x00" not in raw:
            try:
                return ("string", raw.decode("utf-8", "strict"))
            except UnicodeDecodeError:
                pass
        return ("binary", raw)
    if kind == "timestamp":
        seconds = value if isinstance(value, int) else int(value.timestamp())
        return ("timestamp", seconds * 1000)
    if kind == "void":
        return NULL
    if kind == "array":
        return ("list", [_from_091(v, type_name(v)) for v in value])
    if kind == "table":
        return (
            "map",
            [(("symbol", k), _from_091(v, _type_091(value, k))) for k, v in value.items()],
        )
    mapped = _FROM_091.get(kind)
    if mapped is None:  # a decimal: mc_amqpl:from_091 has no clause for it
        raise Crash("function_clause")
    if mapped == "binary":
        return ("binary", bytes(value))
    return (mapped, value)


# ============================================================ ~tp of the terms
_ERLANG_TYPE = {"string": "utf8", "bool": "boolean"}
_AS_IS = {"decimal32": 0x74, "decimal64": 0x84, "decimal128": 0x94}


def term(value: Value, tuple_: bool = False) -> str:
    """An AMQP 1.0 value as ``~tp`` prints the term amqp10_binary_parser decodes it to
    (``{utf8,<<"x">>}``, ``{map,[...]}``, ``true``). ``tuple_``: a two-item list printed
    as the ``{Key, Value}`` pair of a map."""
    kind, v = value
    if tuple_:
        return "{" + ",".join(term(item) for item in v) + "}"
    if kind == "null":
        return "null"
    if kind == "bool":
        return "true" if v else "false"
    if kind in ("string", "symbol"):
        return "{" + _ERLANG_TYPE.get(kind, kind) + "," + binary(v) + "}"
    if kind == "binary":
        return "{binary," + binary_term(bytes(v)) + "}"
    if kind in ("float", "double"):
        if v != v or v in (float("inf"), float("-inf")):
            code = 0x72 if kind == "float" else 0x82
            return "{as_is," + str(code) + "," + binary_term(t.encode(value)[1:]) + "}"
        return "{" + kind + "," + erlang_float(v) + "}"
    if kind in _AS_IS:
        return "{as_is," + str(_AS_IS[kind]) + "," + binary_term(bytes(v)) + "}"
    if kind == "uuid":
        return "{uuid," + binary_term(bytes(v)) + "}"
    if kind == "list":
        return "{list,[" + ",".join(term(item) for item in v) + "]}"
    if kind == "map":
        pairs = ("{" + term(k) + "," + term(x) + "}" for k, x in v)
        return "{map,[" + ",".join(pairs) + "]}"
    if kind == "array":
        element = _ERLANG_TYPE.get(v[0][0], v[0][0]) if v else "null"
        return "{array," + atom(element) + ",[" + ",".join(term(item) for item in v) + "]}"
    if kind == "described":
        descriptor, inner = v
        return "{described," + term(descriptor) + "," + term(inner) + "}"
    return "{" + kind + "," + str(v) + "}"


def query_term(query: dict[str, str | bool]) -> str:
    """``~tp`` of the map dissect_query's list makes (keys in term order)."""
    items = sorted(query.items(), key=lambda kv: kv[0].encode())
    shown = (f"{binary(k)} => {'true' if v is True else binary(str(v))}" for k, v in items)
    return "#{" + ",".join(shown) + "}"
