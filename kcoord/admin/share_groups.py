"""`kcoord share-groups`: kafka-share-groups.sh's flags, checks and output
(column headers, widths, ordering and messages of Kafka's ShareGroupCommand)
for KIP-932 share groups, over the Kafka protocol.  Works against Apache
Kafka too."""
from __future__ import annotations

import sys

from ..protocol.errors import Err
from . import share_group_ops as ops
from . import group_command
from .client import AdminClient, AdminError, UsageError
from .group_command import Refusals, run_command
from .groups import delete_groups, message
from .offset_reset import (by_timestamp, clamp, edge_offsets, parse_datetime, print_csv,
                           print_plans, read_plan, topic_partitions)
from .share_group_ops import ShareGroup, ShareGroupError

MISSING = "-"
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("from_file", "to_current", "to_datetime", "to_earliest", "to_latest", "to_offset")
STATES_BY_NAME = {s.lower(): s for s in ops.SHARE_STATES}

HELP = """List, describe, reset the offsets of and delete share groups (KIP-932).
The same flags and output as Apache Kafka's kafka-share-groups.sh; it speaks
the Kafka protocol, so it works against Apache Kafka brokers as well as
kcoord."""


def add_parser(sub) -> None:
    p = sub.add_parser("share-groups", help="kafka-share-groups.sh: list, describe, reset "
                       "offsets of, delete share groups", description=HELP)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security.protocol, ...)")
    p.add_argument("--timeout", type=int, default=30000, metavar="MS",
                   help="timeout for the admin calls (default 30000)")
    p.add_argument("--list", action="store_true", help="list all share groups")
    p.add_argument("--describe", action="store_true",
                   help="describe share group, members and offset information")
    p.add_argument("--delete", action="store_true", help="delete share group(s) (Empty only)")
    p.add_argument("--reset-offsets", action="store_true", help="reset the start offsets of "
                   "one share group, which must have no members")
    p.add_argument("--delete-offsets", action="store_true", help="delete the offsets of a "
                   "share group (one group, one or more --topic)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP")
    p.add_argument("--all-groups", action="store_true")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]")
    p.add_argument("--all-topics", action="store_true")
    p.add_argument("--offsets", action="store_true",
                   help="describe: start offset and lag per partition (default)")
    p.add_argument("--members", action="store_true", help="describe: the members")
    p.add_argument("--verbose", action="store_true", help="describe: more columns")
    p.add_argument("--state", nargs="?", const="", metavar="STATES",
                   help="describe: the group's state; list: show and filter by state "
                        "(Empty, Stable, Dead)")
    p.add_argument("--dry-run", action="store_true", help="reset: only show the plan")
    p.add_argument("--execute", action="store_true", help="reset: do it")
    p.add_argument("--export", action="store_true", help="reset: print the plan as CSV")
    p.add_argument("--to-offset", type=int, metavar="OFFSET")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-current", action="store_true",
                   help="reset: to the current start offset (the log end where there is none)")
    p.add_argument("--from-file", metavar="CSV", help="reset: the plan --export printed")
    p.set_defaults(run=run)


def _given(args, name: str) -> bool:
    return getattr(args, name) not in (None, False)


