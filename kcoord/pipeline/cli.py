"""`kcoord pipeline run | stream | generate`."""
from __future__ import annotations

import argparse
import json
import sys
import time


def add_parser(sub) -> None:
    p = sub.add_parser("pipeline", help="consumer-lag and group-health analytics on Spark")
    ps = p.add_subparsers(dest="pipeline_command", required=True)

    run = ps.add_parser("run", help="read a data dir once and write every table and the report")
    _common(run)
    run.add_argument("--split", choices=["partition", "segment"], default="partition",
                     help="one Spark input partition per log partition or per segment file")
    run.add_argument("--no-report", action="store_true", help="skip the HTML report")

    st = ps.add_parser("stream", help="keep `lag` and `status` current with Structured Streaming")
    _common(st)
    st.add_argument("--checkpoint", help="checkpoint dir (default OUT/_checkpoint)")
    st.add_argument("--trigger-seconds", type=float, default=10.0)
    st.add_argument("--clock", choices=["wall", "data"], default="wall",
                    help="evaluate at the wall clock, or at the newest timestamp in the data")
    st.add_argument("--max-batches", type=int, default=None,
                    help="stop after this many micro-batches (default: run until interrupted)")
    st.add_argument("--until-idle", type=float, default=None, metavar="SECONDS",
                    help="stop once no new records arrived for this long")

    gen = ps.add_parser("generate", help="write a synthetic workload with known answers")
    gen.add_argument("--data-dir", required=True)
    gen.add_argument("--groups", type=int, default=24)
    gen.add_argument("--topics", type=int, default=4)
    gen.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    gen.add_argument("--partitions-per-group", type=int, default=4)
    gen.add_argument("--commits", type=int, default=20000,
                     help="offset commit records to write (rounded up to whole ticks)")
    gen.add_argument("--log-partitions", type=int, default=8,
                     help="__consumer_offsets partitions (kcoord serve uses 50)")
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--interval-ms", type=int, default=60000)
    gen.add_argument("--rate", type=int, default=50, help="records produced per partition per tick (min)")
    gen.add_argument("--segment-bytes", type=int, default=64 << 20)
    gen.add_argument("--start-ms", type=int, default=1_700_000_000_000)
    gen.add_argument("--corrupt", action="store_true",
                     help="also write a bad-CRC batch, an unknown record version and type, a torn tail")
    gen.add_argument("--workers", type=int, default=1, help="processes writing log partitions")
    gen.add_argument("--session-timeout-ms", type=int, default=45000,
                     help="classic members' session timeout (a server loading the log expires "
                          "them that long after it starts)")


def _common(p) -> None:
    p.add_argument("--data-dir", default=None, help="kcoord data dir to read")
    p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,HOST:PORT]",
                   help="read __consumer_offsets and the log ends over the Kafka protocol from "
                        "a running kcoord, kcoord cluster or Kafka (no data dir needed)")
    p.add_argument("--command-config", default=None, metavar="FILE",
                   help="Kafka client properties for --bootstrap-server (security.protocol, ...)")
    p.add_argument("--client-property", action="append", default=[], metavar="KEY=VALUE",
                   help="one Kafka client property (repeatable; wins over --command-config)")
    p.add_argument("--out", required=True, help="where tables, report and summary go")
    p.add_argument("--master", default=None, help="Spark master (default local[*]; spark://HOST:7077)")
    p.add_argument("--bootstrap", default=None,
                   help="with --data-dir: read the log ends from a running kcoord (HOST:PORT)")
    p.add_argument("--as-of", type=int, default=None,
                   help="evaluation time, ms since the epoch (default: newest timestamp in the data)")
    p.add_argument("--window", type=int, default=10, help="commits per partition Burrow looks at")
    p.add_argument("--allowed-lag", type=int, default=0)
    p.add_argument("--min-distance", type=int, default=1, metavar="S",
                   help="Burrow's min-distance: a commit sooner than this after the previous "
                        "one takes its slot in the window")
    p.add_argument("--refresh-ms", type=int, default=10000,
                   help="Burrow's log-end sampling interval for the 'recently caught up' check")
    p.add_argument("--shuffle-partitions", type=int, default=None)
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's progress bars and WARN lines (off by default)")
    p.add_argument("--spark-ui", action="store_true",
                   help="start Spark's web UI (off by default)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting (repeatable)")


