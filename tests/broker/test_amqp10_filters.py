"""RabbitMQ 4.2's filters of an AMQP 1.0 receiving link, unit by unit: the SQL filter
expressions' lexer, parser and evaluation, the property filter expressions, and how an
attach's filter map is read. No RabbitMQ 4 runs here: each test names the v4.2.9 source
it pins; the SQL vectors (tests/broker/data/amqp10_sql_vectors.json) are the expressions
of v4.2.9's deps/rabbit/test/amqp_filter_sql_unit_SUITE.erl with the results it expects
against its ``app_props()`` message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.broker import amqp10_filter_prop, amqp10_sql_eval
from leveret.broker.amqp10_filter_msg import FilterMessage, erl_eq
from leveret.broker.amqp10_filters import consumer_spec
from leveret.broker.amqp10_sql import SqlError, parse_sql, tokenize
from leveret.protocol.amqp10 import types
from leveret.protocol.amqp10.types import Described, Symbol, Value

VECTORS = json.loads((Path(__file__).parent / "data" / "amqp10_sql_vectors.json").read_text())

# the suite's app_props(): keys and values with their AMQP types
APP_PROPS: list[tuple[Value, Value]] = [
    (("string", k), v)
    for k, v in [
        ("country", ("symbol", "UK")),
        ("city", ("string", "London")),
        ("description", ("string", "This is a test message")),
        ("currency", ("symbol", "GBP")),
        ("product_id", ("symbol", "ABC_123")),
        ("weight", ("ushort", 5)),
        ("price", ("double", 10.5)),
        ("quantity", ("uint", 100)),
        ("discount", ("double", 0.25)),
        ("temperature", ("int", -5)),
        ("score", ("ulong", 0)),
        ("distance", ("float", 1.2e6)),
        ("tiny_value", ("double", 3.5e-4)),
        ("large_value", ("double", 6.02e23)),
        ("active", ("bool", True)),
        ("premium", ("bool", False)),
        ("missing", ("null", None)),
        ("percentage", ("ubyte", 75)),
    ]
]


def entry(
    header: list[Value] | None = None,
    properties: list[Value] | None = None,
    app: list[tuple[Value, Value]] | None = None,
) -> bytes:
    """A stored message: header, properties, application properties, an amqp-value body."""
    out = types.section(0x70, ("list", header or []))
    out += types.section(0x73, ("list", properties or []))
    out += types.section(0x74, ("map", app or []))
    return out + types.section(0x77, ("symbol", "some message body"))


def described(name: str, value: Value) -> Value:
    return ("described", (("symbol", name), value))


def sql(expression: str) -> amqp10_sql_eval.SqlExpression | None:
    return amqp10_sql_eval.parse(
        ("described", (("symbol", "amqp:sql-filter"), ("string", expression)))
    )


def literal(n: int) -> str:
    """An integer in SQL, which has no negative literals (unary minus)."""
    return str(n) if n >= 0 else f"-{-n}"


def sql_match(expression: str, message: bytes) -> bool:
    parsed = sql(expression)
    assert parsed is not None, expression
    return parsed.matches(FilterMessage(message))


@pytest.mark.parametrize(("expression", "expected"), VECTORS["match"])
def test_sql_vectors_of_rabbitmqs_unit_suite(expression: str, expected: bool) -> None:
    """rabbit_amqp_filter_sql:eval at v4.2.9: each expression's result against the
    suite's message (three-valued logic, comparisons, arithmetic, LIKE, IN, literals,
    identifiers, whitespace, precedence)."""
    assert sql_match(expression, entry(app=APP_PROPS)) is expected


@pytest.mark.parametrize("expression", VECTORS["refused"])
def test_sql_expressions_rabbitmq_refuses(expression: str) -> None:
    """rabbit_amqp_filter_sql:parse at v4.2.9 returns error: scanning, grammar, LIKE
    patterns (control characters, a trailing escape), 4096 characters, 200 tokens,
    unknown section fields, binaries (upper-case hex pairs only)."""
    assert sql(expression) is None


PROPS: list[Value] = [
    ("string", "id-123"),
    ("binary", b"\x0a\x0b\x0c"),
    ("string", "to some queue"),
    ("string", "some subject"),
    ("string", "reply to some topic"),
    ("ulong", 789),
    ("symbol", "text/plain"),
    ("symbol", "deflate"),
    ("timestamp", 1311999988888),
    ("timestamp", 1311704463521),
    ("string", "some group ID"),
    ("uint", 999),
    ("string", "other group ID"),
]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("p.message_id = 'id-123'", True),
        ("p.message_id LIKE 'id-%'", True),
        ("p.user_id = 0x0A0B0C", True),
        ("p.to NOT LIKE '%topic'", True),
        ("p.reply_to LIKE 'reply%topic'", True),
        ("p.reply_to LIKE 'reply%queue'", False),
        ("500 < p.correlation_id", True),
        ("p.content_type IN ('text/plain', 'text/html')", True),
        ("p.content_encoding NOT IN ('gzip', 'compress')", True),
        ("p.absolute_expiry_time > 1311999988000", True),
        ("properties.creation_time = 1311704463521", True),
        ("p.group_sequence >= 999 AND NOT p.group_sequence > 999", True),
        ("p.reply_to_group_id IS NOT NULL", True),
        ("header.priority = 7 AND h.priority > 5", True),
        ("UTC() - p.creation_time > 0", True),
    ],
)
def test_sql_reads_the_header_and_properties(expression: str, expected: bool) -> None:
    """rabbit_amqp_filter_sql:get_field_value at v4.2.9 (mc:property, mc:priority,
    mc:timestamp); rabbit_amqp_util:section_field_name_to_atom (header./h.,
    properties./p.)."""
    message = entry(header=[("null", None), ("ubyte", 7)], properties=PROPS)
    assert sql_match(expression, message) is expected


def test_sql_defaults_priority_to_4_and_unknown_fields_to_null() -> None:
    """?DEFAULT_MSG_PRIORITY is 4; a field the message lacks is unknown: IS NULL, and a
    comparison with it is not true (rabbit_amqp_filter_sql at v4.2.9)."""
    assert sql_match("h.priority = 4", entry())
    assert sql_match("p.subject IS NULL AND nothing IS NULL", entry())
    assert not sql_match("p.subject <> 'x'", entry())
    assert not sql_match("NOT (p.subject = 'x')", entry())


def test_an_amqp091_publishers_priority_is_its_annotation() -> None:
    """mc_amqp:get_property(priority) at v4.2.9: without a header priority, the
    x-basic-priority annotation of a message RabbitMQ 3 stored from AMQP 0-9-1."""
    annotations = types.section(0x72, ("map", [(("symbol", "x-basic-priority"), ("ubyte", 9))]))
    message = annotations + types.section(0x75, ("binary", b"body"))
    assert sql_match("header.priority = 9", message)


@given(
    st.text(
        alphabet=st.characters(
            min_codepoint=32, exclude_categories=("Cs",), exclude_characters="%_'\x7f"
        )
    )
)
def test_a_pattern_without_wildcards_matches_only_itself(text: str) -> None:
    """transform_pattern at v4.2.9: a LIKE pattern without a wildcard is an exact match."""
    literal = text.replace("'", "''")
    app = [(("string", "k"), ("string", text))]
    assert sql_match(f"k LIKE '{literal}'", entry(app=app))
    assert not sql_match(f"k LIKE '{literal}x'", entry(app=app))


@given(st.integers(-(2**63), 2**63 - 1), st.integers(1, 2**40), st.booleans())
def test_integer_arithmetic_is_exact(a: int, b: int, negative: bool) -> None:
    """rabbit_amqp_filter_sql:arithmetic at v4.2.9: Erlang's integers have no bound;
    rem has the dividend's sign; dividing by zero (0 or 0.0) is unknown."""
    b = -b if negative else b
    app = [(("string", "a"), ("long", a)), (("string", "b"), ("long", b))]
    message = entry(app=app)
    remainder = abs(a) % abs(b) * (-1 if a < 0 else 1)
    assert sql_match(f"a * b - b = {literal(a * b - b)}", message)
    assert sql_match(f"a % b = {literal(remainder)}", message)
    assert not sql_match("a / 0 = 0 OR a / 0.0 = 0 OR a % 0 = 0", message)


