"""What the tests, the benchmarks and the scripts share: starting and reaching brokers
(Leveret, the reference RabbitMQ and RabbitMQ nodes of one's own: single, TLS, clustered,
in a network namespace), free ports, waiting, a raw AMQP client, the management API client
and the fuzzing campaigns. Nothing here is a test; ``benchmarks/`` and ``scripts/`` import
from here, never from a test module."""
