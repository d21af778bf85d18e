"""SCRAM credentials and ACLs cluster-wide: etcd holds them, every node
applies them (Kafka keeps them in the replicated metadata log, so every
broker authenticates and authorizes against the same set).

Keys under the cluster's prefix (view.Keys.security):
    <prefix>/security/scram/<user>/<mechanism>   a credential record: salt, StoredKey,
                                                 ServerKey, iterations (never a password);
                                                 the user name percent-encoded
    <prefix>/security/acls/<sha-256 of the ACL>  the ACL record (the key is the
                                                 binding's identity: re-creating is a no-op)

`EtcdSecurity` is the node's SecurityStore backend in cluster mode: a
change is written to etcd in one transaction (per 100 operations) and
answered only once etcd accepted it; it is applied to this node's store at
the transaction's revision at once (read-your-writes on the node that
answered), and every node, this one included, applies what its etcd watch
delivers. A key's change is applied only when newer than the revision last
applied to that key, so a local apply and the watch's copy of the same
change (or an older one arriving late) never undo each other."""
from __future__ import annotations

import hashlib
import json
import logging
from urllib.parse import quote, unquote

from ..security.store import StoreUnavailable

log = logging.getLogger("kcoord.cluster.security")

TXN_OPS = 100  # etcd allows at most 128 operations per transaction


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class SecurityKeys:
    def __init__(self, root: str) -> None:  # root: Keys.security, ends with /
        self.root = root
        self.scram = f"{root}scram/"
        self.acls = f"{root}acls/"

    def credential(self, user: str, mechanism: str) -> str:
        return f"{self.scram}{quote(user, safe='')}/{mechanism}"

    def acl(self, acl_record: dict) -> str:
        return f"{self.acls}{hashlib.sha256(_canonical(acl_record)).hexdigest()}"

    def of(self, record: dict) -> str:
        """The key a store record (store.py's record types) puts or deletes."""
        kind = record["type"]
        if kind in ("scram", "scram-delete"):
            return self.credential(record["user"], record["mechanism"])
        if kind in ("acl", "acl-delete"):
            return self.acl(record["acl"])
        raise ValueError(f"unknown security record type {kind!r}")

    def decode(self, key: str, value: bytes) -> dict | None:
        """The store record a key's value stands for (None: not a key of ours)."""
        doc = json.loads(value)
        if key.startswith(self.scram):
            user, _, mechanism = key[len(self.scram):].rpartition("/")
            return {**doc, "type": "scram", "user": unquote(user), "mechanism": mechanism}
        if key.startswith(self.acls):
            return {"type": "acl", "acl": doc}
        return None


def _value(record: dict) -> bytes:
    if record["type"] == "scram":
        return _canonical({k: record[k] for k in ("salt", "stored_key", "server_key",
                                                  "iterations")})
    return _canonical(record["acl"])


def _undo(record: dict) -> dict:
    """The store record that removes what `record` added."""
    if record["type"] == "scram":
        return {"type": "scram-delete", "user": record["user"], "mechanism": record["mechanism"]}
    return {"type": "acl-delete", "acl": record["acl"]}


class EtcdSecurity:
    def __init__(self, node, store) -> None:
        self.node = node      # the ClusterNode (its control plane exists once started)
        self.store = store    # the SecurityStore the authorizer and SASL read
        self.applied: dict[str, dict] = {}   # key -> the record applied from it
        self.revisions: dict[str, int] = {}  # key -> revision last applied (deletes too)

    @property
    def keys(self) -> SecurityKeys:
        return SecurityKeys(self.node.plane.keys.security)

    # ---------------------------------------------------------------- apply
    def apply(self, key: str, value: bytes | None, revision: int) -> None:
        if revision <= self.revisions.get(key, 0):
            return  # this node already has this change or a newer one
        self.revisions[key] = revision
        old = self.applied.get(key)
        if value is None:
            if old is not None:
                del self.applied[key]
                self.store.replay(_undo(old))
            return
        try:
            record = self.keys.decode(key, value)
        except (ValueError, KeyError) as exc:
            log.error("ignoring unreadable security key %s in etcd: %s", key, exc)
            return
        if record is None or record == old:
            return
        self.applied[key] = record
        self.store.replay(record)

    def on_change(self, what) -> None:
        """The control plane's watch: one key (key, value or None, revision),
        or None after a full read of the prefix (reconcile with the whole set)."""
        if what is not None:
            self.apply(*what)
            return
        view = self.node.plane.view
        for key, (value, revision) in list(view.security.items()):
            self.apply(key, value, revision)
        for key in [k for k in self.applied if k not in view.security]:
            self.apply(key, None, view.revision)  # deleted while the watch was away

    # ---------------------------------------------------------------- write
    async def write(self, records: list[dict]) -> None:
        """The store's backend: every record to etcd (StoreUnavailable
        when etcd does not accept them), then applied here."""
        plane = self.node.plane
        if plane is None or plane.session.client is None:
            raise StoreUnavailable("this node has not joined the cluster yet")
        keys, t = self.keys, plane.txn
        # one operation per key (etcd refuses a transaction naming a key twice): the last wins
        records = list({keys.of(r): r for r in records}.values())
        ops = []
        for r in records:
            key = keys.of(r).encode()
            ops.append(t.delete(key) if r["type"].endswith("-delete") else t.put(key, _value(r)))
        for start in range(0, len(ops), TXN_OPS):
            chunk = records[start:start + TXN_OPS]
            try:
                ok, responses = await plane.client.transaction(
                    compare=[], success=ops[start:start + TXN_OPS], failure=[])
            except Exception as exc:
                raise StoreUnavailable(f"etcd did not accept the change: {exc}") from exc
            revision = _revision(responses)
            for r in chunk:
                deleted = r["type"].endswith("-delete")
                key = keys.of(r)
                self.apply(key, None if deleted else _value(r), revision)

    async def bootstrap(self, records: list[dict]) -> None:
        """`kcoord serve --add-scram` in a cluster: each credential is created
        only if etcd has none for that user and mechanism, so every node may
        be started with the same flags (as kafka-storage format's bootstrap
        records count once); an existing one is kept (change it with
        AlterUserScramCredentials / kcoord configs)."""
        plane = self.node.plane
        keys, t = self.keys, plane.txn
        for r in records:
            key = keys.of(r)
            ok, responses = await plane.client.transaction(
                compare=[t.create(key.encode()) == 0],
                success=[t.put(key.encode(), _value(r))], failure=[])
            if ok:
                self.apply(key, _value(r), _revision(responses))
                log.info("--add-scram: %s credential of %s stored in the cluster",
                         r["mechanism"], r["user"])
            else:
                log.info("--add-scram: the cluster already has a %s credential for %s: kept",
                         r["mechanism"], r["user"])


def _revision(responses) -> int:
    """The revision a successful transaction's writes got."""
    for resp in responses:
        for field in ("response_put", "response_delete_range"):
            if resp.HasField(field):
                return getattr(resp, field).header.revision
    return 0
