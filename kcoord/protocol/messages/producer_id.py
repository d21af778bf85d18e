"""InitProducerId (key 22): idempotent producers ask for an id first."""
from ..schema import api, f

INIT_PRODUCER_ID = api(22, "InitProducerId", "0-5", "2+", request=[
    f("transactional_id", "string", null="0+"),
    f("transaction_timeout_ms", "int32"),
    f("producer_id", "int64", "3+", default=-1),
    f("producer_epoch", "int16", "3+", default=-1),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("producer_id", "int64", default=-1),
    f("producer_epoch", "int16"),
])
