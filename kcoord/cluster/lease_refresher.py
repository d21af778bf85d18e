"""The etcd lease refresh, on a thread of its own.

A node's event loop can be busy for a second or more (taking ~100
leaderships after another node's lapse, on a loaded host): a refresh sent
from that loop goes out late and its answer waits behind the loop's work,
so the lease lapsed although etcd and the node were both up, and the
controller moved everything again (fault seeds 211, 212 at load 16-25).
Here the refreshes are sent and their answers read on threads with a
blocking gRPC channel of their own: the calls wait with the interpreter
lock released, and a thread gets the lock back within a switch interval
(5 ms) of a busy loop.  They go on one keep-alive stream every TTL/3 from
the previous send, answered or not (KeepAliveStream).

The watchdog: a lease says the node serves.  A refresh is sent only while
the event loop has turned within LOOP_SILENCE_S (the loop stamps `tick()`
every TICK_S), so a loop wedged for good still loses its lease: its last
refresh goes out at most TTL/2 after its last turn, so etcd drops the lease
at most 1.5 TTL after it (instead of 1 TTL; a frozen process, whose thread
stops too, loses it after 1 TTL as before).  Correctness does not rest on
this bound: while the lease lives the controller moves none of the node's
leaderships, whichever thread refreshed it, and the node's own lapse check
(EtcdSession.check_lapse, on the loop) counts from the send of the last
answered refresh, as before.  A loop stalled less than about 7/6 TTL keeps
its lease: the last refresh before the cut-off went at most TTL/3 before
it, so the lease outlives the last turn by at least TTL/6 + TTL.

What the thread learns goes to the loop by call_soon_threadsafe (answers of
a lapsed lease, an expired lease, failures): listeners run on the loop."""
from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
import time
from typing import Callable

import grpc
from aetcd import rpc

log = logging.getLogger("kcoord.cluster.etcd")

# after a refresh failed at once (connection refused, reset): ask again this soon
RETRY_S = 0.1
# a refresh answered later than this (s) is logged: the lease is at risk
SLOW_ANSWER_S = 0.5
# how often the loop stamps that it turned (s)
TICK_S = 0.25
# how often a thread that holds its refresh back looks again (s)
HOLD_POLL_S = 0.05


class RefreshSchedule:
    """When a lease refresh is sent and how long its answer is awaited, in
    monotonic seconds: sends keep a TTL/3 cadence from the previous send, so
    one slow answer cannot leave the lease without a refresh for a whole TTL;
    an answer is awaited until the lease would run out (a reply after that is
    useless: send a new one instead, on a new stream)."""

    def __init__(self, ttl_s: float, now: float) -> None:
        self.ttl_s = ttl_s
        self.period = ttl_s / 3.0
        self.last_ok = now      # the lease lives at least until last_ok + ttl_s
        self.next_send = now + self.period

    def delay(self, now: float) -> float:
        return max(0.0, self.next_send - now)

    def sent(self, now: float) -> float:
        """A refresh goes out at `now`: the seconds to await its answer."""
        self.next_send = now + self.period
        return max(self.period, self.last_ok + self.ttl_s - now)

    def answered(self, sent_at: float) -> None:
        self.last_ok = max(self.last_ok, sent_at)  # etcd restarted the TTL no earlier

    def failed(self, now: float) -> None:
        self.next_send = min(self.next_send, now + RETRY_S)

    def granted(self, now: float) -> None:
        self.last_ok = now
        self.next_send = now + self.period


# The lease's channel tries to connect again every 250 ms (the others every
# second): after etcd restarts or a cut from it heals, a node whose lease
# survived learns so (and acknowledges again) up to a second sooner; in seed
# 260 the nodes' first answered refreshes came 0.5-1.4 s after etcd was back.
# (min_reconnect_backoff_ms stays 1 s: gRPC takes it as the connect timeout.)
LEASE_RECONNECT = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 250,
}


def open_channel(host: str, port: int, tls=None) -> grpc.Channel:
    """A blocking channel to etcd on a TCP connection of its own (not shared
    with the node's aio channels: etcd_tls_client.OWN_CONNECTION)."""
    from .etcd_tls_client import OWN_CONNECTION, RECONNECT_OPTIONS
    options = list({**RECONNECT_OPTIONS, **LEASE_RECONNECT, **OWN_CONNECTION}.items())
    target = f"{host}:{port}"
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, tls.grpc_credentials(), options=options)


