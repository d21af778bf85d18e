"""kcoord for testing Kafka applications: a real kcoord in the test process
(or a subprocess, or a local cluster), fault injection, virtual time and
inspection (docs/testing.md).  The pytest plugin is `kcoord.testing.plugin`.

Importing this package imports nothing of the server: `KafkaServer` loads it
on first use, so a test collection stays light."""
from __future__ import annotations

__all__ = ["KafkaServer", "TEST_DEFAULTS"]


def __getattr__(name: str):
    if name in __all__:
        from . import server
        return getattr(server, name)
    raise AttributeError(name)
