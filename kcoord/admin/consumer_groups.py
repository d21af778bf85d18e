"""`kcoord consumer-groups`: kafka-consumer-groups.sh's flags, checks and
output (column headers, widths, ordering and messages of Kafka's
ConsumerGroupCommand), over the Kafka protocol.  Works against Apache
Kafka too."""
from __future__ import annotations

import argparse
import sys

from ..protocol.errors import Err
from . import groups as ops
from . import group_command
from .client import AdminClient, AdminError, UsageError
from .group_command import Refusals, run_command
from .groups import Group, message
from .offset_reset import (parse_datetime, parse_duration, plan_for, print_csv, print_plans,
                           read_plan, topic_partitions)

MISSING = "-"
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "to_datetime", "by_duration", "to_earliest", "to_latest", "shift_by",
             "from_file", "to_current")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
STATES_BY_NAME = {s.lower(): s for s in ops.STATES if s != "Unknown"}

HELP = """List all consumer groups, describe a consumer group, delete consumer group
info, or reset consumer group offsets. The same flags and output as Apache
Kafka's kafka-consumer-groups.sh; it speaks the Kafka protocol, so it works
against Apache Kafka brokers as well as kcoord."""


def add_parser(sub) -> None:
    p = sub.add_parser("consumer-groups", help="kafka-consumer-groups.sh: list, describe, "
                       "reset offsets of, delete consumer groups", description=HELP)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security.protocol, ...)")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS",
                   help="timeout for some calls (default 5000)")
    p.add_argument("--list", action="store_true", help="list all consumer groups")
    p.add_argument("--describe", action="store_true", help="describe consumer group(s) and "
                   "list offset lag (messages not yet processed) related to given group")
    p.add_argument("--delete", action="store_true", help="delete consumer group(s)")
    p.add_argument("--reset-offsets", action="store_true", help="reset offsets of consumer "
                   "group(s); one group at a time, and only while it is inactive")
    p.add_argument("--delete-offsets", action="store_true", help="delete offsets of a "
                   "consumer group (one group, one or more --topic)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP")
    p.add_argument("--all-groups", action="store_true")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]")
    p.add_argument("--all-topics", action="store_true")
    p.add_argument("--offsets", action="store_true", help="describe: offsets and lag (default)")
    p.add_argument("--members", action="store_true", help="describe: the members")
    p.add_argument("--verbose", action="store_true", help="describe: more columns")
    p.add_argument("--state", nargs="?", const="", metavar="STATES",
                   help="describe: the group's state; list: filter by state (comma list)")
    p.add_argument("--type", nargs="?", const="", metavar="TYPES",
                   help="list: show the type, filter by classic,consumer")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--execute", action="store_true")
    p.add_argument("--export", action="store_true", help="reset: print the plan as CSV")
    p.add_argument("--to-offset", type=int, metavar="OFFSET")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--by-duration", metavar="PnDTnHnMnS")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--from-file", metavar="CSV")
    p.add_argument("--to-current", action="store_true")
    p.set_defaults(run=run)


def _given(args, name) -> bool:
    value = getattr(args, name)
    return value not in (None, False)


def check_args(args) -> None:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, "
                         "--delete, --reset-offsets, --delete-offsets")
    action = actions[0]
    if action in ("describe", "delete") and not args.group and not args.all_groups:
        raise UsageError(f"Option --{action} takes one of these options: --all-groups, --group")
    if action == "describe":
        if sum(map(bool, (args.offsets, args.members, args.state is not None))) > 1:
            raise UsageError("Option --describe takes at most one of these options: "
                             "--members, --offsets, --state")
    if action == "delete" and args.topic:
        raise UsageError("Option --delete does not take --topic")
    if action == "delete_offsets" and (len(args.group) != 1 or not args.topic):
        raise UsageError("Option --delete-offsets takes the following options: --group, --topic")
    if action == "reset_offsets":
        if not args.group and not args.all_groups:
            raise UsageError("Option --reset-offsets takes one of these options: "
                             "--all-groups, --group")
        if args.dry_run and args.execute:
            raise UsageError("Option --reset-offsets only accepts one of --execute and --dry-run")
        scenarios = [s for s in SCENARIOS if _given(args, s)]
        if len(scenarios) != 1:
            raise UsageError("One of the reset scopes should be defined: --to-datetime, "
                             "--by-duration, --to-earliest, --to-latest, --shift-by, "
                             "--from-file, --to-current, --to-offset.")
        if not args.from_file and not args.all_topics and not args.topic:
            raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
        if args.all_topics and args.topic:
            raise UsageError("Option --reset-offsets takes only one of --all-topics, --topic")
    if args.all_groups and args.group:
        raise UsageError("Option --all-groups does not take --group")
    if args.verbose and action != "describe":
        raise UsageError("Option --verbose is only valid with --describe")


