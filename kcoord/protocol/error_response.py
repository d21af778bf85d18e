"""The error answer of any request, derived from the response schema.

Kafka's `AbstractRequest.getErrorResponse` (franz-go: kmsg's `ResponseKind`):
the response carries the error code where its schema has one (top level, and
per item for APIs that answer per topic, partition, group, ...), echoes the
keys that name each item, and leaves every other field out, so the encoder
writes the schema's default for it. Only values Kafka sets explicitly in its
error answers (base_offset -1, node_id -1, ...) are listed below.

Use it from protocol/api: `error_response(key, version, request, code)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .messages import APIS
from .schema import Field

__all__ = ["error_response", "error_item", "response_defaults", "ITEMS"]

ERROR_FIELDS = ("error_code", "partition_error_code")


@dataclass(frozen=True)
class Items:
    """Request array `request` answered item for item in response array
    `response`. `keys`: (response field, request field) pairs copied from each
    item, or one response field name when the request array holds bare values
    (group ids, partition indexes). `inner`: the nested arrays answered the same
    way. `fields`: values Kafka sets explicitly in an error item.
    `versions`: the versions (inclusive) in which Kafka echoes these items."""
    request: str
    response: str
    keys: tuple[tuple[str, str], ...] | str
    inner: tuple["Items", ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    versions: tuple[int, int] = (0, 10**9)


def _same(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple((n, n) for n in names)


_NO_NODE = {"node_id": -1, "host": "", "port": -1}
_PARTITION_INDEX = _same("partition_index")
_TOPIC = _same("name")

# the share-state RPCs (broker to share coordinator) answer per topic id and partition
_SHARE_STATE = (Items("topics", "results", _same("topic_id"), (
    Items("partitions", "partitions", _same("partition")),)),)

# The items each API answers one by one (Kafka's getErrorResponse per request
# class); an API not listed answers with its top-level fields alone.
ITEMS: dict[str, tuple[Items, ...]] = {
    "Produce": (Items("topic_data", "responses", _TOPIC, (
        Items("partition_data", "partition_responses", _same("index"),
              fields={"base_offset": -1}),)),),
    "Fetch": (Items("topics", "responses", _same("topic", "topic_id"), (
        Items("partitions", "partitions", (("partition_index", "partition"),),
              fields={"high_watermark": -1, "records": b"", "aborted_transactions": None}),)),),
    "ListOffsets": (Items("topics", "topics", _TOPIC, (
        Items("partitions", "partitions", _PARTITION_INDEX),)),),
    "Metadata": (Items("topics", "topics", _same("name", "topic_id")),),
    "OffsetCommit": (Items("topics", "topics", _TOPIC, (
        Items("partitions", "partitions", _PARTITION_INDEX),)),),
    "OffsetFetch": (
        Items("topics", "topics", _TOPIC, (
            Items("partition_indexes", "partitions", "partition_index",
                  fields={"committed_offset": -1}),), versions=(0, 1)),
        Items("groups", "groups", _same("group_id"), versions=(8, 10**9)),
    ),
    "FindCoordinator": (Items("coordinator_keys", "coordinators", "key", fields=_NO_NODE),),
    "DescribeGroups": (Items("groups", "groups", "group_id"),),
    "DeleteGroups": (Items("groups_names", "results", "group_id"),),
    "CreateTopics": (Items("topics", "topics", _TOPIC),),
    "DeleteTopics": (Items("topic_names", "responses", "name"),
                     Items("topics", "responses", _same("name", "topic_id"))),
    "DeleteRecords": (Items("topics", "topics", _TOPIC, (
        Items("partitions", "partitions", _PARTITION_INDEX, fields={"low_watermark": -1}),)),),
    "OffsetForLeaderEpoch": (Items("topics", "topics", (("topic", "topic"),), (
        Items("partitions", "partitions", (("partition", "partition"),)),)),),
    "AddPartitionsToTxn": (Items("v3_and_below_topics", "results_by_topic_v3_and_below", _TOPIC, (
        Items("partitions", "results_by_partition", "partition_index"),), versions=(0, 3)),),
    "WriteTxnMarkers": (Items("markers", "markers", _same("producer_id"), (
        Items("topics", "topics", _TOPIC, (
            Items("partition_indexes", "partitions", "partition_index"),)),)),),
    "TxnOffsetCommit": (Items("topics", "topics", _TOPIC, (
        Items("partitions", "partitions", _PARTITION_INDEX),)),),
    "CreateAcls": (Items("creations", "results", ()),),
    "DeleteAcls": (Items("filters", "filter_results", ()),),
    "DescribeConfigs": (Items("resources", "results", _same("resource_type", "resource_name")),),
    "AlterConfigs": (Items("resources", "responses", _same("resource_type", "resource_name")),),
    "IncrementalAlterConfigs": (
        Items("resources", "responses", _same("resource_type", "resource_name")),),
    "CreatePartitions": (Items("topics", "results", _TOPIC),),
    "ElectLeaders": (Items("topic_partitions", "replica_election_results", (("topic", "topic"),), (
        Items("partitions", "partition_result", "partition_id"),)),),
    "DescribeUserScramCredentials": (Items("users", "results", (("user", "name"),)),),
    "AlterUserScramCredentials": (Items("deletions", "results", (("user", "name"),)),
                                  Items("upsertions", "results", (("user", "name"),))),
    "DescribeProducers": (Items("topics", "topics", _TOPIC, (
        Items("partition_indexes", "partitions", "partition_index"),)),),
    "DescribeTransactions": (Items("transactional_ids", "transaction_states", "transactional_id"),),
    "ConsumerGroupDescribe": (Items("group_ids", "groups", "group_id"),),
    "ShareGroupDescribe": (Items("group_ids", "groups", "group_id"),),
    "DescribeShareGroupOffsets": (Items("groups", "groups", _same("group_id")),),
    "DescribeTopicPartitions": (Items("topics", "topics", _TOPIC),),
    **{name: _SHARE_STATE for name in (
        "InitializeShareGroupState", "ReadShareGroupState", "WriteShareGroupState",
        "DeleteShareGroupState", "ReadShareGroupStateSummary")},
}

# Top-level values Kafka sets explicitly in an error answer.
TOP_FIELDS: dict[str, dict[str, Any]] = {
    "FindCoordinator": _NO_NODE,
    "InitProducerId": {"producer_id": -1, "producer_epoch": -1},
    "DescribeClientQuotas": {"entries": None},
}


def error_response(key: int, version: int, request: dict, code: int,
                   message: str | None = None) -> dict:
    """The response to `request` (API `key`, `version`) that fails it with
    `code`: every error code of the response set to `code` (top level where
    the schema has one, and each item the request names where the API answers
    per item), `message` in the error_message fields when given, the items'
    names echoed, and nothing else: the encoder fills the rest from the
    schema's defaults. The same as Kafka's getErrorResponse for each API.

    For a partial refusal (some topics denied) answer the denied items alone:
    `error_response(key, version, {**request, "topics": denied}, code)["topics"]`.
    """
    api = APIS[key]
    out: dict[str, Any] = {"throttle_time_ms": 0}
    top = _present(api.response.fields, version)
    _set_errors(out, top, code, message)
    out.update((k, v) for k, v in TOP_FIELDS.get(api.name, {}).items() if k in top)
    for items in ITEMS.get(api.name, ()):
        _answer_items(out, api.response.fields, items, request, version, code, message)
    return out


def error_item(key: int, version: int, path: tuple[str, ...], item: Any, code: int,
               message: str | None = None) -> dict:
    """The answer to one item of a request that otherwise succeeds (a Produce
    partition the broker refuses): `path` names the request arrays down to the
    item, e.g. ("topic_data", "partition_data"); the item as error_response
    would answer it."""
    api = APIS[key]
    fields, chain = api.response.fields, ITEMS[api.name]
    for name in path[:-1]:
        items = next(i for i in chain if i.request == name)
        fields = _present(fields, version)[items.response].fields
        chain = items.inner
    holder: dict[str, Any] = {}
    items = next(i for i in chain if i.request == path[-1])
    _answer_items(holder, fields, items, {path[-1]: (item,)}, version, code, message)
    return holder[items.response][0]


def response_defaults(key: int, version: int | None = None) -> dict:
    """Every top-level field of the response at `version` (default: the
    newest) set to the schema's default, arrays as fresh empty lists: the
    answer of a version-free core, which sets the fields it knows on top."""
    return {name: [] if isinstance(value, tuple) else value
            for name, value in _defaults(key, version)}


@lru_cache(maxsize=None)
def _defaults(key: int, version: int | None) -> tuple[tuple[str, Any], ...]:
    response = APIS[key].response
    if version is None:
        version = response.versions.high
    return tuple((fd.name, fd.default) for fd in response.fields if version in fd.versions)


def _present(fields: list[Field], version: int) -> dict[str, Field]:
    return {fd.name: fd for fd in fields if version in fd.versions}


def _set_errors(out: dict, present: dict[str, Field], code: int, message: str | None) -> None:
    for name in ERROR_FIELDS:
        if name in present:
            out[name] = code
    if message is not None and "error_message" in present:
        out["error_message"] = message


def _answer_items(out: dict, fields: list[Field], items: Items, request: dict, version: int,
                  code: int, message: str | None) -> None:
    if not items.versions[0] <= version <= items.versions[1]:
        return
    resp_field = _present(fields, version).get(items.response)
    asked = request.get(items.request)
    if resp_field is None or resp_field.fields is None or asked is None:
        return
    item_fields = _present(resp_field.fields, version)
    answered = out.setdefault(items.response, [])
    for element in asked:
        entry: dict[str, Any] = {}
        if isinstance(items.keys, str):
            entry[items.keys] = element
        else:
            for resp_key, req_key in items.keys:
                if resp_key in item_fields and req_key in element:
                    entry[resp_key] = element[req_key]
        _set_errors(entry, item_fields, code, message)
        entry.update((k, v) for k, v in items.fields.items() if k in item_fields)
        for inner in items.inner:
            _answer_items(entry, resp_field.fields, inner, element, version, code, message)
        answered.append(entry)
