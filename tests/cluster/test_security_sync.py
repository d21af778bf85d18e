"""EtcdSecurity's apply rules without etcd: per-key revisions make a local
apply and the watch's copies commute, a full read removes what etcd no
longer has, user names with any character map to one key."""
from __future__ import annotations

import base64
from types import SimpleNamespace

from kcoord.cluster.security_sync import EtcdSecurity, SecurityKeys, _value
from kcoord.cluster.view import ClusterView, Keys
from kcoord.security.acl import AclBinding
from kcoord.security.store import SecurityStore, scram_record_from_password


def make(tmp_path):
    view = ClusterView(Keys("/kcoord"))
    node = SimpleNamespace(plane=SimpleNamespace(keys=view.keys, view=view))
    store = SecurityStore(tmp_path)
    return EtcdSecurity(node, store), store, view


ACL = {"type": "acl", "acl": AclBinding(2, "orders", 3, "User:alice", "*", 3, 3).to_record()}


def test_an_older_change_never_undoes_a_newer_one(tmp_path):
    sync, store, _ = make(tmp_path)
    key = sync.keys.of(ACL)
    sync.apply(key, None, 11)          # the watch: deleted at 11 (another node)
    sync.apply(key, _value(ACL), 10)   # this node's own create at 10, answered late
    assert store.authorizer.acls == set()
    sync.apply(key, _value(ACL), 12)
    assert len(store.authorizer.acls) == 1
    sync.apply(key, _value(ACL), 12)   # the watch's copy of what was applied locally
    sync.apply(key, None, 12)
    assert len(store.authorizer.acls) == 1


SECRET = "pass-word!~"


def test_scram_keys_and_a_full_read(tmp_path):
    sync, store, view = make(tmp_path)
    keys = SecurityKeys(view.keys.security)
    # '-', '!' and '~' are outside base64's alphabet: the random key material cannot spell it
    odd = scram_record_from_password("team/ops=1,x", "SCRAM-SHA-512", SECRET)
    plain = scram_record_from_password("bob", "SCRAM-SHA-256", "pw")
    for rev, record in enumerate((odd, plain, ACL), start=1):
        view.apply(keys.of(record), _value(record), rev)
    view.revision = 3
    sync.on_change(None)
    assert set(store.scram) == {("team/ops=1,x", "SCRAM-SHA-512"), ("bob", "SCRAM-SHA-256")}
    assert store.credential("bob", "SCRAM-SHA-256")[1] == \
        base64.b64decode(plain["stored_key"])
    assert len(store.authorizer.acls) == 1
    # bob and the ACL were deleted while the watch was away: the next full read drops them
    view.apply(keys.of(plain), None, 4)
    view.apply(keys.of(ACL), None, 5)
    view.revision = 5
    sync.on_change(None)
    assert set(store.scram) == {("team/ops=1,x", "SCRAM-SHA-512")}
    assert store.authorizer.acls == set()
    assert SECRET.encode() not in _value(odd)
