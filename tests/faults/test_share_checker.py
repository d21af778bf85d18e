"""The share workload's checker on hand-made histories: each broken
delivery rule is found, and a history with redeliveries Kafka allows (an
acknowledgement answered an error, a record delivered again before any
ACCEPT was confirmed) passes."""
from tests.faults.share import DELIVERY_LIMIT, check_share
from tests.faults.test_checkers import kinds, op
from tests.faults.history import UNKNOWN

A, B = (0, 10), (1, 20)


def produced(value, key, t=0):
    return op("share-produce", None, value, t, t + 0.5, partition=key[0], offset=key[1])


def test_allowed_redeliveries_pass():
    ops = [produced("s1", A), produced("s2", B),
           op("share-deliver", A, "s1", 1, 1, count=1),
           op("share-ack", A, "s1", 1, 2, UNKNOWN),          # its leader died: unknown
           op("share-deliver", A, "s1", 3, 3, count=2),      # so it may come again
           op("share-ack", A, "s1", 3, 4),
           op("share-deliver", B, "s2", 1, 1, count=1),
           op("share-deliver", B, "s2", 2, 2, count=2),      # lock ran out, no ack yet
           op("share-ack", B, "s2", 2, 3)]
    result = check_share(ops)
    assert kinds(result) == {}
    assert result["counts"]["acks_unknown"] == 1


def test_each_broken_rule_is_found():
    ops = [produced("s1", A), produced("s2", B), produced("s3", (2, 0)),
           op("share-deliver", A, "s1", 1, 1, count=1),
           op("share-ack", A, "s1", 1, 2),
           op("share-deliver", A, "s1", 3, 3, count=2),      # after its ACCEPT was confirmed
           op("share-deliver", B, "s2", 1, 1, count=DELIVERY_LIMIT + 1),
           op("share-deliver", B, "sX", 2, 2, count=1)]      # another value at one offset
    assert kinds(check_share(ops)) == {"delivered-after-confirmed-accept": 1,
                                       "delivery-count-over-limit": 1,
                                       "two-values-at-one-offset": 1,
                                       "never-delivered": 1}
