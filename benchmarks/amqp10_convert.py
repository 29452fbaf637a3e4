"""CPU per message of the AMQP 1.0 conversions (RabbitMQ 4.2's message container, in
``leveret.broker.amqp10_message`` and ``amqp10_delivery``): a publish (a transfer's
payload into the broker's message), and a delivery (the broker's message into the
sections an AMQP 1.0 consumer receives), for the common shapes.

    python benchmarks/amqp10_convert.py            # 50,000 messages, 5 runs a case
    python benchmarks/amqp10_convert.py --messages 20000 --runs 3 --json out.json

Every message of a run has its own message-id (as clients send them), so caches keyed by
whole property bytes do not help; what repeats (annotations, application properties,
header) is what publishers repeat. Reported: CPU time (``time.process_time``) per
message, median of the runs and their spread. No broker, no sockets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from pamqp import commands

from leveret.broker import amqp10_delivery, amqp10_message
from leveret.broker.message import Message
from leveret.protocol.amqp10 import types

BODY = b"x" * 100


def _payloads(n: int, app: bool) -> list[bytes]:
    head = types.section(0x70, ("list", [("bool", True)]))
    ma = types.section(0x72, ("map", [(("symbol", "x-opt-tenant"), ("string", "t1"))]))
    ap = types.section(
        0x74,
        (
            "map",
            [
                (("string", "region"), ("string", "eu")),
                (("string", "attempt"), ("long", 1)),
                (("string", "ok"), ("bool", True)),
            ],
        ),
    )
    out = []
    for i in range(n):
        props = types.section(
            0x73,
            (
                "list",
                [
                    ("string", f"msg-{i}"),
                    ("null", None),
                    ("string", "/queues/q"),
                    ("null", None),
                    ("null", None),
                    ("null", None),
                    ("symbol", "application/json"),
                ],
            ),
        )
        data = types.section(0x75, ("binary", BODY))
        out.append(head + (ma if app else b"") + props + (ap if app else b"") + data)
    return out


def _cases(n: int) -> dict[str, Callable[[], None]]:
    plain = _payloads(n, False)
    rich = _payloads(n, True)
    born = [amqp10_message.parse(p).message("", "q") for p in plain]
    born_rich = [amqp10_message.parse(p).message("", "q") for p in rich]
    m091 = [
        Message.build(
            "",
            "q",
            BODY,
            commands.Basic.Properties(
                content_type="application/json", delivery_mode=2, message_id=f"msg-{i}"
            ),
        )
        for i in range(n)
    ]
    m091_plain = [Message.build("", "q", BODY) for _ in range(n)]
    m091_headers = [
        Message.build(
            "",
            "q",
            BODY,
            commands.Basic.Properties(
                headers={"region": "eu", "x-tenant": "t1"}, delivery_mode=2, message_id=f"m{i}"
            ),
        )
        for i in range(n)
    ]
    parse = amqp10_message.parse
    deliver = amqp10_delivery.delivery

    def publish(payloads: list[bytes]) -> Callable[[], None]:
        def run() -> None:
            for p in payloads:
                parse(p).message("", "q")

        return run

    def delivering(messages: list[Message], **kw: object) -> Callable[[], None]:
        def run() -> None:
            for m in messages:
                deliver(m, **kw)  # type: ignore[arg-type]

        return run

    return {
        "publish: header, properties, data": publish(plain),
        "publish: + annotations, 3 application properties": publish(rich),
        "deliver AMQP 1.0-published": delivering(born),
        "deliver AMQP 1.0-published, annotations + app props": delivering(born_rich),
        "deliver AMQP 1.0-published, redelivered": delivering(born, redelivered=True),
        "deliver AMQP 1.0-published, quorum x-delivery-count": delivering(
            born, redelivered=True, annotations={"x-delivery-count": 1}
        ),
        "deliver AMQP 0-9-1-published, no properties": delivering(m091_plain),
        "deliver AMQP 0-9-1-published, content-type, mode, id": delivering(m091),
        "deliver AMQP 0-9-1-published, 2 headers, mode, id": delivering(m091_headers),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    results = {}
    for name, run in _cases(args.messages).items():
        run()  # warm caches, as a running broker has them
        samples = []
        for _ in range(args.runs):
            t0 = time.process_time()
            run()
            samples.append((time.process_time() - t0) / args.messages * 1e6)
        results[name] = samples
        print(
            f"{name:55s} median {statistics.median(samples):6.2f} us "
            f"(min {min(samples):.2f}, max {max(samples):.2f})"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
