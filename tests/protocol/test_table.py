"""Content-header properties edited as wire bytes (:mod:`leveret.protocol.table`): the one-walk
insertion the message interceptors use is the same as the general edits."""

from __future__ import annotations

from datetime import UTC

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from leveret.protocol import table
from leveret.protocol.properties import decode, encode_properties

_SHORT = st.one_of(st.none(), st.text(min_size=1, max_size=8))
_PROPERTIES = st.builds(
    commands.Basic.Properties,
    content_type=_SHORT,
    content_encoding=_SHORT,
    delivery_mode=st.one_of(st.none(), st.sampled_from([1, 2])),
    priority=st.one_of(st.none(), st.integers(0, 9)),
    correlation_id=_SHORT,
    reply_to=_SHORT,
    expiration=st.one_of(st.none(), st.sampled_from(["1000", "60000"])),
    message_id=_SHORT,
    timestamp=st.one_of(
        st.none(), st.datetimes(timezones=st.just(UTC)).map(lambda d: d.replace(microsecond=0))
    ),
    message_type=_SHORT,
    user_id=_SHORT,
    app_id=_SHORT,
)
_OTHERS = ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
           "reply_to", "expiration", "message_id", "message_type", "user_id", "app_id")  # fmt: skip


@given(props=_PROPERTIES, seconds=st.one_of(st.none(), st.integers(0, 2**40)))
def test_adding_headers_and_a_timestamp_in_one_walk_is_the_general_edit(
    props: commands.Basic.Properties, seconds: int | None
) -> None:
    raw = encode_properties(props)
    fields = [("timestamp_in_ms", table.long(12345)), ("x-routed-by", table.longstr("n"))]
    expected = table.with_headers(raw, fields)
    if seconds is not None and props.timestamp is None:
        expected = table.with_property(expected, 0x0040, table.timestamp_property(seconds))
    got = table.with_absent(raw, fields, seconds)
    assert got == expected
    before, after = decode(raw), decode(got)
    assert [getattr(after, n) for n in _OTHERS] == [getattr(before, n) for n in _OTHERS]
    assert after.headers == {"timestamp_in_ms": 12345, "x-routed-by": "n"}
