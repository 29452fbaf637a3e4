"""``receive-logs --queue NAME --durable`` across a broker restart (Leveret of the test's
own, restarted on the same port and data directory): it reconnects and resumes, and no
record it acked, nor any persistent record still queued, is lost or written twice."""

from __future__ import annotations

from pathlib import Path

from tests.logs.conftest import Receiver, emit, read_records, start_receiver, wait_records
from tests.support.brokers import start_leveret
from tests.support.waiting import wait_for

N = 30_000


def test_durable_receiver_resumes_across_a_broker_restart(
    tmp_path: Path, name: str, receivers: list[Receiver]
) -> None:
    data = tmp_path / "data"
    broker = start_leveret(data)
    try:
        path = tmp_path / "durable.jsonl"
        args = ("--queue", f"{name}-q", "--durable", "--durable-exchange", "--to", str(path))
        first = start_receiver(receivers, broker, name, *args)
        assert first.stop() == 0  # the durable queue stays, bound, and fills meanwhile
        lines = [f"record {i:06d}" for i in range(N)]
        result = emit(
            broker,
            name,
            "--persistent",
            "--durable-exchange",
            stdin=("\n".join(lines) + "\n").encode(),
        )
        assert result.returncode == 0, result.stderr

        again = start_receiver(receivers, broker, name, *args)
        wait_for(lambda: len(read_records(path)) >= 500, 60, 0.01)
        broker.stop()  # SIGTERM: connection.close 320 to every client
        broker = start_leveret(data, extra=["--amqp-port", str(broker.port)])
        again.wait_ready(count=2)  # reconnected, queue declared and bound again
        assert any("reconnecting" in line for line in again.stderr)

        assert emit(broker, name, "--durable-exchange", "after the restart").returncode == 0
        records = wait_records(path, N + 1)
        got = [r["message"] for r in records]
        assert len(got) == len(set(got)), "a record was written twice"
        assert got == [*lines, "after the restart"]
        assert again.stop() == 0
    finally:
        broker.stop()
