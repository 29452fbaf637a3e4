"""Writing a range of a file to a client's socket with ``os.sendfile`` (no copy through
Python), falling back to reading it and writing through the transport."""

from __future__ import annotations

import asyncio
import os


class FileSender:
    """Sends file ranges after whatever the transport holds. ``sock`` is the plain TCP
    socket's descriptor (-1 on TLS, where the bytes must go through the transport)."""

    __slots__ = ("sock",)

    def __init__(self, transport: asyncio.BaseTransport, tls: bool) -> None:
        sock = transport.get_extra_info("socket")
        usable = not tls and sock is not None and hasattr(os, "sendfile")
        self.sock = sock.fileno() if usable else -1

    def send(
        self, transport: asyncio.Transport, head: bytes, fd: int, position: int, size: int
    ) -> None:
        """``head``, then ``size`` bytes of ``fd`` from ``position``. When the transport
        has nothing queued, the range goes from the file to the socket directly; what the
        socket does not take at once, and everything on TLS, is read and queued on the
        transport (at most one range beyond its high-water mark: writing then pauses)."""
        sent = 0
        if self.sock >= 0 and transport.get_write_buffer_size() == 0:
            transport.write(head)
            if transport.get_write_buffer_size() == 0:
                try:
                    sent = os.sendfile(self.sock, fd, position, size)
                except BlockingIOError:
                    sent = 0
                except OSError:  # a socket sendfile refuses: read and write from now on
                    self.sock = -1
                    sent = 0
            if sent < size:
                transport.write(os.pread(fd, size - sent, position + sent))
        else:
            transport.writelines((head, os.pread(fd, size, position)))
