"""The snapshot's payload: a core restored from it and replayed on equals a full replay."""
import random

import pytest

from kcoord.coordinator.result import Record
from kcoord.coordinator.shard import CoordinatorConfig, CoordinatorShard
from kcoord.coordinator.snapshot import decode_state, encode_state


def _random_ops(rng: random.Random, n: int) -> list:
    ops = []
    for _ in range(n):
        key = {"group": f"g{rng.randrange(5)}", "topic": f"t{rng.randrange(3)}",
               "partition": rng.randrange(4)}
        roll = rng.random()
        if roll < 0.6:
            ops.append(("r", Record(1, key, {"offset": rng.randrange(10**6), "leader_epoch": 0,
                                            "metadata": "", "commit_timestamp": 1,
                                            "expire_timestamp": -1}, 3)))
        elif roll < 0.75:
            ops.append(("r", Record(1, key, None)))
        elif roll < 0.9:
            ops.append(("txo", rng.randrange(3), Record(1, key, {
                "offset": rng.randrange(10**6), "leader_epoch": 0, "metadata": "m",
                "commit_timestamp": 2, "expire_timestamp": -1}, 3)))
        else:
            ops.append(("marker", rng.randrange(3), rng.random() < 0.5))
    return ops


def _state(obj, seen=None):
    """A core's data as plain values (objects by their attributes, callables left out)."""
    seen = set() if seen is None else seen
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return obj
    if callable(obj) or id(obj) in seen:
        return "<ref>"
    seen.add(id(obj))
    if isinstance(obj, dict):
        return {k: _state(v, seen) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [_state(v, seen) for v in obj]
        return sorted(items, key=repr) if isinstance(obj, (set, frozenset)) else items
    fields = dict(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                fields[name] = getattr(obj, name)
    fields.pop("config", None)
    return (type(obj).__name__, {k: _state(v, seen) for k, v in fields.items()})


def _apply(core, ops) -> None:
    for op in ops:
        if op[0] == "r":
            core.replay(op[1])
        elif op[0] == "txo":
            core.replay_txn_offsets(op[1], 0, [op[2]])
        else:
            core.replay_txn_marker(op[1], 0, op[2])


@pytest.mark.parametrize("seed", range(8))
def test_restored_then_replayed_equals_full_replay(seed):
    rng = random.Random(seed)
    ops = _random_ops(rng, 300)
    config = CoordinatorConfig()
    full = CoordinatorShard(0, config)
    _apply(full, ops)
    cut = rng.randrange(len(ops) + 1)
    first = CoordinatorShard(0, config)
    _apply(first, ops[:cut])
    restored = decode_state(encode_state(first), config)
    assert restored is not first and restored.config is config
    _apply(restored, ops[cut:])
    assert _state(restored) == _state(full)
    assert _state(full)[1]["offsets"] != _state(CoordinatorShard(0))[1]["offsets"]
    assert restored.offsets is not first.offsets


def test_malformed_payload_raises():
    payload = encode_state(CoordinatorShard(0))
    with pytest.raises(Exception):
        decode_state(payload[: len(payload) // 2], CoordinatorConfig())


def test_the_runtime_config_and_its_objects_are_put_back():
    """What the config holds (the live per-group overrides a manager keeps a
    reference to, an authorizer's callback) comes from the loading runtime."""
    saved = CoordinatorConfig(topic_describable=lambda *_: True)
    payload = encode_state(CoordinatorShard(0, saved))
    config = CoordinatorConfig()
    restored = decode_state(payload, config)
    assert restored.config is config
    assert restored.consumer._overrides_by_group is config.group_overrides.by_group
    assert restored.share.config is config


def test_a_payload_of_other_code_is_refused():
    from kcoord.coordinator.snapshot import StaleSnapshot
    payload = encode_state(CoordinatorShard(0))
    with pytest.raises(StaleSnapshot):
        decode_state(bytes([payload[0] ^ 1]) + payload[1:], CoordinatorConfig())


def _random_table(rng: random.Random) -> dict:
    from kcoord.coordinator.offsets import OffsetValue
    texts = ["", "meta", "ünï\x00", "\ud800x", "t" * 300]
    return {rng.choice(texts) + f"g{g}": {
        (rng.choice(texts), rng.randrange(-1, 2**31)): OffsetValue(
            rng.randrange(-1, 2**63), rng.randrange(-2**31, 2**31), rng.choice(texts),
            rng.randrange(-2**63, 2**63), rng.choice([None, 0, 2**63 - 1]))
        for _ in range(rng.randrange(0, 30))} for g in range(rng.randrange(0, 20))}


@pytest.mark.parametrize("seed", range(10))
def test_the_offset_table_decodes_to_what_was_encoded(seed):
    """Values at the columns' limits, odd strings, empty groups: the same
    dicts back, iterating in the same order."""
    from kcoord.coordinator.offset_table import decode_offsets, encode_offsets
    table = _random_table(random.Random(seed))
    data = encode_offsets(table)
    back, used = decode_offsets(data + b"more")
    assert used == len(data)
    assert back == table and list(back) == list(table)
    assert all(list(back[g]) == list(table[g]) for g in table)
    with pytest.raises((ValueError, IndexError)):
        decode_offsets(data[:len(data) - 1 - seed])


def test_offsets_no_column_holds_are_pickled_with_the_rest():
    from kcoord.coordinator.offsets import OffsetValue
    for value in (OffsetValue(2**63, 0, "", 1, None), OffsetValue(1, 0, "", 1, -5)):
        core = CoordinatorShard(0)
        core.offsets.by_group["g"] = {("t", 0): value}
        restored = decode_state(encode_state(core), CoordinatorConfig())
        assert restored.offsets.by_group == {"g": {("t", 0): value}}
