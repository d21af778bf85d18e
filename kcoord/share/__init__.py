"""Share groups (KIP-932) on the partition leader and the share coordinator.

- persister.py: the seam between a share partition (in-flight record state on
  the partition leader) and the share coordinator (its durable copy on
  __share_group_state), Kafka's Persister.
- partition.py: one share partition's in-flight records (Kafka's
  SharePartition), sans-I/O: acquire, acknowledge, lock expiry, the window and
  its start offset, and the writes that make them durable.
"""