def test_the_lexer_takes_the_longest_match() -> None:
    """leex at v4.2.9: the longest token wins, the first rule of equal length (keywords in
    upper case before identifiers); 1.5E3 a float, 1E3 an integer and an identifier."""
    assert [t.kind for t in tokenize("ANDY AND 1.5E3")] == ["identifier", "AND", "float"]
    assert [t.kind for t in tokenize("1E3")] == ["integer", "identifier"]
    assert tokenize("[a ]]b]")[0].value == b"a ]b"
    assert tokenize("'it''s'")[0].value == b"it's"
    with pytest.raises(SqlError):
        tokenize("a \v= 1")  # a vertical tab is no whitespace there


def test_not_binds_tighter_than_and_and_comparisons_do_not_chain() -> None:
    """rabbit_amqp_sql_parser.yrl at v4.2.9: NOT 600 > AND 200 > OR 100; comparisons are
    non-associative; IS NULL only after an identifier."""
    assert parse_sql("NOT a = 1 AND b = 2")[0] == "and"
    assert parse_sql("a = 1 OR b = 2 AND c = 3")[0] == "or"
    for bad in ("a = b = c", "(a) IS NULL", "a + 1 IS NULL", "- -1 = 1", "a NOT b"):
        with pytest.raises(SqlError):
            parse_sql(bad)


