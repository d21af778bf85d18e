"""`kcoord cluster up` (a local cluster: one etcd member and N nodes, each
its own process) and `kcoord cluster status` (nodes, controller, and per
partition leader / ISR / under-replicated, read through Metadata)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NODE_START_TIMEOUT_S = 60.0
NODE_STOP_TIMEOUT_S = 30.0


def add_parser(sub) -> None:
    cluster = sub.add_parser("cluster", help="run or inspect a kcoord cluster")
    csub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = csub.add_parser("up", help="start etcd and N nodes on 127.0.0.1 until stopped")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--data-dir", required=True)
    up.add_argument("--base-port", type=int, default=9092,
                    help="node i listens on base-port + i - 1")
    up.add_argument("--http-base-port", type=int, default=None,
                    help="node i serves http.listen (/metrics, Burrow's API, status page) on "
                         "http-base-port + i - 1 (default base-port + 552: 9644 for 9092; "
                         "0: no HTTP endpoint)")
    up.add_argument("--etcd-port", type=int, default=0,
                    help="etcd's client port (default: a free one)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override passed to every node (repeatable)")
    up.add_argument("--etcd-cert-file", metavar="PEM",
                    help="serve etcd's client port over TLS with this certificate "
                         "(with --etcd-key-file); nodes get etcd.ssl.client.enable=true")
    up.add_argument("--etcd-key-file", metavar="PEM", help="the private key of --etcd-cert-file")
    up.add_argument("--etcd-trusted-ca-file", metavar="PEM",
                    help="etcd accepts only clients with a certificate this CA signed "
                         "(--client-cert-auth); nodes trust it as etcd.ssl.truststore.location "
                         "and need etcd.ssl.keystore.location (--set)")
    status = csub.add_parser("status", help="nodes, controller and partition leaders and ISRs")
    status.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    status.add_argument("--under-replicated", action="store_true",
                        help="list only partitions whose ISR is smaller than their replicas")


def main(args) -> int:
    if args.cluster_command == "up":
        from .etcd_server import EtcdServerTls
        if bool(args.etcd_cert_file) != bool(args.etcd_key_file) or \
                (args.etcd_trusted_ca_file and not args.etcd_cert_file):
            print("kcoord cluster up: --etcd-cert-file and --etcd-key-file go together "
                  "(and --etcd-trusted-ca-file needs them)", file=sys.stderr)
            return 2
        tls = None
        if args.etcd_cert_file:
            ca = args.etcd_trusted_ca_file
            tls = EtcdServerTls(Path(args.etcd_cert_file).resolve(),
                                Path(args.etcd_key_file).resolve(),
                                Path(ca).resolve() if ca else None)
        http_base = args.base_port + 552 if args.http_base_port is None else args.http_base_port
        return cluster_up(Path(args.data_dir), args.nodes, args.base_port, args.etcd_port,
                          args.set, tls, http_base)
    return cluster_status(args.bootstrap_server, args.under_replicated)


# ------------------------------------------------------------------- up
def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port_outside(reserved: set[int]) -> int:
    """A free port (the kernel's choice) that is none of `reserved`: the
    nodes' ports, checked free but not yet bound when etcd starts, so the
    kernel may hand one of them to etcd (a random --base-port in the
    ephemeral range: a node then fails with "address already in use")."""
    from .etcd_server import free_port
    for _ in range(100):
        port = free_port()
        if port not in reserved:
            return port
    raise RuntimeError("no free port outside the nodes' ports")


def cluster_up(data_dir: Path, nodes: int, base_port: int, etcd_port: int,
               overrides: list[str], tls=None, http_base: int = 0) -> int:
    from .etcd_server import EtcdServer
    if nodes < 1:
        print("kcoord cluster up: --nodes must be at least 1", file=sys.stderr)
        return 2
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    busy = [base_port + i for i in range(nodes) if _port_open(base_port + i)]
    if busy:
        print(f"kcoord cluster up: port(s) {busy} already in use (--base-port)", file=sys.stderr)
        return 1
    busy = [http_base + i for i in range(nodes) if http_base and _port_open(http_base + i)]
    if busy:
        print(f"kcoord cluster up: port(s) {busy} already in use (--http-base-port)",
              file=sys.stderr)
        return 1
    stop = {"now": False}

    def on_signal(_signum, _frame):
        stop["now"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        reserved = {base_port + i for i in range(nodes)}
        reserved |= {http_base + i for i in range(nodes) if http_base}
        client_port = etcd_port or free_port_outside(reserved)
        etcd = EtcdServer(data_dir / "etcd", client_port=client_port,
                          peer_port=free_port_outside(reserved | {client_port}), tls=tls).start()
    except (OSError, RuntimeError) as exc:
        print(f"kcoord cluster up: {exc}", file=sys.stderr)
        return 1
    procs: list[tuple[int, subprocess.Popen, Path, int]] = []
    try:
        for node_id in range(1, nodes + 1):
            port = base_port + node_id - 1
            node_dir = data_dir / f"node-{node_id}"
            cmd = [sys.executable, "-m", "kcoord.cli", "serve", "--listen", f"127.0.0.1:{port}",
                   "--data-dir", str(node_dir), "--set", f"node.id={node_id}",
                   "--set", f"etcd.endpoints={etcd.endpoint}"]
            if http_base:  # before the overrides: a --set http.listen wins
                cmd += ["--set", f"http.listen=127.0.0.1:{http_base + node_id - 1}"]
            if tls is not None:  # before the overrides: a --set of the same key wins
                cmd += ["--set", "etcd.ssl.client.enable=true"]
                if tls.trusted_ca_file is not None:
                    cmd += ["--set", f"etcd.ssl.truststore.location={tls.trusted_ca_file}"]
            for item in overrides:
                cmd += ["--set", item]
            log = open(data_dir / f"node-{node_id}.log", "ab")
            # own session: a Ctrl-C reaches only this command, which stops the nodes in order
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            log.close()
            procs.append((node_id, proc, node_dir, port))
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        for node_id, proc, _, port in procs:
            while not _port_open(port):
                if proc.poll() is not None or time.monotonic() > deadline or stop["now"]:
                    print(f"kcoord cluster up: node {node_id} did not start; see "
                          f"{data_dir / f'node-{node_id}.log'}", file=sys.stderr)
                    return 1
                time.sleep(0.1)
        doc = {"etcd": [etcd.endpoint],
               "nodes": [{"id": node_id, "listen": f"127.0.0.1:{port}", "pid": proc.pid,
                          "data_dir": str(node_dir)} for node_id, proc, node_dir, port in procs]}
        tmp = data_dir / "cluster.json.tmp"
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, data_dir / "cluster.json")
        bootstrap = ",".join(f"127.0.0.1:{port}" for _, _, _, port in procs)
        print(f"etcd {etcd.endpoint}; {nodes} node(s) up; logs and data in {data_dir}")
        if http_base:  # metrics, Burrow's API and the status page of each node
            print("http: " + " ".join(f"http://127.0.0.1:{http_base + i}/" for i in range(nodes)))
        print(f"bootstrap.servers={bootstrap}", flush=True)
        while not stop["now"]:
            for node_id, proc, _, _ in procs:
                if proc.poll() is not None and not getattr(proc, "_reported", False):
                    proc._reported = True
                    print(f"node {node_id} exited with code {proc.returncode}", file=sys.stderr)
            time.sleep(0.2)
        return 0
    finally:
        _stop_nodes(procs)
        etcd.stop()
        print("cluster stopped", flush=True)


def _stop_nodes(procs) -> None:
    """SIGTERM every node (each hands its leaderships over: controlled
    shutdown), wait bounded, then kill what is left."""
    for _, proc, _, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + NODE_STOP_TIMEOUT_S
    for _, proc, _, _ in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# --------------------------------------------------------------- status
def _request(host: str, port: int, api_key: int, version: int, body: dict) -> dict:
    from ..protocol.client import BlockingExchange
    with socket.create_connection((host, port), timeout=10) as sock:
        try:
            return BlockingExchange(sock, "kcoord-cluster-status").call(api_key, version, body)
        except EOFError:
            raise ConnectionError("connection closed by the server") from None


def cluster_status(bootstrap: str, only_under_replicated: bool = False,
                   out=sys.stdout) -> int:
    host, _, port = bootstrap.rpartition(":")
    try:
        meta = _request(host or "127.0.0.1", int(port), 3, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})
    except (OSError, ValueError) as exc:
        print(f"kcoord cluster status: {bootstrap}: {exc}", file=sys.stderr)
        return 1
    print("nodes:", file=out)
    for b in sorted(meta["brokers"], key=lambda b: b["node_id"]):
        print(f"  {b['node_id']}  {b['host']}:{b['port']}", file=out)
    print(f"controller: {meta['controller_id']}", file=out)
    rows = []
    under = 0
    for t in sorted(meta["topics"], key=lambda t: t["name"] or ""):
        for p in sorted(t["partitions"], key=lambda p: p["partition_index"]):
            lagging = len(p["isr_nodes"]) < len(p["replica_nodes"]) or p["leader_id"] < 0
            under += lagging
            if only_under_replicated and not lagging:
                continue
            rows.append((t["name"], p["partition_index"], p["leader_id"], p["leader_epoch"],
                         ",".join(map(str, p["replica_nodes"])),
                         ",".join(map(str, p["isr_nodes"])), "yes" if lagging else "no"))
    header = ("TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "UNDER-REPLICATED")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip(), file=out)
    print(f"{under} under-replicated partition(s)", file=out)
    return 0
