"""Why a listener could not open: which one, on which address and port."""

from __future__ import annotations

import errno

# what each listener serves, as the one-line error names it
SERVES = {
    "amqp": "AMQP",
    "amqp/ssl": "AMQP over TLS",
    "http": "management API and dashboard",
    "prometheus": "Prometheus metrics",
    "stream": "stream protocol",
    "stream/ssl": "stream protocol over TLS",
    "syslog": "syslog (UDP and TCP)",
}


class ListenError(OSError):
    """A listener (``amqp``, ``amqp/ssl``, ``http``, ``prometheus``, ``stream``,
    ``stream/ssl``, ``syslog``) could not listen on
    ``host:port``. An :class:`OSError` with the cause's errno and text, so callers that
    catch ``OSError`` for a port in use still do."""

    def __init__(self, listener: str, host: str, port: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.listener = listener
        self.host = host
        self.port = port

    @property
    def in_use(self) -> bool:
        return (
            self.errno == errno.EADDRINUSE or "address already in use" in str(self.strerror).lower()
        )

    def __str__(self) -> str:
        serves = SERVES.get(self.listener, self.listener)
        reason = f"port {self.port} is in use" if self.in_use else str(self.strerror)
        return f"cannot listen on {self.host}:{self.port} ({serves}): {reason}"
