"""The server keeps freed request buffers in its heap (glibc's mallopt)."""
import platform

import pytest

from kcoord.server.malloc_tuning import keep_freed_buffers


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_accepts_the_settings():
    assert keep_freed_buffers() is True
