"""The offsets a `consumer-groups --reset-offsets` scenario computes for a
group (Kafka's GroupOffsetsResetter): --to-earliest/--to-latest/--to-offset/
--shift-by/--to-current/--to-datetime/--by-duration/--from-file, clamped to
[log start, log end] where Kafka clamps, with its warnings."""
from __future__ import annotations

import re
import sys
import time
from datetime import datetime, timedelta, timezone

from . import groups as ops
from .client import AdminClient, UsageError


def topic_partitions(admin: AdminClient, topic_args: list[str]) -> list[tuple[str, int]]:
    out, whole = [], []
    for arg in topic_args:
        if ":" in arg:
            topic, _, parts = arg.partition(":")
            if not topic or not parts:
                raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
            for p in parts.split(","):
                if not p.strip().lstrip("-").isdigit():
                    raise UsageError(f"Invalid partition '{p}' specified in topic arg '{arg}'")
                out.append((topic, int(p)))
        else:
            whole.append(arg)
    if whole:
        for topic, partitions in admin.partitions(whole).items():
            out += [(topic, p) for p in partitions]
    return out


def print_plans(plans: dict[str, dict[tuple[str, int], int]]) -> None:
    """Kafka's GroupOffsetsResetter.printOffsetsToReset: GROUP TOPIC PARTITION NEW-OFFSET."""
    g = max([15] + [len(gid) for gid in plans])
    t = max([15] + [len(tp[0]) for plan in plans.values() for tp in plan])
    if plans:
        sys.stdout.write("\n" + " ".join(["GROUP".ljust(g), "TOPIC".ljust(t),
                                          "PARTITION".ljust(10), "NEW-OFFSET"]))
    for group_id, plan in plans.items():
        for (topic, partition), offset in sorted(plan.items()):
            sys.stdout.write("\n" + " ".join([group_id.ljust(g), topic.ljust(t),
                                              str(partition).ljust(10), str(offset)]))
    print()


def print_csv(plans: dict[str, dict[tuple[str, int], int]], with_group: bool) -> None:
    """--export: the plan as Kafka's CSV (group,topic,partition,offset or, for one group,
    topic,partition,offset), which --from-file reads back."""
    lines = []
    for group_id, plan in plans.items():
        for (topic, partition), offset in sorted(plan.items()):
            lines.append(f"{group_id},{topic},{partition},{offset}" if with_group
                         else f"{topic},{partition},{offset}")
    print("".join(line + "\n" for line in lines))


