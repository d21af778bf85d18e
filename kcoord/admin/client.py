"""A small blocking Kafka admin client on kcoord's own codec.

Used by the operator commands (`kcoord consumer-groups`, `topics`,
`configs`); it speaks only the Kafka protocol, so it works against Apache
Kafka as well as kcoord.  It connects (the connect step below), negotiates
each API's version with ApiVersions (the highest version both sides
speak), routes group requests to the group's coordinator (FindCoordinator)
and retries COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and
NOT_COORDINATOR until the command's timeout.

Client properties come from `--command-config FILE` (Java properties, as
Kafka's tools take them).  The connect step is pluggable per
`security.protocol`: CONNECTORS maps a protocol name to a function
(host, port, properties, timeout) -> connected socket, and AUTHENTICATORS
maps it to a function (KafkaConnection, properties) run right after the
version negotiation (a SASL handshake, say).  PLAINTEXT is built in.
"""
from __future__ import annotations

import socket
import time
from typing import Any, Callable

from ..protocol import client_config
from ..protocol.api import APIS
from ..protocol.client_config import ClientConfigError
from ..protocol.errors import Err
from ..protocol.client import BlockingExchange, OutOfOrder

API_VERSIONS = 18
RETRIABLE_COORDINATOR = {Err.COORDINATOR_LOAD_IN_PROGRESS, Err.COORDINATOR_NOT_AVAILABLE,
                         Err.NOT_COORDINATOR}


class AdminError(Exception):
    """A failure the command reports as one line."""


class UsageError(Exception):
    """Bad flags or arguments: reported on stderr with exit status 1."""


def error_name(code: int) -> str:
    try:
        return Err(code).name
    except ValueError:
        return f"error {code}"


def read_properties(path: str | None) -> dict[str, str]:
    """A client properties file (protocol/client_config.py); {} without one."""
    if not path:
        return {}
    try:
        return client_config.read_properties(path)
    except ClientConfigError as exc:
        raise AdminError(str(exc)) from None


def plaintext_connect(host: str, port: int, _properties: dict, timeout: float):
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


CONNECTORS: dict[str, Callable[[str, int, dict, float], Any]] = {"PLAINTEXT": plaintext_connect}
AUTHENTICATORS: dict[str, Callable[["KafkaConnection", dict], None]] = {}


