"""Syslog over TCP: a byte stream cut into messages, as RFC 6587 describes both framings.

- Octet counting (RFC 6587 3.4.1, RFC 5425's): ``MSG-LEN SP SYSLOG-MSG``, MSG-LEN a
  decimal without leading zeros (``logger --octet-count``).
- Non-transparent framing (3.4.2): each message ends with LF (a CR before it is dropped).

Each frame decides for itself, as rsyslog's imtcp does: one that starts with a digit
``1``-``9`` followed by more digits and a space is octet-counted; anything else is read up
to the next LF. A line that merely starts with digits (``123abc``) is a line.

What cannot be framed is refused and the stream goes on, as rsyslog and syslog-ng keep
a connection that sent a bad message: a frame over ``max_size`` is refused and skipped
(octet counting says how far), a line over ``max_size`` with no LF yet is refused and the
rest of it, to its LF, skipped. Blank lines between messages (a CR LF sender's, or a
keep-alive) are framing, not messages, and are passed over.

No project imports and no I/O: bytes in (:meth:`StreamFramer.feed`), frames out."""

from __future__ import annotations

from dataclasses import dataclass

#: The largest message taken by default: 64 KiB, a UDP datagram's most (rsyslog's
#: maxMessageSize defaults to 8 KiB; RFC 5425 asks receivers for at least 2 KiB).
MAX_MESSAGE = 65_536
_MAX_DIGITS = 10


@dataclass(frozen=True, slots=True)
class Refused:
    """Bytes that are no message: ``reason`` says why, ``size`` how many were dropped."""

    reason: str
    size: int


Frame = bytes | Refused


class StreamFramer:
    """Cuts one TCP connection's bytes into syslog messages."""

    def __init__(self, max_size: int = MAX_MESSAGE) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._skip = 0  # octets still to drop of a refused octet-counted frame
        self._discarding = False  # inside a refused over-long line, until its LF

    def feed(self, data: bytes) -> list[Frame]:
        """The frames the stream holds once ``data`` is added."""
        self._buf += data
        out: list[Frame] = []
        buf = self._buf
        while buf:
            if self._skip:
                n = min(self._skip, len(buf))
                del buf[:n]
                self._skip -= n
                continue
            if self._discarding:
                lf = buf.find(b"\n")
                if lf < 0:
                    buf.clear()
                    break
                del buf[: lf + 1]
                self._discarding = False
                continue
            first = buf[0]
            if first in b"\r\n":
                del buf[:1]
                continue
            if 0x31 <= first <= 0x39:  # 1-9: perhaps MSG-LEN
                i = 1
                while i < len(buf) and i <= _MAX_DIGITS and 0x30 <= buf[i] <= 0x39:
                    i += 1
                if i == len(buf) and i <= _MAX_DIGITS:
                    break  # the header is not all here yet
                if i <= _MAX_DIGITS and buf[i] == 0x20:
                    length = int(buf[:i])
                    if length > self.max_size:
                        del buf[: i + 1]
                        self._skip = length
                        out.append(
                            Refused(
                                f"octet-counted frame of {length} octets is over the limit "
                                f"of {self.max_size}",
                                length,
                            )
                        )
                        continue
                    if len(buf) < i + 1 + length:
                        break  # the frame is not all here yet
                    out.append(bytes(buf[i + 1 : i + 1 + length]))
                    del buf[: i + 1 + length]
                    continue
            lf = buf.find(b"\n")
            if lf < 0:
                if len(buf) > self.max_size:
                    out.append(
                        Refused(
                            f"line of more than {self.max_size} octets without a newline",
                            len(buf),
                        )
                    )
                    buf.clear()
                    self._discarding = True
                break
            if lf > self.max_size:
                out.append(Refused(f"line of {lf} octets is over the limit of {self.max_size}", lf))
            else:
                line = bytes(buf[:lf]).rstrip(b"\r")
                if line.strip():
                    out.append(line)
            del buf[: lf + 1]
        return out

    def close(self) -> list[Frame]:
        """At the end of the stream: a last line without its LF is a message (senders
        that close after one message often leave it out); a cut octet-counted frame is
        refused."""
        buf = self._buf
        out: list[Frame] = []
        if self._skip:
            out.append(Refused(f"connection closed {self._skip} octets short of a frame's end", 0))
        elif buf and not self._discarding:
            first = buf[0]
            i = 1
            while i < len(buf) and 0x30 <= buf[i] <= 0x39:
                i += 1
            if 0x31 <= first <= 0x39 and i < len(buf) and buf[i] == 0x20 and i <= _MAX_DIGITS:
                want = int(buf[:i])
                have = len(buf) - i - 1
                out.append(
                    Refused(
                        f"connection closed inside an octet-counted frame ({have} of {want} "
                        "octets)",
                        len(buf),
                    )
                )
            else:
                line = bytes(buf).rstrip(b"\r")
                if line.strip():
                    out.append(line)
        buf.clear()
        self._skip = 0
        self._discarding = False
        return out
