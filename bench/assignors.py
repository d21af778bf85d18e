"""Server-side assignors on the grid of Kafka's ServerSideAssignorBenchmark.

    python -m bench.assignors                 # the default grid
    python -m bench.assignors --full          # Kafka's whole grid (long)
    python -m bench.assignors --quick         # a smoke run
    python -m bench.assignors --jmh [--quick] # Kafka's three published cells, goal met/missed,
                                              # the compiled and the pure build side by side

Cells: members x partitions-per-member x topics, HOMOGENEOUS or HETEROGENEOUS
(5 subscription buckets, as in Kafka's benchmark), FULL (no prior assignment)
or INCREMENTAL (the group is assigned, then one member joins and only that
second assignment is timed).  kcoord's uniform and range assignors run beside
kafka-python's client-side range and sticky assignors on the same inputs (the
sticky one gets the previous assignment as its user data).  kafka-python's
sticky assignor is skipped on cells above --sticky-max-partitions, where one
run takes minutes.  The published figures of Kafka's Java assignors
(KAFKA_REFERENCE.md section 3) are quoted beside the cells they measured.

Results go to bench/results/assignors.md and .json.  Times are the median of
--repeat runs, in milliseconds; nothing is asserted.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kcoord.coordinator.assignors import ASSIGNORS, GroupSpec, MemberSpec  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BUCKETS = 5

# Kafka's Java numbers (ms/op) from apache/kafka PR comments, KAFKA_REFERENCE.md section 3:
# (assignor, subscription, full/incremental, members, ratio, topics) -> (ms, source)
JAVA = {
    ("uniform", "homogeneous", "full", 100, 5, 10): (0.020, "#19677"),
    ("uniform", "homogeneous", "full", 100, 5, 1000): (0.066, "#19677"),
    ("uniform", "homogeneous", "full", 5000, 10, 1000): (1.714, "#17133"),
    ("uniform", "homogeneous", "full", 5000, 50, 1000): (7.491, "#17133"),
    ("uniform", "homogeneous", "full", 10000, 10, 1000): (4.309, "#17133"),
    ("uniform", "heterogeneous", "full", 100, 5, 10): (0.059, "#17385"),
    ("uniform", "heterogeneous", "full", 100, 10, 10): (0.076, "#17385"),
}


def topic_id(i: int) -> bytes:
    return i.to_bytes(16, "big")


def cell_inputs(members: int, ratio: int, topics: int, heterogeneous: bool):
    per_topic = max(1, members * ratio // topics)
    partitions = {topic_id(t): per_topic for t in range(topics)}
    names = {topic_id(t): f"topic-{t}" for t in range(topics)}
    ids = sorted(partitions)
    subs = []
    for m in range(members + 1):  # one more: the member that joins in INCREMENTAL
        if heterogeneous:
            b = m % BUCKETS
            lo, hi = b * topics // BUCKETS, (b + 1) * topics // BUCKETS
            subs.append(frozenset(ids[lo:hi] or ids[:1]))
        else:
            subs.append(frozenset(ids))
    return partitions, names, subs


def timed(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs)


# ------------------------------------------------------------ kcoord
def run_kcoord(name, partitions, subs, members, incremental, repeat):
    assign = ASSIGNORS[name]
    homogeneous = len(set(subs)) == 1
    specs = {f"member-{m}": MemberSpec(subs[m]) for m in range(members)}
    if incremental:
        previous = assign(GroupSpec(specs, homogeneous), partitions)
        specs = {m: MemberSpec(s.subscribed_topic_ids, previous.get(m, {})) for m, s in specs.items()}
        specs[f"member-{members}"] = MemberSpec(subs[members])
    spec = GroupSpec(specs, homogeneous)
    return timed(lambda: assign(spec, partitions), repeat)


# ------------------------------------------------------------ kafka-python
class _Cluster:
    def __init__(self, partitions_by_name):
        self.partitions_by_name = partitions_by_name

    def partitions_for_topic(self, topic):
        return self.partitions_by_name.get(topic)

    def topics(self):
        return set(self.partitions_by_name)


_Member = namedtuple("_Member", ["member_id", "group_instance_id", "metadata"])


def run_kafka_python(name, partitions, names, subs, members, incremental, repeat):
    from kafka.coordinator.assignors.abstract import ConsumerProtocolSubscription
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    cluster = _Cluster({names[t]: set(range(n)) for t, n in partitions.items()})
    topics_of = [sorted(names[t] for t in s) for s in subs]
    assignor = RangePartitionAssignor if name == "range" else StickyPartitionAssignor()

    def members_for(count, previous=None):
        out = []
        for m in range(count):
            member_id = f"member-{m}"
            if previous is not None and member_id in previous:
                # what a sticky consumer sends: its previous assignment as user data
                metadata = StickyPartitionAssignor._metadata(topics_of[m], previous[member_id], 1)
            else:
                metadata = ConsumerProtocolSubscription(version=0, topics=topics_of[m], user_data=b"")
            out.append(_Member(member_id, None, metadata))
        return out

    group = members_for(members)
    if incremental:
        first = assignor.assign(cluster, group)
        previous = {m: a.partitions() for m, a in first.items()}
        group = members_for(members + 1, previous if name == "sticky" else None)
    return timed(lambda: assignor.assign(cluster, group), repeat)


# ------------------------------------------------------------ Kafka's published cells
# (members, partitions per member, topics): uniform, homogeneous, FULL, rack-unaware
JMH_CELLS = [(100, 5, 10), (5000, 10, 1000), (10000, 10, 1000)]
GOAL_FACTOR = 3


def jmh_spec(members: int, ratio: int, topics: int, incremental: bool, assign):
    """The inputs as Kafka's ServerSideAssignorBenchmark builds them, outside the
    timed part: members*ratio//topics partitions per topic, ids member0..; INCREMENTAL
    assigns members-1 of them, then adds "newMember" with no assignment."""
    partitions = {topic_id(t): members * ratio // topics for t in range(topics)}
    subscribed = frozenset(partitions)
    count = members - 1 if incremental else members
    specs = {f"member{i}": MemberSpec(subscribed) for i in range(count)}
    if incremental:
        previous = assign(GroupSpec(specs, True), partitions)
        specs = {m: MemberSpec(subscribed, previous.get(m, {})) for m in specs}
        specs["newMember"] = MemberSpec(subscribed)
    return GroupSpec(specs, True), partitions


def cpu_ms(fn, repeat: int) -> float:
    """Median CPU milliseconds of one call (CPU time: the machine is shared)."""
    runs = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        runs.append((time.process_time() - start) * 1000)
    return statistics.median(runs)


def jmh_rows(repeat: int) -> list[dict]:
    """Every cell, both assignors, FULL and INCREMENTAL, in this process's build."""
    rows = []
    for members, ratio, topics in JMH_CELLS:
        for kind in ("full", "incremental"):
            for name in ("uniform", "range"):
                assign = ASSIGNORS[name]
                spec, partitions = jmh_spec(members, ratio, topics, kind == "incremental", assign)
                rows.append({"assignor": name, "members": members, "ratio": ratio, "topics": topics,
                             "kind": kind, "cpu_ms": cpu_ms(lambda a=assign, s=spec, n=partitions: a(s, n), repeat)})
    return rows


