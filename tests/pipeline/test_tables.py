"""Every table of a batch run against values computed in plain Python from the same log."""
from __future__ import annotations

import base64
import json
import bisect
import math
import time
from collections import Counter

import pytest

from . import reference as ref
from .conftest import read_table



@pytest.fixture(scope="module")
def expected(batch_run):
    data, out, summary, manifest = batch_run
    rows, bad = ref.read_log(data)
    ends = ref.LogEnds(data)
    as_of = ref.data_time(rows, ends)
    return {"rows": rows, "bad": bad, "ends": ends, "as_of": as_of}


def _date(ms: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ms / 1000))


def test_as_of_is_the_newest_timestamp_in_the_data(batch_run, expected):
    _, _, summary, _ = batch_run
    assert summary["as_of"] == expected["as_of"]


def test_commits_table_holds_every_offset_commit(batch_run, expected):
    _, out, _, manifest = batch_run
    got = read_table(out / "commits")
    want = ref.commits(expected["rows"])
    assert len(got) == len(want) > 3000
    cols = ["group", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
            "commit_timestamp", "expire_timestamp", "log_partition", "log_offset",
            "record_timestamp", "value_version", "key_type", "txn"]
    assert Counter(tuple(r[c] for c in cols) for r in got) == \
        Counter(tuple(r[c] for c in cols) for r in want)
    assert all(r["date"] == _date(r["commit_timestamp"]) for r in got)
    # the workload covers every OffsetCommit value version, both key types, transactions
    assert {r["value_version"] for r in got} == {0, 1, 2, 3, 4}
    assert {r["key_type"] for r in got} == {0, 1}
    assert {r["txn"] for r in got} == {None, "committed", "aborted", "open"}


def test_offsets_table_is_what_the_coordinator_loads(batch_run, expected):
    _, out, summary, manifest = batch_run
    got = {(r["group"], r["topic"], r["partition"]): r for r in read_table(out / "offsets")}
    want = ref.offsets(expected["rows"])
    assert set(got) == set(want)
    for k, r in want.items():
        v = r["value"]
        g = got[k]
        assert (g["committed_offset"], g["commit_timestamp"], g["log_offset"],
                g["log_partition"], g["metadata"]) == \
            (v["offset"], v["commit_timestamp"], r["offset"], r["log_partition"],
             v["metadata"] or ""), k
        assert g["leader_epoch"] == (v.get("leader_epoch", -1) if r["version"] >= 3 else -1)
        assert g["date"] == _date(summary["as_of"])
    # tombstones applied: the deleted group and the expired partition are gone
    kinds = {g["name"]: g for g in manifest["groups"]}
    for name, spec in kinds.items():
        for tp, status in spec["expected_partitions"].items():
            topic, p = tp.split("/")
            assert ((name, topic, int(p)) in got) == (status is not None), (name, tp)
    # aborted and open transactions are not applied
    txn = next(g for g in manifest["groups"] if g["kind"] == "txn")
    assert all(got[(txn["name"], t, p)]["committed_offset"] > 100
               for t, p in txn["partitions"])


def test_lag_table(batch_run, expected):
    _, out, summary, _ = batch_run
    got = {(r["group"], r["topic"], r["partition"]): r for r in read_table(out / "lag")}
    want, _, _ = ref.lag_and_status(expected["rows"], expected["ends"], expected["as_of"])
    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        assert (g["committed_offset"], g["log_end_offset"], g["lag"], g["commit_timestamp"]) == \
            (w["committed_offset"], w["log_end_offset"], w["lag"], w["commit_timestamp"]), k
        if w["lag_seconds"] is None:
            assert g["lag_seconds"] is None, k
        else:
            assert math.isclose(g["lag_seconds"], w["lag_seconds"], rel_tol=1e-9), k
        # at the newest time in the data the log end is the partition's current log end
        assert g["log_end_offset"] == expected["ends"].current[(k[1], k[2])]
        assert g["as_of"] == summary["as_of"]
    assert any(r["lag"] > 0 for r in got.values())
    assert any(r["lag"] == 0 and r["lag_seconds"] == 0.0 for r in got.values())


