"""The topic config catalogue (pure): Kafka's keys, types, ranges and
relations, and the canonical stored form."""
import pytest

from kcoord.broker.topic_configs import TOPIC_CONFIGS, canonical, validate_topic_configs
from kcoord.protocol.config_types import ConfigError


def test_every_key_accepts_its_default():
    assert len(TOPIC_CONFIGS) == 36
    for name, (key, _) in TOPIC_CONFIGS.items():
        rendered = key.render(key.default)
        if name == "remote.storage.enable":
            continue
        assert validate_topic_configs({name: rendered})[name] == key.parse(rendered), name


@pytest.mark.parametrize("configs, fragment", [
    ({"bogus": "1"}, "Unknown topic config name: bogus"),
    ({"cleanup.policy": "compact,foo"}, "cleanup.policy"),
    ({"retention.ms": "-2"}, "retention.ms"),
    ({"segment.bytes": "13"}, "segment.bytes"),
    ({"segment.bytes": "2147483648"}, "segment.bytes"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
    ({"preallocate": "yes"}, "preallocate"),
    ({"compression.gzip.level": "0"}, "compression.gzip.level"),
    ({"leader.replication.throttled.replicas": "0:x"}, "throttled"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "min.compaction.lag.ms"),
    ({"remote.storage.enable": "true"}, "Tiered Storage"),
    ({"retention.ms": None}, "Null value"),
])
def test_invalid(configs, fragment):
    with pytest.raises(ConfigError) as info:
        validate_topic_configs(configs)
    assert info.value.code == 40 and fragment in info.value.message


def test_canonical_form():
    assert canonical({"cleanup.policy": " compact , delete ", "preallocate": "TRUE",
                      "leader.replication.throttled.replicas": "*",
                      "compression.type": "zstd"}) == {
        "cleanup.policy": "compact,delete", "preallocate": "true",
        "leader.replication.throttled.replicas": "*", "compression.type": "zstd"}