def jmh_rows_in(build: str, repeat: int) -> tuple[str, list[dict]]:
    """The rows measured by a child interpreter on the compiled or the pure build
    (the build is chosen at import, so one process cannot time both)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KCOORD_PURE_PYTHON", None)
    if build == "pure":
        env["KCOORD_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-m", "bench.assignors", "--jmh-rows",
                          "--repeat", str(repeat)], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    got = json.loads(out.splitlines()[-1])
    return got["build"], got["rows"]


def run_jmh(repeat: int) -> int:
    compiled_state, compiled = jmh_rows_in("compiled", repeat)
    pure_state, pure = jmh_rows_in("pure", repeat)
    rows = []
    for c, pr in zip(compiled, pure):
        java = JAVA[("uniform", "homogeneous", "full", c["members"], c["ratio"], c["topics"])]
        ms = c["cpu_ms"]
        row = {k: c[k] for k in ("assignor", "members", "ratio", "topics", "kind")}
        row.update({"compiled_cpu_ms": ms, "pure_cpu_ms": pr["cpu_ms"],
                    "pure_over_compiled": pr["cpu_ms"] / ms, "java_ms": java[0],
                    "java_source": java[1], "ratio_to_java": ms / java[0],
                    "pure_ratio_to_java": pr["cpu_ms"] / java[0],
                    "goal": "met" if ms <= GOAL_FACTOR * java[0] else "missed"})
        rows.append(row)
        print(" ".join(f"{k}={fmt(v)}" for k, v in row.items()), flush=True)
    load = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    out = {"builds": {"compiled": compiled_state, "pure": pure_state}, "load": load,
           "repeat": repeat, "rows": rows}
    (RESULTS / "assignors_jmh.json").write_text(json.dumps(out, indent=1))
    lines = ["# Kafka's published assignor cells (CPU ms per assignment, median)", "",
             f"Builds: {compiled_state} and {pure_state}, each in its own interpreter, one after "
             f"the other; load average {load:.1f}; median of {repeat} runs. "
             "Inputs as ServerSideAssignorBenchmark builds them (homogeneous, rack-unaware; "
             "INCREMENTAL: members-1 assigned, then one new member). Java: Kafka's published "
             "UNIFORM HOMOGENEOUS FULL figure for the cell (no RANGE figure is published; "
             f"the goal holds both to it). Goal: the compiled build within {GOAL_FACTOR}x.", "",
             "| assignor | members | partitions/member | topics | kind | compiled CPU ms | "
             "pure CPU ms | pure / compiled | Java ms | x Java (compiled) | x Java (pure) | goal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['assignor']} | {r['members']} | {r['ratio']} | {r['topics']} | {r['kind']} | "
                     f"{fmt(r['compiled_cpu_ms'])} | {fmt(r['pure_cpu_ms'])} | "
                     f"{r['pure_over_compiled']:.2f} | {r['java_ms']} ({r['java_source']}) | "
                     f"{r['ratio_to_java']:.2f} | {r['pure_ratio_to_java']:.2f} | {r['goal']} |")
    (RESULTS / "assignors_jmh.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'assignors_jmh.md'}")
    return 0


# ------------------------------------------------------------ the grid
def grid(args):
    if args.quick:
        return itertools.product([100, 500], [5], [10, 100])
    if args.full:
        return itertools.product([100, 500, 1000, 5000, 10000], [5, 10, 50], [10, 100, 1000])
    return itertools.product([100, 1000, 10000], [10], [10, 1000])


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, (str, int)):
        return str(v)
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.assignors", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--full", action="store_true")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--sticky-max-partitions", type=int, default=2500,
                   help="skip kafka-python's sticky assignor on larger cells (default 2500; "
                        "it takes 5-15 s per run at 2500 partitions)")
    p.add_argument("--no-kafka-python", action="store_true")
    p.add_argument("--jmh", action="store_true",
                   help="only Kafka's three published cells, uniform and range, full and incremental")
    p.add_argument("--jmh-rows", action="store_true",
                   help="(internal) the --jmh cells in this interpreter's build, as one JSON line")
    args = p.parse_args(argv)
    if args.jmh_rows:
        from kcoord import native_build
        print(json.dumps({"build": native_build.state, "rows": jmh_rows(args.repeat)}))
        return 0
    if args.jmh:
        return run_jmh(3 if args.quick else max(args.repeat, 21))

    rows = []
    for members, ratio, topics in grid(args):
        for subscription in ("homogeneous", "heterogeneous"):
            partitions, names, subs = cell_inputs(members, ratio, topics, subscription == "heterogeneous")
            total = sum(partitions.values())
            for kind in ("full", "incremental"):
                incremental = kind == "incremental"
                row = {"members": members, "ratio": ratio, "topics": topics,
                       "partitions": total, "subscription": subscription, "kind": kind}
                for name in ("uniform", "range"):
                    row[f"kcoord_{name}"] = run_kcoord(name, partitions, subs, members,
                                                       incremental, args.repeat)
                    java = JAVA.get((name, subscription, kind, members, ratio, topics))
                    row[f"java_{name}"] = java[0] if java else None
                if not args.no_kafka_python:
                    row["kafka_python_range"] = run_kafka_python(
                        "range", partitions, names, subs, members, incremental, 1)
                    if total <= args.sticky_max_partitions:
                        row["kafka_python_sticky"] = run_kafka_python(
                            "sticky", partitions, names, subs, members, incremental, 1)
                    else:
                        row["kafka_python_sticky"] = "skipped"
                rows.append(row)
                print(" ".join(f"{k}={fmt(v)}" for k, v in row.items()), flush=True)

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "assignors.json").write_text(json.dumps(rows, indent=1))
    header = ["members", "partitions/member", "topics", "subscription", "kind",
              "kcoord uniform", "Java uniform", "kcoord range", "kafka-python range",
              "kafka-python sticky"]
    lines = ["# Server-side assignors (ms per assignment, median)", "",
             "kcoord's assignors beside kafka-python's client-side ones on the same inputs; "
             "Java: Kafka's published figures where that cell was measured "
             "(KAFKA_REFERENCE.md section 3). Wall-clock ms; load average at the end of "
             f"the run {os.getloadavg()[0]:.1f}.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(v) for v in (
            r["members"], r["ratio"], r["topics"], r["subscription"], r["kind"],
            r["kcoord_uniform"], r["java_uniform"], r["kcoord_range"],
            r.get("kafka_python_range"), r.get("kafka_python_sticky"))) + " |")
    (RESULTS / "assignors.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'assignors.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
