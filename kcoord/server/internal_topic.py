"""How every coordinator runtime opens its internal topic (__consumer_offsets,
__transaction_state, __share_group_state): created on first use with the
runtime's partition count and configs, as Kafka auto-creates them; one that
exists keeps its partitions (each runtime says what a different count means)."""
from __future__ import annotations

import logging

log = logging.getLogger("kcoord.coordinator")


def compacted(segment_bytes: int) -> dict[str, str]:
    """The configs of a compacted coordinator log (offsets, transaction state)."""
    return {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}


def open_internal_topic(catalogue, name: str, partitions: int, configs: dict[str, str],
                        partitions_key: str, strict: bool = False):
    """-> the topic, created with `partitions` and `configs` if need be.  An
    existing topic with another count is kept: logged (the group runtimes
    follow the topic, as Kafka), or with `strict` refused with ValueError
    (transactional ids would move partitions; Kafka refuses to load then)."""
    topic = catalogue.get(name)
    if topic is None:
        return catalogue.create(name, partitions, configs)
    if len(topic.partitions) != partitions:
        if strict:
            raise ValueError(f"{partitions_key}={partitions} but {name} has "
                             f"{len(topic.partitions)} partitions")
        log.warning("%s has %d partitions; %s=%d is ignored", name, len(topic.partitions),
                    partitions_key, partitions)
    return topic
