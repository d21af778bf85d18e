"""A synthetic workload in kcoord's on-disk format, with known answers.

`generate(data_dir, ...)` writes:

* `__consumer_offsets-<p>/<base>.log` segments: record batches v2 holding
  offset commits, tombstones, GroupMetadata generations, KIP-848 consumer
  group records, transactional commits with their markers, in the record
  versions Kafka has used (OffsetCommitValue v0-v4, key types 0 and 1,
  GroupMetadataValue v0-v4), some batches compressed;
* `<topic>-<p>/<base>.log` for every user topic partition: one small batch
  per tick at the partition's log end then (offsets in between are absent,
  as after compaction), so the log-end history is exact;
* `kcoord-topics.json`, the topic catalogue;
* `kcoord-generate.json`, the manifest: parameters, and every group with
  the kind of behaviour it was built to show and the Burrow status it must
  get.

Time advances in ticks (`interval_ms`).  At each tick every user partition
grows by a random amount (between `rate` and 2x`rate` records) at the tick
time, and each group commits all of its partitions in one batch shortly
after (its own jitter, under half a tick).  Group kinds:

    ok        commits the log end every third tick, a little behind otherwise  -> OK
    warn      consumes slower than the producers: lag grows at every commit     -> WARN
    stall     from mid-run commits the same offsets again and again (lag > 0)   -> ERR/STALL
    stop      stops committing at mid-run while the producers go on             -> ERR/STOP
    rewind    three ticks before the end commits far back and crawls on         -> ERR/REWIND
    mixed     one partition stalls, the others are fine                         -> ERR
    deleted   a classic group deleted at a third of the run (tombstones)        -> absent
    expired   one offset expires (tombstone), another expires and comes back    -> OK
    consumer  a KIP-848 group: epochs, members joining and leaving              -> OK
    classic   a classic group rebalancing every few ticks                       -> OK
    versions  every OffsetCommit and GroupMetadata value version, key type 0    -> OK
    txn       transactional commits, one aborted transaction, one left open     -> OK

With `corrupt=True` log partition 0 also gets a batch with a bad CRC, a
record with an unknown value version, a record of an unknown type and a
torn tail, and the manifest says how many of each.
"""
from __future__ import annotations

import json
import random
import struct
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kcoord.protocol.messages.consumer_protocol import encode_assignment, encode_subscription
from kcoord.protocol.messages.coordinator_records import encode_record_key, encode_record_value
from kcoord.coordinator.partitioner import partition_for  # the coordinator's own rule
from kcoord.protocol.records import build_batch
from kcoord.protocol.internal_topics import OFFSETS_TOPIC

# a record type no Kafka writes yet (types 0-15 are all known now; a newer
# Kafka adds more, which readers skip)
UNKNOWN_RECORD_TYPE = 999

MANIFEST = "kcoord-generate.json"
SPECIAL_KINDS = ["ok", "warn", "stall", "stop", "rewind", "mixed", "deleted", "expired",
                 "consumer", "classic", "versions", "txn"]
EXPECTED_GROUP = {"ok": "OK", "warn": "WARN", "stall": "ERR", "stop": "ERR", "rewind": "ERR",
                  "mixed": "ERR", "deleted": None, "expired": "OK", "consumer": "OK",
                  "classic": "OK", "versions": "OK", "txn": "OK"}
EXPECTED_PARTITION = {"ok": "OK", "warn": "WARN", "stall": "STALL", "stop": "STOP",
                      "rewind": "REWIND", "consumer": "OK", "classic": "OK", "versions": "OK",
                      "txn": "OK", "expired": "OK"}
MIN_TICKS = 30

_V3 = struct.Struct(">hqihq")


@dataclass
class GroupSpec:
    name: str
    kind: str
    log_partition: int
    topics: list[str]
    partitions: list[list]               # [[topic, partition], ...]
    jitter_ms: int
    expected_status: str | None          # group status, None: the group must be absent
    expected_partitions: dict = field(default_factory=dict)  # "topic/p" -> status or None


