"""The pipeline's tables computed in plain Python, independently of kcoord.pipeline.

Records come from kcoord's protocol layer (iter_batches, decode_batch with
its CRC check, decode_record_key/value), user log ends from kcoord.log's
PartitionLog and batch headers, and Burrow's rules are written out again
here from linkedin/Burrow's evaluator (caching.go), so a bug in the
pipeline's own decoder or evaluator cannot hide in both places.
"""
from __future__ import annotations

import bisect
import struct
from collections import defaultdict
from pathlib import Path

from kcoord.protocol.messages.consumer_protocol import decode_assignment
from kcoord.protocol.messages.coordinator_records import (
    UnknownRecordTypeError,
    UnknownRecordVersionError,
    decode_record_key,
    decode_record_value,
)
from kcoord.protocol.records import CorruptRecordError, decode_batch, iter_batches

OFFSETS = "__consumer_offsets"


def _segments(directory: Path):
    return sorted(p for p in directory.iterdir() if p.suffix == ".log" and len(p.stem) == 20)


def read_log(data_dir) -> tuple[list[dict], dict]:
    """Every decodable record of __consumer_offsets, and counts of bad input."""
    data_dir = Path(data_dir)
    rows: list[dict] = []
    bad = defaultdict(int)
    for d in sorted(data_dir.iterdir()):
        if not d.is_dir() or not d.name.startswith(OFFSETS + "-"):
            continue
        lp = int(d.name.rsplit("-", 1)[1])
        for seg in _segments(d):
            buf = seg.read_bytes()
            end = 0
            for pos, h in iter_batches(buf):
                end = pos + h.size
                try:
                    header, records = decode_batch(buf, pos)
                except CorruptRecordError as exc:
                    bad["crc_mismatch" if "CRC" in str(exc) else "corrupt_batch"] += 1
                    continue
                for rec in records:
                    row = {"log_partition": lp, "offset": rec.offset, "timestamp": rec.timestamp,
                           "producer_id": header.producer_id,
                           "transactional": header.is_transactional, "control": None}
                    if header.is_control:
                        row["control"] = struct.unpack(">hh", rec.key)[1]
                        rows.append(row)
                        continue
                    try:
                        rtype, key = decode_record_key(rec.key)
                    except UnknownRecordTypeError:
                        bad["unknown_record_type"] += 1
                        continue
                    try:
                        version, value = decode_record_value(rtype, rec.value)
                    except UnknownRecordVersionError:
                        bad["unknown_record_version"] += 1
                        continue
                    row.update(type=rtype, key=key, version=version, value=value)
                    rows.append(row)
            if end < len(buf):
                bad["truncated_tail"] += 1
    return rows, dict(bad)


def txn_state(rows: list[dict]) -> dict:
    """(log partition, offset) of each transactional commit -> committed/aborted/open."""
    out = {}
    by_lp = defaultdict(list)
    for r in rows:
        by_lp[r["log_partition"]].append(r)
    for lp, rs in by_lp.items():
        rs.sort(key=lambda r: r["offset"])
        open_: dict[int, list] = defaultdict(list)
        for r in rs:
            if r["control"] is not None:
                for o in open_.pop(r["producer_id"], []):
                    out[(lp, o)] = "committed" if r["control"] == 1 else "aborted"
            elif r["transactional"] and r.get("type") in (0, 1):
                open_[r["producer_id"]].append(r["offset"])
        for pid, offs in open_.items():
            for o in offs:
                out[(lp, o)] = "open"
    return out


def commits(rows: list[dict]) -> list[dict]:
    tx = txn_state(rows)
    out = []
    for r in rows:
        if r.get("type") in (0, 1) and r["value"] is not None:
            v = r["value"]
            out.append({
                "group": r["key"]["group"], "topic": r["key"]["topic"],
                "partition": r["key"]["partition"], "committed_offset": v["offset"],
                "leader_epoch": v.get("leader_epoch", -1) if r["version"] >= 3 else -1,
                "metadata": v["metadata"] or "", "commit_timestamp": v["commit_timestamp"],
                "expire_timestamp": v.get("expire_timestamp") if r["version"] == 1 else None,
                "log_partition": r["log_partition"], "log_offset": r["offset"],
                "record_timestamp": r["timestamp"], "value_version": r["version"],
                "key_type": r["type"], "txn": tx.get((r["log_partition"], r["offset"])),
            })
    return out


