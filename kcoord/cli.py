"""The `kcoord` command."""
from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from .admin.commands import add_parsers as add_admin_parsers, version
    parser = argparse.ArgumentParser(prog="kcoord", description="A Kafka-protocol group coordinator")
    parser.add_argument("--version", action="version", version=f"kcoord {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_admin_parsers(sub)
    serve = sub.add_parser("serve", help="serve the Kafka protocol")
    serve.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT (port 0 picks one)")
    serve.add_argument("--data-dir", default="./data")
    serve.add_argument("--config", help="properties file with Kafka's key names")
    serve.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override one config key (repeatable)")
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument("--add-scram", action="append", default=[], metavar="SPEC",
                       help="store a SCRAM credential before serving, as kafka-storage format "
                            "--add-scram: 'SCRAM-SHA-256=[name=alice,password=secret]'")
    from .pipeline.cli import add_parser as add_pipeline_parser
    add_pipeline_parser(sub)
    from .cluster.cli import add_parser as add_cluster_parser
    add_cluster_parser(sub)
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is not None:  # the operator commands
        return args.run(args)
    if args.command == "cluster":
        from .cluster.cli import main as cluster_main
        logging.basicConfig(level="WARNING", stream=sys.stderr)
        return cluster_main(args)
    if args.command == "pipeline":
        from .pipeline.cli import main as pipeline_main
        return pipeline_main(args)
    level = logging.getLevelName(args.log_level.upper())
    if not isinstance(level, int):
        return _startup_error(f"--log-level: {args.log_level!r} is not one of "
                              "CRITICAL, ERROR, WARNING, INFO, DEBUG")
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .log import step_trace
    step_trace.refresh()  # --log-level DEBUG turns the step trace on
    if args.command == "serve":
        from .server.app import StartupError, run
        from .server.config import build_config
        try:
            config = build_config(args.listen, args.data_dir, args.config, args.set)
            if args.add_scram:
                from .security.store import add_scram
                add_scram(config, args.add_scram)
        except ValueError as exc:
            return _startup_error(str(exc))
        except OSError as exc:
            return _startup_error(f"--config {exc.filename or args.config}: "
                                  f"{exc.strerror or exc}")
        try:
            run(config)
        except StartupError as exc:
            return _startup_error(str(exc))
        except ConnectionError as exc:  # cluster mode: etcd unreachable at start
            print(f"kcoord: {exc}", file=sys.stderr)
            return 1
    return 0


def _startup_error(message: str) -> int:
    """One line naming the key, no traceback; exit status 2 (as argparse's)."""
    print(f"kcoord: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
