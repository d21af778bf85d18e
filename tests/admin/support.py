"""Shared by the HTTP endpoint tests: a server with http.listen on an
ephemeral port, scrapes parsed into samples, and JSON GETs."""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

from tests.support import ServerProcess

_HTTP = re.compile(r"http endpoint on http://([\d.]+):(\d+)/")


def http_server(data_dir, **settings) -> ServerProcess:
    proc = ServerProcess(data_dir, settings={"group.initial.rebalance.delay.ms": "0",
                                             "http.listen": "127.0.0.1:0", **settings})
    proc.start()
    return proc


def http_port(server: ServerProcess) -> int:
    for line in server.log_lines:
        m = _HTTP.search(line)
        if m:
            return int(m.group(2))
    raise AssertionError("no http endpoint line in the log:\n" + server.log_text())


def get(port: int, path: str, timeout: float = 30.0) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def get_json(port: int, path: str) -> tuple[int, dict]:
    status, body, ctype = get(port, path)
    assert ctype.startswith("application/json"), ctype
    return status, json.loads(body)


def scrape(port: int) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of one /metrics scrape."""
    from prometheus_client.parser import text_string_to_metric_families
    status, body, ctype = get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))), 0.0)


def wait_for(condition, what: str, timeout: float = 120.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
