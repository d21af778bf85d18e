"""Burrow's cluster name is `local` unless http.burrow.cluster.name names it
(one name for all nodes of a kcoord cluster, as a Burrow config names it)."""
from __future__ import annotations

import pytest

from kcoord.server.config import build_config
from tests.admin.support import get_json, http_port, http_server


def test_the_burrow_routes_answer_to_the_configured_name(tmp_path):
    server = http_server(tmp_path / "data", **{"http.burrow.cluster.name": "prod-eu"})
    try:
        port = http_port(server)
        status, doc = get_json(port, "/v3/kafka")
        assert status == 200 and doc["clusters"] == ["prod-eu"]
        status, doc = get_json(port, "/v3/kafka/prod-eu/consumer")
        assert status == 200 and doc["error"] is False
        status, doc = get_json(port, "/v3/kafka/local/consumer")
        assert status == 404 and doc["message"] == "cluster not found"
    finally:
        server.stop()


def test_a_name_that_is_not_a_path_segment_is_refused(tmp_path):
    with pytest.raises(ValueError, match="^http.burrow.cluster.name: "):
        build_config("127.0.0.1:0", str(tmp_path), None, ["http.burrow.cluster.name=a/b"])
