"""kcoord's own definitions of every Kafka message it speaks.

Each module declares ApiDefs (request/response pairs) with `api(...)` and
standalone Schemas (embedded and record formats) with `schema(...)`; this
package collects them.  Written from the protocol facts of Kafka's message
schemas; cross-checked against kafka-python's and kio's in tests.
"""
from __future__ import annotations

import importlib

from ..schema import ApiDef, Schema

_MODULES = ["api_versions", "metadata", "topics", "produce_fetch", "group", "offsets",
            "admin_groups", "consumer_group", "consumer_protocol", "coordinator_records",
            "producer_id", "admin_configs", "admin_cluster", "security", "replication",
            "transactions", "share_state", "share_fetch", "share_group"]


def _collect():
    apis: dict[int, ApiDef] = {}
    schemas: dict[str, Schema] = {}
    for name in _MODULES:
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue  # not written yet
            raise
        for value in vars(mod).values():
            if isinstance(value, ApiDef):
                if value.key in apis:
                    raise ValueError(f"API key {value.key} defined twice")
                apis[value.key] = value
            elif isinstance(value, Schema):
                schemas[value.name] = value
    return apis, schemas


APIS, SCHEMAS = _collect()
