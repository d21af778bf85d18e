"""mypyc's class options for the compiled core (native/build.py), read by the
compiler and a no-op when interpreted: no runtime dependency on mypy."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    def mypyc_attr(*_args, **_kwargs):
        return lambda cls: cls

__all__ = ["mypyc_attr"]
