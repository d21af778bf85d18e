"""bench/results/README.md's regeneration: a run rewrites the rows of the
benchmarks it ran and keeps every other row's text, hand notes included."""
from __future__ import annotations

import json
import os

import pytest

from bench import summary


def _headline(path, label: str, figure: str, date: str) -> None:
    """A JSON of the shape the headline benchmarks write (summary rows)."""
    path.write_text(json.dumps({"machine": {"date": date},
                                "summary": [[label, figure, "< 10 s", "met"]]}))


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(summary, "RESULTS", tmp_path)
    _headline(tmp_path / "security.json", "security row", "1.0 s", "day 1")
    _headline(tmp_path / "snapshot_restart.json", "restart row", "2.0 s", "day 1")
    summary.write()
    readme = tmp_path / "README.md"
    # notes written by hand into both rows, and a row no JSON gives
    text = (readme.read_text().replace("| 1.0 s |", "| 1.0 s (compiled, load 3) |")
            .replace("| 2.0 s |", "| 2.0 s (quiet machine) |"))
    readme.write_text(text + "| hand row | 5 | - | - | day 0 |\n")
    return tmp_path


def _rows(path) -> dict[str, list[str]]:
    out = {}
    for line in (path / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 5:
            out[cells[0]] = cells
    return out


def test_a_run_rewrites_only_the_rows_of_what_it_ran(results):
    before = summary.json_stamps()
    _headline(results / "snapshot_restart.json", "restart row", "3.0 s", "day 2")
    os.utime(results / "snapshot_restart.json", ns=(before["snapshot_restart"] + 10**9,) * 2)
    changed = summary.changed_since(before)
    assert changed == ["snapshot_restart"]
    summary.write(changed)
    rows = _rows(results)
    assert rows["restart row"][1:] == ["3.0 s", "< 10 s", "met", "day 2"]
    # the row of a benchmark that did not run keeps its hand note
    assert rows["security row"][1] == "1.0 s (compiled, load 3)"
    assert rows["hand row"][1] == "5"
    assert list(rows)[1:] == ["security row", "restart row", "hand row"]  # order kept


def test_a_full_regeneration_rewrites_every_row_a_json_gives(results):
    summary.write()
    rows = _rows(results)
    assert rows["security row"][1] == "1.0 s"
    assert rows["restart row"][1] == "2.0 s"
    assert rows["hand row"][1] == "5"


def test_a_run_whose_json_gives_no_row_leaves_the_readme_as_it_is(results):
    # (a fault run writes faults.json, which no README row reads)
    text = (results / "README.md").read_text()
    summary.write(summary.changed_since(summary.json_stamps()))
    summary.write(["faults"])
    assert (results / "README.md").read_text() == text


def test_a_partial_rerun_rewrites_only_the_rows_whose_figures_changed(tmp_path, monkeypatch):
    # one JSON, two rows (as `bench compiled --rows X` rewrites compiled.json
    # whole, the rows it did not run unchanged but for the run date)
    monkeypatch.setattr(summary, "RESULTS", tmp_path)

    def two(first: str, date: str) -> None:
        (tmp_path / "security.json").write_text(json.dumps({
            "machine": {"date": date},
            "summary": [["row a", first, "-", "-"], ["row b", "7 us", "-", "-"]]}))

    two("1 us", "day 1")
    summary.write()
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("| 7 us |", "| 7 us (load 2, at abc) |"))
    shown, stamps = summary.figures(), summary.json_stamps()
    two("2 us", "day 2")
    os.utime(tmp_path / "security.json", ns=(stamps["security"] + 10**9,) * 2)
    summary.write(summary.changed_since(stamps), shown)
    rows = _rows(tmp_path)
    assert rows["row a"][1:] == ["2 us", "-", "-", "day 2"]
    assert rows["row b"][1:] == ["7 us (load 2, at abc)", "-", "-", "day 1"]


def test_produce_rows_beside_the_mock_include_the_kcoord_that_keeps_as_little():
    def phase(mb_s, cpu):
        return {"mb_per_s": mb_s, "server_cpu_s_per_gb": cpu}

    pf = {"machine": {"date": "day 2"}, "results": {
        "kcoord": {"produce_acks_1": phase(600, 0.6), "produce_acks_all": phase(500, 0.9)},
        "kcoord-recycled": {"produce_acks_1": phase(720, 0.3),
                            "produce_acks_all": phase(650, 0.5)},
        "mock": {"produce_acks_1": phase(700, 0.2), "produce_acks_all": phase(690, 0.2)}}}
    rows = {r[0]: r for r in summary._produce_vs_mock_rows(pf)}
    same_work = [r for label, r in rows.items() if "only its newest segments" in label]
    assert len(same_work) == 2
    acks_1, acks_all = same_work
    # ahead and 1.5x the mock's CPU: met; behind the mock and 2.5x its CPU: missed
    assert acks_1[1].startswith("kcoord 720") and "1.5x" in acks_1[1] and acks_1[3] == "met"
    assert acks_all[3] == "MISSED" and "2.5x" in acks_all[1]
    # without the second kcoord, only the plain rows
    del pf["results"]["kcoord-recycled"]
    assert not [r for r in summary._produce_vs_mock_rows(pf) if "newest" in r[0]]


def test_the_cluster_transactions_goal_is_judged_by_the_interleaved_rounds_ratios(tmp_path,
                                                                                 monkeypatch):
    """Each round's single node and cluster ran under the same load: the
    median of those ratios judges the goal, not the ratio of the two
    setups' medians (the single node's rate moves with the load)."""
    monkeypatch.setattr(summary, "RESULTS", tmp_path)

    def run(single: list, cluster: list, ratios=None) -> list:
        body = {"machine": {"date": "day 1"},
                "results": {"single node": [{"txn_s": x} for x in single],
                            "3-node cluster (rf 3)": [{"txn_s": x} for x in cluster]}}
        if ratios is not None:
            body["round_ratios"] = ratios
        (tmp_path / "cluster_transactions.json").write_text(json.dumps(body))
        return summary._transaction_rows()[0]

    # the medians' ratio reads 55% (110 / 200); the rounds' own ratios 40%
    row = run([100, 200, 300], [40, 150, 110], [0.40, 0.75, 110 / 300])
    assert row[3] == "MISSED" and "median 40%" in row[1]
    assert run([100, 200, 300], [40, 150, 110])[3] == "met"    # a run without them
    assert run([100, 100, 100], [55, 60, 50], [0.55, 0.6, 0.5])[3] == "met"
