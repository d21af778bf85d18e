import pytest

from kcoord.log import LogConfig, PartitionLog


@pytest.fixture
def open_log(tmp_path):
    """Factory: open (or reopen) the partition log under tmp_path, closing
    whatever is still open at the end of the test."""
    opened = []

    def _open(config: LogConfig | None = None, name: str = "topic-0") -> PartitionLog:
        log = PartitionLog(tmp_path / name, config or LogConfig())
        opened.append(log)
        return log

    yield _open
    for log in opened:
        if not log._closed:
            log.close()