class _Log:
    """Appends batches to one partition directory, rolling segments by size."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.next_offset = 0
        self.fh = None
        self.size = 0
        self._open(0)

    def _open(self, base: int) -> None:
        if self.fh:
            self.fh.close()
        self.fh = open(self.dir / f"{base:020d}.log", "wb", buffering=1 << 20)
        self.size = 0

    def append(self, records, ts: int, *, compression: int = 0, producer_id: int = -1,
               transactional: bool = False, control: bool = False,
               base_offset: int | None = None) -> int:
        base = self.next_offset if base_offset is None else base_offset
        batch = build_batch(records, base_offset=base, base_timestamp=ts,
                            compression=compression, producer_id=producer_id,
                            producer_epoch=0 if producer_id >= 0 else -1,
                            transactional=transactional, control=control)
        return self.append_raw(batch, base, len(records))

    def append_raw(self, batch: bytes, base: int, count: int) -> int:
        if self.size and self.size + len(batch) > self.segment_bytes:
            self._open(base)
        self.fh.write(batch)
        self.size += len(batch)
        self.next_offset = base + max(count, 1)
        return base

    def close(self) -> None:
        if self.fh:
            self.fh.close()
            self.fh = None


def _commit_value(offset: int, ts: int, version: int = 3, metadata: str = "",
                  leader_epoch: int = -1, expire: int = -1) -> bytes:
    if version == 3 and not metadata:
        return _V3.pack(3, offset, leader_epoch, 0, ts)
    body = {"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata,
            "commit_timestamp": ts, "expire_timestamp": expire}
    return encode_record_value(1, version, body)


# the hand-packed v3 value is exactly what the codec writes
assert _commit_value(5, 7, leader_epoch=2) == encode_record_value(
    1, 3, {"offset": 5, "leader_epoch": 2, "metadata": "", "commit_timestamp": 7})


class Workload:
    def __init__(self, *, groups: int, topics: int, partitions: int, commits: int,
                 log_partitions: int, seed: int, start_ms: int, interval_ms: int, rate: int,
                 partitions_per_group: int, session_timeout_ms: int = 45_000) -> None:
        self.rng = random.Random(seed)
        self.session_timeout_ms = session_timeout_ms
        self.seed = seed
        self.log_partitions = log_partitions
        self.start_ms = start_ms
        self.interval_ms = interval_ms
        self.rate = rate
        self.topics = [f"topic-{i:03d}" for i in range(topics)]
        self.partitions = partitions
        self.topic_ids = {t: uuid.UUID(int=self.rng.getrandbits(128)).bytes for t in self.topics}
        ppg = max(1, min(partitions_per_group, topics * partitions))
        self.ppg = ppg
        self.groups: list[GroupSpec] = []
        kinds = list(SPECIAL_KINDS) if groups >= len(SPECIAL_KINDS) else SPECIAL_KINDS[:groups]
        kinds += ["ok"] * (groups - len(kinds))
        all_tps = [(t, p) for t in self.topics for p in range(partitions)]
        for i, kind in enumerate(kinds):
            name = f"{kind}-{i:05d}" if i < len(SPECIAL_KINDS) else f"app-{i:05d}"
            start = (i * ppg) % len(all_tps)
            tps = [all_tps[(start + j) % len(all_tps)] for j in range(ppg)]
            if kind in ("mixed", "expired") and len(tps) < 3:
                tps = [all_tps[(start + j) % len(all_tps)] for j in range(min(3, len(all_tps)))]
            tps = sorted(set(tps))
            exp_parts = {}
            for j, (t, p) in enumerate(tps):
                key = f"{t}/{p}"
                if kind == "deleted":
                    exp_parts[key] = None
                elif kind == "mixed":
                    exp_parts[key] = "STALL" if j == 0 else "OK"
                elif kind == "expired" and j == 0:
                    exp_parts[key] = None
                else:
                    exp_parts[key] = EXPECTED_PARTITION[kind]
            self.groups.append(GroupSpec(
                name=name, kind=kind, log_partition=partition_for(name, log_partitions),
                topics=sorted({t for t, _ in tps}), partitions=[[t, p] for t, p in tps],
                jitter_ms=1000 + self.rng.randrange(max(1, interval_ms // 2 - 1000)),
                expected_status=EXPECTED_GROUP[kind], expected_partitions=exp_parts))
        per_tick = sum(len(g.partitions) for g in self.groups) or 1
        self.ticks = max(MIN_TICKS, -(-commits // per_tick))
        # log ends: L[tp][t] after the tick-t produce batch
        self.log_end: dict[tuple[str, int], list[int]] = {}
        for tp in all_tps:
            end = self.rng.randrange(1000, 100000)
            ends = []
            for _ in range(self.ticks):
                end += self.rng.randrange(rate, 2 * rate + 1)
                ends.append(end)
            self.log_end[tp] = ends

    def tick_ms(self, t: int) -> int:
        return self.start_ms + t * self.interval_ms

    # ------------------------------------------------------------ commits
    def committed(self, g: GroupSpec, j: int, tp, t: int) -> int | None:
        """Offset group g commits for its j-th partition tp at tick t (None: no commit)."""
        L = self.log_end[tp]
        T = self.ticks
        lo = self.rate
        kind = g.kind
        if kind == "mixed":
            kind = "stall" if j == 0 else "ok"
        if kind == "warn":
            return L[0] - lo + t * (lo // 2)
        if kind == "stall":
            if t >= T // 2:
                return L[T // 2] - lo
            kind = "ok"
        if kind == "stop":
            return None if t > T // 2 - 1 else L[t] - (0 if t % 3 == 0 else 1 + (t + j) % lo)
        if kind == "rewind":
            tr = T - 3
            if t < tr:
                return L[t] - (0 if t % 3 == 0 else 1 + (t + j) % lo)
            return L[tr - 1] - 10 * lo + (t - tr) * (lo // 2)
        # ok-like kinds
        return L[t] - (0 if t % 3 == 0 else 1 + (t * 7 + j) % lo)


def generate(data_dir, *, groups: int = 24, topics: int = 4, partitions: int = 4,
             commits: int = 20_000, log_partitions: int = 8, seed: int = 7,
             start_ms: int = 1_700_000_000_000, interval_ms: int = 60_000, rate: int = 50,
             partitions_per_group: int = 4, segment_bytes: int = 64 << 20,
             corrupt: bool = False, workers: int = 1, session_timeout_ms: int = 45_000,
             log=None) -> dict:
    """Write the workload into data_dir (which should be empty); -> the manifest.

    With workers > 1, processes write disjoint sets of log partitions (the
    workload is a pure function of the parameters, so each rebuilds it).
    session_timeout_ms: the classic members' session timeout in GroupMetadata
    (a server that loads the log expires them that long after loading)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    kw = dict(groups=groups, topics=topics, partitions=partitions, commits=commits,
              log_partitions=log_partitions, seed=seed, start_ms=start_ms,
              interval_ms=interval_ms, rate=rate, partitions_per_group=partitions_per_group,
              session_timeout_ms=session_timeout_ms)
    w = Workload(**kw)
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(workers) as pool:
            jobs = [pool.submit(_worker, kw, str(data_dir), segment_bytes, corrupt, k, workers)
                    for k in range(workers)]
            _write_topics(w, data_dir, segment_bytes)
            counts: dict = {}
            for job in jobs:
                for key, value in job.result().items():
                    counts[key] = counts.get(key, 0) + value
    else:
        _write_topics(w, data_dir, segment_bytes)
        counts = _write_offsets(w, data_dir, segment_bytes, corrupt)
    manifest = {
        "params": {"groups": groups, "topics": topics, "partitions": partitions,
                   "commits": commits, "log_partitions": log_partitions, "seed": seed,
                   "start_ms": start_ms, "interval_ms": interval_ms, "rate": rate,
                   "partitions_per_group": w.ppg, "segment_bytes": segment_bytes,
                   "corrupt": corrupt},
        "ticks": w.ticks,
        "end_ms": w.tick_ms(w.ticks - 1) + max(g.jitter_ms for g in w.groups),
        "records": counts,
        "groups": [asdict(g) for g in w.groups],
    }
    (data_dir / MANIFEST).write_text(json.dumps(manifest, indent=1))
    if log:
        log(f"generated {counts['offset_commits']} offset commits, {counts['records']} records "
            f"in {log_partitions} log partitions over {w.ticks} ticks into {data_dir}")
    return manifest


