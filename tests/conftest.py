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
