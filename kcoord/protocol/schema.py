"""kcoord's compact description of Kafka messages.

A message is a `Schema`: a name, a version range, the first flexible
version and a list of `Field`s.  Field types are the wire types of the
Kafka protocol:

    bool int8 int16 uint16 int32 uint32 int64 float64 uuid
    string bytes records         (records: nullable bytes of record batches)
    []T                          array of a primitive T
    []                           array of structs (give `fields=`)
    {}                           a single struct (give `fields=`)

Versions are written as Kafka writes them: "0+", "3-5", "4", "none".
Decoded messages are plain dicts keyed by the snake_case field names; a
field absent from a version decodes to its default, and a missing key
encodes as the default.
"""
from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Any

PRIMITIVES = {
    "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
    "uuid", "string", "bytes", "records",
}
ZERO_UUID = bytes(16)


@dataclass(frozen=True)
class Versions:
    low: int
    high: int  # inclusive; 10**9 means open-ended

    @classmethod
    def parse(cls, text: str) -> "Versions":
        text = text.strip()
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), 10**9)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


@dataclass
class Field:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tag: int | None
    default: Any
    fields: list["Field"] | None

    @property
    def element_type(self) -> str | None:
        if self.type.startswith("[]") and self.type != "[]":
            return self.type[2:]
        return None


def f(name: str, type: str, v: str = "0+", *, null: str = "none", tag: int | None = None,
      default: Any = ..., fields: list[Field] | None = None) -> Field:
    """Declare a field. `v` is the versions it exists in (for a tagged field,
    the versions in which it is tagged); `null` the versions where it may be null."""
    if type not in PRIMITIVES and type not in ("[]", "{}") and not (
            type.startswith("[]") and type[2:] in PRIMITIVES):
        raise ValueError(f"unknown type {type!r} for field {name}")
    if (type in ("[]", "{}")) != (fields is not None):
        raise ValueError(f"field {name}: struct types need fields=, others must not have them")
    if default is ...:
        default = _implicit_default(type)
    return Field(name, type, Versions.parse(v), Versions.parse(null), tag, default, fields)


def _implicit_default(type: str) -> Any:
    if type == "bool":
        return False
    if type in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return 0
    if type == "float64":
        return 0.0
    if type == "uuid":
        return ZERO_UUID
    if type == "string":
        return ""
    if type in ("bytes", "records"):
        return b""
    if type == "{}":
        return None  # built from the struct's own defaults on encode
    return ()  # arrays


@dataclass
class Schema:
    name: str
    versions: Versions
    flexible: Versions
    fields: list[Field] = dc_field(default_factory=list)

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible


def schema(name: str, versions: str, flexible: str, fields: list[Field]) -> Schema:
    return Schema(name, Versions.parse(versions), Versions.parse(flexible), fields)


@dataclass
class ApiDef:
    """A request/response pair of one API key."""
    key: int
    name: str
    request: Schema
    response: Schema

    @property
    def min_version(self) -> int:
        return self.request.versions.low

    @property
    def max_version(self) -> int:
        return self.request.versions.high


def api(key: int, name: str, versions: str, flexible: str, request: list[Field],
        response: list[Field]) -> ApiDef:
    return ApiDef(key, name,
                  schema(name + "Request", versions, flexible, request),
                  schema(name + "Response", versions, flexible, response))
