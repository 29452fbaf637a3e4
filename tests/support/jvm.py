"""How the tests run Spark's JVMs: the C1 compiler alone and the serial collector.

The suite is CPU-bound on two cores, and the JIT compiler's threads are much of what a
short-lived JVM spends. Measured here, alone on the machine: the classic-queue ingest test
took 90 CPU-seconds with the JVM's defaults and 58 with these options (61 s and 50 s of
wall time); the 200,000-record exactly-once test 102 and 85, in the same wall time. The
tests check behaviour; the benchmarks (``benchmarks/``) run Spark as users do."""

from __future__ import annotations

#: For every JVM a test starts: drivers, executors, a standalone master and its workers.
OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: ``SPARK_SUBMIT_OPTS`` for a driver (``spark-submit``, and PySpark's gateway through
#: it): the options, no web UI, and its executors started with the same options (a
#: ``spark.*`` system property is read as a setting).
SUBMIT_OPTS = f'{OPTIONS} -Dspark.ui.enabled=false -Dspark.executor.extraJavaOptions="{OPTIONS}"'

#: ``SPARK_DAEMON_JAVA_OPTS`` for a standalone master and its workers.
DAEMON_OPTS = OPTIONS
