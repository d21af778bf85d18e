"""The dispatcher's table has one source: every API a node serves (advertised
or hidden) is entered by Dispatcher.register_handlers from a method marked
@serves with that API's key, so `grep JoinGroup` finds where it is served."""
import pytest

from kcoord.protocol.api import APIS
from kcoord.server.app import Server
from kcoord.server.config import build_config

CONFIGS = {
    "single": [],
    "cluster": ["etcd.endpoints=127.0.0.1:1", "node.id=1"],  # no etcd needed until start()
    "classic-only": ["group.coordinator.rebalance.protocols=classic"],
    "authorizer": ["authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                   "super.users=User:admin"],
}


def _marker(handler):
    fn = getattr(handler, "__wrapped__", handler)  # security/checks.py's guard
    fn = getattr(fn, "__func__", fn)               # bound method -> function
    return getattr(fn, "serves", None)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_served_api_comes_from_serves(tmp_path, name):
    server = Server(build_config("127.0.0.1:0", str(tmp_path), None, CONFIGS[name]))
    try:
        d = server.dispatcher
        assert d.handlers, "nothing registered"
        for key, (handler, lo, hi) in d.handlers.items():
            marked = _marker(handler)
            assert marked is not None, f"{APIS[key].name} registered without @serves: {handler!r}"
            assert marked[0] == key, f"{APIS[key].name} served by a handler marked for {marked[0]}"
            assert (key in d.pure) == marked[3] and (key in d.hidden) == marked[4]
        advertised = {v["api_key"] for v in d.api_versions()}
        assert advertised == set(d.handlers) - d.hidden
        if name == "classic-only":
            assert d.hidden == {68, 69}
        else:
            assert not d.hidden and {68, 69} <= advertised
        if name == "cluster":  # the control plane serves topic admin in a cluster
            assert type(_marker_owner(d.handlers[19][0])).__name__ == "ClusterNode"
    finally:
        server.dir_lock.release()


def _marker_owner(handler):
    return getattr(getattr(handler, "__wrapped__", handler), "__self__", None)
