"""Names vulture reports as unused that are used in ways it cannot see.

Only false findings go here, each group with why; real dead code is deleted.
`make lint` runs vulture over kcoord (tests and bench count as users).
"""
# ruff: noqa
_ = object()

# Kafka's error codes (Errors.java): the whole table, so any code read off the
# wire has its name (Err(code).name in logs and the admin tools).
INVALID_FETCH_SIZE
NETWORK_EXCEPTION
RECORD_LIST_TOO_LARGE
INVALID_COMMIT_OFFSET_SIZE
UNSUPPORTED_FOR_MESSAGE_FORMAT
INVALID_TIMESTAMP
NOT_CONTROLLER
DUPLICATE_SEQUENCE_NUMBER
UNKNOWN_PRODUCER_ID
FETCH_SESSION_ID_NOT_FOUND
INVALID_FETCH_SESSION_EPOCH
UNSUPPORTED_COMPRESSION_TYPE
INCONSISTENT_TOPIC_ID

# Members of an enumeration defined as one table of Kafka's (ConfigSource ids,
# Burrow's status codes by position).
SOURCE_UNKNOWN
NOTFOUND

# A table for readers: which topic configs kcoord's log honours (the module
# docstring and docs point to it).
HONOURED

# Called by Spark's Python data source API (DataSource / DataSourceStreamReader).
_.streamReader
_.initialOffset
_.latestOffset

# asyncio's Transport / Protocol interface, called by the event loop and by
# whoever writes to the TLS transport.
_.writelines
_.abort
_.can_write_eof
_.eof_received

# aetcd's Client attributes, set by the TLS client that replaces its channel
# (read by aetcd's own methods).
_.kvstub
_.clusterstub
_.leasestub
_.maintenancestub
_._watcher

# A typing.Protocol: the interface the replica manager writes ISR changes to.
PartitionStateStore

# Dataclass fields of the pipeline's generated groups, read by the tests as
# dict keys (dataclasses.asdict).
expected_status
expected_partitions

# share/persister.py: the Persister seam's Protocol and its dataclass fields
# (the share-group work implements and reads them).
SharePersister
delivery_state
delivery_count
state_epoch
delivery_complete_count

# kcoord.testing: a module __getattr__ (PEP 562), pytest's hooks (called by
# name), and the public API users' tests call
__getattr__
pytest_addoption
pytest_configure
pytest_runtest_makereport
_.move_coordinator

# ShareGroupSettings' fields: built by GroupOverrides.share_settings for the
# share-partition leader, which the share-group work is wiring (no reader yet)
auto_offset_reset
record_lock_duration_ms
isolation_level

# kcoord/testing/child.py: methods called by name over the child's RPC
# (remote.py / server.py rpc("on_fault", ...))
_.on_fault
_.release_parked
_.server_call

# admin/http_security.py: the http.ssl.* / http.auth.* key list, unread today
# (kept for the HTTP endpoint's settings check under way; delete if unused)
HTTP_KEYS
# pickle calls these hooks of the snapshot's Pickler/Unpickler (coordinator/snapshot.py)
_.persistent_id
_.persistent_load
_.reducer_override
