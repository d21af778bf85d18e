"""Requests from this node to another node's inter-broker listener (TLS and
SASL as the cluster's inter-broker settings say): a few connections per
(node, API), one request at a time each, so one slow request (a marker
waiting for a high watermark) does not hold up another API's.  Used by the
transaction markers and the share-state persister."""
from __future__ import annotations

import asyncio

REQUEST_TIMEOUT_S = 10.0
CONNECTIONS_PER_PEER = 4


class PeerCalls:
    def __init__(self, cluster, client_id: str, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.cluster = cluster          # ClusterNode: peers' addresses, TLS/SASL properties
        self.client_id = client_id
        self.timeout = timeout
        # (node id, API key) -> [(LeaderConnection, lock)]
        self._peers: dict[tuple, list] = {}

    async def call(self, node_id: int, api_key: int, version: int, body: dict) -> dict:
        """One request to a peer; ConnectionError (and the socket's errors)
        when it is not registered or the connection fails."""
        from ..cluster.fetcher import LeaderConnection
        address = self.cluster.peer_address(node_id)
        if address is None:
            raise ConnectionError(f"node {node_id} is not registered")
        pool = self._peers.setdefault((node_id, api_key), [])
        for conn, _ in list(pool):
            if (conn.host, conn.port) != tuple(address):  # the node moved: reconnect
                conn.close()
                pool.clear()
                break
        entry = next((e for e in pool if not e[1].locked()), None)
        if entry is None and len(pool) < CONNECTIONS_PER_PEER:
            entry = (LeaderConnection(address[0], address[1], self.client_id,
                                      self.cluster.peer_properties), asyncio.Lock())
            pool.append(entry)
        if entry is None:
            entry = pool[0]
        conn, lock = entry
        async with lock:
            try:
                return await conn.call(api_key, version, body, self.timeout)
            except BaseException:
                conn.close()
                raise

    def close(self) -> None:
        for pool in self._peers.values():
            for conn, _ in pool:
                conn.close()
        self._peers.clear()
