"""The HTTP endpoint (`http.listen=HOST:PORT`): /metrics, Burrow's v3 API and
the status page, on the server's event loop (asyncio streams, HTTP/1.1 GET
with one request per connection; no web framework).

Handlers run on the loop like the Kafka handlers: a scrape of a very large
server pauses serving for its duration (bench/results has the figure).
"""
from __future__ import annotations

import asyncio
import json
import logging
import socket
from urllib.parse import parse_qs, unquote, urlsplit

from .burrow_api import CLUSTER, BurrowView, only_problems
from .events import ServerMetrics
from .lag import RecordTimes
from .prometheus import CONTENT_TYPE, exposition, make_registry
from .http_security import HttpAuth, ssl_context
from .status_page import PAGE, group_partitions, status_snapshot

log = logging.getLogger("kcoord.http")

MAX_HEADER_BYTES = 16384
READ_TIMEOUT_S = 10.0
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           500: "Internal Server Error"}


def _header(head: bytes, name: bytes) -> str | None:
    """One request header's value (name lower-case), or None."""
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None


class HttpEndpoint:
    def __init__(self, runtime, catalogue, metrics: ServerMetrics, kafka_servers: list[str],
                 burrow_cluster: str = CLUSTER, min_distance_s: int = 1,
                 values: dict | None = None, shares=None) -> None:
        self.runtime = runtime  # the coordinator runtime, read through read_all
        self.catalogue = catalogue
        self.metrics = metrics
        self.shares = shares    # the share-group collector (share_metrics.py), if any
        self.registry = make_registry(runtime, catalogue, metrics,
                                      [shares] if shares is not None else [])
        self.burrow = BurrowView(runtime, catalogue, kafka_servers, cluster=burrow_cluster,
                                 min_distance_s=min_distance_s)
        self.times = RecordTimes()
        values = values or {}
        self.ssl = ssl_context(values)  # None: plain HTTP
        self.auth = HttpAuth(values)
        self._server: asyncio.base_events.Server | None = None
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True,
                                                  ssl=self.ssl)
        sock = self._server.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        log.info("http endpoint on %s://%s:%d/ (/metrics, /v3/kafka, status page)%s",
                 "https" if self.ssl else "http", self.host, self.port,
                 "" if not self.auth.enabled else
                 " (bearer token)" if self.auth.token else " (basic auth)")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # ------------------------------------------------------------------ HTTP
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                    ConnectionError):
                return
            if len(head) > MAX_HEADER_BYTES:
                self._write(writer, 400, b"request header too large\n", "text/plain")
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                self._write(writer, 400, b"bad request line\n", "text/plain")
                return
            method, target = parts[0], parts[1]
            if self.auth.enabled and not self.auth.allows(_header(head, b"authorization")):
                self._write(writer, 401, b"authentication required\n", "text/plain",
                            extra=f"WWW-Authenticate: {self.auth.challenge}\r\n")
                await writer.drain()
                return
            if method not in ("GET", "HEAD"):
                self._write(writer, 405, b"only GET\n", "text/plain")
                return
            try:
                status, body, ctype = await self.route(urlsplit(target).path, target)
            except Exception:
                log.exception("http %s failed", target)
                status, body, ctype = 500, b"internal error\n", "text/plain"
            self._write(writer, status, b"" if method == "HEAD" else body, ctype, len(body))
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    @staticmethod
    def _write(writer, status: int, body: bytes, ctype: str, length: int | None = None,
               extra: str = "") -> None:
        head = (f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body) if length is None else length}"
                f"\r\nCache-Control: no-store\r\nConnection: close\r\n{extra}\r\n")
        writer.write(head.encode("latin-1") + body)

    # ------------------------------------------------------------------ routes
    async def route(self, path: str, url: str) -> tuple[int, bytes, str]:
        if path == "/metrics":
            return 200, exposition(self.registry), CONTENT_TYPE
        if path in ("/", "/index.html"):
            return 200, PAGE.encode(), "text/html; charset=utf-8"
        if path == "/status.json":
            group = parse_qs(urlsplit(url).query).get("group")
            if group:  # one group by partition
                return self._json(200, group_partitions(self.runtime, self.catalogue, self.times,
                                                        group[0],
                                                        await self.burrow.evaluate(group[0]),
                                                        self.shares))
            snapshot = status_snapshot(self.runtime, self.catalogue, self.metrics, self.times,
                                       self.shares)
            for g in snapshot["groups"]:  # Burrow's verdict (None: no committed offsets)
                verdict = await self.burrow.evaluate(g["group"])
                g["burrow"] = verdict["status"] if verdict else None
            return self._json(200, snapshot)
        if path.startswith("/v3/"):
            return await self._burrow([unquote(p) for p in path.strip("/").split("/")], url)
        return 404, b"not found\n", "text/plain"

    @staticmethod
    def _json(status: int, doc: dict) -> tuple[int, bytes, str]:
        return status, json.dumps(doc).encode(), "application/json"

    async def _burrow(self, parts: list[str], url: str) -> tuple[int, bytes, str]:
        """Burrow's v3 routes; every body is {error, message, request, payload}
        (request.host is the serving host's name, as Burrow gives it)."""
        request = {"url": url, "host": socket.gethostname()}

        def ok(message: str, **payload) -> tuple[int, bytes, str]:
            return self._json(200, {"error": False, "message": message, **payload,
                                    "request": request})

        def error(status: int, message: str) -> tuple[int, bytes, str]:
            return self._json(status, {"error": True, "message": message, "request": request})

        if parts[:2] != ["v3", "kafka"]:
            return error(404, "invalid request type")
        rest = parts[2:]
        if not rest:
            return ok("cluster list returned", clusters=[self.burrow.cluster])
        if rest[0] != self.burrow.cluster:
            return error(404, "cluster not found")
        rest = rest[1:]
        if not rest:
            return ok("cluster module detail returned", module={
                "class-name": "kafka", "servers": self.burrow.servers,
                "client-profile": {"name": "kcoord", "client-id": "kcoord", "kafka-version": "",
                                   "tls": None, "sasl": None},
                "topic-refresh": 60, "offset-refresh": self.burrow.refresh_ms // 1000})
        if rest == ["topic"]:
            return ok("topic list returned", topics=self.burrow.topics())
        if len(rest) == 2 and rest[0] == "topic":
            offsets = self.burrow.topic_offsets(rest[1])
            if offsets is None:
                return error(404, "topic not found")
            return ok("topic offsets returned", offsets=offsets)
        if rest == ["consumer"]:
            return ok("consumer list returned", consumers=await self.burrow.consumers())
        if rest[0] == "consumer" and len(rest) in (2, 3):
            group = rest[1]
            if len(rest) == 2:
                topics = await self.burrow.detail(group)
                if topics is None:
                    return error(404, "cluster or consumer not found")
                return ok("consumer detail returned", topics=topics)
            if rest[2] in ("status", "lag"):
                status = await self.burrow.evaluate(group)
                if status is None:
                    return error(404, "cluster or consumer not found")
                if rest[2] == "status":
                    status = only_problems(status)
                return ok("consumer status returned", status=status)
        return error(404, "invalid request type")