def test_erlang_equality() -> None:
    """Erlang's ==: numbers across integer and float, a boolean only a boolean."""
    assert erl_eq(1, 1.0) and not erl_eq(True, 1) and not erl_eq(b"1", 1)
    assert erl_eq(False, False) and not erl_eq(None, False)


# ------------------------------------------------------------ property filters
def prop_filter(descriptor: Value, pairs: list[tuple[Value, Value]]) -> Any:
    return amqp10_filter_prop.parse(("described", (descriptor, ("map", pairs))))


PROPERTIES = ("symbol", "amqp:properties-filter")
APPLICATION = ("symbol", "amqp:application-properties-filter")


def test_property_filters_match_exactly_by_prefix_or_by_suffix() -> None:
    """rabbit_amqp_filter_prop:match_simple_type and parse_string_modifier_prefix at
    v4.2.9: &p: a prefix, &s: a suffix, && an escaped &; numbers across types."""
    message = FilterMessage(entry(properties=PROPS, app=APP_PROPS))
    cases = [
        (PROPERTIES, [(("symbol", "subject"), ("string", "&p:some"))], True),
        (PROPERTIES, [(("symbol", "subject"), ("string", "&s:subject"))], True),
        (PROPERTIES, [(("symbol", "subject"), ("string", "&s:subjec"))], False),
        (PROPERTIES, [(("symbol", "correlation-id"), ("ulong", 789))], True),
        (PROPERTIES, [(("symbol", "group-sequence"), ("uint", 999))], True),
        (PROPERTIES, [(("symbol", "user-id"), ("binary", b"\x0a\x0b\x0c"))], True),
        (("ulong", 0x173), [(("symbol", "content-type"), ("symbol", "text/plain"))], True),
        (APPLICATION, [(("string", "weight"), ("double", 5.0))], True),
        (APPLICATION, [(("string", "country"), ("string", "UK"))], True),  # a symbol there
        (APPLICATION, [(("string", "active"), ("bool", True))], True),
        (APPLICATION, [(("string", "active"), ("int", 1))], False),
        (APPLICATION, [(("string", "missing"), ("null", None))], True),
        (APPLICATION, [(("string", "absent"), ("null", None))], False),  # must be there
        (
            APPLICATION,
            [(("string", "city"), ("string", "&p:Lon")), (("string", "weight"), ("int", 6))],
            False,
        ),
    ]
    for descriptor, pairs, expected in cases:
        parsed = prop_filter(descriptor, pairs)
        assert parsed is not None, pairs
        assert parsed.matches(message) is expected, pairs
    escaped = prop_filter(APPLICATION, [(("string", "k"), ("string", "&&x"))])
    app = [(("string", "k"), ("string", "&x"))]
    assert escaped.matches(FilterMessage(entry(app=app)))


