"""Operating the broker: the management HTTP API in RabbitMQ's shapes, Prometheus
metrics, and the dashboard page, composed with the AMQP server by :mod:`.runner`."""
