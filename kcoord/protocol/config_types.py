"""Typed config keys as Kafka's ConfigDef has them, and the DescribeConfigs
ConfigType and ConfigSource ids: parse, check, render.

Shared by the topic, group and broker config catalogues.  A key parses a
string the way Kafka's ConfigDef.parseType does (booleans case-insensitive,
lists split on commas with blanks dropped, numbers in their type's range)
and renders a value as DescribeConfigs shows it (a list joined with ","
and no spaces, a boolean as true/false).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# DescribeConfigs ConfigType ids
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)

# DescribeConfigs ConfigSource ids
SOURCE_UNKNOWN = 0
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_GROUP = 8

_INT_RANGES = {INT: (-2**31, 2**31 - 1), SHORT: (-2**15, 2**15 - 1), LONG: (-2**63, 2**63 - 1)}
LONG_MAX = 2**63 - 1


class ConfigError(Exception):
    """A config refused with a Kafka error code (INVALID_CONFIG unless told)."""

    def __init__(self, message: str, code: int = 40) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: int
    default: Any                      # parsed value; None when Kafka's default is null
    doc: str = ""
    low: float | None = None          # inclusive bounds for numbers
    high: float | None = None
    choices: tuple[str, ...] | None = None  # for STRING, and for each item of a LIST
    check: Callable[[Any], str | None] | None = None  # extra rule -> problem or None

    @property
    def sensitive(self) -> bool:
        return self.type == PASSWORD

    def parse(self, raw: Any) -> Any:
        """The typed value of `raw` (a string, or already typed); ConfigError
        naming the key and the rule when it is not valid."""
        value = self._convert(raw)
        problem = self._problem(value)
        if problem:
            raise ConfigError(f"Invalid value {raw} for configuration {self.name}: {problem}")
        return value

    def _convert(self, raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        text = raw.strip()
        try:
            if self.type == BOOLEAN:
                if text.lower() not in ("true", "false"):
                    raise ValueError("Expected value to be either true or false")
                return text.lower() == "true"
            if self.type in _INT_RANGES:
                return int(text)
            if self.type == DOUBLE:
                return float(text)
            if self.type == LIST:
                return [item.strip() for item in text.split(",") if item.strip()]
        except ValueError as exc:
            detail = str(exc) if self.type == BOOLEAN else f"Not a number of type {_TYPE_NAMES[self.type]}"
            raise ConfigError(f"Invalid value {raw} for configuration {self.name}: {detail}") \
                from None
        return raw if self.type == PASSWORD else text

    def _problem(self, value: Any) -> str | None:
        if value is None:
            return None
        if self.type in _INT_RANGES:
            lo, hi = _INT_RANGES[self.type]
            if not lo <= value <= hi:
                return f"Not a number of type {_TYPE_NAMES[self.type]}"
        if self.low is not None and value < self.low:
            return f"Value must be at least {self.low:g}" if self.high is None else \
                f"Value must be in [{self.low:g}, {self.high:g}]"
        if self.high is not None and value > self.high:
            return f"Value must be no more than {self.high:g}" if self.low is None else \
                f"Value must be in [{self.low:g}, {self.high:g}]"
        if self.choices is not None:
            items = value if self.type == LIST else [value]
            lowered = {c.lower(): c for c in self.choices}
            for item in items:
                if str(item).lower() not in lowered:
                    return f"String must be one of: {', '.join(self.choices)}"
        if self.check is not None:
            return self.check(value)
        return None

    def render(self, value: Any) -> str | None:
        if value is None:
            return None
        if self.type == BOOLEAN:
            return "true" if value else "false"
        if self.type == LIST:
            return ",".join(value)
        if self.type == DOUBLE:
            return repr(float(value))
        return str(value)


_TYPE_NAMES = {BOOLEAN: "boolean", STRING: "string", INT: "int", SHORT: "short", LONG: "long",
               DOUBLE: "double", LIST: "list", CLASS: "class", PASSWORD: "password"}
