"""Burrow's min-distance on a real server's /v3 API: commits sooner than
http.burrow.min-distance after the previous one take its window slot and
keep the stored timestamp, as Burrow's storage does."""
from __future__ import annotations

import time

import pytest

from tests.clients.wire import WireClient, create_topic

from .support import get_json, http_port, http_server

pytestmark = pytest.mark.clients


def commit(c: WireClient, offset: int) -> None:
    resp = c.request(8, 8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                            "topics": [{"name": "t", "partitions": [
                                {"partition_index": 0, "committed_offset": offset,
                                 "committed_metadata": ""}]}]})
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0, resp


def test_fast_commits_share_a_slot_keeping_its_timestamp(tmp_path):
    server = http_server(tmp_path / "data", **{"http.burrow.min-distance": "3600"})
    try:
        with WireClient(server.port) as c:
            assert create_topic(c, "t")["error_code"] == 0
            commit(c, 1)
            first_done = int(time.time() * 1000)
            for offset in range(2, 6):
                commit(c, offset)
        status, doc = get_json(http_port(server), "/v3/kafka/local/consumer/g")
        assert status == 200, doc
        [slot] = doc["topics"]["t"][0]["offsets"]
        assert slot["offset"] == 5 and slot["timestamp"] <= first_done
    finally:
        server.stop()
