"""The application under test: it sends orders to the queue ``orders`` and takes them."""

from __future__ import annotations

import json
from typing import Any

import pika

QUEUE = "orders"


def send_order(url: str, order: dict[str, Any]) -> None:
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare(QUEUE, durable=True)
        channel.basic_publish(
            "", QUEUE, json.dumps(order).encode(), pika.BasicProperties(delivery_mode=2)
        )


def take_orders(url: str) -> list[dict[str, Any]]:
    orders = []
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        channel = conn.channel()
        channel.queue_declare(QUEUE, durable=True)
        while True:
            method, _, body = channel.basic_get(QUEUE, auto_ack=True)
            if method is None:
                return orders
            orders.append(json.loads(body))