class KafkaConnection:
    """One broker connection: framed requests, responses in order."""

    def __init__(self, host: str, port: int, properties: dict, timeout: float,
                 client_id: str = "kcoord-admin") -> None:
        protocol = properties.get("security.protocol", "PLAINTEXT").upper()
        connect = CONNECTORS.get(protocol)
        if connect is None:
            raise AdminError(f"security.protocol {protocol} is not supported by this client "
                             f"(known: {', '.join(sorted(CONNECTORS))})")
        self.host, self.port, self.timeout, self.client_id = host, port, timeout, client_id
        try:
            self.sock = connect(host, port, properties, timeout)
        except OSError as exc:
            raise AdminError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self._exchange = BlockingExchange(self.sock, client_id)
        self.versions = self._negotiate()
        authenticate = AUTHENTICATORS.get(protocol)
        if authenticate is not None:
            authenticate(self, properties)

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        response = self.send(API_VERSIONS, 3, {"client_software_name": "kcoord-admin",
                                               "client_software_version": "1"})
        if response["error_code"] == Err.UNSUPPORTED_VERSION:
            response = self.send(API_VERSIONS, 0, {})
        if response["error_code"] != Err.NONE:
            raise AdminError(f"ApiVersions failed: {error_name(response['error_code'])}")
        return {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}

    def version(self, api_key: int, low: int = 0, high: int | None = None) -> int:
        """The highest version of the API both this client and the broker speak."""
        api = APIS[api_key]
        broker = self.versions.get(api_key)
        top = min(api.max_version, broker[1] if broker else -1, 10**9 if high is None else high)
        bottom = max(api.min_version, broker[0] if broker else 10**9, low)
        if broker is None or top < bottom:
            raise AdminError(f"the broker at {self.host}:{self.port} does not support "
                             f"{api.name} in a version this tool speaks")
        return top

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
            return True
        except AdminError:
            return False

    def call(self, api_key: int, body: dict, low: int = 0, high: int | None = None) -> tuple[int, dict]:
        version = self.version(api_key, low, high)
        return version, self.send(api_key, version, body)

    def send(self, api_key: int, version: int, body: dict) -> dict:
        try:
            return self._exchange.call(api_key, version, body)
        except OutOfOrder:
            raise AdminError(f"{self.host}:{self.port} answered out of order") from None
        except (OSError, EOFError) as exc:
            raise AdminError(f"connection to {self.host}:{self.port} failed: {exc}") from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class AdminClient:
    def __init__(self, bootstrap: str, properties: dict | None = None,
                 timeout_ms: int = 30000) -> None:
        self.properties = dict(properties or {})
        self.timeout = timeout_ms / 1000.0
        try:
            self.bootstrap = client_config.parse_bootstrap(bootstrap)
        except ClientConfigError as exc:
            raise AdminError(f"--bootstrap-server: {exc}") from None
        self._by_address: dict[tuple[str, int], KafkaConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}

    # -------------------------------------------------------- connections
    def _connect(self, address: tuple[str, int]) -> KafkaConnection:
        conn = self._by_address.get(address)
        if conn is None:
            conn = KafkaConnection(address[0], address[1], self.properties, self.timeout)
            self._by_address[address] = conn
        return conn

    def any(self) -> KafkaConnection:
        if self._by_address:
            return next(iter(self._by_address.values()))
        problems = []
        for address in self.bootstrap:
            try:
                return self._connect(address)
            except AdminError as exc:
                problems.append(str(exc))
        raise AdminError("; ".join(problems))

    def node(self, node_id: int) -> KafkaConnection:
        if node_id not in self._brokers:
            self.metadata([])
        address = self._brokers.get(node_id)
        if address is None:
            raise AdminError(f"broker {node_id} is not in the cluster metadata")
        return self._connect(address)

    def brokers(self) -> dict[int, tuple[str, int]]:
        self.metadata([])
        return dict(self._brokers)

    def close(self) -> None:
        for conn in self._by_address.values():
            conn.close()
        self._by_address.clear()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------- metadata
    def metadata(self, topics: list[str] | None = None) -> dict:
        """Metadata for the topics (None: all; []: none), brokers remembered."""
        conn = self.any()
        version = conn.version(3, 1)
        body = {"topics": None if topics is None else [{"name": t, "topic_id": bytes(16)}
                                                       for t in topics],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        response = conn.send(3, version, body)
        self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
        return response

    def partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """Partition indexes of each topic; AdminError naming an unknown topic."""
        out = {}
        for t in self.metadata(topics)["topics"]:
            if t["error_code"] != Err.NONE:
                raise AdminError(f"topic '{t['name']}': {error_name(t['error_code'])}")
            out[t["name"]] = sorted(p["partition_index"] for p in t["partitions"])
        return out

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        out = {}
        for t in self.metadata(sorted(set(topics)))["topics"]:
            for p in t["partitions"]:
                out[(t["name"], p["partition_index"])] = p["leader_id"]
        return out

    # ------------------------------------------------------- coordinators
    def coordinator(self, group: str, key_type: int = 0) -> KafkaConnection:
        """The coordinator of a group (key_type 0) or transactional id (1)."""
        return self.coordinator_of(group, key_type)[1]

    def coordinator_of(self, key: str, key_type: int = 0) -> tuple[int, KafkaConnection]:
        """(node id, connection) of the key's coordinator."""
        deadline = time.monotonic() + self.timeout
        what = "group" if key_type == 0 else "transactional id"
        while True:
            conn = self.any()
            version = conn.version(10, 1 if key_type else 0)
            if version >= 4:
                response = conn.send(10, version, {"key_type": key_type, "coordinator_keys": [key]})
                [found] = response["coordinators"]
            else:
                found = conn.send(10, version, {"key": key, "key_type": key_type})
            code = found["error_code"]
            if code == Err.NONE:
                return found["node_id"], self._connect((found["host"], found["port"]))
            if code not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                raise AdminError(f"FindCoordinator for {what} '{key}': {error_name(code)}")
            time.sleep(0.2)

    def group_request(self, group: str, api_key: int, body: dict,
                      error_of: Callable[[dict], int], low: int = 0,
                      high: int | None = None) -> tuple[int, dict]:
        """Send to the group's coordinator, retrying the coordinator errors."""
        deadline = time.monotonic() + self.timeout
        while True:
            conn = self.coordinator(group)
            version, response = conn.call(api_key, body, low, high)
            if error_of(response) not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                return version, response
            time.sleep(0.2)

    # ------------------------------------------------------------ offsets
    def list_offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict:
        """{(topic, partition): offset} for a spec (-1 latest, -2 earliest, or a
        timestamp: -1 when no record is that recent), asking each leader."""
        by_leader: dict[int, list[tuple[str, int]]] = {}
        leaders = self.leaders([t for t, _ in partitions])
        for tp in partitions:
            by_leader.setdefault(leaders.get(tp, -1), []).append(tp)
        out = {}
        for leader, tps in by_leader.items():
            if leader < 0:
                for tp in tps:
                    out[tp] = None
                continue
            conn = self.node(leader)
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            _, response = conn.call(2, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp,
                                            "current_leader_epoch": -1} for p in ps]}
                for t, ps in topics.items()]}, low=1)
            for t in response["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"])] = (
                        p["offset"] if p["error_code"] == Err.NONE else None)
        return out