def applied_events(rows: list[dict]) -> dict:
    """{(group, topic, partition): [(offset, row or None for a tombstone)]} in log order."""
    tx = txn_state(rows)
    out = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["log_partition"], r["offset"])):
        if r.get("type") not in (0, 1):
            continue
        state = tx.get((r["log_partition"], r["offset"]))
        if state not in (None, "committed"):
            continue
        k = (r["key"]["group"], r["key"]["topic"], r["key"]["partition"])
        out[k].append(r)
    return out


def offsets(rows: list[dict]) -> dict:
    """What the coordinator would load: {(group, topic, partition): commit row}."""
    state = {}
    for k, evs in applied_events(rows).items():
        last = evs[-1]
        if last["value"] is not None:
            state[k] = last
    return state


class LogEnds:
    def __init__(self, data_dir) -> None:
        from kcoord.log import PartitionLog
        self.hist: dict = {}
        self.current: dict = {}
        data_dir = Path(data_dir)
        for d in sorted(data_dir.iterdir()):
            if not d.is_dir() or d.name.startswith(OFFSETS):
                continue
            topic, p = d.name.rsplit("-", 1)
            points = []
            for seg in _segments(d):
                buf = seg.read_bytes()
                for pos, h in iter_batches(buf):
                    points.append((h.max_timestamp, h.next_offset))
            points.sort()
            times, ends, best = [], [], 0
            for ts, end in points:
                best = max(best, end)
                times.append(ts)
                ends.append(best)
            self.hist[(topic, int(p))] = (times, ends)
            log = PartitionLog(d)
            self.current[(topic, int(p))] = log.log_end_offset
            log.close()

    def at(self, tp, t):
        if tp not in self.hist:
            return None
        times, ends = self.hist[tp]
        i = bisect.bisect_right(times, t)
        return ends[i - 1] if i else None


# ----------------------------------------------------------- Burrow, again

OK, WARN, ERR, STOP, STALL, REWIND = 1, 2, 3, 4, 5, 6
NAMES = {1: "OK", 2: "WARN", 3: "ERR", 4: "STOP", 5: "STALL", 6: "REWIND"}


def burrow_partition(window, broker_offsets, current_lag, now):
    """window: [(offset, timestamp, lag or None)], oldest first (caching.go)."""
    if current_lag <= 0:
        return OK
    first_ts, last_ts = window[0][1], window[-1][1]
    stopped = now - last_ts > last_ts - first_ts
    recent_zero = any(b <= window[-1][0] for b in broker_offsets)
    if stopped and not recent_zero:
        return STOP
    for i in range(1, len(window)):
        if window[i][0] < window[i - 1][0]:
            if not any(w[0] >= window[i - 1][0] for w in window[i:]):
                return REWIND
            break
    if all(w[2] is None or w[2] > 0 for w in window):
        if all(w[0] == window[0][0] for w in window):
            return STALL
        lags = [w[2] for w in window if w[2] is not None]
        if all(b >= a for a, b in zip(lags, lags[1:])):
            return WARN
    return OK


def lag_and_status(rows: list[dict], ends: LogEnds, as_of: int, intervals: int = 10,
                   refresh_ms: int = 10_000, min_distance_ms: int = 1000):
    """-> ({key: lag row}, {key: partition status row}, {group: group status row})."""
    lag, parts = {}, {}
    for k, evs in applied_events(rows).items():
        if evs[-1]["value"] is None:
            continue
        slots = []  # Burrow's ring: [offset, stored timestamp]
        for r in evs:
            if r["value"] is None:
                slots = []
            elif slots and r["value"]["commit_timestamp"] - slots[-1][1] < min_distance_ms:
                slots[-1][0] = r["value"]["offset"]  # min-distance: same slot, its timestamp
            else:
                slots.append([r["value"]["offset"], r["value"]["commit_timestamp"]])
        window = [r for r in evs if r["value"] is not None][-1:]  # the latest commit
        tp = (k[1], k[2])
        w = []
        for offset, ts in slots[-intervals:]:
            end = ends.at(tp, ts)
            w.append((offset, ts, None if end is None else max(0, end - offset)))
        end_now = ends.at(tp, as_of)
        cur = None if end_now is None else max(0, end_now - w[-1][0])
        samples = [ends.at(tp, as_of - i * refresh_ms) for i in range(intervals - 1, -1, -1)]
        samples = [s for s in samples if s is not None]
        status = burrow_partition(w, samples, cur or 0, as_of)
        secs = None
        if cur == 0:
            secs = 0.0
        elif cur is not None and len(w) > 1 and w[-1][1] > w[0][1] and w[-1][0] > w[0][0]:
            secs = cur / ((w[-1][0] - w[0][0]) / ((w[-1][1] - w[0][1]) / 1000))
        lag[k] = {"committed_offset": w[-1][0], "log_end_offset": end_now, "lag": cur,
                  "lag_seconds": secs, "commit_timestamp": window[-1]["value"]["commit_timestamp"]}
        parts[k] = {"status": NAMES[status], "complete": min(1.0, len(w) / intervals),
                    "window_commits": len(w), "start_offset": w[0][0], "end_offset": w[-1][0]}
    groups = defaultdict(list)
    for k, p in parts.items():
        groups[k[0]].append((k, p))
    gstat = {}
    for g, ps in groups.items():
        code = OK
        for _, p in ps:
            c = [n for n, v in NAMES.items() if v == p["status"]][0]
            code = max(code, min(c, ERR))
        gstat[g] = {"status": NAMES[code], "partitions": len(ps),
                    "current_lag": sum(lag[k]["lag"] or 0 for k, _ in ps),
                    "complete": sum(1 for _, p in ps if p["complete"] == 1.0) / len(ps)}
    return lag, parts, gstat