# Exit codes: 0 done; 1 a refusal or failure, whose message (Kafka's wording)
# is printed (a group that does not exist, is not empty or not inactive, a
# partial delete, an error answer), or a bad command line.
_refused = Refusals()  # the refusals printed by this run
print_error = _refused.print_error


def run(args) -> int:
    return run_command(args, "consumer", sys.modules[__name__], _refused, _prepare)


def _prepare(args) -> dict:
    check_args(args)
    states = parse_states(args.state) if args.list and args.state else []
    types = parse_types(args.type) if args.list and args.type else []
    if args.reset_offsets and not args.dry_run and not args.execute:
        print("WARN: No action will be performed as the --execute option is missing. "
              "You should add the --dry-run option explicitly if you are scripting this "
              "command and want to keep the current default behavior without prompting.",
              file=sys.stderr)
    return {"states": states, "types": types}


# ---------------------------------------------------------------- --list
def parse_states(text: str) -> list[str]:
    return group_command.parse_states(text, STATES_BY_NAME, list(STATES_BY_NAME.values()))


def parse_types(text: str) -> list[str]:
    out = [t.strip().lower() for t in text.split(",")]
    if any(t not in ops.TYPES for t in out):
        raise UsageError(f"Invalid types list '{text}'. Valid types are: Classic, Consumer")
    return out


def list_groups(admin: AdminClient, args, states, types) -> None:
    listed = ops.list_groups(admin, states, types)
    if args.state is None and args.type is None:
        for g in listed:
            print(g["group_id"])
        return
    width = max([15] + [len(g["group_id"]) for g in listed]) + 10
    columns = [("GROUP", lambda g: g["group_id"], width)]
    if args.type is not None:
        columns.append(("TYPE", lambda g: g["type"].capitalize(), 20))
    if args.state is not None:
        columns.append(("STATE", lambda g: g["state"], 20))
    print(" ".join(name.ljust(w) for name, _, w in columns))
    for g in listed:
        print(" ".join(get(g).ljust(w) for _, get, w in columns))


# ------------------------------------------------------------ --describe
def _groups(admin: AdminClient, args) -> list[str]:
    if args.all_groups:
        return [g["group_id"] for g in ops.list_groups(admin)]
    return list(args.group)


