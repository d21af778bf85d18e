"""The data dir is locked (Kafka's .lock): a second `kcoord serve` on the same
dir exits at once with one line naming the dir and the holder's pid, and
leaves the running server's logs and clean-shutdown marker alone."""
from __future__ import annotations

import subprocess
import sys

from kcoord.log.clean_shutdown import CLEAN_SHUTDOWN_FILE as MARKER
from tests.support import ServerProcess


def serve_again(data_dir) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
                           "--data-dir", str(data_dir)], capture_output=True, text=True,
                          timeout=60)


def test_second_server_on_the_same_dir_exits_at_once(tmp_path):
    first = ServerProcess(tmp_path).start()
    try:
        # the running server took the clean-shutdown marker: a crash now is seen as one
        assert not (tmp_path / MARKER).exists()
        second = serve_again(tmp_path)
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert str(tmp_path.resolve()) in lines[0] and f"pid {first.proc.pid}" in lines[0]
        # it wrote no marker of logs it does not own
        assert not (tmp_path / MARKER).exists()
        assert first.proc.poll() is None
    finally:
        first.stop()
    assert (tmp_path / MARKER).exists()  # written by the clean stop of the owner
    # released on stop: the dir can be served again
    again = ServerProcess(tmp_path).start()
    again.stop()


def test_lock_of_a_killed_server_is_free(tmp_path):
    first = ServerProcess(tmp_path).start()
    first.kill()  # kill -9: the kernel drops the lock with the process
    again = ServerProcess(tmp_path).start()
    again.stop()
