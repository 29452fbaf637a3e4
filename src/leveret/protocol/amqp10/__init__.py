"""AMQP 1.0, sans-IO (placeholder docstring: the engine decision is written below once measured)."""
