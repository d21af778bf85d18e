"""`kcoord transactions`: kafka-transactions.sh's subcommands (list, describe,
describe-producers, find-hanging, abort) over ListTransactions,
DescribeTransactions, DescribeProducers and WriteTxnMarkers, with its
tab-separated padded tables and its error lines (exit 1)."""
from __future__ import annotations

import sys
import time

from ..protocol.errors import Err
from .client import AdminClient, AdminError, error_name, read_properties

HELP = """This tool is used to analyze the transactional state of producers in the cluster.
It can be used to detect and recover from hanging transactions. The subcommands and
output of Apache Kafka's kafka-transactions.sh."""

MESSAGES = {  # Kafka's Errors messages for the errors these calls answer
    Err.TRANSACTIONAL_ID_NOT_FOUND: "The transactionalId could not be found.",
    Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
    Err.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    Err.NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error "
                                "indicates that the broker is not the current leader.",
    Err.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    Err.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}


class Refused(Exception):
    """kafka-transactions.sh's printErrorAndExit: the message on stderr, exit 1."""


def add_parser(sub) -> None:
    p = sub.add_parser("transactions", help="kafka-transactions.sh: list, describe, "
                       "describe-producers, find-hanging, abort", description=HELP)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties")
    p.add_argument("--timeout", type=int, default=30000, metavar="MS")
    cmds = p.add_subparsers(dest="subcommand", required=True)
    c = cmds.add_parser("list", help="list transactions")
    c.add_argument("--duration-filter", type=int, help="only transactions running longer "
                   "than this many milliseconds (< 0: all)")
    c = cmds.add_parser("describe", help="describe the state of an active transactional-id")
    c.add_argument("--transactional-id", required=True)
    c = cmds.add_parser("describe-producers", help="describe the states of active producers "
                        "for a topic partition")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, required=True)
    c.add_argument("--broker-id", type=int, help="a replica to ask instead of the leader")
    c = cmds.add_parser("find-hanging", help="find hanging transactions")
    c.add_argument("--broker-id", type=int)
    c.add_argument("--max-transaction-timeout", type=int, default=15, help="minutes")
    c.add_argument("--topic")
    c.add_argument("--partition", type=int)
    c = cmds.add_parser("abort", help="abort a hanging transaction (requires administrative "
                        "privileges)")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, required=True)
    c.add_argument("--start-offset", type=int)
    c.add_argument("--producer-id", type=int)
    c.add_argument("--producer-epoch", type=int)
    c.add_argument("--coordinator-epoch", type=int)
    p.set_defaults(run=run)


def table(headers: list[str], rows: list[list[str]]) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column, then a tab."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [headers] + rows:
        print("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths)))


def run(args) -> int:
    try:
        with AdminClient(args.bootstrap_server, read_properties(args.command_config),
                         args.timeout) as admin:
            COMMANDS[args.subcommand](admin, args)
    except Refused as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except AdminError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def _failed(what: str, code: int) -> Refused:
    return Refused(f"{what}: {MESSAGES.get(code, error_name(code))} "
                   "Enable debug logging for additional detail.")


# ---------------------------------------------------------------- calls
def list_all(admin: AdminClient, producer_ids=(), duration: int = -1) -> list[tuple[int, dict]]:
    """(broker id, listing) from every broker's ListTransactions."""
    out = []
    for node in sorted(admin.brokers()):
        conn = admin.node(node)
        _, resp = conn.call(66, {"state_filters": [], "producer_id_filters": list(producer_ids),
                                 "duration_filter": duration}, low=1 if duration >= 0 else 0)
        if resp["error_code"] != Err.NONE:
            raise _failed("Failed to list transactions", resp["error_code"])
        out += [(node, t) for t in resp["transaction_states"]]
    return out


def describe_txn(admin: AdminClient, tid: str) -> tuple[int, dict]:
    node, conn = admin.coordinator_of(tid, 1)
    _, resp = conn.call(65, {"transactional_ids": [tid]})
    [state] = resp["transaction_states"]
    return node, state


def describe_producers(admin: AdminClient, topic: str, partition: int,
                       broker: int | None = None) -> dict:
    if broker is None:
        broker = admin.leaders([topic]).get((topic, partition), -1)
        if broker < 0:
            raise _failed(f"Failed to describe producers for partition {topic}-{partition} on "
                          "leader", Err.UNKNOWN_TOPIC_OR_PARTITION)
    _, resp = admin.node(broker).call(61, {"topics": [{"name": topic,
                                                      "partition_indexes": [partition]}]})
    [t] = resp["topics"]
    [p] = t["partitions"]
    return p


# ------------------------------------------------------------ subcommands
def cmd_list(admin: AdminClient, args) -> None:
    duration = -1 if args.duration_filter is None else args.duration_filter
    table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
          [[t["transactional_id"], str(node), str(t["producer_id"]), t["transaction_state"]]
           for node, t in list_all(admin, duration=duration)])


def cmd_describe(admin: AdminClient, args) -> None:
    tid = args.transactional_id
    node, s = describe_txn(admin, tid)
    if s["error_code"] != Err.NONE:
        raise _failed(f"Failed to describe transaction state of transactional-id `{tid}`",
                      s["error_code"])
    start = s["transaction_start_time_ms"]
    started = start >= 0
    table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
           "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
           "TransactionDurationMs", "TopicPartitions"],
          [[str(node), tid, str(s["producer_id"]), str(s["producer_epoch"]),
            s["transaction_state"], str(s["transaction_timeout_ms"]),
            str(start) if started else "None",
            str(int(time.time() * 1000) - start) if started else "None",
            ",".join(f"{t['topic']}-{p}" for t in s["topics"] for p in t["partitions"])]])


