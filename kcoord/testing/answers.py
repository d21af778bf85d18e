"""What a test reads off a request, without the server: the groups, topics
and partitions a request names (fault filters) and the error code an answer
carries (the request log).  The error answer `fail` sends is the server's
own, protocol.api.error_response."""
from __future__ import annotations

from ..protocol.api import API_KEYS, APIS, response_codec
from ..protocol.errors import Err

# request field names that hold a topic's name or a partition's index in an element
_TOPIC_KEYS = ("name", "topic")
_PARTITION_KEYS = ("partition_index", "partition", "index")


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