# ----------------------------------------------------------- generations


def generations(rows: list[dict]) -> list[dict]:
    """(group, type, generation, member ids, assignment) per generation / assignment epoch."""
    out = []
    by_group = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["log_partition"], r["offset"])):
        if r.get("type") in range(2, 9):
            g = r["key"].get("group", r["key"].get("group_id"))
            by_group[g].append(r)
    for g, rs in by_group.items():
        classic: dict = {}
        members: dict = {}
        target: dict = {}
        for r in rs:
            v = r["value"]
            if r["type"] == 2:
                if v is not None:
                    asg = {}
                    for m in v["members"]:
                        parts = None
                        if v["protocol_type"] == "consumer" and m["assignment"]:
                            _, a = decode_assignment(m["assignment"])
                            parts = sorted((x["topic"], tuple(sorted(x["partitions"])))
                                           for x in a["assigned_partitions"])
                        asg[m["member_id"]] = parts
                    classic[v["generation"]] = (v["protocol"], v["leader"], asg)
                continue
            member = r["key"].get("member_id")
            if r["type"] == 3 and v is None:
                members.clear()
                target.clear()
            elif r["type"] == 5:
                if v is None:
                    members.pop(member, None)
                else:
                    members[member] = v
            elif r["type"] == 7:
                if v is None:
                    target.pop(member, None)
                else:
                    target[member] = sorted(
                        (tp["topic_id"], tuple(sorted(tp["partitions"])))
                        for tp in v["topic_partitions"])
            elif r["type"] == 6 and v is not None:
                ids = sorted(set(members) | set(target))
                out.append({"group": g, "group_type": "consumer",
                            "generation": v["assignment_epoch"],
                            "members": {m: target.get(m, []) for m in ids}})
        for gen, (protocol, leader, asg) in classic.items():
            out.append({"group": g, "group_type": "classic", "generation": gen,
                        "protocol": protocol, "leader": leader, "members": asg})
    return out


def data_time(rows: list[dict], ends: LogEnds) -> int:
    stamps = [r["timestamp"] for r in rows]
    stamps += [r["value"]["commit_timestamp"] for r in rows
               if r.get("type") in (0, 1) and r["value"] is not None]
    stamps += [t[-1] for t, _ in ends.hist.values() if t]
    return max(stamps)



def user_records(data_dir) -> dict:
    """{(topic, partition): [(offset, timestamp)]} of every data record of the user
    topics (through kcoord's record batch decoder), in offset order."""
    from kcoord.protocol.records import decode_batch
    out: dict = {}
    for d in sorted(Path(data_dir).iterdir()):
        if not d.is_dir() or d.name.startswith(OFFSETS):
            continue
        topic, p = d.name.rsplit("-", 1)
        recs = []
        for seg in _segments(d):
            buf = seg.read_bytes()
            for pos, h in iter_batches(buf):
                if h.attributes & 0x20:
                    continue
                recs.extend((r.offset, r.timestamp) for r in decode_batch(buf, pos)[1])
        out[(topic, int(p))] = sorted(recs)
    return out


def time_lag_seconds(records: list, committed: int, lag: int | None, as_of: int):
    """as_of minus the timestamp of the first record at or after the committed offset."""
    if lag is None:
        return None
    if lag == 0:
        return 0.0
    i = bisect.bisect_left(records, (committed, -(1 << 63)))
    return None if i == len(records) else max(0, as_of - records[i][1]) / 1000.0
