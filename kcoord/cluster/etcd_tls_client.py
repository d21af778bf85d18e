"""aetcd over TLS, and a handshake probe that turns a TLS mismatch into
one clear start-up line.

aetcd 1.0 opens only insecure gRPC channels; `TlsClient` is the same
client on a secure channel (credentials from security/etcd_tls.py).  gRPC
reports a certificate it does not trust only as "failed to connect", and
the node would retry until its start-up deadline, so before connecting the
node makes one TLS handshake with Python's ssl module and the same trust:
an untrusted certificate or a peer that does not speak TLS is a permanent
error naming the key to fix (EtcdTlsError); a refused connection is left
to the usual retries (etcd may still be starting).  A plaintext node whose
connection fails asks `speaks_tls` whether etcd wants TLS, for the same
reason."""
from __future__ import annotations

import asyncio
import os
import ssl
import tempfile

import aetcd
from aetcd import rpc, watcher

from ..security.etcd_tls import KEYSTORE, TRUSTSTORE, EtcdTls
from .aio import bounded


class EtcdTlsError(ConnectionError):
    """TLS to etcd cannot work with this configuration (not worth retrying)."""


class TlsClient(aetcd.Client):
    def __init__(self, tls: EtcdTls, **kw) -> None:
        super().__init__(**kw)
        self._credentials = tls.grpc_credentials()

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        # nothing awaited below: no other task can start a second channel meanwhile
        self.channel = rpc.secure_channel(f"{self._host}:{self._port}", self._credentials,
                                          options=list(self._options.items()))
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                        metadata=self.metadata)
        self._connected.set()


# gRPC's defaults back reconnects off up to 120 s and give each connect 20 s:
# after etcd restarts or a cut heals a node then stayed away for seconds past
# its lease TTL.  Retry at least every second instead (one connect per second
# to one endpoint is nothing to etcd).
RECONNECT_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 250,
    "grpc.min_reconnect_backoff_ms": 1000,
    "grpc.max_reconnect_backoff_ms": 1000,
}


# gRPC shares one TCP connection among the channels of a process to the same
# target with the same arguments; a channel with its own pool gets its own.
OWN_CONNECTION = {"grpc.use_local_subchannel_pool": 1}


def make_client(host: str, port: int, timeout: float, tls: EtcdTls | None,
                own_connection: bool = False) -> aetcd.Client:
    options = {**RECONNECT_OPTIONS, **(OWN_CONNECTION if own_connection else {})}
    if tls is None:
        return aetcd.Client(host=host, port=port, timeout=timeout, options=options)
    return TlsClient(tls, host=host, port=port, timeout=timeout, options=options)


def _context(tls: EtcdTls) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=tls.ca.decode() if tls.ca else None)
    if tls.key is not None:
        fd, path = tempfile.mkstemp(prefix="kcoord-etcd-", suffix=".pem")
        try:  # load_cert_chain reads files only: a private copy, removed at once
            with os.fdopen(fd, "wb") as fh:
                fh.write(tls.chain + tls.key)
            ctx.load_cert_chain(path)
        finally:
            os.unlink(path)
    return ctx


async def probe(host: str, port: int, tls: EtcdTls, timeout: float = 5.0) -> None:
    """One TLS handshake with etcd: EtcdTlsError when it cannot succeed,
    OSError (retry) when etcd is not reachable."""
    ctx = _context(tls)
    where = f"etcd at {host}:{port}"
    try:
        reader, writer = await bounded(
            asyncio.open_connection(host, port, ssl=ctx, server_hostname=host), timeout)
    except ssl.SSLCertVerificationError as exc:
        raise EtcdTlsError(f"{TRUSTSTORE}: {where} presented a certificate this node does "
                           f"not trust ({exc.verify_message})") from None
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
            raise EtcdTlsError(f"etcd.ssl.client.enable: {where} does not speak TLS "
                               f"({reason})") from None
        if "CERTIFICATE" in reason.upper():
            raise EtcdTlsError(f"{KEYSTORE}: {where} wants a client certificate it trusts "
                               f"({reason})") from None
        raise EtcdTlsError(f"{where}: TLS handshake failed ({reason})") from None
    try:  # TLS 1.3: a refused client certificate is an alert after the handshake
        await bounded(reader.read(1), 0.5)
    except ssl.SSLError as exc:
        raise EtcdTlsError(f"{KEYSTORE}: {where} wants a client certificate it trusts "
                           f"({exc.reason or exc})") from None
    except (OSError, asyncio.TimeoutError):
        pass  # etcd waits for the client's first HTTP/2 bytes: the handshake was accepted
    writer.close()
    try:
        await bounded(writer.wait_closed(), timeout)
    except (OSError, ssl.SSLError, asyncio.TimeoutError):
        pass


async def speaks_tls(host: str, port: int, timeout: float = 5.0) -> bool:
    """Whether the server at host:port answers a TLS handshake (certificate
    not checked: this only tells a plaintext node what is wrong)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await bounded(asyncio.open_connection(host, port, ssl=ctx), timeout)
    except ssl.SSLError as exc:  # an alert from the server (e.g. no client certificate): TLS
        return "ALERT" in str(exc.reason or exc).upper()
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True