def parse_datetime(text: str) -> int:
    """Kafka's Utils.getDateTime: yyyy-MM-dd'T'HH:mm:ss.SSS with an optional
    zone (Z, +hh:mm, +hhmm); local time without one.  -> epoch ms."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?"
                     r"(Z|[+-]\d{2}(?::?\d{2})?)?", text.strip())
    if not m:
        raise UsageError(f"Error parsing timestamp '{text}': expected YYYY-MM-DDTHH:mm:SS.sss")
    base = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    millis = int((m.group(2) or ".0")[1:].ljust(3, "0"))
    zone = m.group(3)
    if zone is None:
        moment = base.astimezone()  # local time, as Kafka's tool
    elif zone == "Z":
        moment = base.replace(tzinfo=timezone.utc)
    else:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        moment = base.replace(tzinfo=timezone(sign * offset))
    return int(moment.timestamp()) * 1000 + millis


def parse_duration(text: str) -> int:
    """ISO-8601 PnDTnHnMn.nS (java.time.Duration.parse) -> milliseconds."""
    m = re.fullmatch(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                     r"(?:([-+]?\d+(?:\.\d+)?)S)?)?", text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise UsageError(f"Error parsing duration '{text}': expected PnDTnHnMnS")
    days, hours, minutes = (int(g or 0) for g in m.group(2, 3, 4))
    seconds = float(m.group(5) or 0)
    total = ((days * 24 + hours) * 60 + minutes) * 60000 + int(round(seconds * 1000))
    return -total if m.group(1) == "-" else total


def read_plan(path: str, groups: list[str]) -> dict[str, dict[tuple[str, int], int]]:
    try:
        lines = [line.strip() for line in open(path).read().splitlines() if line.strip()]
    except OSError as exc:
        raise UsageError(f"cannot read --from-file {path}: {exc.strerror}") from None
    plan: dict[str, dict[tuple[str, int], int]] = {}
    single = len(groups) == 1 and lines and len(lines[0].split(",")) == 3
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        try:
            if single:
                group, (topic, partition, offset) = groups[0], cells
            else:
                group, topic, partition, offset = cells
            plan.setdefault(group, {})[(topic, int(partition))] = int(offset)
        except ValueError:
            raise UsageError(f"{path}: bad line {line!r}: expected "
                             f"{'topic,partition,offset' if single else 'group,topic,partition,offset'}") from None
    return plan


def clamp(admin: AdminClient, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    starts = admin.list_offsets(list(wanted), -2)
    ends = admin.list_offsets(list(wanted), -1)
    out = {}
    for tp, offset in wanted.items():
        end, start = ends.get(tp), starts.get(tp)
        if end is not None and offset > end:
            print(f"WARN New offset ({offset}) is higher than latest offset for topic partition "
                  f"{tp[0]}-{tp[1]}. Value will be set to {end}", file=sys.stderr)
            offset = end
        elif start is not None and offset < start:
            print(f"WARN New offset ({offset}) is lower than earliest offset for topic partition "
                  f"{tp[0]}-{tp[1]}. Value will be set to {start}", file=sys.stderr)
            offset = start
        out[tp] = offset
    return out


def by_timestamp(admin: AdminClient, partitions, timestamp: int) -> dict[tuple[str, int], int]:
    found = admin.list_offsets(partitions, timestamp)
    missing = [tp for tp in partitions if found.get(tp) in (None, -1)]
    for topic, partition in missing:
        print(f"\nWarn: Partition {partition} from topic {topic} is empty. "
              f"Falling back to latest known offset.")
    out = {tp: found[tp] for tp in partitions if tp not in missing}
    if missing:
        out.update(admin.list_offsets(missing, -1))
    return out


def edge_offsets(admin: AdminClient, partitions, earliest: bool) -> dict[tuple[str, int], int]:
    """--to-earliest / --to-latest: each partition's log start or end."""
    found = admin.list_offsets(partitions, -2 if earliest else -1)
    for tp in partitions:
        if found.get(tp) is None:
            raise UsageError(f"Error getting {'starting' if earliest else 'ending'} "
                             f"offset of topic partition: {tp[0]}-{tp[1]}")
    return {tp: found[tp] for tp in partitions}


def plan_for(admin: AdminClient, args, group_id: str, file_plan) -> dict[tuple[str, int], int]:
    committed = None
    if args.from_file:
        wanted = file_plan.get(group_id, {})
        return clamp(admin, wanted) if wanted else {}
    if args.all_topics:
        committed = ops.committed_offsets(admin, group_id)
        partitions = sorted(committed)
    else:
        partitions = sorted(set(topic_partitions(admin, args.topic)))
    if not partitions:
        return {}
    if args.to_earliest or args.to_latest:
        return edge_offsets(admin, partitions, args.to_earliest)
    if args.to_offset is not None:
        return clamp(admin, {tp: args.to_offset for tp in partitions})
    if args.shift_by is not None or args.to_current:
        if committed is None:
            committed = ops.committed_offsets(admin, group_id)
        if args.to_current:
            out = {tp: committed[tp] for tp in partitions if tp in committed}
            rest = [tp for tp in partitions if tp not in committed]
            if rest:
                out.update(admin.list_offsets(rest, -1))
            return out
        for tp in partitions:
            if tp not in committed:
                raise UsageError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since "
                                 f"there is no current committed offset")
        return clamp(admin, {tp: committed[tp] + args.shift_by for tp in partitions})
    if args.to_datetime:
        return by_timestamp(admin, partitions, parse_datetime(args.to_datetime))
    return by_timestamp(admin, partitions,
                         int(time.time() * 1000) - parse_duration(args.by_duration))