def cmd_describe_producers(admin: AdminClient, args) -> None:
    p = describe_producers(admin, args.topic, args.partition, args.broker_id)
    if p["error_code"] != Err.NONE:
        where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
        raise _failed(f"Failed to describe producers for partition {args.topic}-"
                      f"{args.partition} on {where}", p["error_code"])
    table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
           "LastTimestamp", "CurrentTransactionStartOffset"],
          [[str(a["producer_id"]), str(a["producer_epoch"]), str(a["coordinator_epoch"]),
            str(a["last_sequence"]), str(a["last_timestamp"]),
            str(a["current_txn_start_offset"]) if a["current_txn_start_offset"] >= 0 else "None"]
           for a in p["active_producers"]])


def cmd_find_hanging(admin: AdminClient, args) -> None:
    if args.topic is None and args.broker_id is None:
        raise Refused("The `find-hanging` command requires either --topic or --broker-id to "
                      "limit the scope of the search")
    if args.partition is not None and args.topic is None:
        raise Refused("The --partition argument requires --topic to be provided")
    meta = admin.metadata(None if args.topic is None else [args.topic])
    partitions = []
    for t in meta["topics"]:
        if t["error_code"] != Err.NONE:
            raise _failed("Failed to describe 1 topics", t["error_code"])
        for p in t["partitions"]:
            if args.partition is not None and p["partition_index"] != args.partition:
                continue
            if args.broker_id is None or args.broker_id in p["replica_nodes"]:
                partitions.append((t["name"], p["partition_index"]))
    now = int(time.time() * 1000)
    limit = args.max_transaction_timeout * 60_000
    open_ = []  # (topic, partition, producer state) open longer than the limit
    for topic, partition in sorted(partitions):
        p = describe_producers(admin, topic, partition, args.broker_id)
        if p["error_code"] != Err.NONE:
            raise _failed(f"Failed to describe producers for {len(partitions)} partitions on "
                          f"broker {args.broker_id}", p["error_code"])
        open_ += [(topic, partition, a) for a in p["active_producers"]
                  if a["current_txn_start_offset"] >= 0 and now - a["last_timestamp"] > limit]
    hanging = []
    if open_:
        ids = {t["producer_id"]: t["transactional_id"]
               for _, t in list_all(admin, {a["producer_id"] for _, _, a in open_})}
        described: dict[str, dict | None] = {}
        for tid in set(ids.values()):
            _, s = describe_txn(admin, tid)
            described[tid] = s if s["error_code"] == Err.NONE else None
        for topic, partition, a in open_:
            s = described.get(ids.get(a["producer_id"], ""))
            # still in its coordinator's transaction: the coordinator will write the marker
            if s is None or partition not in next(
                    (t["partitions"] for t in s["topics"] if t["topic"] == topic), []):
                hanging.append((topic, partition, a))
    table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
           "StartOffset", "LastTimestamp", "Duration(min)"],
          [[topic, str(partition), str(a["producer_id"]), str(a["producer_epoch"]),
            str(a["coordinator_epoch"]), str(a["current_txn_start_offset"]),
            str(a["last_timestamp"]), str((now - a["last_timestamp"]) // 60_000)]
           for topic, partition, a in hanging])


def cmd_abort(admin: AdminClient, args) -> None:
    tp = f"{args.topic}-{args.partition}"
    if args.start_offset is None and args.producer_id is None:
        raise Refused("The transaction to abort must be identified either with --start-offset "
                      "(for brokers on 3.0 or above) or with --producer-id, --producer-epoch, "
                      "and --coordinator-epoch (for older brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise Refused("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise Refused("Missing required argument --coordinator-epoch")
        pid, epoch, coord_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    else:
        p = describe_producers(admin, args.topic, args.partition)
        if p["error_code"] != Err.NONE:
            raise _failed(f"Failed to validate producer state for partition {tp}",
                          p["error_code"])
        found = [a for a in p["active_producers"]
                 if a["current_txn_start_offset"] == args.start_offset]
        if not found:
            raise Refused(f"Could not find any open transactions starting at offset "
                          f"{args.start_offset} on partition {tp}")
        pid, epoch, coord_epoch = (found[0]["producer_id"], found[0]["producer_epoch"],
                                   found[0]["coordinator_epoch"])
    coord_epoch = max(coord_epoch, 0)  # -1 before any marker: 0 is below every epoch
    leader = admin.leaders([args.topic]).get((args.topic, args.partition), -1)
    if leader < 0:
        raise _failed(f"Failed to abort transaction on {tp}", Err.UNKNOWN_TOPIC_OR_PARTITION)
    _, resp = admin.node(leader).call(27, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
        "topics": [{"name": args.topic, "partition_indexes": [args.partition]}],
        "coordinator_epoch": coord_epoch}]})
    code = resp["markers"][0]["topics"][0]["partitions"][0]["error_code"]
    if code != Err.NONE:
        raise _failed(f"Failed to abort transaction AbortTransactionSpec(topicPartition={tp}, "
                      f"producerId={pid}, producerEpoch={epoch}, "
                      f"coordinatorEpoch={coord_epoch})", code)


COMMANDS = {"list": cmd_list, "describe": cmd_describe,
            "describe-producers": cmd_describe_producers, "find-hanging": cmd_find_hanging,
            "abort": cmd_abort}