def check_args(args) -> None:
    """ShareGroupCommandOptions.checkArgs' rules and messages."""
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, "
                         "--delete, --reset-offsets, --delete-offsets.")
    action = actions[0]
    if action == "describe":
        if not args.group and not args.all_groups:
            raise UsageError("Option --describe takes one of these options: --all-groups, "
                             "--group")
        if sum(map(bool, (args.members, args.offsets, args.state is not None))) > 1:
            raise UsageError("Option --describe takes at most one of these options: "
                             "--members, --offsets, --state")
        if args.state:
            raise UsageError("Option --describe does not take a value for --state")
    elif args.members or args.offsets or args.verbose:
        raise UsageError("Options --members, --offsets and --verbose are only valid with "
                         "--describe")
    elif args.state is not None and action != "list":
        raise UsageError("Option --state is only valid with --describe or --list")
    if action == "delete":
        if not args.group and not args.all_groups:
            raise UsageError("Option --delete takes the options --group or --all-groups")
        if args.group and args.all_groups:
            raise UsageError("Option --delete takes either --group or --all-groups, not both.")
        if args.topic:
            raise UsageError("Option --delete does not take the option: --topic")
    if action == "delete_offsets" and (len(args.group) != 1 or not args.topic):
        raise UsageError("Option --delete-offsets takes the following options: --group, --topic")
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            raise UsageError("Option --reset-offsets only accepts one of --execute and --dry-run")
        if not args.dry_run and not args.execute:
            raise UsageError("Option --reset-offsets takes the option: --execute or --dry-run")
        if len(args.group) != 1:
            raise UsageError("Option --reset-offsets takes the option: --group")
        given = [s for s in SCENARIOS if _given(args, s)]
        if not args.topic and not args.all_topics and given != ["from_file"]:
            raise UsageError("Option --reset-offsets takes one of these options: --all-topics, "
                             "--topic")  # (both: --topic wins, as Kafka's)
        if not given:
            raise UsageError("Option --reset-offsets takes one of these options: "
                             + ", ".join("--" + s.replace("_", "-") for s in SCENARIOS))
        if len(given) > 1:
            first, second = (s.replace("_", "-") for s in given[:2])
            raise UsageError(f"Option --{first} can't be used with option --{second}")
    elif args.all_topics or args.dry_run or args.execute or args.export or any(
            _given(args, s) for s in SCENARIOS):
        raise UsageError("Options --all-topics, --dry-run, --execute, --export and the reset "
                         "scenarios are only valid with --reset-offsets")
    if args.group and args.all_groups:
        raise UsageError("Option --group can't be used with option --all-groups")
    if args.group and action == "list":
        raise UsageError("Option --group can't be used with option --list")
    if args.topic and action in ("list", "describe"):
        raise UsageError(f"Option --topic can't be used with option --{action}")
    if args.all_groups and action not in ("describe", "delete"):
        raise UsageError("Option --all-groups is only valid with --describe or --delete")


# Exit codes (as `kcoord consumer-groups`): 0 done; 1 a refusal or failure,
# whose message (Kafka's wording) is printed, or a bad command line.
_refused = Refusals()  # the refusals this run printed
print_error = _refused.print_error


def run(args) -> int:
    return run_command(args, "share", sys.modules[__name__], _refused, _prepare)


def _prepare(args) -> dict:
    check_args(args)
    states = parse_states(args.state) if args.list and args.state else []
    if args.reset_offsets and args.to_datetime:
        parse_datetime(args.to_datetime)  # a bad value is refused before any call
    return {"states": states}


# ---------------------------------------------------------------- --list
def parse_states(text: str) -> list[str]:
    return group_command.parse_states(text, STATES_BY_NAME, list(ops.SHARE_STATES))


def list_groups(admin: AdminClient, args, states: list[str]) -> None:
    listed = ops.list_share_groups(admin, states)
    if args.state is None:
        for g in listed:
            print(g["group_id"])
        return
    width = max([15] + [len(g["group_id"]) for g in listed])
    print(f"{'GROUP':<{width}} STATE")
    for g in listed:
        print(f"{g['group_id']:<{width}} {g['state']}")


# ------------------------------------------------------------ --describe
def describe(admin: AdminClient, args) -> None:
    """Every group is described before anything prints: one that is refused
    fails the whole command, as Kafka's tool."""
    names = sorted(set(g["group_id"] for g in ops.list_share_groups(admin))
                   if args.all_groups else set(args.group))
    groups = [ops.describe_share_group(admin, name) for name in names]
    if args.members:
        for group in groups:
            print_members(group, args.verbose)
    elif args.state is not None:
        for group in groups:
            print_state(group, args.verbose)
    else:
        offsets = [(group, ops.share_offsets(admin, group.group_id)) for group in groups]
        for group, rows in offsets:
            print_offsets(group, rows, args.verbose)


def print_empty_state(group: ShareGroup, rows: int) -> bool:
    """Kafka's maybePrintEmptyGroupState: whether the rows should print."""
    if group.state == "Dead":
        print_error(f"Share group '{group.group_id}' does not exist.")
    elif group.state == "Empty":
        print(f"\nShare group '{group.group_id}' has no active members.", file=sys.stderr)
    return group.state != "Dead" and rows > 0


def _text(value: int | None) -> str:
    return MISSING if value is None else str(value)


