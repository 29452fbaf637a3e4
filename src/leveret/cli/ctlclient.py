"""The part of ``leveret ctl`` that talks to the management API: options, a small HTTP
client (the standard library's urllib, basic auth), rabbitmqctl's exit codes and errors, and
``Ctl``, what every verb is given."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

# rabbitmqctl's exit codes (sysexits.h)
EX_OK = 0
EX_USAGE = 64
EX_DATAERR = 65
EX_NOUSER = 67
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_TEMPFAIL = 75
EX_NOPERM = 77

DEFAULT_URL = "http://127.0.0.1:15672"


class CtlError(Exception):
    def __init__(self, message: str, code: int, plain: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.plain = plain  # printed as is, without "Error: "


_RAISE: Any = object()  # a 404 is an HttpError like any other answer


class HttpError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        if isinstance(self.body, dict):
            return str(self.body.get("reason", self.body.get("error", "")))
        return str(self.body)


@dataclass
class Options:
    url: str = DEFAULT_URL
    username: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    quiet: bool = False
    formatter: str = "table"
    formatter_given: bool = False
    table_headers: bool = True
    timeout: float = 60.0


class Client:
    """A small management API client (the standard library's urllib, basic auth)."""

    def __init__(self, opts: Options) -> None:
        self.base = opts.url.rstrip("/")
        self.opts = opts
        token = base64.b64encode(f"{opts.username}:{opts.password}".encode()).decode()
        self.auth = f"Basic {token}"

    def request(self, method: str, path: str, body: Any = None, missing: Any = _RAISE) -> Any:
        """The answer's JSON (None when empty). A 404 raises HttpError, unless ``missing``
        is given: then an exception given is raised instead, anything else returned."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", self.auth)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.opts.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed: Any = json.loads(raw) if raw else {}
            except ValueError:
                parsed = raw.decode("utf-8", "replace")
            if (
                exc.code == 401
                and isinstance(parsed, dict)
                and (parsed.get("reason") in ("Login failed", "Not management user"))
            ):
                raise CtlError(
                    f"authentication failed for user '{self.opts.username}' at {self.base}: "
                    f"{parsed.get('reason')}",
                    EX_NOPERM,
                ) from exc
            if exc.code == 404 and missing is not _RAISE:
                if isinstance(missing, BaseException):
                    raise missing from exc
                return missing
            raise HttpError(exc.code, parsed) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CtlError(
                f"unable to perform an operation: could not reach the Leveret management API "
                f"at {self.base} ({reason}). Is the broker running (leveret server)?",
                EX_UNAVAILABLE,
            ) from exc
        return json.loads(raw) if raw.strip() else None

    def get(self, path: str, missing: Any = _RAISE) -> Any:
        return self.request("GET", path, missing=missing)

    def user(self, name: str, missing: Any = _RAISE) -> Any:
        """The user ``name`` as the API shows it (``missing``: as :meth:`request`'s)."""
        return self.get(f"/api/users/{q(name)}", missing=missing)

    def vhost(self, name: str, missing: Any = _RAISE) -> Any:
        """The virtual host ``name`` as the API shows it (``missing``: as :meth:`request`'s)."""
        return self.get(f"/api/vhosts/{q(name)}", missing=missing)

    def node_name(self) -> str:
        """The node the broker says it is ("leveret" when it does not say)."""
        try:
            who = self.get("/api/overview")
            return str(who.get("node", "leveret"))
        except HttpError:
            return "leveret"


def q(name: str) -> str:
    """A path segment: vhosts and names are percent-encoded, '/' included."""
    return quote(name, safe="")


def banner_line(opts: Options, line: str) -> None:
    if not opts.quiet:
        print(line, flush=True)


@dataclass
class Ctl:
    """What a verb works with: the options in force and a client of the management API."""

    opts: Options
    client: Client

    def banner(self, line: str) -> None:
        banner_line(self.opts, line)


def user_and_vhost(
    client: Client, user: str, vhost: str, error: Callable[[str, int], CtlError] = CtlError
) -> None:
    """A user and a virtual host a verb names must exist: rabbitmqctl's texts and codes
    if not (``error`` frames them: the permission verbs and the topic permission verbs
    print them differently)."""
    client.user(user, missing=error(f"User {user} does not exist", EX_NOUSER))
    client.vhost(vhost, missing=error(f"Virtual host {vhost} does not exist", EX_UNAVAILABLE))


def put_permissions(
    ctl: Ctl, kind: str, user: str, body: dict[str, str], error: Callable[[HttpError], CtlError]
) -> None:
    """Set ``user``'s permissions (``kind``: "permissions" or "topic-permissions") in the
    virtual host given by -p; the API's refusal as ``error`` makes it."""
    try:
        ctl.client.request("PUT", f"/api/{kind}/{q(ctl.opts.vhost)}/{q(user)}", body)
    except HttpError as exc:
        raise error(exc) from exc
