"""``format("amqp")``: the Python data source that ties the readers and writers together."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from leveret.spark.client import AmqpSourceError
from leveret.spark.options import ReadOptions, WriteOptions
from leveret.spark.queue import ClassicQueueStreamReader
from leveret.spark.schema import LOG_SCHEMA, MESSAGE_SCHEMA
from leveret.spark.stream import StreamQueueBatchReader, StreamQueueStreamReader
from leveret.spark.superstream import SuperStreamBatchReader, SuperStreamStreamReader
from leveret.spark.writer import AmqpStreamWriter, AmqpWriter


class AmqpDataSource(DataSource):
    """Messages of an AMQP 0-9-1 broker (Leveret or RabbitMQ) as rows, and rows as messages.

    Read options: ``url``; ``stream`` (a stream queue: replayable, exactly-once),
    ``superStream`` (every partition of a super stream, exactly-once per partition; see
    :mod:`leveret.spark.superstream`, and ``managementUrl``) or ``queue`` (a classic queue:
    at-least-once, needs ``walLocation``); ``startingOffsets``
    and, for batch reads, ``endingOffsets`` (``earliest``, ``latest``, an offset or an
    ISO-8601 time); ``maxRecordsPerTrigger``; ``minPartitions``; ``maxRecordsPerPartition``;
    ``prefetch``; ``failOnDataLoss``; ``probeTimeout``; ``stallTimeout``; ``records``:
    ``messages`` (the default: one row per message, ``schema.MESSAGE_SCHEMA``) or ``log``
    (log records parsed on the executors, ``schema.LOG_SCHEMA``: see
    :mod:`leveret.spark.logparse`).
    Write options: see :mod:`leveret.spark.writer`.
    """

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self) -> StructType:
        records = {k.lower(): str(v) for k, v in self.options.items()}.get("records", "")
        return LOG_SCHEMA if records.strip().lower() == "log" else MESSAGE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions.parse(self.options)
        if opts.super_stream is not None:
            return SuperStreamBatchReader(opts)
        if opts.stream is None:
            raise AmqpSourceError(
                "a batch read needs a stream queue (option stream): a classic queue can only "
                "be read as a stream (spark.readStream)"
            )
        return StreamQueueBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = ReadOptions.parse(self.options)
        if opts.super_stream is not None:
            return SuperStreamStreamReader(opts)
        if opts.stream is not None:
            return StreamQueueStreamReader(opts)
        return ClassicQueueStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return AmqpWriter(WriteOptions.parse(self.options, schema.fieldNames()))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return AmqpStreamWriter(WriteOptions.parse(self.options, schema.fieldNames()))
