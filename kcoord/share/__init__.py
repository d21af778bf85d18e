"""Share groups (KIP-932) on the partition leader and the share coordinator.

- persister.py: the seam between a share partition (in-flight record state on
  the partition leader) and the share coordinator (its durable copy on
  __share_group_state), Kafka's Persister.
"""