class LeaseRefresher:
    """Refreshes `lease_id()` on its own thread while the loop turns.

    The callbacks run on `loop`: answered(lease, sent, took) after each
    answer that the lease lives, expired(lease) once per lease etcd calls
    gone (or lease 0: none), failed(exc, since) at the first failure of a
    run.  on_tick() runs on the loop at every tick.  Times are
    time.monotonic(), as the loop's clock."""

    def __init__(self, loop: asyncio.AbstractEventLoop, channel: grpc.Channel,
                 schedule: RefreshSchedule, lease_id: Callable[[], int],
                 answered: Callable[[int, float, float], None],
                 expired: Callable[[int], None],
                 failed: Callable[[BaseException, float], None],
                 on_tick: Callable[[], None], loop_silence_s: float) -> None:
        self.loop, self.channel, self.schedule = loop, channel, schedule
        self.lease_id = lease_id
        self._answered, self._expired, self._failed = answered, expired, failed
        self.on_tick = on_tick      # on the loop at each tick: its own lapse check
        self.loop_silence_s = loop_silence_s
        self.lock = threading.Lock()    # the schedule is shared with the loop's grants
        self.loop_seen = time.monotonic()
        self._stub = rpc.LeaseStub(channel)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set on stop, and when a stream fails
        self._tick_handle: asyncio.TimerHandle | None = None
        self._thread = threading.Thread(target=self._run, name="kcoord-lease", daemon=True)
        self.held_back = 0      # refreshes not sent because the loop was silent (for tests)
        self.reported = -1      # the lease last reported expired
        self.most_unanswered = 0    # refreshes awaiting their answers at once, at most (tests)

    def start(self) -> None:
        self.tick()
        self._thread.start()

    def tick(self) -> None:
        """On the loop: it turned."""
        self.loop_seen = time.monotonic()
        self._tick_handle = self.loop.call_later(TICK_S, self.tick)
        try:
            self.on_tick()
        except Exception:
            log.exception("lease tick failed")

    async def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self.channel.close()    # ends a call in flight at once
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def _post(self, callback, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:    # the loop is closed: the node is gone
            self._stop.set()

    def _run(self) -> None:
        failing = False
        stream: KeepAliveStream | None = None
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if stream is not None and stream.error is not None:
                    if not failing:  # once per run of failures: etcd down fails every 0.1 s
                        self._post(self._failed, stream.error, now - stream.opened)
                    failing = True
                    stream.close()
                    stream = None
                    with self.lock:
                        self.schedule.failed(now)
                with self.lock:
                    delay = self.schedule.delay(now)
                lease = self.lease_id()
                held = lease == self.reported   # the loop is granting a new lease
                silent = now - self.loop_seen > self.loop_silence_s
                if delay > 0 or held or silent:
                    # the watchdog (silent): a wedged loop must lose its lease
                    self.held_back += delay <= 0 and silent and not held
                    self._wake.wait(delay if delay > 0 else HOLD_POLL_S)
                    self._wake.clear()
                    continue
                if lease == 0:      # a failed grant: the loop tries again
                    self.reported = 0
                    self._post(self._expired, 0)
                    continue
                if stream is not None and stream.stuck(now, self.schedule.ttl_s):
                    # no answer while the lease could live: the connection is held
                    # (a cut without a reset); a new stream, as a new call would
                    stream.close()
                    stream = None
                if stream is None:
                    stream = KeepAliveStream(self._stub, self._reply, self._wake)
                elif stream.answered:
                    failing = False
                with self.lock:
                    self.schedule.sent(now)
                stream.send(lease, now)
                self.most_unanswered = max(self.most_unanswered, stream.unanswered)
        finally:
            if stream is not None:
                stream.close()

    def grant_failed(self) -> None:
        """On the loop: a new lease could not be granted (lease_id is 0):
        report it expired again after RETRY_S, so the loop tries again."""
        with self.lock:
            self.schedule.failed(time.monotonic())
        self.reported = -1
        self._wake.set()

    def _reply(self, lease: int, sent: float, ttl: int) -> None:
        """On a stream's reader thread: etcd answered the refresh sent at `sent`."""
        if ttl <= 0:
            if self.reported != lease:
                self.reported = lease
                self._post(self._expired, lease)
            return
        with self.lock:
            self.schedule.answered(sent)
        self._post(self._answered, lease, sent, time.monotonic() - sent)


class KeepAliveStream:
    """One LeaseKeepAlive stream to etcd, as etcd's own client keeps: a
    refresh goes out every period whether or not the previous one was
    answered yet, and etcd answers each in order on the stream.  Waiting for
    each answer before sending the next (as before) spaced the refreshes
    etcd saw by its answer delay: at load 16 etcd answered renewals
    0.5-1.5 s late (every node at once), and one late answer held the next
    refresh back.  A reader thread takes the answers, matched to the send
    times in order."""

    def __init__(self, stub, on_reply: Callable[[int, float, int], None],
                 on_error: threading.Event) -> None:
        self.opened = time.monotonic()
        self.error: BaseException | None = None
        self.answered = False
        self.heard = self.opened    # when the last answer came
        self._on_reply = on_reply
        self._on_error = on_error   # set once `error` is
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._sent: collections.deque[tuple[int, float]] = collections.deque()
        self._call = stub.LeaseKeepAlive(iter(self._requests.get, None))
        self._reader = threading.Thread(target=self._read, name="kcoord-lease-answers",
                                        daemon=True)
        self._reader.start()

    def send(self, lease: int, now: float) -> None:
        self._sent.append((lease, now))     # before the request can be answered
        self._requests.put(rpc.LeaseKeepAliveRequest(ID=lease))

    @property
    def unanswered(self) -> int:
        return len(self._sent)

    def stuck(self, now: float, ttl_s: float) -> bool:
        """Nothing heard on the stream for a TTL while a refresh waits for
        its answer: a held connection (a slow etcd still answers, in order)."""
        try:
            oldest = self._sent[0][1]
        except IndexError:  # none unanswered (the reader may pop meanwhile)
            return False
        return now - max(oldest, self.heard) >= ttl_s

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()

    def _read(self) -> None:
        try:
            for reply in self._call:
                if not self._sent:
                    continue    # (etcd answers each request once)
                lease, sent = self._sent.popleft()
                self.answered, self.heard = True, time.monotonic()
                self._on_reply(lease, sent, reply.TTL)
            self.error = ConnectionError("etcd ended the lease keep-alive stream")
        except grpc.RpcError as exc:
            self.error = exc
        except Exception as exc:    # a bug here must not silently stop the lease
            log.exception("lease keep-alive reader failed")
            self.error = exc
        self._on_error.set()