def test_time_lag_is_the_wait_of_the_first_unconsumed_record(batch_run, expected):
    """Exact time lag: as-of minus the produce timestamp of the record at the committed
    offset, read from the user partition (here: through kcoord's batch decoder)."""
    data, out, summary, _ = batch_run
    records = ref.user_records(data)
    as_of = expected["as_of"]
    lagging = 0
    for r in read_table(out / "lag"):
        tp = (r["topic"], r["partition"])
        want = ref.time_lag_seconds(records[tp], r["committed_offset"], r["lag"], as_of)
        assert r["time_lag_seconds"] == want, r
        if r["lag"]:
            lagging += 1
            i = bisect.bisect_left(records[tp], (r["committed_offset"], -(1 << 63)))
            assert r["first_unconsumed_timestamp"] == records[tp][i][1]
    assert lagging > 10 and summary["time_lag"]["lagging_partitions"] > 0
    groups = {r["group"]: r for r in read_table(out / "status") if r["scope"] == "group"}
    parts = [r for r in read_table(out / "status") if r["scope"] == "partition"]
    for name, g in groups.items():
        mine = [p["time_lag_seconds"] for p in parts if p["group"] == name]
        assert g["time_lag_seconds"] == max(mine)
        assert g["last_commit_timestamp"] == max(p["last_commit_timestamp"] for p in parts
                                                 if p["group"] == name)


def test_status_table_matches_burrows_rules(batch_run, expected):
    _, out, _, _ = batch_run
    rows = read_table(out / "status")
    _, parts, groups = ref.lag_and_status(expected["rows"], expected["ends"], expected["as_of"])
    got_parts = {(r["group"], r["topic"], r["partition"]): r for r in rows
                 if r["scope"] == "partition"}
    got_groups = {r["group"]: r for r in rows if r["scope"] == "group"}
    assert set(got_parts) == set(parts)
    for k, w in parts.items():
        g = got_parts[k]
        assert (g["status"], g["complete"], g["window_commits"], g["start_offset"],
                g["end_offset"]) == (w["status"], w["complete"], w["window_commits"],
                                     w["start_offset"], w["end_offset"]), k
    assert set(got_groups) == set(groups)
    for name, w in groups.items():
        g = got_groups[name]
        assert (g["status"], g["partitions"], g["current_lag"], g["complete"]) == \
            (w["status"], w["partitions"], w["current_lag"], w["complete"]), name


def test_each_burrow_status_comes_from_a_group_built_to_show_it(batch_run):
    _, out, _, manifest = batch_run
    rows = read_table(out / "status")
    groups = {r["group"]: r["status"] for r in rows if r["scope"] == "group"}
    parts = {(r["group"], f"{r['topic']}/{r['partition']}"): r["status"] for r in rows
             if r["scope"] == "partition"}
    seen = set()
    for spec in manifest["groups"]:
        assert groups.get(spec["name"]) == spec["expected_status"], spec["name"]
        for tp, status in spec["expected_partitions"].items():
            assert parts.get((spec["name"], tp)) == status, (spec["name"], tp)
            seen.add(status)
        seen.add(spec["expected_status"])
    assert {"OK", "WARN", "ERR", "STOP", "STALL", "REWIND"} <= seen


def test_group_generations_table(batch_run, expected):
    data, out, _, _ = batch_run
    got = read_table(out / "group_generations")
    want = ref.generations(expected["rows"])
    names = {base64.urlsafe_b64encode(bytes.fromhex(t["id"])).decode().rstrip("="): t["name"]
             for t in json.loads((data / "kcoord-topics.json").read_text())["topics"]}
    by_key = {(r["group"], r["group_type"], r["generation"]): r for r in got}
    assert len(by_key) == len(got)
    assert set(by_key) == {(w["group"], w["group_type"], w["generation"]) for w in want}
    for w in want:
        g = by_key[(w["group"], w["group_type"], w["generation"])]
        members = {m["member_id"]: m for m in g["members"]}
        assert set(members) == set(w["members"]) and g["member_count"] == len(members)
        for mid, asg in w["members"].items():
            got_asg = sorted((a["topic"], tuple(a["partitions"]))
                             for a in members[mid]["assignment"] or []) \
                if members[mid]["assignment"] is not None else None
            if w["group_type"] == "consumer":
                asg = sorted((names[base64.urlsafe_b64encode(t).decode().rstrip("=")], p)
                             for t, p in asg)
            assert got_asg == asg, (w["group"], w["generation"], mid)
        if w["group_type"] == "classic":
            assert (g["protocol"], g["leader"]) == (w["protocol"], w["leader"])
        assert g["date"] == _date(g["timestamp"])
    types = Counter(r["group_type"] for r in got)
    assert types["classic"] > 5 and types["consumer"] == 3


