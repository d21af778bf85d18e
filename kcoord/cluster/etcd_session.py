"""A node's session with etcd: one client connection and one lease.

The lease is Kafka's ZooKeeper session: every key a node owns (its
registration, the controller key when it is controller) lives under it, so
etcd deletes them when the node stops refreshing it for the TTL.  The
lease is refreshed every TTL/3 counted from the previous send (a late
answer does not push the next refresh back), each refresh waiting for its
answer no longer than the lease can live; when etcd answers that it has expired
(the node was paused or cut off longer than the TTL), `on_expired` is
called and a new lease is granted: to the cluster this is a new
incarnation of the node.

The refreshes are sent from a thread of their own (lease_refresher.py), so
a node whose event loop is busy (taking many leaderships at once on a
loaded host) does not lose its lease to its own loop; a loop silent for
TTL/2 stops them (a wedged node must still lose its lease).  Grants,
revokes and the listeners stay on the loop.

The lease has a connection of its own, apart from the one the node's
writes and watch use: after a heal a node sends a burst of writes (an ISR
change per partition, the controller's moves).  In seed 180 the
controller's refresh and 41 of its ISR writes were answered together 1.8 s
late while the other nodes' leases were renewed meanwhile: its lease
expired with no fault on it.  (Not shown to be the cause: etcd also holds
a renewal behind a large enough burst of transactions on any connection,
docs/cluster.md.)"""
from __future__ import annotations

import asyncio
import logging
import math
from typing import Awaitable, Callable, Sequence

import aetcd

from .aio import bounded, cancel_and_wait
from .lease_refresher import (  # noqa: F401 (RETRY_S: the schedule's tests)
    RETRY_S,
    SLOW_ANSWER_S,
    LeaseRefresher,
    RefreshSchedule,
    open_channel,
)

log = logging.getLogger("kcoord.cluster.etcd")


def parse_endpoints(endpoints: Sequence[str] | str) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' (or a list of them; http:// accepted) -> [(host, port)]."""
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    out = []
    for item in endpoints:
        item = item.strip()
        if not item:
            continue
        item = item.split("://", 1)[-1].rstrip("/")
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"etcd.endpoints: {item!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise ValueError("etcd.endpoints: no endpoint given")
    return out


async def connect(endpoints: list[tuple[str, int]], timeout: float = 5.0,
                  attempts_deadline: float = 30.0, tls=None,
                  own_connection: bool = False) -> aetcd.Client:
    """A client to the first endpoint that answers, trying them in turn
    until attempts_deadline seconds have passed; over TLS when `tls`
    (security/etcd_tls.EtcdTls) is given, after a handshake probe whose
    EtcdTlsError (a configuration that cannot work) is raised at once.
    `own_connection`: a TCP connection no other client of this process shares."""
    from .etcd_tls_client import EtcdTlsError, make_client, probe, speaks_tls
    loop = asyncio.get_running_loop()
    deadline = loop.time() + attempts_deadline
    last: Exception | None = None
    while True:
        for host, port in endpoints:
            if tls is not None:
                try:
                    await probe(host, port, tls, timeout)
                except EtcdTlsError:
                    raise
                except (OSError, asyncio.TimeoutError) as exc:  # not up (yet): next one
                    last = exc
                    continue
            client = make_client(host, port, timeout, tls, own_connection)
            try:
                await client.connect()
                await client.status()
                return client
            except Exception as exc:  # unreachable or not ready: try the next one
                last = exc
                await _close_quietly(client)
                if tls is None and await speaks_tls(host, port):
                    raise EtcdTlsError(f"etcd.ssl.client.enable: etcd at {host}:{port} speaks "
                                       f"TLS (set etcd.ssl.client.enable=true and "
                                       f"etcd.ssl.truststore.location)") from None
        if loop.time() > deadline:
            raise ConnectionError(f"etcd.endpoints: no etcd answered at "
                                  f"{', '.join(f'{h}:{p}' for h, p in endpoints)} ({last})")
        await asyncio.sleep(0.2)


async def _close_quietly(client: aetcd.Client) -> None:
    try:  # bounded: closing waits for the watch stream, which a dead etcd never ends
        await bounded(client.close(), 5.0)
    except (Exception, asyncio.TimeoutError):
        pass


def _call(listener: Callable[[], None] | None, what: str) -> None:
    if listener is not None:
        try:
            listener()
        except Exception:
            log.exception("%s listener failed", what)


