"""What `kcoord consumer-groups` and `kcoord share-groups` share: the run of a
command (its checks, one admin connection, the action the flags name, and
Kafka's messages and exit codes for a refusal or failure) and the --state
list parser."""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Callable, Mapping

from .client import AdminClient, AdminError, UsageError, read_properties

# each flag and the tool module's function it runs (the last runs when no other flag is given)
ACTIONS = {"list": "list_groups", "describe": "describe", "delete": "delete",
           "reset_offsets": "reset_offsets", "delete_offsets": "delete_offsets"}


class Refusals(list):
    """The refusals a run printed: any makes the command exit 1 (Kafka's tool
    exits 0, so scripts could not tell)."""

    def print_error(self, msg: str) -> None:
        """Kafka's printError."""
        self.append(msg)
        print(f"\nError: {msg}")


def run_command(args, tool: str, module: ModuleType, refused: Refusals,
                prepare: Callable[[Any], dict]) -> int:
    """`prepare(args)` checks the command line (UsageError: usage, exit 1) and
    returns the keyword arguments of the list action; then `module`'s
    function for the first flag of ACTIONS given runs."""
    refused.clear()
    try:
        list_kwargs = prepare(args)
    except UsageError as exc:
        print(f"{exc}", file=sys.stderr)
        print(f"Usage: kcoord {tool}-groups --help", file=sys.stderr)
        return 1
    flags = list(ACTIONS)
    name = next((f for f in flags[:-1] if getattr(args, f)), flags[-1])
    action = getattr(module, ACTIONS[name])
    try:
        with AdminClient(args.bootstrap_server, read_properties(args.command_config),
                         args.timeout) as admin:
            action(admin, args, **(list_kwargs if name == "list" else {}))
    except UsageError as exc:  # the GroupCommand's IllegalArgumentException: stderr
        print(f"{exc}", file=sys.stderr)
        return 1
    except AdminError as exc:
        print(f"\nError: Executing {tool} group command failed due to {exc}")
        return 1
    return 1 if refused else 0


def parse_states(text: str, by_name: Mapping[str, str], valid: list[str]) -> list[str]:
    """A --state list (any case) as the state names; UsageError naming `valid`."""
    out = []
    for item in text.split(","):
        state = by_name.get(item.strip().lower())
        if state is None:
            raise UsageError(f"Invalid state list '{text}'. Valid states are: "
                             + ", ".join(valid))
        out.append(state)
    return out
