"""The sample application's own tests (examples/orders_app: confluent-kafka,
aiokafka, kafka-python, kafkajs) run as a user runs them: pytest in a
subprocess with the plugin loaded by name, only the public fixtures."""
from __future__ import annotations

import re

from tests.testing.support import ROOT, run_pytest


def test_orders_app_suite_passes_with_the_plugin():
    run = run_pytest(ROOT / "examples" / "orders_app", "-rs", timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", out))
    # every client's tests ran (kafkajs included: nothing skipped)
    assert counts.get("passed") == 12 and "skipped" not in counts, out
