"""kcoord as a cluster: control plane on etcd, replication with Kafka's protocol.

`state.py` is the contract between the control plane (who leads, who is in
sync) and the replica manager (what each node's logs do about it)."""