def should_print(group: Group, rows: int | None) -> bool:
    """Kafka's shouldPrintMemberState: the state messages, and whether rows follow."""
    if rows is None:
        print_error(f"The consumer group '{group.group_id}' does not exist.")
        return False
    if group.state == "Dead":
        print_error(f"Consumer group '{group.group_id}' does not exist.")
    elif group.state == "Empty":
        print(f"\nConsumer group '{group.group_id}' has no active members.", file=sys.stderr)
    elif group.state in REBALANCING:
        print(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.", file=sys.stderr)
    return group.state != "Dead" and rows > 0


def describe(admin: AdminClient, args) -> None:
    names = sorted(set(_groups(admin, args)))
    for name in names:
        group = ops.describe_group(admin, name)
        if args.members:
            print_members(group, args.verbose)
        elif args.state is not None:
            print_state(group, args.verbose)
        else:
            print_offsets(admin, group, args.verbose)


def offset_rows(admin: AdminClient, group: Group) -> list[dict]:
    with_epochs = ops.committed_with_epochs(admin, group.group_id)
    committed = {tp: offset for tp, (offset, _) in with_epochs.items()}
    rows: list[dict] = []
    assigned: set[tuple[str, int]] = set()
    members = sorted((m for m in group.members if m.assignment),
                     key=lambda m: -len(m.assignment))  # stable: ties keep their order
    owners = []
    for m in members:
        owners += [(tp, m.member_id, m.host, m.client_id) for tp in sorted(m.assignment)]
        assigned.update(m.assignment)
    owners += [(tp, MISSING, MISSING, MISSING) for tp in sorted(committed) if tp not in assigned]
    ends = admin.list_offsets([tp for tp, *_ in owners], -1) if owners else {}
    for tp, consumer, host, client in owners:
        offset, end = committed.get(tp), ends.get(tp)
        lag = end - offset if offset is not None and end is not None else None
        epoch = with_epochs.get(tp, (None, -1))[1]
        rows.append({"group": group.group_id, "topic": tp[0], "partition": str(tp[1]),
                     "epoch": MISSING if epoch is None or epoch < 0 else str(epoch),
                     "offset": MISSING if offset is None else str(offset),
                     "end": MISSING if end is None else str(end),
                     "lag": MISSING if lag is None else str(lag),
                     "consumer": consumer, "host": host, "client": client})
    return rows


def print_offsets(admin: AdminClient, group: Group, verbose: bool) -> None:
    rows = offset_rows(admin, group)
    if not should_print(group, len(rows)):
        return
    g = max([15] + [len(r["group"]) for r in rows])
    t = max([15] + [len(r["topic"]) for r in rows])
    c = max([15] + [len(r["consumer"]) for r in rows])
    h = max([15] + [len(r["host"]) for r in rows])

    def line(r):
        cells = [r["group"].ljust(g), r["topic"].ljust(t), r["partition"].ljust(10)]
        if verbose:
            cells.append(r["epoch"].ljust(15))
        cells += [r["offset"].ljust(15), r["end"].ljust(15), r["lag"].ljust(15),
                  r["consumer"].ljust(c), r["host"].ljust(h), r["client"]]
        return " ".join(cells)

    header = {"group": "GROUP", "topic": "TOPIC", "partition": "PARTITION",
              "epoch": "LEADER-EPOCH", "offset": "CURRENT-OFFSET", "end": "LOG-END-OFFSET",
              "lag": "LAG", "consumer": "CONSUMER-ID", "host": "HOST", "client": "CLIENT-ID"}
    sys.stdout.write("\n" + line(header))
    for r in rows:
        sys.stdout.write("\n" + line(r))
    print()


def assignment_string(pairs: list[tuple[str, int]] | None) -> str:
    if not pairs:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for topic, p in pairs:
        by_topic.setdefault(topic, []).append(p)
    return ";".join(sorted(f"{t}:" + ",".join(str(p) for p in sorted(ps))
                           for t, ps in by_topic.items()))


def print_members(group: Group, verbose: bool) -> None:
    members = group.members
    g, c, i, h, cl, cur, tgt = 15, 15, 17, 15, 15, 20, 20
    with_instance = False
    if should_print(group, len(members)):
        for m in members:
            g, c = max(g, len(group.group_id)), max(c, len(m.member_id))
            i, h, cl = max(i, len(m.instance_id or "")), max(h, len(m.host)), max(cl, len(m.client_id))
            with_instance = with_instance or bool(m.instance_id)
            cur = max(cur, len(assignment_string(m.assignment)))
            tgt = max(tgt, len(assignment_string(m.target)))

    def head(cells):
        out = [cells[0].ljust(g), cells[1].ljust(c)]
        if with_instance:
            out.append(cells[2].ljust(i))
        out += [cells[3].ljust(h), cells[4].ljust(cl), cells[5].ljust(15)]
        return " ".join(out) + " "

    def tail(cells):
        return " ".join([cells[0].ljust(15), cells[1].ljust(cur), cells[2].ljust(15),
                         cells[3].ljust(tgt)])

    sys.stdout.write("\n" + head(["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST",
                                  "CLIENT-ID", "#PARTITIONS"]))
    if verbose:
        sys.stdout.write(tail(["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                               "TARGET-ASSIGNMENT"]))
    print()
    for m in members:
        sys.stdout.write(head([group.group_id, m.member_id, m.instance_id or "", m.host,
                               m.client_id, str(len(m.assignment))]))
        if verbose:
            epoch = MISSING if m.epoch is None else str(m.epoch)
            target_epoch = MISSING if group.assignment_epoch is None or m.target is None \
                else str(group.assignment_epoch)
            sys.stdout.write(tail([epoch, assignment_string(m.assignment), target_epoch,
                                   assignment_string(m.target)]))
        print()


def print_state(group: Group, verbose: bool) -> None:
    if not should_print(group, 1):
        return
    node_id, host, port = group.coordinator
    coordinator = f"{host}:{port}  ({node_id})"
    cw, gw = max(25, len(coordinator)), max(15, len(group.group_id))
    strategy = group.assignor or MISSING

    def line(cells):
        out = [cells[0].ljust(gw), cells[1].ljust(cw), cells[2].ljust(20), cells[3].ljust(20)]
        if verbose:
            out += [cells[4].ljust(15), cells[5].ljust(25)]
        return " ".join(out + [cells[6]])

    sys.stdout.write("\n" + line(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                  "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]))
    sys.stdout.write("\n" + line([group.group_id, coordinator, strategy, group.state,
                                  MISSING if group.group_epoch is None else str(group.group_epoch),
                                  MISSING if group.assignment_epoch is None
                                  else str(group.assignment_epoch), str(len(group.members))]))
    print()


# -------------------------------------------------------------- --delete
def delete(admin: AdminClient, args) -> None:
    results = ops.delete_groups(admin, sorted(set(_groups(admin, args))))
    failed = {g: code for g, code in results.items() if code != Err.NONE}
    succeeded = [g for g in results if g not in failed]
    if not failed:
        print("Deletion of requested consumer groups (" + ", ".join(
            f"'{g}'" for g in succeeded) + ") was successful.")
        return
    print_error("Deletion of some consumer groups failed:")
    for g, code in failed.items():
        print(f"* Group '{g}' could not be deleted due to: {message(code)}")
    if succeeded:
        print("\nThese consumer groups were deleted successfully: "
              + ", ".join(f"'{g}'" for g in succeeded))


# ------------------------------------------------------ --delete-offsets
def delete_offsets(admin: AdminClient, args) -> None:
    group_id = args.group[0]
    partitions = sorted(set(topic_partitions(admin, args.topic)))
    top, per_partition = ops.delete_offsets(admin, group_id, partitions)
    if top == Err.NONE:  # as the Admin client's all(): the first partition error fails it
        top = next((code for _, code in sorted(per_partition.items()) if code), Err.NONE)
    if top == Err.NONE:
        print(f"Request succeeded for deleting offsets from group {group_id}.")
    elif top in (Err.INVALID_GROUP_ID, Err.GROUP_ID_NOT_FOUND, Err.GROUP_AUTHORIZATION_FAILED,
                 Err.NON_EMPTY_GROUP):
        print_error(message(top))
    elif top in (Err.GROUP_SUBSCRIBED_TO_TOPIC, Err.TOPIC_AUTHORIZATION_FAILED,
                 Err.UNKNOWN_TOPIC_OR_PARTITION):
        print_error("Encountered some partition-level error, see the follow-up details.")
    else:
        print_error(f"Encountered some unknown error: {Err(top).name}")
    width = max([15] + [len(t) for t, _ in partitions])
    sys.stdout.write("\n" + " ".join(["TOPIC".ljust(width), "PARTITION".ljust(10),
                                      "STATUS".ljust(15)]))
    for tp in sorted(partitions, key=lambda tp: tp[0] + str(tp[1])):
        code = per_partition.get(tp, top if top != Err.NONE else Err.NONE)
        status = "Successful" if code == Err.NONE else f"Error: {message(code)}"
        sys.stdout.write("\n" + " ".join([tp[0].ljust(width), str(tp[1]).ljust(10),
                                          status.ljust(15)]))
    print()


# ------------------------------------------------------- --reset-offsets
def reset_offsets(admin: AdminClient, args) -> None:
    group_ids = sorted(set(_groups(admin, args)))
    file_plan = read_plan(args.from_file, group_ids) if args.from_file else {}
    if args.to_datetime:
        parse_datetime(args.to_datetime)  # a bad value is a usage error before anything is read
    if args.by_duration:
        parse_duration(args.by_duration)
    plans: dict[str, dict[tuple[str, int], int]] = {}
    for group_id in group_ids:
        group = ops.describe_group(admin, group_id)
        if group.state not in ("Empty", "Dead"):
            print_error(f"Assignments can only be reset if the group '{group_id}' is inactive, "
                        f"but the current state is {group.state}.")
            plans[group_id] = {}
            continue
        plan = plan_for(admin, args, group_id, file_plan)
        if args.execute and plan:
            errors = {tp: code for tp, code in ops.commit_offsets(admin, group_id, plan).items()
                      if code != Err.NONE}
            if errors:
                (topic, partition), code = next(iter(sorted(errors.items())))
                raise AdminError(f"committing offsets of group '{group_id}' failed: "
                                 f"{topic}-{partition}: {message(code)}")
        plans[group_id] = plan
    if args.export:
        print_csv(plans, with_group=len(group_ids) != 1)
        return
    print_plans(plans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kcoord")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["consumer-groups", *(argv or [])])
    return args.run(args)
