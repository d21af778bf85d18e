"""Registry of APIs and cached generated codecs.

Codecs are generated on first use of an (api, version) and cached, so
start-up stays fast; `warm_up()` generates all of them ahead of time.  A
compiled build (`make native`) brings the hot ones written ahead of time
(codec_source.py, as _generated_codecs) and compiled: used only when that
module runs compiled (as a .py it would be no faster, and could be stale).
"""
from __future__ import annotations

import importlib
import importlib.util
from functools import lru_cache
from typing import Callable

from .codegen import build_codec
from .error_response import error_item, error_response, response_defaults
from .messages import APIS, SCHEMAS

__all__ = ["APIS", "SCHEMAS", "API_KEYS", "AUTH_OPS_NOT_REQUESTED", "request_codec",
           "response_codec", "schema_codec", "error_response", "error_item", "response_defaults",
           "warm_up", "is_flexible", "serves"]

API_KEYS: dict[str, int] = {api.name: key for key, api in APIS.items()}  # "JoinGroup" -> 11

# *AuthorizedOperations when the request did not ask for them (INT32_MIN)
AUTH_OPS_NOT_REQUESTED = -(2**31)


def _ahead_of_time() -> dict:
    """(schema name, version) -> (strict encoder, bytes decoder), compiled."""
    name = __package__ + "._generated_codecs"
    spec = importlib.util.find_spec(name)
    if spec is None or str(spec.origin).endswith(".py"):
        return {}  # not built, KCOORD_PURE_PYTHON=1, or a build older than the sources
    return importlib.import_module(name).CODECS


_AHEAD = _ahead_of_time()


@lru_cache(maxsize=None)
def _codec(sch_name: str, key: int | None, is_request: bool, version: int):
    if key is None:
        sch = SCHEMAS[sch_name]
    else:
        api = APIS[key]
        sch = api.request if is_request else api.response
    return build_codec(sch, version, _AHEAD.get((sch.name, version)))


def request_codec(key: int, version: int) -> tuple[Callable, Callable]:
    return _codec("", key, True, version)


def response_codec(key: int, version: int) -> tuple[Callable, Callable]:
    return _codec("", key, False, version)


def schema_codec(name: str, version: int) -> tuple[Callable, Callable]:
    """Codec of a standalone schema (embedded protocol, coordinator records)."""
    return _codec(name, None, False, version)


def is_flexible(key: int, version: int) -> bool:
    return APIS[key].request.is_flexible(version)


def warm_up() -> None:
    for key, api in APIS.items():
        for v in range(api.min_version, api.max_version + 1):
            request_codec(key, v)
            response_codec(key, v)
    for name, sch in SCHEMAS.items():
        for v in range(sch.versions.low, sch.versions.high + 1):
            schema_codec(name, v)


def serves(api: str | int, *, min_version: int | None = None, max_version: int | None = None,
           pure: bool = False, hidden: bool = False):
    """Mark a handler method as the one serving `api` (its name, as in
    Kafka's schemas, or its key); see Dispatcher.register_handlers.
    hidden: served (with an error) but not advertised in ApiVersions."""
    key = API_KEYS[api] if isinstance(api, str) else api

    def mark(fn):
        fn.serves = (key, min_version, max_version, pure, hidden)
        return fn
    return mark