def print_offsets(group: ShareGroup, offsets: dict, verbose: bool) -> None:
    if not offsets:
        print(f"\nShare group '{group.group_id}' has no offset information.")
        return
    g = max(15, len(group.group_id))
    t = max([15] + [len(topic) for topic, _ in offsets])

    def line(cells: list[str]) -> str:
        out = [cells[0].ljust(g), cells[1].ljust(t), cells[2].ljust(10)]
        if verbose:
            out.append(cells[3].ljust(13))
        return " ".join(out + [cells[4].ljust(13), cells[5]])

    sys.stdout.write("\n" + line(["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH",
                                  "START-OFFSET", "LAG"]))
    for (topic, partition), o in sorted(offsets.items()):
        sys.stdout.write("\n" + line([group.group_id, topic, str(partition),
                                      _text(o.leader_epoch), _text(o.start), _text(o.lag)]))
    print()


def print_state(group: ShareGroup, verbose: bool) -> None:
    print_empty_state(group, 1)
    node_id, host, port = group.coordinator
    coordinator = f"{host}:{port}  ({node_id})"
    g, c = max(15, len(group.group_id)), max(25, len(coordinator))

    def line(cells: list[str]) -> str:
        out = [cells[0].ljust(g), cells[1].ljust(c), cells[2].ljust(15)]
        if verbose:
            out += [cells[3].ljust(12), cells[4].ljust(17)]
        return " ".join(out + [cells[5]])

    sys.stdout.write("\n" + line(["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH",
                                  "ASSIGNMENT-EPOCH", "#MEMBERS"]))
    sys.stdout.write("\n" + line([group.group_id, coordinator, group.state,
                                  str(group.group_epoch), str(group.assignment_epoch),
                                  str(len(group.members))]))
    print()


