"""What a test reads off a request and builds for it, without the server:
the groups, topics and partitions a request names (fault filters), a
whole-request error answer in the response's own schema (`fail`), and the
error code an answer carries (the request log)."""
from __future__ import annotations

from ..protocol.api import API_KEYS, APIS, response_codec
from ..protocol.errors import Err

# request field names that hold a topic's name or a partition's index in an element
_TOPIC_KEYS = ("name", "topic")
_PARTITION_KEYS = ("partition_index", "partition", "index")
# response array -> the request arrays it answers element by element
_ANSWERS = {
    "responses": ("topic_data", "topics"),
    "partition_responses": ("partition_data", "partitions"),
    "coordinators": ("coordinator_keys",),
    "results": ("topics", "groups", "transactions", "resources"),
    "results_by_topic_v3_and_below": ("v3_and_below_topics",),
    "results_by_transaction": ("transactions",),
    "results_by_partition": ("partitions",),
    "groups": ("groups", "group_ids"),
}
# a response element built for a request element that is a plain string
_STRING_IDS = ("key", "group_id", "name", "transactional_id")


def api_key(api) -> int:
    """An API by name ("OffsetCommit") or key (8)."""
    if isinstance(api, int):
        if api not in APIS:
            raise ValueError(f"unknown API key {api}")
        return api
    try:
        return API_KEYS[api]
    except KeyError:
        raise ValueError(f"unknown API {api!r} (names as Kafka's: {', '.join(sorted(API_KEYS))})") \
            from None


def error_code(error) -> int:
    """An error by name ("NOT_COORDINATOR") or code (16)."""
    if isinstance(error, int):
        return int(Err(error))
    try:
        return int(Err[error])
    except KeyError:
        raise ValueError(f"unknown Kafka error {error!r}") from None


# ----------------------------------------------------------- what a request names
def groups_of(key: int, req: dict) -> set[str]:
    out: set[str] = set()
    gid = req.get("group_id")
    if isinstance(gid, str):
        out.add(gid)
    for item in req.get("groups") or ():
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, dict) and isinstance(item.get("group_id"), str):
            out.add(item["group_id"])
    for item in req.get("group_ids") or ():
        out.add(item)
    if key == 10:  # FindCoordinator: the group keys (key type 0)
        if not req.get("key_type"):
            if req.get("key"):
                out.add(req["key"])
            out.update(req.get("coordinator_keys") or ())
    return out


def partitions_of(req: dict) -> set[tuple[str, int | None]]:
    """(topic, partition) pairs a request names; (topic, None) for a topic
    without partitions; up to two levels deep (OffsetFetch's groups)."""
    out: set[tuple[str, int | None]] = set()

    def topics(items) -> None:
        for t in items or ():
            if isinstance(t, str):
                out.add((t, None))
                continue
            if not isinstance(t, dict):
                continue
            name = next((t[k] for k in _TOPIC_KEYS if isinstance(t.get(k), str)), None)
            if name is None:
                continue
            parts = None
            for value in t.values():
                if isinstance(value, (list, tuple)) and value:
                    first = value[0]
                    if isinstance(first, int):
                        parts = list(value)
                    elif isinstance(first, dict):
                        parts = [p.get(k) for p in value for k in _PARTITION_KEYS if k in p][:len(value)]
                    if parts:
                        break
            if parts:
                out.update((name, p) for p in parts)
            else:
                out.add((name, None))

    for field in ("topics", "topic_data", "v3_and_below_topics"):
        topics(req.get(field))
    for g in req.get("groups") or ():
        if isinstance(g, dict):
            topics(g.get("topics"))
    return out


# ----------------------------------------------------------- a whole-request error
def error_response(key: int, version: int, req: dict, code: int) -> dict:
    """The answer of `key` v`version` to `req` with `code` wherever the
    response has an error code, element by element for the topics,
    partitions, groups or keys the request named."""
    return _fill(APIS[key].response.fields, version, req, code)


def _fill(fields, version: int, source, code: int) -> dict:
    out: dict = {}
    for f in fields:
        if version not in f.versions:
            continue
        if f.name == "error_code":
            out["error_code"] = code
        elif f.type == "[]":  # an array of structs
            items = _answered(f.name, source)
            out[f.name] = [_fill(f.fields, version, item, code) for item in items]
        elif f.fields is None and f.element_type is None:
            value = _copied(f, source)
            if value is not None:
                out[f.name] = value
    return out


def _answered(name: str, source) -> list:
    if not isinstance(source, dict):
        return []
    for field in (name,) + _ANSWERS.get(name, ()):
        items = source.get(field)
        if isinstance(items, (list, tuple)) and items:
            return list(items)
    return []


def _copied(f, source):
    if isinstance(source, str):
        return source if f.name in _STRING_IDS and f.type == "string" else None
    if not isinstance(source, dict):
        return None
    names = [f.name]
    if f.name in _PARTITION_KEYS:
        names += _PARTITION_KEYS
    elif f.name in _TOPIC_KEYS:
        names += _TOPIC_KEYS
    for n in names:
        value = source.get(n)
        if value is not None and not isinstance(value, (list, tuple, dict)):
            if f.type == "string" and not isinstance(value, str):
                continue
            if f.type.startswith(("int", "uint")) and not isinstance(value, int):
                continue
            return value
    return None


# ----------------------------------------------------------- an answer's error
def answer_error(key: int, version: int, response) -> int:
    """The answer's top-level error code, else its first non-zero nested one."""
    if response is None:
        return 0
    if isinstance(response, (bytes, bytearray)):
        try:
            response, _ = response_codec(key, version)[1](bytes(response), 0)
        except Exception:
            return 0
    if not isinstance(response, dict):
        return 0
    top = response.get("error_code")
    if top:
        return int(top)
    return _first_error(response)


def _first_error(value) -> int:
    if isinstance(value, dict):
        code = value.get("error_code")
        if code:
            return int(code)
        for v in value.values():
            if isinstance(v, (list, tuple, dict)):
                found = _first_error(v)
                if found:
                    return found
    elif isinstance(value, (list, tuple)):
        for v in value:
            found = _first_error(v)
            if found:
                return found
    return 0
