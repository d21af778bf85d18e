import pytest

from tests.support import ServerProcess


@pytest.fixture
def server(tmp_path):
    """A fresh `kcoord serve` on its own port and data dir."""
    proc = ServerProcess(tmp_path / "data", settings={"group.initial.rebalance.delay.ms": "0"})
    proc.start()
    yield proc
    proc.stop()
    if proc.proc.returncode not in (0, None):
        print(proc.log_text())


@pytest.fixture(scope="module")
def module_server(tmp_path_factory):
    """One `kcoord serve` for a whole module whose tests each use names of their own."""
    with ServerProcess(tmp_path_factory.mktemp("module") / "data",
                       settings={"group.initial.rebalance.delay.ms": "0"}) as proc:
        yield proc
