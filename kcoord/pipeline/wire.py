"""A small blocking Kafka client for the pipeline: Metadata, ListOffsets and
Fetch over kcoord's own codec (no JVM, no Kafka client library).

It talks to anything that speaks Kafka (one kcoord, a kcoord cluster, Apache
Kafka): each request's version is the highest both sides know within the
range the pipeline was written for (topic names in Fetch: v4-12), and a
partition is always read from its leader as Metadata names it.

Client properties (`client_properties`) use Kafka's client config names.  The
connection is built per `security.protocol` exactly as in kcoord/admin/client.py
(the same function signatures): `SOCKET_FACTORIES` (host, port, properties,
timeout) -> connected socket, and `AUTHENTICATORS` (connection, properties), run
after the version negotiation (the connection offers `send(api_key, version,
body)`).  PLAINTEXT is built here; SSL, SASL_PLAINTEXT and SASL_SSL are the TLS
wrap and SASL login of kcoord/security/client.py, the implementation the admin
CLI registers too.  They are registered when this module is imported, so a Spark
executor that only imports the wire source has them as well.  A security setting
nothing implements is an error, never silently dropped.
"""
from __future__ import annotations

import base64
import socket
import time
from typing import Callable

from kcoord.protocol import client_config
from kcoord.protocol.api import APIS
from kcoord.protocol.client import BlockingExchange, OutOfOrder

CLIENT_ID = "kcoord-pipeline"

# api key -> (lowest, highest) version the pipeline's requests are written for
WANTED = {18: (0, 3), 3: (1, 12), 2: (1, 9), 1: (4, 12)}

NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION = 0, 1, 3
LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER = 5, 6
TOPIC_AUTHORIZATION_FAILED = 29
RETRIABLE = {LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, 74, 75, 14}  # + fenced/unknown epoch, load
ERROR_NAMES = {1: "OFFSET_OUT_OF_RANGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE",
               6: "NOT_LEADER_OR_FOLLOWER", 17: "INVALID_TOPIC_EXCEPTION",
               29: "TOPIC_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED",
               35: "UNSUPPORTED_VERSION", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH"}

LATEST, EARLIEST = -1, -2


class WireError(Exception):
    """A server that cannot be reached or answers with an error: one clear line."""


# security.protocol -> function(host, port, properties, timeout) -> connected socket
SOCKET_FACTORIES: dict[str, Callable] = {}


def _plain_socket(host: str, port: int, _props: dict, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


SOCKET_FACTORIES["PLAINTEXT"] = _plain_socket
# security.protocol -> function(connection, properties), after ApiVersions
AUTHENTICATORS: dict[str, Callable] = {}

# Properties that only matter to TLS (ssl.*) or SASL (sasl.*): set with a
# protocol that has no TLS / no SASL they mean the caller expected security the
# connection would not have.
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def open_socket(host: str, port: int, props: dict | None, timeout: float) -> socket.socket:
    props = dict(props or {})
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    factory = SOCKET_FACTORIES.get(protocol)
    if factory is None:
        raise WireError(f"security.protocol={protocol} is not supported by the pipeline's "
                        f"client (supported: {', '.join(sorted(SOCKET_FACTORIES))})")
    unused = (() if protocol in _TLS_PROTOCOLS else ("ssl.",)) + \
        (() if protocol in _SASL_PROTOCOLS else ("sasl.",))
    stray = sorted(k for k in props if k.startswith(unused)) if unused else []
    if stray:
        raise WireError(f"{stray[0]} is set but security.protocol is {protocol}")
    return factory(host, port, props, timeout)


# ---------------------------------------------------------------- security
# kcoord/security/client.py is client-side only (TLS contexts, JAAS parsing,
# the SASL exchange over protocol codecs): no server, coordinator or admin code.
# Imported on first use, so a PLAINTEXT pipeline never loads it.
def _secure_socket(host: str, port: int, props: dict, timeout: float) -> socket.socket:
    import ssl

    from kcoord.security.client import connect
    try:
        return connect(host, port, props, timeout)
    except ssl.SSLError:
        raise  # an OSError (certificate verification too): Connection names the address
    except ValueError as exc:  # an ssl.* setting that cannot be used: names the key
        raise WireError(str(exc)) from None


def _sasl_authenticate(conn: "Connection", props: dict) -> None:
    from kcoord.security.client import SaslLoginError, sasl_login
    try:
        sasl_login(conn.send, props)
    except (SaslLoginError, ValueError) as exc:
        raise WireError(f"{conn.address}: {exc}") from None


for _protocol in _TLS_PROTOCOLS + _SASL_PROTOCOLS:
    SOCKET_FACTORIES[_protocol] = _secure_socket
for _protocol in _SASL_PROTOCOLS:
    AUTHENTICATORS[_protocol] = _sasl_authenticate


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    try:
        return client_config.parse_bootstrap(text)
    except client_config.ClientConfigError as exc:
        raise WireError(str(exc)) from None


class Connection:
    """One connection to one broker; requests are answered in order."""

    def __init__(self, host: str, port: int, props: dict | None = None,
                 timeout: float = 30.0) -> None:
        self.address = f"{host}:{port}"
        try:
            self.sock = open_socket(host, port, props, timeout)
        except OSError as exc:
            raise WireError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        self._exchange = BlockingExchange(self.sock, CLIENT_ID)
        self.versions: dict[int, int] = {}
        self._negotiate()
        protocol = str((props or {}).get("security.protocol", "PLAINTEXT")).upper()
        authenticate = AUTHENTICATORS.get(protocol)
        if authenticate is not None:
            try:
                authenticate(self, dict(props or {}))
            except WireError:
                raise
            except Exception as exc:  # the authenticator's own error, as one line
                raise WireError(f"{self.address}: authentication failed: {exc}") from None

    def _negotiate(self) -> None:
        resp = self._call(18, 3, {"client_software_name": CLIENT_ID,
                                  "client_software_version": "1"})
        if resp["error_code"] == 35:  # UNSUPPORTED_VERSION: the broker answers with v0
            resp = self._call(18, 0, {})
        theirs = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
        for key, (lo, hi) in WANTED.items():
            if key == 18:
                continue
            ours = APIS[key]
            lo, hi = max(lo, ours.min_version), min(hi, ours.max_version)
            if key in theirs:
                tlo, thi = theirs[key]
                if max(lo, tlo) <= min(hi, thi):
                    self.versions[key] = min(hi, thi)

    def version(self, api_key: int) -> int:
        v = self.versions.get(api_key)
        if v is None:
            raise WireError(f"{self.address} supports no version of API {api_key} the pipeline "
                            f"can use")
        return v

    def send(self, api_key: int, version: int, body: dict) -> dict:
        """One request at an explicit version (what an authenticator uses)."""
        return self._call(api_key, version, body)

    def call(self, api_key: int, body: dict) -> tuple[dict, int]:
        v = self.version(api_key)
        return self._call(api_key, v, body), v

    def _call(self, api_key: int, version: int, body: dict) -> dict:
        try:
            return self._exchange.call(api_key, version, body)
        except OutOfOrder as exc:
            raise WireError(f"{self.address}: {exc}") from None
        except OSError as exc:
            raise WireError(f"{self.address}: {exc.strerror or exc}") from None
        except EOFError:
            raise WireError(f"{self.address}: connection closed by the server") from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def topic_id_str(raw: bytes | None) -> str | None:
    """A topic id as Kafka prints it (URL-safe base64, no padding)."""
    if not raw or raw == bytes(16):
        return None
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class Cluster:
    """Metadata from the bootstrap servers, connections to leaders by node id."""

    def __init__(self, bootstrap: str, props: dict | None = None, timeout: float = 30.0) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.props = dict(props or {})
        self.timeout = timeout
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, dict] = {}
        self._conns: dict[int, Connection] = {}
        self._boot: Connection | None = None

    # --------------------------------------------------------------- metadata
    def _bootstrap_conn(self) -> Connection:
        if self._boot is not None:
            return self._boot
        problems = []
        for host, port in self.bootstrap:
            try:
                self._boot = Connection(host, port, self.props, self.timeout)
                return self._boot
            except WireError as exc:
                problems.append(str(exc))
        raise WireError("; ".join(problems))

    def refresh(self, topics: list[str] | None = None) -> None:
        """Metadata for `topics` (None: every topic, internal ones included)."""
        conn = self._bootstrap_conn()
        body = {"topics": None if topics is None else [{"name": t, "topic_id": bytes(16)}
                                                         for t in topics],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        try:
            resp, _ = conn.call(3, body)
        except WireError:
            self._boot = None
            raise
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in resp["brokers"]}
        for t in resp["topics"]:
            self.topics[t["name"]] = {
                "error_code": t["error_code"], "is_internal": t.get("is_internal", False),
                "topic_id": topic_id_str(t.get("topic_id")),
                "partitions": {p["partition_index"]: (p["error_code"], p["leader_id"],
                                                      p.get("leader_epoch", -1))
                               for p in t["partitions"]}}

    def topic_names(self) -> dict[str, str]:
        """Topic id string -> name of every topic known (KIP-848 records name topics by id)."""
        return {t["topic_id"]: name for name, t in self.topics.items() if t["topic_id"]}

    def partitions(self, topic: str) -> dict[int, tuple[int, int, int]]:
        """{partition: (error, leader id, leader epoch)}; a clear error if the topic
        cannot be read."""
        t = self.topics.get(topic)
        if t is None or t["error_code"]:
            code = t["error_code"] if t else UNKNOWN_TOPIC_OR_PARTITION
            raise WireError(f"topic {topic} cannot be read from {self.describe()}: "
                            f"{ERROR_NAMES.get(code, f'error {code}')}")
        return t["partitions"]

    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.bootstrap)

    def connection(self, node_id: int) -> Connection:
        conn = self._conns.get(node_id)
        if conn is None:
            if node_id not in self.brokers:
                raise WireError(f"broker {node_id} is not in the metadata")
            host, port = self.brokers[node_id]
            conn = self._conns[node_id] = Connection(host, port, self.props, self.timeout)
        return conn

    def drop(self, node_id: int) -> None:
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------ ListOffsets
    def list_offsets(self, topic: str, partitions, timestamp: int,
                     retries: int = 5) -> dict[int, int]:
        """{partition: offset} for LATEST (-1: the high watermark) or EARLIEST
        (-2: the log start), each asked of the partition's leader."""
        want = set(partitions)
        out: dict[int, int] = {}
        for attempt in range(retries + 1):
            by_leader: dict[int, list[int]] = {}
            for p in sorted(want - set(out)):
                _, leader, _ = self.partitions(topic)[p]
                by_leader.setdefault(leader, []).append(p)
            retry = False
            for leader, parts in by_leader.items():
                try:
                    resp, _ = self.connection(leader).call(2, {
                        "replica_id": -1, "isolation_level": 0, "topics": [{
                            "name": topic, "partitions": [
                                {"partition_index": p, "current_leader_epoch": -1,
                                 "timestamp": timestamp} for p in parts]}]})
                except WireError:
                    if attempt == retries:
                        raise
                    self.drop(leader)
                    retry = True
                    continue
                for t in resp["topics"]:
                    for p in t["partitions"]:
                        code = p["error_code"]
                        if code == NONE:
                            out[p["partition_index"]] = p["offset"]
                        elif code in RETRIABLE and attempt < retries:
                            retry = True
                        else:
                            raise WireError(
                                f"ListOffsets {topic}-{p['partition_index']}: "
                                f"{ERROR_NAMES.get(code, f'error {code}')}")
            if not retry:
                break
            time.sleep(min(0.1 * 2 ** attempt, 2.0))
            self.refresh([topic])
        return out

    # ------------------------------------------------------------------ Fetch
    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 8 << 20,
              retries: int = 5) -> tuple[int, bytes, int, int]:
        """One Fetch from the partition's leader (read_uncommitted: every record up
        to the high watermark, transaction markers included).
        -> (error code, record bytes, high watermark, log start offset)."""
        for attempt in range(retries + 1):
            _, leader, epoch = self.partitions(topic)[partition]
            try:
                resp, v = self.connection(leader).call(1, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [{
                        "partition": partition, "current_leader_epoch": -1,
                        "fetch_offset": offset, "last_fetched_epoch": -1,
                        "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
            except WireError:
                if attempt == retries:
                    raise
                self.drop(leader)
                time.sleep(min(0.1 * 2 ** attempt, 2.0))
                self.refresh([topic])
                continue
            if resp.get("error_code"):
                code = resp["error_code"]
                raise WireError(f"Fetch {topic}-{partition}: {ERROR_NAMES.get(code, code)}")
            p = resp["responses"][0]["partitions"][0]
            code = p["error_code"]
            if code in RETRIABLE and attempt < retries:
                time.sleep(min(0.1 * 2 ** attempt, 2.0))
                self.refresh([topic])
                continue
            return code, p["records"] or b"", p["high_watermark"], p.get("log_start_offset", -1)
        raise WireError(f"Fetch {topic}-{partition}: no leader answered")

    def fetch_many(self, node_id: int, items: list[tuple[str, int, int]],
                   part_bytes: int) -> list[tuple[int, bytes, int]]:
        """One Fetch to one broker for many (topic, partition, offset), each at most
        part_bytes.  -> [(error code, record bytes, log start offset)] in item order
        (a partition the answer leaves out, or a lost connection: error -1)."""
        topics: dict[str, list] = {}
        for t, p, off in items:
            topics.setdefault(t, []).append({
                "partition": p, "current_leader_epoch": -1, "fetch_offset": off,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": part_bytes})
        try:
            resp, _ = self.connection(node_id).call(1, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                "max_bytes": part_bytes * len(items), "isolation_level": 0, "session_id": 0,
                "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        except WireError:
            self.drop(node_id)
            return [(-1, b"", -1)] * len(items)
        got = {}
        for t in resp["responses"]:
            for p in t["partitions"]:
                got[(t["topic"], p["partition_index"])] = (
                    p["error_code"], p["records"] or b"", p.get("log_start_offset", -1))
        return [got.get((t, p), (-1, b"", -1)) for t, p, _ in items]

    def close(self) -> None:
        for node in list(self._conns):
            self.drop(node)
        if self._boot is not None:
            self._boot.close()
            self._boot = None