def _worker(kw: dict, data_dir: str, segment_bytes: int, corrupt: bool, k: int, n: int) -> dict:
    w = Workload(**kw)
    only = {p for p in range(w.log_partitions) if p % n == k}
    return _write_offsets(w, Path(data_dir), segment_bytes, corrupt, only)


def _write_topics(w: Workload, data_dir: Path, segment_bytes: int) -> None:
    doc = {"topics": [{"name": t, "id": w.topic_ids[t].hex(), "partitions": w.partitions,
                       "configs": {}} for t in w.topics]}
    (data_dir / "kcoord-topics.json").write_text(json.dumps(doc))
    payload = b"x" * 16
    for (t, p), ends in w.log_end.items():
        lg = _Log(data_dir / f"{t}-{p}", segment_bytes)
        for tick, end in enumerate(ends):
            ts = w.tick_ms(tick)
            lg.append([(None, payload, [], ts)], ts, base_offset=end - 1)
        lg.close()


def _assignment(tps) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return encode_assignment({"assigned_partitions": [
        {"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())],
        "user_data": None}, 0)


def _group_metadata(g: GroupSpec, generation: int, members: list[str], ts: int,
                    version: int = 3, session_timeout: int = 45_000) -> bytes:
    tps = [tuple(x) for x in g.partitions]
    ms = []
    for i, m in enumerate(members):
        mine = tps[i::len(members)]
        ms.append({"member_id": m, "group_instance_id": None, "client_id": m.split("-")[0],
                   "client_host": "/127.0.0.1", "rebalance_timeout": 300000,
                   "session_timeout": session_timeout,
                   "subscription": encode_subscription({"topics": g.topics, "user_data": None,
                                                        "owned_partitions": []}, 0),
                   "assignment": _assignment(mine)})
    value = {"protocol_type": "consumer", "generation": generation, "protocol": "range",
             "leader": members[0] if members else None, "current_state_timestamp": ts,
             "members": ms}
    return encode_record_value(2, version, value)


def _write_offsets(w: Workload, data_dir: Path, segment_bytes: int, corrupt: bool,
                   only: set | None = None) -> dict:
    """The __consumer_offsets partitions (all, or those in `only`), tick by tick.

    Within a tick the events are written in timestamp order; the few special
    events (group metadata, KIP-848 records, corruption) are merged in at
    their times.  Memory stays at one tick's worth of batches."""
    only = set(range(w.log_partitions)) if only is None else only
    counts = {"records": 0, "offset_commits": 0, "batches": 0, "crc_mismatch": 0,
              "unknown_record_version": 0, "unknown_record_type": 0, "truncated_tail": 0}
    for p in sorted(only):
        groups = [(gi, g) for gi, g in enumerate(w.groups) if g.log_partition == p]
        specials: list = []
        for gi, g in groups:
            if g.kind in ("deleted", "classic", "versions", "stall", "mixed"):
                members = [f"consumer-{gi}-{k}" for k in range(2)]
                specials.append((w.tick_ms(0) + g.jitter_ms - 1, "batch", dict(records=[(
                    encode_record_key(2, {"group": g.name}),
                    _group_metadata(g, 1, members, w.tick_ms(0),
                                    session_timeout=w.session_timeout_ms), [], None)])))
            if g.kind == "consumer":
                _consumer_group_events(w, g, specials)
            if g.kind == "versions":
                for v in range(5):  # GroupMetadataValue v0..v4
                    ts = w.tick_ms(v + 1) + g.jitter_ms - 2
                    specials.append((ts, "batch", dict(records=[(
                        encode_record_key(2, {"group": g.name}),
                        _group_metadata(g, 10 + v, [f"consumer-v-{v}"], ts, version=v,
                                        session_timeout=w.session_timeout_ms), [],
                        None)])))
        if corrupt and p == 0:
            _corruption_events(w, specials)
        specials.sort(key=lambda e: e[0])
        gen = _GroupTicks(w, groups)
        lg = _Log(data_dir / f"{OFFSETS_TOPIC}-{p}", segment_bytes)
        si = 0
        for t in range(w.ticks):
            tick_end = w.tick_ms(t + 1)
            events = gen.events(t)
            while si < len(specials) and specials[si][0] < tick_end:
                events.append(specials[si])
                si += 1
            events.sort(key=lambda e: e[0])
            for ev in events:
                _write_event(lg, ev, counts)
        for ev in specials[si:]:
            _write_event(lg, ev, counts)
        lg.close()
    return counts


class _GroupTicks:
    """The batches each group of one log partition writes at a tick."""

    def __init__(self, w: Workload, groups) -> None:
        self.w = w
        self.groups = []
        for gi, g in groups:
            tps = [tuple(x) for x in g.partitions]
            keys = {rtype: [encode_record_key(rtype, {"group": g.name, "topic": t,
                                                      "partition": p_}) for t, p_ in tps]
                    for rtype in ((0, 1) if g.kind == "versions" else (1,))}
            self.groups.append((gi, g, tps, keys, _codec(gi),
                                [f"consumer-{gi}-{k}" for k in range(2)]))

    def events(self, t: int) -> list:
        w = self.w
        T = w.ticks
        pack = _V3.pack
        out = []
        for gi, g, tps, keys, comp, members in self.groups:
            ts = w.tick_ms(t) + g.jitter_ms
            kind = g.kind
            if kind == "deleted" and t > T // 3:
                if t == T // 3 + 1:
                    recs = [(k, None, [], ts) for k in keys[1]]
                    recs.append((encode_record_key(2, {"group": g.name}), None, [], ts))
                    out.append((ts, "batch", dict(records=recs)))
                continue
            if kind == "classic" and t % 5 == 0 and t:
                gen = t // 5 + 1
                ms = members[:1] if gen % 2 else members
                out.append((ts - 1, "batch", dict(records=[(
                    encode_record_key(2, {"group": g.name}),
                    _group_metadata(g, gen, ms, ts - 1,
                                    session_timeout=w.session_timeout_ms), [], None)])))
            recs = []
            if kind in ("ok", "warn", "stall", "stop", "rewind", "mixed", "consumer", "classic"):
                committed = w.committed
                k1 = keys[1]
                for j, tp in enumerate(tps):
                    off = committed(g, j, tp, t)
                    if off is not None:
                        recs.append((k1[j], pack(3, off, 0, 0, ts), _NO_HEADERS, ts))
            else:
                for j, tp in enumerate(tps):
                    if kind == "expired":
                        if j == 0 and t >= T // 2:
                            if t == T // 2:
                                recs.append((keys[1][j], None, [], ts))
                            continue
                        if j == 1 and t == T // 3:
                            recs.append((keys[1][j], None, [], ts))
                            continue
                    off = w.committed(g, j, tp, t)
                    if off is None:
                        continue
                    if kind == "versions":
                        version = (t + j) % 5
                        rtype = 0 if (t + j) % 7 == 0 else 1
                        md = f"m{t}" if version != 3 or t % 2 else ""
                        value = _commit_value(off, ts, version, md, leader_epoch=t % 4,
                                              expire=ts + 86400000 if version == 1 else -1)
                        recs.append((keys[rtype][j], value, [], ts))
                    else:
                        recs.append((keys[1][j], _commit_value(off, ts, leader_epoch=0), [], ts))
            if not recs:
                continue
            if kind == "txn":
                pid = 1000 + gi
                if t == T - 2:  # aborted: these offsets (far back) must not count
                    recs = [(k, _commit_value(1, ts, leader_epoch=0), [], ts) for k, _, _, _ in recs]
                elif t == T - 1:  # left open: no marker, not applied either
                    recs = [(k, _commit_value(2, ts, leader_epoch=0), [], ts) for k, _, _, _ in recs]
                out.append((ts, "batch", dict(records=recs, producer_id=pid, transactional=True)))
                if t < T - 1:
                    out.append((ts + 1, "control", dict(producer_id=pid, commit=t != T - 2)))
            else:
                out.append((ts, "batch", dict(records=recs, compression=comp)))
        return out


def _codec(gi: int) -> int:
    """Kafka writes __consumer_offsets uncompressed by default; a few groups here
    use each codec (gzip, snappy, lz4, zstd) so readers meet them all."""
    return (gi % 4) + 1 if gi % 3 == 2 and gi < 24 else 0
_NO_HEADERS: list = []


def _write_event(lg: "_Log", event, counts: dict) -> None:
    ts, kind, arg = event
    if kind == "control":
        key = struct.pack(">hh", 0, 1 if arg["commit"] else 0)
        value = struct.pack(">hi", 0, 0)
        lg.append([(key, value, [], ts)], ts, producer_id=arg["producer_id"],
                  transactional=True, control=True)
    elif kind == "raw":
        lg.append_raw(arg["make"](lg.next_offset, ts), lg.next_offset, arg["count"])
        counts[arg["counts"]] += 1
        return
    elif kind == "tail":
        lg.fh.write(arg["bytes"])
        counts["truncated_tail"] += 1
        return
    else:
        recs = arg["records"]
        if any(r[3] is None for r in recs):
            recs = [(k, v, h, ts if rts is None else rts) for k, v, h, rts in recs]
        lg.append(recs, ts, compression=arg.get("compression", 0),
                  producer_id=arg.get("producer_id", -1),
                  transactional=arg.get("transactional", False))
        counts["offset_commits"] += sum(1 for k, v, _, _ in recs
                                        if v is not None and k[:2] in (b"\0\1", b"\0\0"))
        counts["unknown_record_version"] += arg.get("bad_version", 0)
        counts["unknown_record_type"] += arg.get("bad_type", 0)
    counts["records"] += len(arg.get("records", [None]))
    counts["batches"] += 1


def _consumer_group_events(w: Workload, g: GroupSpec, ev: list) -> None:
    """KIP-848 records: a member joins at 0, another at T/3, the first leaves at 2T/3."""
    T = w.ticks
    tps = [tuple(x) for x in g.partitions]

    def tp_list(items):
        by: dict[str, list[int]] = {}
        for t, p in items:
            by.setdefault(t, []).append(p)
        return [{"topic_id": w.topic_ids[t], "partitions": sorted(ps)} for t, ps in sorted(by.items())]

    def k(rtype, member=None):
        body = {"group_id": g.name}
        if member is not None:
            body["member_id"] = member
        return encode_record_key(rtype, body)

    def member_meta():
        return encode_record_value(5, 0, {
            "instance_id": None, "rack_id": None, "client_id": "kip848-client",
            "client_host": "/127.0.0.1", "subscribed_topic_names": g.topics,
            "subscribed_topic_regex": None, "rebalance_timeout_ms": 300000,
            "server_assignor": "uniform", "classic_member_metadata": None})

    epoch = 0
    members: list[str] = []
    plan = [(0, "join", "m-a"), (T // 3, "join", "m-b"), (2 * T // 3, "leave", "m-a")]
    for t, action, m in plan:
        ts = w.tick_ms(t) + g.jitter_ms - 5
        epoch += 1
        recs = []
        if action == "join":
            members.append(m)
            recs.append((k(5, m), member_meta(), [], None))
        else:
            members.remove(m)
            recs += [(k(8, m), None, [], None), (k(7, m), None, [], None), (k(5, m), None, [], None)]
        recs.append((k(4), encode_record_value(4, 0, {"topics": [
            {"topic_id": w.topic_ids[t_], "topic_name": t_, "num_partitions": w.partitions,
             "partition_metadata": []} for t_ in g.topics]}), [], None))
        recs.append((k(3), encode_record_value(3, 0, {"epoch": epoch}), [], None))
        for i, mm in enumerate(members):
            recs.append((k(7, mm), encode_record_value(7, 0, {
                "topic_partitions": tp_list(tps[i::len(members)])}), [], None))
        recs.append((k(6), encode_record_value(6, 0, {"assignment_epoch": epoch}), [], None))
        for i, mm in enumerate(members):
            recs.append((k(8, mm), encode_record_value(8, 0, {
                "member_epoch": epoch, "previous_member_epoch": epoch - 1, "state": 0,
                "assigned_partitions": tp_list(tps[i::len(members)]),
                "partitions_pending_revocation": []}), [], None))
        ev.append((ts, "batch", dict(records=recs)))


def _corruption_events(w: Workload, ev: list) -> None:
    """Bad input in log partition 0: each kind once, at mid-run."""
    ts = w.tick_ms(w.ticks // 2) + 7

    def bad_crc(base, ts_):
        good = build_batch([(encode_record_key(1, {"group": "corrupt-crc", "topic": "topic-000",
                                                   "partition": 0}),
                             _commit_value(1, ts_), [], ts_)], base_offset=base,
                           base_timestamp=ts_)
        b = bytearray(good)
        b[-3] ^= 0xFF  # flip a byte of the value: the CRC no longer matches
        return bytes(b)

    ev.append((ts, "raw", dict(make=bad_crc, count=1, counts="crc_mismatch")))
    key = encode_record_key(1, {"group": "corrupt-version", "topic": "topic-000", "partition": 0})
    ev.append((ts + 1, "batch", dict(records=[
        (key, struct.pack(">hq", 9, 12345), [], None)], bad_version=1)))
    ev.append((ts + 2, "batch", dict(records=[
        (struct.pack(">h", UNKNOWN_RECORD_TYPE) + b"\x00\x05newer", b"\x00\x00", [], None)],
        bad_type=1)))
    # a torn tail: the first 30 bytes of a batch, at the very end of the log
    ev.append((1 << 62, "tail", dict(bytes=build_batch(
        [(key, _commit_value(3, ts), [], ts)], base_offset=0)[:30])))
