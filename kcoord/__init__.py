"""kcoord: a Kafka-protocol group coordinator."""
from .native_build import install as _use_compiled_if_current

# before any submodule: the mypyc-built modules run only if built from these sources
_use_compiled_if_current()
