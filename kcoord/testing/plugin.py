"""The pytest plugin (entry point pytest11 `kcoord`; or `pytest -p kcoord.testing.plugin`).

Fixtures:
- `kafka`: a KafkaServer shared by the session (one per distinct
  `kafka_config`), its faults, caps and request log reset for each test;
  `kafka.topic_name()`, `kafka.group_name()`, `kafka.create_topic()` give
  names no other test uses.
- `kafka_server_factory`: `factory(config=None, **KafkaServer kwargs)` -> a
  started server of the test's own, stopped when the test ends.

Config: the `kafka_config` ini option (one `key=value` a line) and the
marker `@pytest.mark.kafka_config({...}, virtual_time=False, nodes=1)`.
A failing test's report gets the server's log tail and request log.

Collection imports only this module: the server loads when a fixture is used.
"""
from __future__ import annotations

import pytest

_SERVERS_ATTR = "_kcoord_servers"


def pytest_addoption(parser) -> None:
    parser.addini("kafka_config", "server config of the kafka fixture: one key=value a line",
                  type="linelist", default=[])


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "kafka_config(config=None, *, virtual_time=False, nodes=1): the kcoord "
                   "server the `kafka` fixture gives this test (shared with tests asking the same)")


def _ini_config(pytestconfig) -> dict:
    out = {}
    for line in pytestconfig.getini("kafka_config"):
        key, sep, value = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"kafka_config: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


class _SharedServers:
    """The session's servers, one per (config, virtual_time, nodes)."""

    def __init__(self) -> None:
        self.servers: dict = {}

    def get(self, config: dict, virtual_time: bool, nodes: int):
        key = (tuple(sorted((k, str(v)) for k, v in config.items())), virtual_time, nodes)
        server = self.servers.get(key)
        if server is None:
            from kcoord.testing import KafkaServer
            server = KafkaServer(config, virtual_time=virtual_time, nodes=nodes).start()
            self.servers[key] = server
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()


@pytest.fixture(scope="session")
def _kcoord_shared_servers():
    shared = _SharedServers()
    yield shared
    shared.stop_all()


def _remember(request, server) -> None:
    servers = getattr(request.node, _SERVERS_ATTR, None)
    if servers is None:
        servers = []
        setattr(request.node, _SERVERS_ATTR, servers)
    servers.append(server)


@pytest.fixture
def kafka(request, pytestconfig, _kcoord_shared_servers):
    """A running kcoord (kcoord.testing.KafkaServer) with clean faults and request log."""
    config = _ini_config(pytestconfig)
    virtual_time, nodes = False, 1
    marker = request.node.get_closest_marker("kafka_config")
    if marker is not None:
        if marker.args:
            config.update(marker.args[0] or {})
        config.update(marker.kwargs.get("config") or {})
        virtual_time = bool(marker.kwargs.get("virtual_time", False))
        nodes = int(marker.kwargs.get("nodes", 1))
    server = _kcoord_shared_servers.get(config, virtual_time, nodes)
    # a node a previous test stopped or killed comes back
    for node in server._nodes:
        if not node.running:
            node.start(wait_loaded=nodes == 1)
    server.reset()
    _remember(request, server)
    yield server
    server.reset()  # parked requests go through before the next test


@pytest.fixture
def kafka_server_factory(request, pytestconfig):
    """factory(config=None, *, nodes=1, in_process=True, data_dir=None,
    virtual_time=False) -> a started KafkaServer, stopped after the test."""
    from kcoord.testing import KafkaServer
    made = []

    def factory(config: dict | None = None, **kwargs):
        server = KafkaServer({**_ini_config(pytestconfig), **(config or {})}, **kwargs)
        made.append(server)
        _remember(request, server)
        return server.start()
    yield factory
    for server in made:
        server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ARG001 (pytest matches hook arguments by name)
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for server in getattr(item, _SERVERS_ATTR, ()):
        try:
            report.sections.append((f"kcoord log tail {server.bootstrap}", server.log_tail()))
            report.sections.append((f"kcoord requests {server.bootstrap}", server.request_log()))
        except Exception as exc:  # the report must not fail for it
            report.sections.append(("kcoord", f"no server report: {exc!r}"))
