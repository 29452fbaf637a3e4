"""``as_stored_in_a_stream``: the property bytes a stream gives back, byte for byte, for any
properties a client can send."""

from __future__ import annotations

from typing import Any

import pika
from hypothesis import given
from hypothesis import strategies as st

from leveret.broker.queues.stream_properties import as_stored_in_a_stream

scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.text(max_size=20), st.booleans(), st.none(),
    st.binary(max_size=10),
)  # fmt: skip
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)  # fmt: skip
shortstr = st.none() | st.text(max_size=20)


def encode(props: pika.BasicProperties) -> bytes:
    return b"".join(props.encode())


def decode(raw: bytes) -> pika.BasicProperties:
    props = pika.BasicProperties()
    props.decode(raw)
    return props


@given(
    headers=st.none() | st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=6),
    content_type=shortstr, message_id=shortstr, cluster_id=shortstr, app_id=shortstr,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    timestamp=st.none() | st.integers(0, 2**40),
)  # fmt: skip
def test_only_table_and_array_headers_and_the_cluster_id_are_dropped(
    headers: dict[str, Any] | None, **fields: Any
) -> None:
    sent = pika.BasicProperties(headers=headers, **fields)
    raw = encode(sent)
    got = decode(as_stored_in_a_stream(raw))
    if headers is None:
        assert got.headers is None
    else:
        assert got.headers == {k: v for k, v in headers.items()
                               if not isinstance(v, (dict, list))}  # fmt: skip
    assert got.cluster_id is None
    for key in fields:
        if key != "cluster_id":
            assert getattr(got, key) == getattr(sent, key)
    if fields["cluster_id"] is None and (headers is None or not any(
            isinstance(v, (dict, list)) for v in headers.values())):  # fmt: skip
        assert as_stored_in_a_stream(raw) is raw  # nothing to drop: no copy


@given(st.binary(max_size=40))
def test_bytes_it_cannot_walk_come_back_unchanged_or_shorter(raw: bytes) -> None:
    out = as_stored_in_a_stream(b"\x20\x04" + raw)
    assert len(out) <= len(raw) + 2