def _settings(args):
    from .jobs import Settings
    return Settings(intervals=args.window, refresh_ms=args.refresh_ms,
                    allowed_lag=args.allowed_lag, min_distance_s=args.min_distance)


def _session(args, app: str):
    from .session import build_session
    conf = dict(kv.split("=", 1) for kv in args.conf)
    return build_session(args.master, app, args.shuffle_partitions, conf,
                         verbose=args.verbose, ui=args.spark_ui)


def main(args) -> int:
    from .preflight import InputError, check_inputs, client_properties
    cmd = args.pipeline_command
    if cmd in ("run", "stream"):
        try:
            props = client_properties(args.command_config, args.client_property)
            check_inputs(args.data_dir, args.bootstrap_server, props, args.bootstrap,
                         allow_empty=(cmd == "stream"))
        except InputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        args.client_properties = props
    if cmd == "generate":
        from .generate import generate
        t0 = time.time()
        manifest = generate(args.data_dir, groups=args.groups, topics=args.topics,
                            partitions=args.partitions, commits=args.commits,
                            log_partitions=args.log_partitions, seed=args.seed,
                            interval_ms=args.interval_ms, rate=args.rate,
                            partitions_per_group=args.partitions_per_group,
                            segment_bytes=args.segment_bytes, start_ms=args.start_ms,
                            corrupt=args.corrupt, workers=args.workers,
                            session_timeout_ms=args.session_timeout_ms)
        print(json.dumps({"data_dir": args.data_dir, "ticks": manifest["ticks"],
                          "records": manifest["records"],
                          "seconds": round(time.time() - t0, 2)}, indent=1))
        return 0
    if cmd == "run":
        from .jobs import run_pipeline
        spark = _session(args, "kcoord-pipeline-run")
        try:
            summary = run_pipeline(spark, args.data_dir, args.out, as_of=args.as_of,
                                   bootstrap=args.bootstrap,
                                   bootstrap_server=args.bootstrap_server,
                                   client_properties=args.client_properties, split=args.split,
                                   settings=_settings(args), report=not args.no_report)
        finally:
            spark.stop()
        brief = {k: summary[k] for k in ("as_of_utc", "records", "records_by_type", "tombstones",
                                         "bad_input", "table_rows", "statuses", "elapsed_s")}
        print(json.dumps(brief, indent=1))
        if summary["bad_input_total"]:
            print(f"warning: {summary['bad_input_total']} bad input items skipped "
                  f"(see {args.out}/summary.json)", file=sys.stderr)
        if not summary["records"]:
            print("error: the log holds no readable records (every batch was bad input)",
                  file=sys.stderr)
            return 3
        from pathlib import Path
        print(f"summary: {Path(args.out, 'summary.json').resolve()}")
        if not args.no_report:
            print(f"report: {Path(args.out, 'report.html').resolve()}")
        return 0
    if cmd == "stream":
        from .stream import run_stream
        spark = _session(args, "kcoord-pipeline-stream")
        try:
            run_stream(spark, args.data_dir, args.out, checkpoint=args.checkpoint,
                       bootstrap=args.bootstrap, bootstrap_server=args.bootstrap_server,
                       client_properties=args.client_properties, settings=_settings(args),
                       trigger_seconds=args.trigger_seconds, clock=args.clock,
                       as_of=args.as_of, max_batches=args.max_batches,
                       until_idle=args.until_idle)
        finally:
            spark.stop()
        return 0
    return 2


def standalone(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kcoord")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(standalone())