def assignment_string(pairs: list[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, p in pairs:
        by_topic.setdefault(topic, []).append(p)
    return ";".join(sorted(f"{t}:" + ",".join(str(p) for p in sorted(ps))
                           for t, ps in by_topic.items()))


def print_members(group: ShareGroup, verbose: bool) -> None:
    members = sorted(group.members, key=lambda m: m.member_id)
    if not print_empty_state(group, len(members)):
        return
    g = max(15, len(group.group_id))
    c = max([15] + [len(m.member_id) for m in members])
    h = max([15] + [len(m.host) for m in members])
    cl = max([15] + [len(m.client_id) for m in members])

    def line(cells: list[str]) -> str:
        out = [cells[0].ljust(g), cells[1].ljust(c), cells[2].ljust(h), cells[3].ljust(cl),
               cells[4].ljust(12)]
        if verbose:
            out.append(cells[5].ljust(13))
        return " ".join(out + [cells[6]])

    sys.stdout.write("\n" + line(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                  "MEMBER-EPOCH", "ASSIGNMENT"]))
    for m in members:
        sys.stdout.write("\n" + line([group.group_id, m.member_id, m.host, m.client_id,
                                      str(len(m.assignment)), str(m.epoch),
                                      assignment_string(m.assignment)]))
    print()


# -------------------------------------------------------------- --delete
def delete(admin: AdminClient, args) -> None:
    """ShareGroupService.deleteShareGroups: only listed, Empty share groups
    reach DeleteGroups; the others are refused with Kafka's messages."""
    states = {g["group_id"]: g["state"] for g in ops.list_share_groups(admin)}
    wanted = list(states) if args.all_groups else list(dict.fromkeys(args.group))
    failed: dict[str, str] = {}
    for gid in wanted:
        state = states.get(gid)
        if state is None:
            failed[gid] = f"Group '{gid}' is not a share group."
        elif state == "Dead":
            failed[gid] = f"Share group '{gid}' group state is DEAD."
        elif state != "Empty":
            failed[gid] = f"Share group '{gid}' is not EMPTY."
    rest = [gid for gid in wanted if gid not in failed]
    codes = delete_groups(admin, rest) if rest else {}
    failed.update({gid: message(code) for gid, code in codes.items() if code != Err.NONE})
    succeeded = [gid for gid in rest if gid not in failed]
    if not failed:
        print("Deletion of requested share groups (" + ", ".join(
            f"'{g}'" for g in succeeded) + ") was successful.")
        return
    print_error("Deletion of some share groups failed:")
    for gid, why in failed.items():
        print(f"* Group '{gid}' could not be deleted due to: {why}")
    if succeeded:
        print("\nThese share groups were deleted successfully: "
              + ", ".join(f"'{g}'" for g in succeeded))


# ------------------------------------------------------ --delete-offsets
TOP_LEVEL_REFUSALS = (Err.INVALID_GROUP_ID, Err.GROUP_ID_NOT_FOUND,
                      Err.GROUP_AUTHORIZATION_FAILED, Err.NON_EMPTY_GROUP)


def delete_offsets(admin: AdminClient, args) -> None:
    group_id = args.group[0]
    topics = sorted(set(args.topic))
    top, top_message, per_topic = ops.delete_share_offsets(admin, group_id, topics)
    if top in TOP_LEVEL_REFUSALS:
        print_error(top_message or message(top))
    elif top != Err.NONE:
        print_error(f"Encounter some unknown error: {top_message or message(top)}")
    elif any(code for code, _ in per_topic.values()):
        _refused.append("a topic was refused")  # shown in the table below, as Kafka's tool
    width = max([15] + [len(t) for t in topics])
    sys.stdout.write(f"\n{'TOPIC':<{width}} STATUS")
    for topic in topics:
        if top != Err.NONE:
            code, why = top, top_message
        else:
            code, why = per_topic.get(topic, (Err.UNKNOWN_TOPIC_OR_PARTITION, None))
        status = "Successful" if code == Err.NONE else f"Error: {why or message(code)}"
        sys.stdout.write(f"\n{topic:<{width}} {status}")
    print()


# ------------------------------------------------------- --reset-offsets
def reset_offsets(admin: AdminClient, args) -> None:
    """ShareGroupService.resetOffsets: a group with members is refused; a
    group that does not exist yet may be given start offsets."""
    group_id = args.group[0]
    try:
        state = ops.describe_share_group(admin, group_id).state
    except ShareGroupError as exc:
        if exc.code != Err.GROUP_ID_NOT_FOUND:
            raise
        state = "Dead"
    if state not in ("Empty", "Dead"):
        raise UsageError(f"Share group '{group_id}' is not empty.")
    plan = share_plan(admin, args, group_id)
    if args.execute and plan:
        errors = {tp: code for tp, code in ops.alter_share_offsets(admin, group_id, plan).items()
                  if code != Err.NONE}
        if errors:
            (topic, partition), code = next(iter(sorted(errors.items())))
            raise AdminError(f"altering the share offsets of group '{group_id}' failed: "
                             f"{topic}-{partition}: {message(code)}")
    if args.export:
        print_csv({group_id: plan}, with_group=False)
    else:
        print_plans({group_id: plan} if plan else {})


def share_plan(admin: AdminClient, args, group_id: str) -> dict[tuple[str, int], int]:
    """The new start offsets (Kafka's GroupOffsetsResetter for a share group)."""
    if args.from_file:
        wanted = read_plan(args.from_file, [group_id]).get(group_id)
        if wanted is None:
            print_error(f"No reset plan for group {group_id} found.")
            return {}
        return clamp(admin, wanted)
    if args.topic:
        partitions = sorted(set(topic_partitions(admin, args.topic)))
        check_partitions_exist(admin, partitions)
    else:  # --all-topics: every share partition with share state
        partitions = sorted(ops.share_offsets(admin, group_id))
    if not partitions:
        return {}
    if args.to_offset is not None:
        return clamp(admin, {tp: args.to_offset for tp in partitions})
    if args.to_current:  # the start offset where the group has one, else the log end
        starts = {tp: o.start for tp, o in ops.share_offsets(admin, group_id).items()
                  if o.start is not None}
        rest = [tp for tp in partitions if tp not in starts]
        plan = edge_offsets(admin, rest, False) if rest else {}
        return {**plan, **{tp: starts[tp] for tp in partitions if tp in starts}}
    if args.to_datetime:
        return by_timestamp(admin, partitions, parse_datetime(args.to_datetime))
    return edge_offsets(admin, partitions, args.to_earliest)


def check_partitions_exist(admin: AdminClient, partitions: list[tuple[str, int]]) -> None:
    """GroupOffsetsResetter.checkAllTopicPartitionsValid's first check."""
    known = admin.partitions(sorted({t for t, _ in partitions}))
    missing = [f"{t}-{p}" for t, p in partitions if p not in known.get(t, ())]
    if missing:
        raise AdminError(f'The partitions "{",".join(missing)}" do not exist')
