"""Testing applications that speak AMQP: a pytest plugin (:mod:`leveret.testing.plugin`,
registered under the name ``leveret`` when Leveret is installed) whose fixtures give every
test a vhost of its own on an in-process Leveret, or on an outside broker such as RabbitMQ
(``--leveret-url``), created and deleted through its management API
(:class:`leveret.testing.remote.RemoteBroker`)."""

from __future__ import annotations
