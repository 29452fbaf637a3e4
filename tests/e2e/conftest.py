"""Fixtures for the end-to-end tests: each test gets a vhost and a user of its own on Leveret
and, for differential tests, on RabbitMQ."""

from tests.support.mgmt import leveret_site, rabbitmq_site

__all__ = ["leveret_site", "rabbitmq_site"]
