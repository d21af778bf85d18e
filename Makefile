# `make serve` and `make test` work on a fresh machine: they build the
# virtualenv and install everything (Python packages and kafkajs) first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LISTEN ?= 127.0.0.1:9092
DATA_DIR ?= ./data
JS_DIR := tests/clients/js

.PHONY: serve test venv js bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,pipeline]'
	touch $@

js: $(JS_DIR)/node_modules/.installed

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package.json
	cd $(JS_DIR) && npm install --no-audit --no-fund --silent
	touch $@

serve: venv
	$(VENV)/bin/kcoord serve --listen $(LISTEN) --data-dir $(DATA_DIR)

test: venv js
	$(PY) -m pytest -q

bench: venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(JS_DIR)/node_modules
