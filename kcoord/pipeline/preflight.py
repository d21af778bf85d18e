"""Checks of the pipeline's input before Spark starts: a bad data dir, an
unreachable server or a topic the pipeline cannot read is one clear line and a
non-zero exit, never a run that writes empty tables."""
from __future__ import annotations

import os
from pathlib import Path

from kcoord.protocol.client_config import ClientConfigError, read_properties

from kcoord.protocol.internal_topics import OFFSETS_TOPIC

from .segments import partition_dirs, segment_files


class InputError(Exception):
    """Input the pipeline cannot run on (the message is the one line shown)."""


def client_properties(command_config: str | None, pairs: list[str]) -> dict[str, str]:
    try:
        props = read_properties(command_config) if command_config else {}
    except ClientConfigError as exc:
        raise InputError(f"--command-config: {exc}") from None
    for item in pairs or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--client-property expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def check_data_dir(data_dir, allow_empty: bool = False) -> None:
    path = Path(data_dir)
    if not path.exists():
        raise InputError(f"data dir {path} does not exist")
    if not path.is_dir():
        raise InputError(f"data dir {path} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"data dir {path} cannot be read (permission denied)")
    parts = partition_dirs(path)
    if not parts:
        raise InputError(f"data dir {path} holds no {OFFSETS_TOPIC} log "
                         f"(no {OFFSETS_TOPIC}-<n> directories): is it a kcoord data dir?")
    if allow_empty:
        return
    for _, directory in parts:
        for _, seg in segment_files(directory):
            try:
                if seg.stat().st_size > 0:
                    return
            except OSError:
                continue
    raise InputError(f"data dir {path} has an empty {OFFSETS_TOPIC} log: no records to analyse")


def check_server(bootstrap: str, props: dict, topic: str = OFFSETS_TOPIC,
                 allow_empty: bool = False) -> None:
    from .wire import EARLIEST, LATEST, Cluster, WireError
    cluster = None
    try:
        cluster = Cluster(bootstrap, props, timeout=15.0)
        cluster.refresh([topic])
        parts = sorted(cluster.partitions(topic))
        if not parts:
            raise InputError(f"topic {topic} on {bootstrap} has no partitions")
        ends = cluster.list_offsets(topic, parts, LATEST)
        starts = cluster.list_offsets(topic, parts, EARLIEST)
    except WireError as exc:
        raise InputError(f"bootstrap server {bootstrap}: {exc}") from None
    finally:
        if cluster is not None:
            cluster.close()
    if not allow_empty and all(ends[p] <= starts.get(p, 0) for p in ends):
        raise InputError(f"topic {topic} on {bootstrap} is empty: no records to analyse")


def check_inputs(data_dir, bootstrap_server: str | None, props: dict,
                 bootstrap: str | None = None, allow_empty: bool = False) -> None:
    if bootstrap_server and data_dir:
        raise InputError("give --data-dir or --bootstrap-server, not both")
    if not bootstrap_server and not data_dir:
        raise InputError("nothing to read: give --data-dir DIR or --bootstrap-server HOST:PORT")
    if props and not bootstrap_server and not bootstrap:
        raise InputError("client properties apply to --bootstrap-server or --bootstrap only")
    if bootstrap_server:
        check_server(bootstrap_server, props, allow_empty=allow_empty)
    else:
        check_data_dir(data_dir, allow_empty)
    if bootstrap:
        from .wire import Cluster, WireError
        cluster = None
        try:
            cluster = Cluster(bootstrap, props, timeout=15.0)
            cluster.refresh(None)
        except WireError as exc:
            raise InputError(f"--bootstrap {bootstrap}: {exc}") from None
        finally:
            if cluster is not None:
                cluster.close()
