"""The live status page in headless Chromium: the page's script fetches
/status.json and fills the groups and recent-rebalances tables.

Skipped (with the reason) where no Chromium is installed.  The screenshot
test writes a PNG only when KCOORD_STATUS_SCREENSHOT names a path (run by
hand, then looked at)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.clients.wire import WireClient, create_topic

from .support import get, get_json, http_port, http_server, wait_for

HEARTBEAT = 68
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def _chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless Chromium found (looked for " + ", ".join(BROWSERS)
                + "); install one (e.g. apt-get install chromium) to run the status page test")


def _chromium_args(browser: str, tmp_path) -> list[str]:
    return [browser, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--virtual-time-budget=8000"]


@pytest.fixture
def busy_server(tmp_path):
    """A server with a KIP-848 group of one member (so one rebalance to show)
    and a simple group with lag."""
    server = http_server(tmp_path / "data")
    try:
        with WireClient(server.port) as c:
            create_topic(c, "pages", 2)
            resp = c.request(HEARTBEAT, 1, {
                "group_id": "page-group", "member_id": "m1", "member_epoch": 0,
                "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
                "subscribed_topic_names": ["pages"], "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": []})
            assert resp["error_code"] == 0
            tps = resp["assignment"]["topic_partitions"]
            # acknowledge the assignment so the member (and the group) is Stable
            resp = c.request(HEARTBEAT, 1, {
                "group_id": "page-group", "member_id": "m1", "member_epoch": resp["member_epoch"],
                "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
                "subscribed_topic_names": None, "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": tps})
            assert resp["error_code"] == 0
            resp = c.request(8, 8, {
                "group_id": "lagging-group", "generation_id_or_member_epoch": -1,
                "member_id": "", "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": "pages", "partitions": [
                    {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                     "commit_timestamp": -1, "committed_metadata": ""}]}]})
            assert resp["topics"][0]["partitions"][0]["error_code"] == 0
        port = http_port(server)
        wait_for(lambda: any(r["group"] == "page-group"
                             for r in get_json(port, "/status.json")[1]["recent_rebalances"]),
                 "the rebalance of page-group on /status.json", timeout=30)
        yield server, port
    finally:
        server.stop()


def test_burrow_badge_and_partition_view(busy_server):
    server, port = busy_server
    _, snap = get_json(port, "/status.json")
    by_group = {g["group"]: g for g in snap["groups"]}
    # lagging-group committed 0 on a partition with no records: caught up, OK;
    # page-group never committed: no verdict
    assert by_group["lagging-group"]["burrow"] == "OK"
    assert by_group["page-group"]["burrow"] is None
    _, detail = get_json(port, "/status.json?group=lagging-group")
    assert detail["group"] == "lagging-group" and detail["burrow"] == "OK"
    [row] = detail["partitions"]
    assert (row["topic"], row["partition"], row["committed"], row["lag"], row["burrow"]) == (
        "pages", 0, 0, 0, "OK")
    assert row["last_commit"] <= detail["time"]
    _, page, _ = get(port, "/")
    assert b"toISOString" in page and b"' UTC'" in page and b'id="partitions"' in page


def test_status_page_in_headless_chromium(busy_server, tmp_path):
    browser = _chromium()
    server, port = busy_server
    out = subprocess.run(_chromium_args(browser, tmp_path)
                         + ["--dump-dom", f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=180)
    dom = out.stdout
    assert 'data-loaded="1"' in dom, (out.returncode, out.stderr[-2000:], dom[:2000])
    groups = dom[dom.index('id="groups"'):dom.index('id="rebalances"')]
    rebalances = dom[dom.index('id="rebalances"'):]
    # one row per group, with its protocol, state and members
    assert "<td>page-group</td><td>consumer</td><td class=\"Stable\">Stable</td>" in groups
    assert "<td>lagging-group</td><td>simple</td>" in groups
    # the recent rebalance of page-group, with its reason
    assert "<td>page-group</td><td>consumer</td>" in rebalances
    assert "member m1 joined" in rebalances
    assert "groups, " in dom[dom.index('id="meta"'):][:300]  # the summary line was filled


@pytest.mark.skipif(not os.environ.get("KCOORD_STATUS_SCREENSHOT"),
                    reason="set KCOORD_STATUS_SCREENSHOT=/path/to/shot.png to take a screenshot")
def test_status_page_screenshot(busy_server, tmp_path):
    browser = _chromium()
    server, port = busy_server
    path = os.environ["KCOORD_STATUS_SCREENSHOT"]
    subprocess.run(_chromium_args(browser, tmp_path)
                   + ["--window-size=1100,600", f"--screenshot={path}",
                      f"http://127.0.0.1:{port}/"],
                   capture_output=True, text=True, timeout=180)
    assert os.path.getsize(path) > 10_000
