"""OffsetForLeaderEpoch (23) against a real single node, every version."""
import pytest

from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, create_topic, produce

OFFSET_FOR_LEADER_EPOCH = 23


def ask(client, version, topic, partition=0, epoch=0, current=-1):
    body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
    response = client.request(OFFSET_FOR_LEADER_EPOCH, version, body)
    return response["topics"][0]["partitions"][0]


@pytest.mark.parametrize("version", range(5))
def test_the_epoch_of_a_single_node_ends_at_the_log_end(module_server, version):
    topic = f"t{version}"  # the versions share the module's server
    with WireClient(module_server.port) as client:
        versions = {k["api_key"]: k for k in client.api_versions()["api_keys"]}
        assert (versions[23]["min_version"], versions[23]["max_version"]) == (0, 4)
        assert create_topic(client, topic)["error_code"] == Err.NONE
        batch = build_batch([(b"k", b"v%d" % i, [], 1000) for i in range(3)])
        produce(client, topic, 0, batch)
        answer = ask(client, version, topic, epoch=0)
        assert answer["error_code"] == Err.NONE and answer["end_offset"] == 3
        if version >= 1:
            assert answer["leader_epoch"] == 0
        unknown = ask(client, version, topic, epoch=5)    # an epoch never seen
        assert (unknown["error_code"], unknown["end_offset"]) == (Err.NONE, -1)
        missing = ask(client, version, "nope")
        assert missing["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
        outside = ask(client, version, topic, partition=7)
        assert outside["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
        if version >= 2:    # fencing by the client's view of the leader epoch
            assert ask(client, version, topic, current=1)["error_code"] == Err.UNKNOWN_LEADER_EPOCH
            assert ask(client, version, topic, current=0)["error_code"] == Err.NONE
