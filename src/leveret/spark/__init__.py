"""Leveret on Spark: the ``amqp`` Python data source, log-record parsing, and the log
pipeline (ingest into a Parquet lake, reports). Install with the ``spark`` extra.

Reaches a broker only over the network (pika), so it works against RabbitMQ as well.

    from leveret.spark import register
    register(spark)
    df = spark.readStream.format("amqp").option("stream", "logs").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``format("amqp")`` available on ``spark``."""
    from leveret.spark.source import AmqpDataSource

    spark.dataSource.register(AmqpDataSource)


__all__ = ["register"]
