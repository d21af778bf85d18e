"""Host the librdkafka mock cluster (C, bundled in the confluent-kafka wheel)
in a process of its own, through ctypes, so its CPU time can be measured.

    python -m bench.mock_helper [--topic NAME:PARTITIONS ...] [--brokers 1]
                                [--heartbeat-ms MS] [--session-ms MS]

--heartbeat-ms and --session-ms set the mock's KIP-848 consumer-group
heartbeat interval and session timeout.

Prints `BOOTSTRAP <host:port,...>` once the cluster is up, then serves until
its stdin closes.  The process holds one idle producer handle (the mock
cluster needs one) and the mock cluster's own thread.
"""
from __future__ import annotations

import argparse
import ctypes
import sys

from bench.common import librdkafka_path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topic", action="append", default=[])
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--heartbeat-ms", type=int)
    ap.add_argument("--session-ms", type=int)
    args = ap.parse_args()
    path = librdkafka_path()
    if path is None:
        print("ERROR librdkafka not found (pip install confluent-kafka)", flush=True)
        return 1
    lib = ctypes.CDLL(path)
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                               ctypes.c_int]
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms.argtypes = [ctypes.c_void_p,
                                                                           ctypes.c_int]
    lib.rd_kafka_mock_set_group_consumer_session_timeout_ms.argtypes = [ctypes.c_void_p,
                                                                        ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]

    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, 512)
    rk = lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER
    if not rk:
        print(f"ERROR rd_kafka_new: {errstr.value.decode()}", flush=True)
        return 1
    mc = lib.rd_kafka_mock_cluster_new(rk, args.brokers)
    if not mc:
        print("ERROR rd_kafka_mock_cluster_new failed", flush=True)
        return 1
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms(mc, 0)
    if args.heartbeat_ms is not None:
        lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(mc, args.heartbeat_ms)
    if args.session_ms is not None:
        lib.rd_kafka_mock_set_group_consumer_session_timeout_ms(mc, args.session_ms)
    for spec in args.topic:
        name, _, parts = spec.rpartition(":")
        err = lib.rd_kafka_mock_topic_create(mc, name.encode(), int(parts), 1)
        if err:
            print(f"ERROR rd_kafka_mock_topic_create {name}: error {err}", flush=True)
            return 1
    print("BOOTSTRAP " + lib.rd_kafka_mock_cluster_bootstraps(mc).decode(), flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    lib.rd_kafka_mock_cluster_destroy(mc)
    lib.rd_kafka_destroy(rk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
