"""The names of Kafka's internal topics kcoord keeps (one definition for the
coordinators, the cluster and the pipeline)."""

OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
