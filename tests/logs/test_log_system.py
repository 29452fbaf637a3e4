"""The log system end to end, on Leveret and on RabbitMQ: ``emit-log`` to receivers on a
file and on a terminal, routing by severity and topic, late receivers, and bad input."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.logs.conftest import (
    WAIT,
    Receiver,
    emit,
    one_error_line,
    read_records,
    start_receiver,
    wait_records,
)
from tests.support.brokers import BrokerUnderTest
from tests.support.ports import free_port

N = 100_000


def test_file_and_terminal_receivers_get_all_100k_lines_in_order(
    broker: BrokerUnderTest, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    path = tmp_path / "logs.jsonl"
    to_file = start_receiver(receivers, broker, name, "--to", str(path))
    on_tty = start_receiver(receivers, broker, name, tty=True)
    lines = [f"line {i:06d}" for i in range(N)]
    result = emit(broker, name, stdin=("\n".join(lines) + "\n").encode())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"Sent {N} records to exchange '{name}' (fanout)"

    records = wait_records(path, N)
    assert [r["message"] for r in records] == lines
    assert {r["severity"] for r in records} == {"info"}
    shown = on_tty.wait_output(N)
    assert shown == lines
    assert b"\x1b[" not in on_tty.output  # info lines keep the terminal's own colour

    for r in (to_file, on_tty):
        assert r.stop() == 0
        assert "Traceback" not in "".join(r.stderr)
    assert len(read_records(path)) == N


def test_terminal_receiver_colours_by_severity(
    broker: BrokerUnderTest, name: str, receivers: list[Receiver]
) -> None:
    tty = start_receiver(receivers, broker, name, tty=True)
    for severity in ("debug", "info", "warning", "error", "critical"):
        assert emit(broker, name, "--severity", severity, f"a {severity}").returncode == 0
    assert len(tty.wait_output(5)) == 5
    raw = bytes(tty.output)
    assert b"\x1b[31m" in raw and b"a error" in raw  # red
    assert b"\x1b[33m" in raw  # yellow warning
    assert tty.stop() == 0


def test_a_receiver_started_after_the_emit_gets_nothing_old(
    broker: BrokerUnderTest, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    assert emit(broker, name, "old 1", "old 2").returncode == 0  # no queue bound: dropped
    path = tmp_path / "late.jsonl"
    late = start_receiver(receivers, broker, name, "--to", str(path))
    assert emit(broker, name, "new").returncode == 0
    assert emit(broker, name, "end").returncode == 0
    assert [r["message"] for r in wait_records(path, 2)] == ["new", "end"]

    # Ctrl-C ends it cleanly, and its server-named exclusive queue goes with it
    assert late.queue.startswith("amq.gen-")
    assert late.stop(signal.SIGINT) == 0
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare(late.queue, passive=True)
        assert info.value.reply_code == 404
    finally:
        conn.close()
    assert [r["message"] for r in read_records(path)] == ["new", "end"]


def _sentinel_wait(
    broker: BrokerUnderTest, exchange: str, kind: str, files: dict[Path, list[str]]
) -> dict[Path, list[tuple[str, str]]]:
    """Send each receiver an ``end`` record its binding selects, after everything else.
    Per-queue order means that once an ``end`` arrives, every earlier record has too."""
    for keys in files.values():
        if kind == "topic":
            facility, severity = ("end", "debug") if keys[0] == "#" else keys[0].split(".")
            args = [
                "--facility",
                facility.replace("*", "end"),
                "--severity",
                severity.replace("*", "debug"),
            ]
        else:
            args = ["--severity", keys[0]]
        assert emit(broker, exchange, "--type", kind, *args, "end").returncode == 0
    got = {}
    for path in files:
        deadline = time.monotonic() + WAIT
        records = read_records(path)
        while not any(r["message"] == "end" for r in records) and time.monotonic() < deadline:
            time.sleep(0.05)
            records = read_records(path)
        got[path] = [(r["facility"], r["severity"]) for r in records if r["message"] != "end"]
    return got


def test_direct_routing_delivers_exactly_the_selected_severities(
    broker: BrokerUnderTest, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    bindings = {
        tmp_path / "errors": ["error"],
        tmp_path / "warn-error": ["warning", "error"],
        tmp_path / "info": ["info"],
    }
    for path, keys in bindings.items():
        start_receiver(receivers, broker, name, "--type", "direct", "--to", str(path), *keys)
    sent = []
    for severity in ("debug", "info", "warning", "error", "critical", "error", "info"):
        r = emit(broker, name, "--type", "direct", "--severity", severity, "m")
        assert r.returncode == 0, r.stderr
        sent.append(severity)
    got = _sentinel_wait(broker, name, "direct", bindings)
    for path, keys in bindings.items():
        assert [s for _, s in got[path]] == [s for s in sent if s in keys], path.name


def test_topic_routing_delivers_exactly_what_each_pattern_selects(
    broker: BrokerUnderTest, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    bindings = {
        tmp_path / "kern": ["kern.*"],
        tmp_path / "critical": ["*.critical"],
        tmp_path / "both": ["kern.*", "*.critical"],
        tmp_path / "all": ["#"],
        tmp_path / "auth-info": ["auth.info"],
    }
    for path, keys in bindings.items():
        start_receiver(receivers, broker, name, "--type", "topic", "--to", str(path), *keys)
    sent = []
    for facility in ("kern", "auth", "cron"):
        for severity in ("info", "critical", "error"):
            r = emit(
                broker,
                name,
                "--type",
                "topic",
                "--facility",
                facility,
                "--severity",
                severity,
                f"{facility}.{severity}",
            )
            assert r.returncode == 0, r.stderr
            sent.append((facility, severity))
    got = _sentinel_wait(broker, name, "topic", bindings)

    def selects(keys: list[str], f: str, s: str) -> bool:
        return any(k == "#" or k == f"{f}.{s}" or k == f"{f}.*" or k == f"*.{s}" for k in keys)

    for path, keys in bindings.items():
        assert got[path] == [(f, s) for f, s in sent if selects(keys, f, s)], path.name


def test_records_carry_the_schema_and_plain_text_from_the_tutorial_is_shown(
    broker: BrokerUnderTest, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    path = tmp_path / "r.jsonl"
    tty = start_receiver(receivers, broker, name, tty=True)
    start_receiver(receivers, broker, name, "--to", str(path))
    assert (
        emit(
            broker,
            name,
            "--severity",
            "warning",
            "--facility",
            "kern",
            "--app",
            "web",
            "disk almost full",
        ).returncode
        == 0
    )
    # the tutorial's emit_log.py: a plain-text body with routing key ''
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().basic_publish(exchange=name, routing_key="", body=b"info: Hello World!")
    conn.close()
    first, second = wait_records(path, 2)
    assert set(first) == {"ts", "severity", "facility", "host", "app", "pid", "message"}
    assert (first["severity"], first["facility"], first["app"], first["message"]) == (
        "warning",
        "kern",
        "web",
        "disk almost full",
    )
    assert first["ts"].endswith("Z") and isinstance(first["pid"], int) and first["host"]
    assert (second["message"], second["severity"]) == ("info: Hello World!", "info")
    assert tty.wait_output(2) == ["disk almost full", "info: Hello World!"]


def test_records_are_json_on_the_wire(broker: BrokerUnderTest, name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(name, "fanout")
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, name)
    assert emit(broker, name, "--persistent", "hi").returncode == 0
    method, props, body = ch.basic_get(q, auto_ack=True)
    conn.close()
    assert method is not None
    assert props.content_type == "application/json" and props.delivery_mode == 2
    assert props.message_id
    assert b'"message":"hi"' in body


def test_durable_queue_keeps_records_while_the_receiver_is_away(
    broker: BrokerUnderTest, name: str, tmp_path: Path, receivers: list[Receiver]
) -> None:
    path = tmp_path / "d.jsonl"
    queue = f"{name}-q"
    args = ("--queue", queue, "--durable", "--to", str(path))
    first = start_receiver(receivers, broker, name, *args)
    assert emit(broker, name, "one").returncode == 0
    assert len(wait_records(path, 1)) == 1
    assert first.stop() == 0
    assert emit(broker, name, "--persistent", "while away 1", "while away 2").returncode == 0
    start_receiver(receivers, broker, name, *args)
    assert emit(broker, name, "back").returncode == 0
    assert [r["message"] for r in wait_records(path, 4)] == [
        "one",
        "while away 1",
        "while away 2",
        "back",
    ]
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().queue_delete(queue)
    conn.close()


# ---------------------------------------------------------------- bad input


def receiver_fails(receivers: list[Receiver], args: list[str]) -> str:
    """``receive-logs ARGS``, which is to fail: the one line it says on stderr."""
    r = Receiver(args)
    receivers.append(r)
    assert r.proc.wait(30) != 0
    r.close()
    return one_error_line((r.proc.returncode, "".join(r.stderr)))


def test_refused_connection_is_one_line(name: str, receivers: list[Receiver]) -> None:
    port = free_port()  # a port nobody listens on
    url = f"amqp://guest:secret@127.0.0.1:{port}/"
    line = one_error_line(emit(url, name, "x"))
    assert "cannot connect" in line and "secret" not in line
    assert "cannot connect" in receiver_fails(receivers, ["--url", url, "--exchange", name])


@pytest.mark.parametrize("url", ["http://localhost/", "not a url", "amqp://h:port/"])
def test_malformed_url_is_one_line(url: str, name: str) -> None:
    assert "invalid URL" in one_error_line(emit(url, name, "x"))


def test_refused_credentials_are_one_line(
    broker: BrokerUnderTest, name: str, receivers: list[Receiver]
) -> None:
    url = broker.url.replace("guest:guest", "guest:wrong")
    line = one_error_line(emit(url, name, "x"))
    assert "ACCESS_REFUSED" in line and "wrong" not in line
    assert "ACCESS_REFUSED" in receiver_fails(receivers, ["--url", url, "--exchange", name])


def test_exchange_of_another_type_is_406_in_one_line(
    broker: BrokerUnderTest, name: str, receivers: list[Receiver]
) -> None:
    assert emit(broker, name, "--type", "direct", "x").returncode == 0
    line = one_error_line(emit(broker, name, "x"))  # fanout by default
    assert line == (
        f"Error: PRECONDITION_FAILED - inequivalent arg 'type' for exchange "
        f"'{name}' in vhost '/': received 'fanout' but current is 'direct'"
    )
    topic = ["--url", broker.url, "--exchange", name, "--type", "topic"]
    assert "PRECONDITION_FAILED" in receiver_fails(receivers, topic)


def test_a_full_disk_is_one_line_and_nothing_unwritten_is_acked(
    broker: BrokerUnderTest, name: str, receivers: list[Receiver]
) -> None:
    queue = f"{name}-full"
    r = start_receiver(receivers, broker, name, "--queue", queue, "--to", "/dev/full")
    assert emit(broker, name, "lost?").returncode == 0
    assert r.proc.wait(30) != 0
    r.close()
    line = one_error_line(
        (r.proc.returncode, "".join(x for x in r.stderr if "Waiting for logs" not in x))
    )
    assert line == "Error: cannot write /dev/full: No space left on device"
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    assert ch.queue_declare(queue, passive=True).method.message_count == 1
    ch.queue_delete(queue)
    conn.close()


def test_bad_options_are_one_line(broker: BrokerUnderTest, name: str) -> None:
    assert "unknown severity" in one_error_line(emit(broker, name, "-s", "loud", "x"))
    assert "facility" in one_error_line(emit(broker, name, "-f", "a.b", "x"))
    for args, why in [
        (["--durable"], "--durable needs --queue"),
        (["info"], "binding keys are for"),
    ]:
        r = Receiver(["--url", broker.url, "--exchange", name, *args])
        assert r.proc.wait(30) != 0
        r.close()
        assert why in one_error_line((r.proc.returncode, "".join(r.stderr)))