@pytest.mark.parametrize(
    ("descriptor", "pairs"),
    [
        (PROPERTIES, []),  # no field
        (PROPERTIES, [(("symbol", "group-sequence"), ("long", 1))]),  # a uint only
        (PROPERTIES, [(("symbol", "message-id"), ("int", 1))]),  # ulong, uuid, binary, string
        (PROPERTIES, [(("symbol", "subject"), ("symbol", "s"))]),
        (PROPERTIES, [(("symbol", "durable"), ("bool", True))]),  # not a property
        (PROPERTIES, [(("string", "subject"), ("string", "s"))]),  # keys are symbols
        (APPLICATION, [(("symbol", "k"), ("string", "v"))]),  # keys are strings
        (APPLICATION, [(("string", "k"), ("string", "&x:v"))]),  # no such modifier
        (APPLICATION, [(("string", f"k{i}"), ("int", i)) for i in range(17)]),  # 16 at most
        (("symbol", "apache.org:selector-filter:string"), [(("string", "k"), ("int", 1))]),
    ],
)
def test_property_filters_rabbitmq_refuses(descriptor: Value, pairs: list[Any]) -> None:
    """rabbit_amqp_filter_prop:parse at v4.2.9 returns error: the filter is left out."""
    assert prop_filter(descriptor, pairs) is None


# ------------------------------------------------------------ the filter map
def test_the_attach_keeps_what_it_put_in_place_as_sent() -> None:
    """rabbit_amqp_session:parse_filters at v4.2.9: the effective map names the filters
    in place, each value as sent; a rabbitmq:stream-* filter without a descriptor is
    taken (and echoed) as described by its name (amqp_filter_set_bug); the stream filter
    keeps a list's strings."""
    tagged: Value = (
        "map",
        [
            (("symbol", "rabbitmq:stream-offset-spec"), ("ulong", 5)),
            (
                ("symbol", "my-filter"),
                (
                    "described",
                    (("symbol", "rabbitmq:stream-filter"), ("list", [("string", "a"), ("int", 1)])),
                ),
            ),
            (
                ("symbol", "rabbitmq:stream-match-unfiltered"),
                ("described", (("symbol", "rabbitmq:stream-match-unfiltered"), ("bool", True))),
            ),
            (
                ("symbol", "jms"),
                (
                    "described",
                    (("symbol", "apache.org:selector-filter:string"), ("string", "a = 1")),
                ),
            ),
        ],
    )
    plain = {Symbol("x"): 1}  # the plain view is not read when the tagged one is there
    spec = consumer_spec(plain, None, tagged)
    assert spec.arguments == {
        "x-stream-offset": 5,
        "x-stream-filter": ["a"],
        "x-stream-match-unfiltered": True,
    }
    assert list(spec.filter or {}) == [
        "rabbitmq:stream-offset-spec",
        "my-filter",
        "rabbitmq:stream-match-unfiltered",
    ]
    offset = (spec.filter or {})[Symbol("rabbitmq:stream-offset-spec")]
    assert types.encode(types.tag(offset)) == types.encode(
        ("described", (("symbol", "rabbitmq:stream-offset-spec"), ("ulong", 5)))
    )
    assert spec.message_filter is None


def spec_of(*pairs: tuple[str, Value]) -> Any:
    return consumer_spec({}, None, ("map", [(("symbol", k), v) for k, v in pairs]))


def test_sql_and_property_filters_exclude_each_other_the_later_wins() -> None:
    """parse_filters folds from the map's end (lists:foldr) at v4.2.9: of two filters
    that exclude each other the later is kept; two of one property kind: the later."""
    prop = ("described", (PROPERTIES, ("map", [(("symbol", "subject"), ("string", "s"))])))
    sql_value = ("described", (("symbol", "amqp:sql-filter"), ("string", "TRUE")))
    spec = consumer_spec(
        {}, None, ("map", [(("symbol", "p"), prop), (("symbol", "sql-filter"), sql_value)])
    )
    assert list(spec.filter or {}) == ["sql-filter"]
    spec = consumer_spec(
        {}, None, ("map", [(("symbol", "sql-filter"), sql_value), (("symbol", "p"), prop)])
    )
    assert list(spec.filter or {}) == ["p"]
    spec = spec_of(("p1", prop), ("p2", prop))
    assert list(spec.filter or {}) == ["p2"]
    assert spec.message_filter is not None


def test_the_first_offset_spec_in_the_map_is_the_consumers() -> None:
    """The consumer arguments are prepended as the map is folded from its end, and the
    stream queue reads the first x-stream-offset of them."""
    first = Described(Symbol("rabbitmq:stream-offset-spec"), "first")
    last = Described(Symbol("rabbitmq:stream-offset-spec"), "last")
    spec = consumer_spec({Symbol("a"): first, Symbol("b"): last}, None)
    assert spec.arguments["x-stream-offset"] == "first"
    assert list(spec.filter or {}) == ["a", "b"]
