"""Deterministic test records shared by the real-client tests.

Keys, values and header values are arbitrary bytes (not UTF-8), so any
client or server that mangles bytes is caught by an exact comparison.
"""
from __future__ import annotations

import base64
import json
import random
from collections import defaultdict
from typing import NamedTuple

PARTITIONS = 6
RECORDS = 10_000


class Rec(NamedTuple):
    partition: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def make_records(n: int = RECORDS, partitions: int = PARTITIONS, seed: int = 20261121) -> list[Rec]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = f"k{i:05d}-".encode() + rng.randbytes(rng.randint(1, 16))
        # Mostly small values, some of a few KiB; compressible text mixed
        # with random bytes so every codec has real work to do.
        size = rng.choice((8, 40, 120, 300, 2000)) + rng.randint(0, 50)
        value = (b"value-%d|" % i) * (size // 24) + rng.randbytes(size % 24 + 1)
        headers = [("seq", str(i).encode()), ("blob", rng.randbytes(rng.randint(0, 12)))]
        if i % 3 == 0:
            headers.append(("trace-id", rng.randbytes(8)))
        out.append(Rec(i % partitions, key, value, tuple(headers)))
    return out


def expected_by_partition(records: list[Rec]) -> dict[int, list[tuple]]:
    """partition -> [(key, value, headers)] in production order."""
    out: dict[int, list[tuple]] = defaultdict(list)
    for r in records:
        out[r.partition].append((r.key, r.value, list(r.headers)))
    return dict(out)


def to_json(records: list[Rec]) -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return json.dumps([{"p": r.partition, "k": b64(r.key), "v": b64(r.value),
                        "h": [[hk, b64(hv)] for hk, hv in r.headers]} for r in records])


def compare(expected: dict[int, list[tuple]], got: dict[int, list[tuple]]) -> None:
    """Assert byte-exact equality per partition with a readable first difference."""
    assert sorted(got) == sorted(expected), f"partitions {sorted(got)} != {sorted(expected)}"
    for p in sorted(expected):
        exp, act = expected[p], got[p]
        for i, (e, a) in enumerate(zip(exp, act)):
            assert a == e, f"partition {p} record {i}: got {a!r}, expected {e!r}"
        assert len(act) == len(exp), f"partition {p}: got {len(act)} records, expected {len(exp)}"
