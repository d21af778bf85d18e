import asyncio

from conftest import assert_all_committed, seed, totals
from orders import with_aiokafka


def test_every_order_totalled_and_committed(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 8)
    assert asyncio.run(with_aiokafka.run(kafka.bootstrap, group, orders, out, 8)) == 8
    assert totals(kafka, out) == {i: 2.5 for i in range(8)}
    assert_all_committed(kafka, group, orders, 8)


def test_a_dropped_fetch_connection_is_survived(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 4)
    drop = kafka.faults.disconnect("Fetch", count=1, topic=orders)
    assert asyncio.run(with_aiokafka.run(kafka.bootstrap, group, orders, out, 4)) == 4
    assert drop.fired == 1
    assert sorted(totals(kafka, out)) == [0, 1, 2, 3]
