"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27, coordinator to partition leader), DescribeProducers (61),
DescribeTransactions (65), ListTransactions (66).

Field versions follow Kafka's message schemas.  EndTxn stops at v4 (v5 is
transaction protocol v2, which kcoord does not finalize).
"""
from ..schema import api, f

_TOPIC = [f("name", "string"), f("partitions", "[]int32")]
_TOPIC_RESULT = [
    f("name", "string"),
    f("results_by_partition", "[]", fields=[
        f("partition_index", "int32"),
        f("partition_error_code", "int16"),
    ]),
]

ADD_PARTITIONS_TO_TXN = api(24, "AddPartitionsToTxn", "0-5", "3+", request=[
    # v4+: the batched (broker) form; VerifyOnly asks "is it in the txn?" (KIP-890)
    f("transactions", "[]", "4+", fields=[
        f("transactional_id", "string", "4+"),
        f("producer_id", "int64", "4+"),
        f("producer_epoch", "int16", "4+"),
        f("verify_only", "bool", "4+", default=False),
        f("topics", "[]", "4+", fields=_TOPIC),
    ]),
    f("v3_and_below_transactional_id", "string", "0-3"),
    f("v3_and_below_producer_id", "int64", "0-3"),
    f("v3_and_below_producer_epoch", "int16", "0-3"),
    f("v3_and_below_topics", "[]", "0-3", fields=_TOPIC),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16", "4+"),
    f("results_by_transaction", "[]", "4+", fields=[
        f("transactional_id", "string", "4+"),
        f("topic_results", "[]", "4+", fields=_TOPIC_RESULT),
    ]),
    f("results_by_topic_v3_and_below", "[]", "0-3", fields=_TOPIC_RESULT),
])

ADD_OFFSETS_TO_TXN = api(25, "AddOffsetsToTxn", "0-4", "3+", request=[
    f("transactional_id", "string"),
    f("producer_id", "int64"),
    f("producer_epoch", "int16"),
    f("group_id", "string"),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
])

END_TXN = api(26, "EndTxn", "0-4", "3+", request=[
    f("transactional_id", "string"),
    f("producer_id", "int64"),
    f("producer_epoch", "int16"),
    f("committed", "bool"),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
])

WRITE_TXN_MARKERS = api(27, "WriteTxnMarkers", "0-1", "1+", request=[
    f("markers", "[]", fields=[
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("transaction_result", "bool"),  # true = COMMIT
        f("topics", "[]", fields=[
            f("name", "string"),
            f("partition_indexes", "[]int32"),
        ]),
        f("coordinator_epoch", "int32"),
    ]),
], response=[
    f("markers", "[]", fields=[
        f("producer_id", "int64"),
        f("topics", "[]", fields=[
            f("name", "string"),
            f("partitions", "[]", fields=[
                f("partition_index", "int32"),
                f("error_code", "int16"),
            ]),
        ]),
    ]),
])

DESCRIBE_PRODUCERS = api(61, "DescribeProducers", "0", "0+", request=[
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partition_indexes", "[]int32"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("error_message", "string", null="0+", default=None),
            f("active_producers", "[]", fields=[
                f("producer_id", "int64"),
                f("producer_epoch", "int32"),
                f("last_sequence", "int32", default=-1),
                f("last_timestamp", "int64", default=-1),
                f("coordinator_epoch", "int32"),
                f("current_txn_start_offset", "int64", default=-1),
            ]),
        ]),
    ]),
])

DESCRIBE_TRANSACTIONS = api(65, "DescribeTransactions", "0", "0+", request=[
    f("transactional_ids", "[]string"),
], response=[
    f("throttle_time_ms", "int32"),
    f("transaction_states", "[]", fields=[
        f("error_code", "int16"),
        f("transactional_id", "string"),
        f("transaction_state", "string"),
        f("transaction_timeout_ms", "int32"),
        f("transaction_start_time_ms", "int64"),
        f("producer_id", "int64"),
        f("producer_epoch", "int16"),
        f("topics", "[]", fields=[
            f("topic", "string"),
            f("partitions", "[]int32"),
        ]),
    ]),
])

LIST_TRANSACTIONS = api(66, "ListTransactions", "0-1", "0+", request=[
    f("state_filters", "[]string"),
    f("producer_id_filters", "[]int64"),
    f("duration_filter", "int64", "1+", default=-1),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("unknown_state_filters", "[]string"),
    f("transaction_states", "[]", fields=[
        f("transactional_id", "string"),
        f("producer_id", "int64"),
        f("transaction_state", "string"),
    ]),
])
