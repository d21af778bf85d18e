"""The roundrobin server assignor, and custom server assignors from the
`kcoord.assignors` entry points: a tiny package pip-installed (--target) from
a tmp dir, named in group.consumer.assignors, used by a real server."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from kcoord.coordinator.assignors import ASSIGNORS, GroupSpec, MemberSpec, is_homogeneous
from kcoord.coordinator.assignors.spec import AssignorError
from tests.clients.wire import WireClient, create_topic
from tests.support import ServerProcess

HEARTBEAT, DESCRIBE = 68, 69
A, B, C = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16


def _spec(members: dict[str, set]) -> GroupSpec:
    specs = {m: MemberSpec(frozenset(t)) for m, t in members.items()}
    return GroupSpec(specs, is_homogeneous(specs))


def _flat(result) -> dict[str, list]:
    return {m: sorted((t, p) for t, ps in a.items() for p in ps) for m, a in result.items()}


def test_roundrobin_deals_sorted_partitions_to_sorted_members():
    rr = ASSIGNORS["roundrobin"]
    got = _flat(rr(_spec({"m2": {A, B}, "m1": {A, B}, "m3": {A, B}}), {B: 2, A: 3}))
    # partitions A0 A1 A2 B0 B1 dealt to m1 m2 m3 m1 m2
    assert got == {"m1": [(A, 0), (B, 0)], "m2": [(A, 1), (B, 1)], "m3": [(A, 2)]}


def test_roundrobin_heterogeneous_and_edges():
    rr = ASSIGNORS["roundrobin"]
    # m1 only A, m2 A and C: A0->m1, A1->m2, then C: m1 skipped -> m2 takes C0, C1
    got = _flat(rr(_spec({"m1": {A}, "m2": {A, C}}), {A: 2, C: 2}))
    assert got == {"m1": [(A, 0)], "m2": [(A, 1), (C, 0), (C, 1)]}
    assert rr(_spec({}), {}) == {}
    more = _flat(rr(_spec({"a": {A}, "b": {A}, "c": {A}, "d": {A}}), {A: 2}))
    assert more == {"a": [(A, 0)], "b": [(A, 1)], "c": [], "d": []}
    with pytest.raises(AssignorError):
        rr(_spec({"m": {A}}), {})
    # every partition exactly once, balanced within one, for a range of shapes
    for members in range(1, 7):
        for n in range(0, 13):
            res = _flat(rr(_spec({f"m{i}": {A, B} for i in range(members)}), {A: n, B: 3}))
            dealt = sorted(x for v in res.values() for x in v)
            assert dealt == sorted([(A, p) for p in range(n)] + [(B, p) for p in range(3)])
            sizes = [len(v) for v in res.values()]
            assert max(sizes) - min(sizes) <= 1


def _hb(group: str, member: str, assignor: str) -> dict:
    return {"group_id": group, "member_id": member, "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"],
            "subscribed_topic_regex": None, "server_assignor": assignor,
            "topic_partitions": []}


def _join_two(port: int, group: str, assignor: str) -> dict[str, list[int]]:
    """Two members join with ServerAssignor `assignor`; -> each one's target."""
    with WireClient(port) as c:
        for m in ("m1", "m2"):
            resp = c.request(HEARTBEAT, 1, _hb(group, m, assignor))
            assert resp["error_code"] == 0, resp
        desc = c.request(DESCRIBE, 0, {"group_ids": [group],
                                       "include_authorized_operations": False})
    [g] = desc["groups"]
    assert g["error_code"] == 0 and g["assignor_name"] == assignor
    return {m["member_id"]: sorted(p for tp in m["target_assignment"]["topic_partitions"]
                                   for p in tp["partitions"]) for m in g["members"]}


def test_roundrobin_on_a_real_server(tmp_path):
    server = ServerProcess(tmp_path / "data", settings={
        "group.consumer.assignors": "uniform,range,roundrobin"})
    server.start()
    try:
        with WireClient(server.port) as c:
            create_topic(c, "t", 5)
        assert _join_two(server.port, "g", "roundrobin") == {"m1": [0, 2, 4], "m2": [1, 3]}
    finally:
        server.stop()


EXAMPLE = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "kcoord-last-takes-all"
        version = "0.1"

        [project.entry-points."kcoord.assignors"]
        last-takes-all = "kcoord_last_takes_all:assign"
        """,
    "kcoord_last_takes_all/__init__.py": """
        def assign(spec, partitions):
            \"\"\"Every partition to the member with the greatest member id.\"\"\"
            last = max(spec.members)
            return {last: {t: frozenset(range(n)) for t, n in partitions.items()}}
        """,
}


def test_custom_assignor_from_an_installed_package(tmp_path, monkeypatch):
    pkg, site = tmp_path / "pkg", tmp_path / "site"
    for name, text in EXAMPLE.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(textwrap.dedent(text))
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--target", str(site), str(pkg)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip("pip could not build the example package (no setuptools from the "
                    f"package index?): {proc.stderr.strip().splitlines()[-1:]}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    server = ServerProcess(tmp_path / "data", settings={
        "group.consumer.assignors": "uniform,last-takes-all"})
    server.start()
    try:
        assert any("server assignor last-takes-all loaded from kcoord_last_takes_all:assign"
                   in line for line in server.log_lines), server.log_text()
        with WireClient(server.port) as c:
            create_topic(c, "t", 4)
        assert _join_two(server.port, "g", "last-takes-all") == {"m1": [], "m2": [0, 1, 2, 3]}
    finally:
        server.stop()

    # a name no assignor or entry point has: one line naming the key
    bad = subprocess.run([sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
                          "--data-dir", str(tmp_path / "d2"), "--set",
                          "group.consumer.assignors=uniform,nope"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "group.consumer.assignors: ['nope']" in bad.stderr
