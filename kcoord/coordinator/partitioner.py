"""Which __consumer_offsets partition owns a group (KAFKA_REFERENCE 1.3)."""
from functools import lru_cache


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@lru_cache(maxsize=65536)  # every group request hashes its id; the loop is per character
def partition_for(group_id: str, partitions: int) -> int:
    """Utils.abs(groupId.hashCode()) % partitions; Utils.abs(MIN_VALUE) is 0."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
