"""AMQP 1.0 (OASIS), sans-IO: bytes in, events out; commands in, bytes out. Both roles:
:class:`~leveret.protocol.amqp10.server.ServerConnection` for the broker,
:class:`~leveret.protocol.amqp10.client.ClientConnection` for the tests (h11's way: one
codec, both sides). No sockets, no asyncio, no project imports outside leveret.protocol.

Modules: ``types`` (the project's one AMQP 1.0 type codec, stream messages included),
``definitions`` (error conditions, delivery states, source/target), ``performatives``,
``frames`` (headers, framing, transfer splitting), ``events``, ``states`` (every
transition, one table each), ``session`` (windows, credit, delivery assembly),
``endpoints`` (session and link commands), ``connection``, ``server``, ``client``.

The engine: Leveret's own, chosen by measurement (``benchmarks/amqp10_engine.py``, 20,000
64-byte messages, 5 rounds, Proton 0.40's own Python client publishing unsettled and
consuming with credit 170): server CPU per transfer, median (spread), own engine against
python-qpid-proton's C engine driven from Python through ``Transport``/``Collector``:
publish 15.1 µs (14.6-16.9) against 21.6 (20.7-23.4), consume 3.3 (2.7-4.6) against 18.6
(16.3-19.3). Proton's C core is fast, but every event, delivery and link crosses into
Python through cffi wrappers, several per transfer, and that costs more than decoding the
frame in Python here; a consumer's delivery is a spliced frame for ours against a Delivery
object, ``send`` and ``advance`` for Proton. Besides speed, RabbitMQ's exact behaviour is
cheaper on our own engine: Proton chooses its own frames (its open/begin/attach fields,
session windows from byte capacities, when flows and dispositions go out, its own error
conditions and texts for framing and decode errors), has no hook for RabbitMQ 4's texts
("incoming window violation (tolerated excess tranfers: 0)", "frame size (N bytes) >
maximum frame size (M bytes)", a silent close before the open, the SASL header in answer
to a bare AMQP header), and its built-in SASL server (without Cyrus) offers only
ANONYMOUS and EXTERNAL, so PLAIN would be ours anyway. Proton stays a test dependency: the
benchmark and clients in tests.
"""
