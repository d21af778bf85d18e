"""Burrow's v3 HTTP API over kcoord's own logs.

Burrow consumes `__consumer_offsets` and keeps, per partition, a window of
the last `intervals` commits with the lag at each commit, plus log-end
samples; it evaluates a group on request.  Here the same window comes from
tailing each shard's log (incrementally: only what was appended since the
last request is read), and the log-end history from the partition's batch
headers (the log end at each batch's max timestamp, one observation per
second, as the pipeline's logend.partition_history reads it).  The rules
are burrow_rules.py (pure Python, which the pipeline uses too), so /status
agrees with the pipeline's status table over the same log; `current_lag`
is computed at request time.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from . import burrow_rules as burrow
from ..coordinator import partition_owners
from ..protocol.messages.coordinator_records import decode_record_key, decode_record_value
from ..protocol.records import decode_batch, iter_batches

CLUSTER = "local"  # the default name (http.burrow.cluster.name)
OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA = 2
READ_CHUNK = 1 << 20
RESOLUTION_MS = 1000


@dataclass
class _Partition:
    commits: list = field(default_factory=list)  # (offset, commit timestamp), last `keep`
    deleted: bool = False


class _EndHistory:
    """Observations (log end, timestamp) of one user partition, read from its
    batch headers as the log grows (thinned to one per RESOLUTION_MS)."""

    def __init__(self) -> None:
        self.next_offset = -1
        self.obs: list[tuple[int, int]] = []

    def update(self, plog) -> None:
        start, end = plog.log_start_offset, plog.log_end_offset
        if self.next_offset < start or self.next_offset > end:
            self.next_offset, self.obs = start, []
        while self.next_offset < end:
            data = plog.read(self.next_offset, READ_CHUNK, min_one=True)
            if not data:
                break
            last = self.next_offset
            for _, h in iter_batches(data):
                if h.next_offset <= self.next_offset:
                    continue
                e, ts = h.next_offset, h.max_timestamp
                obs = self.obs
                if obs and ts // RESOLUTION_MS == obs[-1][1] // RESOLUTION_MS and ts >= obs[-1][1]:
                    obs[-1] = (e, ts)
                else:
                    obs.append((e, ts))
                last = e
            if last == self.next_offset:
                break
            self.next_offset = last

    def history(self) -> burrow.LogEndHistory:
        return burrow.LogEndHistory(self.obs or [(0, -1)])


class BurrowView:
    """Burrow's view of the server: commit windows per (group, topic,
    partition) from the shard logs, evaluated on request."""

    def __init__(self, runtime, catalogue, servers: list[str], intervals: int =
                 burrow.DEFAULT_INTERVALS, refresh_ms: int = burrow.DEFAULT_REFRESH_MS,
                 allowed_lag: int = 0, cluster: str = CLUSTER,
                 min_distance_s: int = burrow.DEFAULT_MIN_DISTANCE_S) -> None:
        self.cluster = cluster  # the one cluster name the /v3/kafka routes answer to
        self.runtime = runtime  # the coordinator runtime: its shards' logs, and read_all
        self.catalogue = catalogue
        self.servers = servers
        self.intervals = intervals
        self.refresh_ms = refresh_ms
        self.allowed_lag = allowed_lag
        self.min_distance_ms = min_distance_s * 1000  # Burrow's storage min-distance
        self._positions: dict[int, int] = {}  # shard index -> next offset to read
        self._groups: dict[str, dict[tuple[str, int], _Partition]] = {}
        self._ends: dict[tuple[str, int], _EndHistory] = {}
        self._lock: asyncio.Lock | None = None  # made on the loop, at the first refresh

    # ------------------------------------------------------------ reading the logs
    async def refresh(self) -> None:
        """Read what the shard logs gained since the last call; the loop gets
        a turn between chunks (the first call reads every log from its start).
        One refresh at a time: concurrent requests must not read a chunk twice."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._refresh()

    async def _refresh(self) -> None:
        for shard in self.runtime.shards:
            plog = shard.plog
            pos = self._positions.get(shard.index, plog.log_start_offset)
            pos = max(pos, plog.log_start_offset)
            end = plog.log_end_offset
            while pos < end:
                data = plog.read(pos, READ_CHUNK, min_one=True)
                if not data:
                    break
                before = pos
                pos = self._consume(data, pos)
                self._positions[shard.index] = pos
                if pos == before:
                    break
                await asyncio.sleep(0)
            self._positions[shard.index] = pos

    def _consume(self, data: bytes, pos: int) -> int:
        offset = 0
        while offset < len(data):
            try:
                header, records = decode_batch(data, offset, verify_crc=False)
            except Exception:
                break
            offset += header.size
            if header.next_offset <= pos:
                continue
            if not header.is_control:
                for rec in records:
                    if rec.offset >= pos and rec.key is not None:
                        self._record(rec.key, rec.value)
            pos = header.next_offset
        return pos

    def _record(self, key: bytes, value: bytes | None) -> None:
        try:
            rtype, k = decode_record_key(key)
        except Exception:
            return
        if rtype in OFFSET_COMMIT_TYPES:
            parts = self._groups.setdefault(k["group"], {})
            p = parts.setdefault((k["topic"], k["partition"]), _Partition())
            if value is None:
                p.commits, p.deleted = [], True
                return
            try:
                _, v = decode_record_value(rtype, value)
            except Exception:
                return
            p.deleted = False
            burrow.add_commit(p.commits, v["offset"], v["commit_timestamp"], self.min_distance_ms)
            if len(p.commits) > 2 * self.intervals:
                del p.commits[:-self.intervals]
        elif rtype == GROUP_METADATA and value is None:
            for p in self._groups.get(k["group"], {}).values():
                p.commits, p.deleted = [], True

    def _end_history(self, topic: str, partition: int) -> burrow.LogEndHistory | None:
        plog = self.catalogue.partition(topic, partition)
        if plog is None:
            return None
        hist = self._ends.setdefault((topic, partition), _EndHistory())
        hist.update(plog)
        return hist.history()

    # ------------------------------------------------------------ answers
    async def consumers(self) -> list[str]:
        await self.refresh()
        return sorted(g for g, parts in self._groups.items()
                      if any(not p.deleted and p.commits for p in parts.values()))

    def _owners(self, group: str) -> dict[tuple[str, int], tuple[str, str]]:
        """(topic, partition) -> (owner host, client id) from the live group."""
        out: dict[tuple[str, int], tuple[str, str]] = {}
        answers, _ = self.runtime.read_all(lambda core, _now: partition_owners(core, group))
        for owners in answers:
            out.update(owners)
        return out

    async def evaluate(self, group: str, now_ms: int | None = None) -> dict | None:
        """Burrow's ConsumerGroupStatus with every partition; None: NOTFOUND."""
        await self.refresh()
        now_ms = self.runtime.clock.ms() if now_ms is None else now_ms
        parts = self._groups.get(group)
        if not parts:
            return None
        owners = self._owners(group)
        rows = []
        for (topic, partition) in sorted(parts):
            p = parts[(topic, partition)]
            if p.deleted or not p.commits:
                continue
            hist = self._end_history(topic, partition)
            window = []
            for offset, ts in p.commits[-self.intervals:]:
                end = hist.at(ts) if hist else None
                window.append(burrow.Commit(offset, ts,
                                            None if end is None else max(0, end - offset)))
            log_end = hist.at(now_ms) if hist else None
            lag = None if log_end is None else max(0, log_end - window[-1].offset)
            samples = hist.samples(now_ms, self.intervals, self.refresh_ms) if hist else []
            status, complete = burrow.evaluate_partition(
                window, samples, lag or 0, now_ms, self.intervals, self.allowed_lag)
            owner, client_id = owners.get((topic, partition), ("", ""))
            rows.append({
                "topic": topic, "partition": partition, "owner": owner, "client_id": client_id,
                "status": burrow.STATUS_NAMES[status],
                "start": _offset(window[0]), "end": _offset(window[-1]),
                "current_lag": lag or 0, "complete": complete, "_code": status})
        if not rows:
            return None
        code = burrow.group_status([r["_code"] for r in rows])
        maxlag = None
        for r in rows:  # the first partition with the largest lag, as the pipeline picks
            if maxlag is None or r["current_lag"] > maxlag["current_lag"]:
                maxlag = r
        for r in rows:
            del r["_code"]
        return {"cluster": self.cluster, "group": group, "status": burrow.STATUS_NAMES[code],
                "complete": sum(1 for r in rows if r["complete"] == 1.0) / len(rows),
                "partitions": rows, "partition_count": len(rows), "maxlag": maxlag,
                "totallag": sum(r["current_lag"] for r in rows)}

    async def detail(self, group: str) -> dict | None:
        """`/consumer/{group}`: the stored offsets per topic and partition."""
        status = await self.evaluate(group)
        if status is None:
            return None
        parts = self._groups[group]
        topics: dict[str, list] = {}
        for r in status["partitions"]:
            hist = self._end_history(r["topic"], r["partition"])
            commits = parts[(r["topic"], r["partition"])].commits[-self.intervals:]
            offsets = []
            for offset, ts in commits:
                end = hist.at(ts) if hist else None
                offsets.append({"offset": offset, "timestamp": ts, "observedAt": ts,
                                "lag": 0 if end is None else max(0, end - offset)})
            lst = topics.setdefault(r["topic"], [])
            while len(lst) <= r["partition"]:
                lst.append(None)
            lst[r["partition"]] = {"offsets": offsets, "owner": r["owner"],
                                   "client_id": r["client_id"], "current-lag": r["current_lag"]}
        return topics

    def topics(self) -> list[str]:
        return sorted(n for n, t in self.catalogue.topics.items() if not t.internal)

    def topic_offsets(self, topic: str) -> list[int] | None:
        t = self.catalogue.topics.get(topic)
        if t is None or t.internal:
            return None
        return [plog.log_end_offset for plog in t.partitions]


def _offset(c: burrow.Commit) -> dict:
    return {"offset": c.offset, "timestamp": c.timestamp, "observedAt": c.timestamp,
            "lag": c.lag or 0}


def only_problems(status: dict) -> dict:
    """What /status shows: the partitions that are not OK (Burrow's filter)."""
    out = dict(status)
    out["partitions"] = [p for p in status["partitions"] if p["status"] != "OK"]
    return out
