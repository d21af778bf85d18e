"""What the application computes, the same for every client."""
from __future__ import annotations

import json


def total(order: bytes) -> bytes:
    """An order's total, as the JSON the totals topic carries."""
    o = json.loads(order)
    return json.dumps({"id": o["id"], "total": round(o["qty"] * o["price"], 2)}).encode()


def order(i: int, qty: int = 2, price: float = 1.25) -> bytes:
    return json.dumps({"id": i, "qty": qty, "price": price}).encode()
