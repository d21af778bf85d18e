# `make serve` and `make test` work on a fresh machine: they build the
# virtualenv and install what each needs first. Serving installs kcoord
# alone (no Spark, no test tools); testing installs every extra and kafkajs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LISTEN ?= 127.0.0.1:9092
HTTP_LISTEN ?= 127.0.0.1:9644
# make cluster: node i on BASE_PORT + i - 1, its HTTP endpoint on HTTP_BASE_PORT + i - 1
BASE_PORT ?= 9092
HTTP_BASE_PORT ?= 9644
DATA_DIR ?= ./data
JS_DIR := tests/clients/js

.PHONY: serve test lint venv venv-all js bench clean cluster faults-tools native

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(VENV)/.installed-serve

$(VENV)/.installed-serve: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	touch $@

venv-all: $(VENV)/.installed-all

$(VENV)/.installed-all: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[test,bench,pipeline,cluster]'
	touch $@ $(VENV)/.installed-serve

$(VENV)/.installed-cluster: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[cluster]'
	touch $@ $(VENV)/.installed-serve

js: $(JS_DIR)/node_modules/.installed

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package.json
	cd $(JS_DIR) && npm install --no-audit --no-fund --silent
	touch $@

# the hot modules compiled with mypyc, in place (native/build.py): skipped when
# up to date; a failed build leaves pure Python with one warning line
native:
	$(PY) native/build.py --install

serve: venv native
	$(VENV)/bin/kcoord serve --listen $(LISTEN) --data-dir $(DATA_DIR) --set http.listen=$(HTTP_LISTEN)

# a local cluster: etcd and 3 nodes on 127.0.0.1:BASE_PORT.. (9092-9094), each
# with its HTTP endpoint on HTTP_BASE_PORT.. (9644-9646) (Ctrl-C stops it)
cluster: $(VENV)/.installed-cluster
	$(VENV)/bin/kcoord cluster up --nodes 3 --data-dir $(DATA_DIR)/cluster \
		--base-port $(BASE_PORT) --http-base-port $(HTTP_BASE_PORT)

# the fault harness (tests/faults) needs ip, nft and tc, and libfaketime for
# clock faults: installed from Debian when we are root and they are missing;
# without them (not root, no apt) its tests skip and say why
FAULT_TOOLS := $(shell command -v nft >/dev/null && command -v ip >/dev/null && command -v tc >/dev/null && command -v faketime >/dev/null || echo missing)
faults-tools:
ifeq ($(FAULT_TOOLS),missing)
	-@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq iproute2 nftables faketime >/dev/null; \
	else echo "fault harness tools (iproute2 nftables faketime) missing: its tests will skip"; fi
endif

# the suite on the compiled build, then again on the .py files
# (KCOORD_PURE_PYTHON=1) the tests of what is compiled: the record codec and
# headers, the request codecs (ahead of time against import time), the core,
# the network layer's framing and memo (in process), the transaction and
# runtime simulations (the record
# codec's three garbage fuzz tests, minutes of pure Python, run compiled only)
PURE_TESTS := tests/protocol/test_records.py tests/protocol/test_record_reader.py tests/protocol/test_codec_source.py \
	tests/protocol/test_group_messages.py tests/coordinator tests/test_native_build.py \
	tests/txn/test_txn_core.py tests/txn/test_txn_offsets_core.py tests/txn/test_txn_simulation.py \
	tests/server/test_runtime_sim.py tests/cluster/test_replication_sim.py \
	tests/server/test_frame_reassembly.py tests/server/test_api_versions_repeat.py tests/server/test_reply.py
PURE_SKIP := not decode_garbage_raises and not decompress_garbage_raises and not decompress_mutated_raises

test: venv-all js faults-tools native
	$(MAKE) lint
	KCOORD_EXPECT_COMPILED=1 $(PY) -m pytest -q
	KCOORD_PURE_PYTHON=1 $(PY) -m pytest -q $(PURE_TESTS) -k "$(PURE_SKIP)"

# ruff, vulture and mypy as configured in pyproject.toml, and the import
# layers (lint/import_layers.py: arrows point down, no cycle); any finding fails.
# vulture also reads tests/ and bench/ (as users of kcoord's code) but only
# kcoord's dead code is reported, less protocol/messages/ (its definitions are
# collected by scanning the modules' globals, never by name).  No install step: `make test` installs first.
lint:
	$(PY) -m ruff check kcoord
	@dead=$$($(PY) -m vulture | grep '^kcoord/' | grep -v '^kcoord/protocol/messages/'); \
	  if [ -n "$$dead" ]; then echo "$$dead"; \
	    echo "vulture: dead code (delete it, or add it to lint/vulture_whitelist.py with why)"; \
	    exit 1; fi
	$(PY) -m mypy
	@# typed strictly: coordinator/ and protocol/; everywhere: no call to a name a module lacks
	@missing=$$($(PY) -m mypy kcoord | grep -E 'Module( "[^"]*")? has no attribute|\[name-defined\]'); \
	  if [ -n "$$missing" ]; then echo "$$missing"; \
	    echo "mypy: a module's attribute or a name is missing"; exit 1; fi
	$(PY) lint/import_layers.py kcoord
	$(PY) lint/compiled_async.py .

bench: venv-all
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(JS_DIR)/node_modules