def test_summary_reports_bad_input_and_goes_on(batch_run, expected):
    _, out, summary, manifest = batch_run
    assert summary["bad_input"] == expected["bad"] == {
        "crc_mismatch": 1, "truncated_tail": 1, "unknown_record_type": 1,
        "unknown_record_version": 1}
    assert summary["bad_input_total"] == 4
    kinds = {d["error"] for d in summary["bad_input_details"]}
    assert kinds == set(expected["bad"])
    assert json.loads((out / "summary.json").read_text())["bad_input"] == summary["bad_input"]
    decoded = Counter(r.get("type") for r in expected["rows"] if r["control"] is None)
    assert sum(summary["records_by_type"].values()) == sum(decoded.values())
    assert summary["records_by_type"]["offset_commit_v0_key"] == decoded[0]
    assert summary["control_records"] == sum(1 for r in expected["rows"]
                                             if r["control"] is not None)
    assert summary["table_rows"]["commits"] == len(ref.commits(expected["rows"]))


def test_report_has_plots_and_the_status_table(batch_run):
    _, out, summary, manifest = batch_run
    page = (out / "report.html").read_text()
    assert "Generations / epochs started per" in page
    # one lag plot per group that is not OK, each titled with the group's name
    problem = [s["name"] for s in manifest["groups"]
               if s["expected_status"] not in (None, "OK")]
    assert len(problem) >= 4
    assert page.count('role="img" aria-label="lag of ') == len(problem)
    for name in problem:
        assert f'aria-label="lag of {name}"' in page
    for spec in manifest["groups"]:
        if spec["expected_status"]:
            assert f"<td>{spec['name']}</td>" in page
        else:  # deleted: not reported anywhere
            assert spec["name"] not in page, spec["name"]
    # statuses as text and badges, never a Python dict; times with their date and UTC
    assert "{'" not in page and "{&#x27;" not in page
    assert summary["as_of_utc"].replace("T", " ").rstrip("Z") + " UTC" in page
    assert "crc_mismatch" in page


def test_report_axes_are_round_and_whole(batch_run):
    from kcoord.pipeline.report import fmt_duration, round_width
    _, out, _, _ = batch_run
    page = (out / "report.html").read_text()
    import re
    per = re.search(r"Generations / epochs started per ([^(]+) \(", page).group(1).strip()
    assert per in ("min", "2 min", "5 min", "10 min", "15 min", "30 min", "h", "2 h", "3 h",
                   "6 h", "12 h", "day"), per
    bars = re.search(r'aria-label="Generations.*?</svg>', page, re.S).group(0)
    ticks = re.findall(r'text-anchor="end">([^<]+)</text>', bars)
    assert ticks and all(t.replace(",", "").isdigit() for t in ticks), ticks
    assert round_width(50 * 60_000, 60) == 60_000 and round_width(3 * 86_400_000, 60) == 7_200_000
    assert [fmt_duration(s) for s in (0, 59, 61, 3600 * 3 + 720, 86400 * 2 + 3600)] == \
        ["0 s", "59 s", "1 min 1 s", "3 h 12 min", "2 d 1 h"]


def test_rerun_replaces_its_dates_only(spark, batch_run, tmp_path):
    """A second run into the same out dir gives the same tables (no duplicates)."""
    from kcoord.pipeline.jobs import run_pipeline
    data, out, summary, _ = batch_run
    before = {t: sorted(map(str, read_table(out / t))) for t in ("offsets", "status")}
    run_pipeline(spark, data, out, report=False, log=lambda *_: None)
    after = {t: sorted(map(str, read_table(out / t))) for t in ("offsets", "status")}
    assert before == after
