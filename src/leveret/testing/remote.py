"""An outside broker (RabbitMQ, or a Leveret started elsewhere) as the pytest fixtures see
it: its AMQP URL, and the vhosts and permissions made and deleted through its management
HTTP API, with the credentials of the AMQP URL."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, unquote, urlsplit

DEFAULT_MANAGEMENT_PORT = 15672
TIMEOUT = 30.0


class ManagementError(Exception):
    """The management API refused a request, or could not be reached."""


class RemoteBroker:
    """A broker reached over the network: ``url`` is an AMQP URL
    (``amqp://user:password@host:port/vhost``); ``management_url`` is the root of its
    management API, with the same credentials (default: found by :meth:`locate`)."""

    def __init__(self, url: str, management_url: str | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
            raise ValueError(f"not an AMQP URL: {url!r} (amqp://user:password@host:port/)")
        self.url = url
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
        self.user = unquote(parts.username) if parts.username is not None else "guest"
        self.password = unquote(parts.password) if parts.password is not None else "guest"
        host = f"[{self.host}]" if ":" in self.host else self.host
        #: where to look for the management API when none is given: RabbitMQ's convention
        #: (15672 beside 5672, so 15673 beside 5673, as ``leveret up`` is told to run
        #: beside a RabbitMQ), then RabbitMQ's default port
        self._candidates = [
            f"http://{host}:{port}"
            for port in dict.fromkeys((self.port + 10000, DEFAULT_MANAGEMENT_PORT))
            if port < 65536
        ]
        self._given = management_url is not None
        self.management_url = (management_url or self._candidates[0]).rstrip("/")
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        self._auth = f"Basic {token}"

    def locate(self) -> None:
        """Make sure the management API is this broker's. A given one is taken as it is (a
        port may be forwarded); otherwise the first candidate whose node listens for AMQP
        on this URL's port, so that the tests' vhosts are never made on another broker on
        the same machine (a RabbitMQ on 15672 beside a Leveret on 5673). ManagementError
        saying what was found where, when none is."""
        if self._given:
            self.vhosts()  # reachable, and the credentials may manage it
            return
        found = []
        for url in self._candidates:
            self.management_url = url
            try:
                ports = self._amqp_ports()
            except ManagementError as exc:
                found.append(str(exc))
                continue
            if self.port in ports:
                return
            found.append(
                f"the one at {url} is another broker's (AMQP on port "
                f"{', '.join(map(str, sorted(ports))) or 'none'})"
            )
        raise ManagementError(
            f"no management API of the broker at {self.host}:{self.port} found: "
            f"{'; '.join(found)}; give it with --leveret-management-url"
        )

    def _amqp_ports(self) -> set[int]:
        """The ports the management API's node listens on for AMQP (``/api/overview``)."""
        overview = self._expect("GET", "/api/overview?columns=listeners", ok=(200,))
        return {
            int(x["port"])
            for x in overview.get("listeners", [])
            if str(x.get("protocol", "")).startswith("amqp")
        }

    def __repr__(self) -> str:
        return f"<RemoteBroker {self.host}:{self.port}, management {self.management_url}>"

    # ------------------------------------------------------------------ HTTP
    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.management_url + path,
            data=data,
            method=method,
            headers={"Authorization": self._auth, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                raw = response.read()
                status = int(response.status)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            status = exc.code
        except (OSError, urllib.error.URLError) as exc:
            raise ManagementError(
                f"cannot reach the management API at {self.management_url}: {exc}"
            ) from exc
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode(errors="replace")
        return status, payload

    def _expect(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        status, payload = self._request(method, path, body)
        if status not in ok:
            reason = payload.get("reason") if isinstance(payload, dict) else payload
            raise ManagementError(
                f"{method} {self.management_url}{path}: {status} {reason or ''}".rstrip()
            )
        return payload

    # -------------------------------------------------------------- the API
    def vhost_url(self, vhost: str, user: str | None = None, password: str | None = None) -> str:
        """The AMQP URL of ``vhost`` on this broker (the URL's credentials by default)."""
        user = self.user if user is None else user
        password = self.password if password is None else password
        host = f"[{self.host}]" if ":" in self.host else self.host
        creds = f"{quote(user, safe='')}:{quote(password, safe='')}@"
        return f"{self.scheme}://{creds}{host}:{self.port}/{quote(vhost, safe='')}"

    def vhosts(self) -> list[str]:
        data = self._expect("GET", "/api/vhosts?columns=name", ok=(200,))
        return sorted(str(v["name"]) for v in data)

    def add_vhost(self, name: str, description: str = "", tags: list[str] | None = None) -> None:
        body = {"description": description, "tags": ",".join(tags or [])}
        self._expect("PUT", f"/api/vhosts/{quote(name, safe='')}", body, ok=(201, 204))

    def delete_vhost(self, name: str) -> bool:
        status, _ = self._request("DELETE", f"/api/vhosts/{quote(name, safe='')}")
        if status == 404:
            return False
        if status not in (200, 204):
            raise ManagementError(f"DELETE vhost {name!r}: {status}")
        return True

    def set_permissions(
        self,
        user: str,
        vhost: str = "/",
        configure: str = ".*",
        write: str = ".*",
        read: str = ".*",
    ) -> None:
        path = f"/api/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}"
        body = {"configure": configure, "write": write, "read": read}
        self._expect("PUT", path, body, ok=(201, 204))
