"""The BROKER_LOGGER config resource (type 8): this node's loggers and
their levels, as `kafka-configs --entity-type broker-loggers` reads and
sets them.  Changes apply at once and, as in Kafka, are not kept across a
restart.  Kafka's level names map onto Python's (WARN = WARNING, FATAL =
CRITICAL, TRACE = 5, OFF = above CRITICAL)."""
from __future__ import annotations

import logging

from ..log import step_trace
from ..protocol.config_types import STRING, ConfigError
from ..protocol.errors import Err

SOURCE_BROKER_LOGGER = 6
ROOT = "root"
LEVELS = {"OFF": logging.CRITICAL + 10, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR,
          "WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": 5}
NAMES = {value: name for name, value in LEVELS.items()}


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


def _known() -> list[str]:
    names = [n for n, lg in logging.root.manager.loggerDict.items()
             if isinstance(lg, logging.Logger) and n.startswith("kcoord")]
    return [ROOT] + sorted(names)


def _level_name(level: int) -> str:
    return NAMES.get(level) or logging.getLevelName(level)


class BrokerLoggerResource:
    incremental_only = True  # legacy AlterConfigs does not know this resource type
    node_local = True        # a node's own loggers: nothing to replicate

    def __init__(self, node_id: int) -> None:
        self.node_id = str(node_id)
        self.explicit: dict[str, str] = {}  # loggers whose level was set through the API

    def check_name(self, name: str,
                   altering: bool = False) -> None:  # noqa: ARG002 (the interface's keyword)
        if name != self.node_id:
            raise ConfigError(f"Unexpected broker id, expected {self.node_id} but received "
                              f"{name!r}", Err.INVALID_REQUEST)

    def entries(self, _name: str) -> list[dict]:
        out = []
        for logger in _known():
            level = _level_name(_logger(logger).getEffectiveLevel())
            out.append({"name": logger, "value": level, "read_only": False,
                        "config_source": SOURCE_BROKER_LOGGER, "is_sensitive": False,
                        "synonyms": [], "config_type": STRING, "documentation": None})
        return out

    def current(self, _name: str) -> dict[str, str]:
        return dict(self.explicit)

    def key_type(self, _name: str, _key: str) -> int | None:
        raise ConfigError("APPEND and SUBTRACT are not supported for broker loggers",
                          Err.INVALID_REQUEST)

    def effective_list(self, _name: str, _key: str) -> list[str]:
        return []

    def validate(self, _name: str, configs: dict) -> dict[str, str]:
        known = set(_known())
        if ROOT in self.explicit and ROOT not in configs:
            raise ConfigError("Removing the log level of the root logger is not allowed",
                              Err.INVALID_REQUEST)
        out = {}
        for logger, level in configs.items():
            if logger not in known:
                raise ConfigError(f"Logger {logger} does not exist!", Err.INVALID_CONFIG)
            if level is None or level.strip().upper() not in LEVELS:
                raise ConfigError(f"Cannot set the log level of {logger} to {level} as it is "
                                  f"not a supported log level. Valid log levels are "
                                  f"{', '.join(LEVELS)}", Err.INVALID_CONFIG)
            out[logger] = level.strip().upper()
        return out

    def replace(self, _name: str, configs: dict[str, str]) -> None:
        for logger in set(self.explicit) - set(configs):
            _logger(logger).setLevel(logging.NOTSET)  # back to its parent's level
        for logger, level in configs.items():
            _logger(logger).setLevel(LEVELS[level])
        self.explicit = dict(configs)
        step_trace.refresh()