class EtcdSession:
    def __init__(self, endpoints: list[tuple[str, int]], ttl_ms: int, tls=None) -> None:
        self.endpoints = endpoints
        self.tls = tls  # security/etcd_tls.EtcdTls, or None: plaintext
        self.ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self.client: aetcd.Client | None = None
        self._lease_client: aetcd.Client | None = None  # grants and revokes
        self.lease_id = 0
        # the expired lease this process held before lease_id (0: none), which
        # its registration names so the controller can tell a return of the
        # same process (memory and log whole) from a restart
        self.resumes = 0
        self.granted_at = 0.0   # loop time of the last grant
        self.on_expired: Callable[[], Awaitable[None]] | None = None
        # called once when no refresh was answered for a whole TTL (the lease may be gone)
        self.on_lapsed: Callable[[], None] | None = None
        # called once when, after a lapse, etcd answers a refresh of the same lease
        self.on_restored: Callable[[], None] | None = None
        self._schedule = RefreshSchedule(self.ttl_s, 0.0)
        self._lapsed = False
        self._refresher: LeaseRefresher | None = None
        self._renewing: asyncio.Task | None = None  # a new lease being granted
        self._expired_lease = 0     # the lease the next grant resumes
        self._expired_again = -1    # a lease reported expired while a grant was under way
        self._closed = False

    async def open(self) -> None:
        timeout = max(2.0, self.ttl_s * 2)
        self.client = await connect(self.endpoints, timeout=timeout, tls=self.tls)
        self._lease_client = await connect(self.endpoints, timeout=timeout, tls=self.tls,
                                           own_connection=True)
        await self._grant()
        loop = asyncio.get_running_loop()
        self._schedule = RefreshSchedule(self.ttl_s, loop.time())
        channel = open_channel(self._lease_client._host, self._lease_client._port, self.tls)
        self._refresher = LeaseRefresher(
            loop, channel, self._schedule, lambda: self.lease_id, self._answered,
            self._expired, self._failed, on_tick=self.check_lapse,
            loop_silence_s=self.ttl_s / 2)
        self._refresher.start()

    async def _grant(self, resumes: int = 0) -> None:
        lease = await self._lease_client.lease(self.ttl_s)
        self.lease_id = lease.id
        self.resumes = resumes
        now = self.granted_at = asyncio.get_running_loop().time()
        if self._refresher is not None:
            with self._refresher.lock:
                self._schedule.granted(now)
        log.info("etcd lease %x granted (ttl %ds)", self.lease_id, self.ttl_s)

    @property
    def lapsed(self) -> bool:
        """No refresh of the current lease answered for a whole TTL."""
        return self._lapsed

    @property
    def held_back(self) -> int:
        """Refreshes not sent because this node's loop had not turned for TTL/2."""
        return 0 if self._refresher is None else self._refresher.held_back

    def check_lapse(self) -> None:
        """Tell on_lapsed at once when no refresh was answered for a whole
        TTL.  Asked before serving from memory too: a process waking from a
        pause reads the requests queued meanwhile before the loop's own
        check runs, and its lease (so its leaderships) may be gone."""
        if self._refresher is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        if not self._lapsed and loop.time() - self._schedule.last_ok >= self.ttl_s:
            self._lapsed = True
            log.warning("no etcd lease refresh answered for %ds: leaderships may be gone",
                        self.ttl_s)
            _call(self.on_lapsed, "lease lapse")

    # ------------------------------------------- the refresher's news (on the loop)
    def _answered(self, lease: int, _sent: float, took: float) -> None:
        if took > SLOW_ANSWER_S:
            # etcd slow (its apply backlog holds renewals) or this process starved:
            # which one shows beside the stall reporter's lines
            log.info("etcd lease refresh answered after %.2fs", took)
        if lease != self.lease_id or self._closed:
            return
        if self._lapsed:
            self._lapsed = False
            log.warning("etcd lease %x refreshed again: it never expired", self.lease_id)
            _call(self.on_restored, "lease restore")

    def _failed(self, exc: BaseException, took: float) -> None:
        log.warning("etcd lease refresh failed after %.1fs: %r", took, exc)
        self.check_lapse()

    def _expired(self, lease: int) -> None:
        if lease != self.lease_id or self._closed:
            return
        if self._renewing is not None:  # (the refresher reports a lease once)
            self._expired_again = lease
            return
        self.check_lapse()
        self._renewing = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        try:
            log.warning("etcd lease %x expired: registering again as a new incarnation",
                        self.lease_id)
            if self.lease_id:  # 0: a failed re-registration's retry names the first
                self._expired_lease = self.lease_id
            try:
                await self._grant(resumes=self._expired_lease)
                self._lapsed = False
                if self.on_expired is not None:
                    await self.on_expired()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("re-registration after lease expiry failed; retrying")
                self.lease_id = 0
                if self._refresher is not None:  # it reports lease 0 expired: tried again
                    self._refresher.grant_failed()
        finally:
            self._renewing = None
            again, self._expired_again = self._expired_again, -1
            if again == self.lease_id and not self._closed:
                # the new lease ran out while on_expired ran (a stalled
                # registration): grant again, as the refresher will not ask twice
                self._expired(again)

    def stop_refreshing(self) -> None:
        """Refresh no more and revoke nothing: the lease runs out in its TTL
        (what a crashed node leaves behind; tests)."""
        self._closed = True
        if self._refresher is not None:
            asyncio.get_running_loop().create_task(self._refresher.stop())
        if self._renewing is not None:
            self._renewing.cancel()

    async def close(self, revoke: bool = True) -> None:
        self._closed = True
        if self._refresher is not None:
            await self._refresher.stop()
        await cancel_and_wait(self._renewing, 5.0)
        if self._lease_client is not None:
            if revoke and self.lease_id:
                try:
                    await bounded(self._lease_client.revoke_lease(self.lease_id), self.ttl_s)
                except Exception as exc:  # etcd gone: the lease expires by itself
                    log.warning("etcd lease revoke failed: %s", exc)
            await _close_quietly(self._lease_client)
        if self.client is not None:
            await _close_quietly(self.client)
