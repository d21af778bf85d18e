"""Registers the operator commands (`kcoord consumer-groups`, `share-groups`,
`topics`, `configs`) on the `kcoord` parser; each sets `run` to its entry point."""
from __future__ import annotations


def add_parsers(sub) -> None:
    from . import configs, consumer_groups, share_groups, topics, transactions
    consumer_groups.add_parser(sub)
    share_groups.add_parser(sub)
    topics.add_parser(sub)
    configs.add_parser(sub)
    transactions.add_parser(sub)
    # security: TLS/SASL connections, the users entity of configs, `kcoord acls`
    from . import client, security_commands
    security_commands.install(client, configs)
    security_commands.add_parser(sub)


def version() -> str:
    try:
        from importlib.metadata import version as dist_version
        return dist_version("kcoord")
    except Exception:  # not installed (run from a checkout)
        return "0.1.0"
