"""What a Kafka client is given on its command line: the bootstrap server
list and a client properties file.  One reading of each for the operator
CLI (kcoord/admin) and the lag pipeline (which may import only protocol,
log and security's client side); each wraps ClientConfigError in its own
error, whose message is the one line shown."""
from __future__ import annotations

from pathlib import Path


class ClientConfigError(ValueError):
    """A bootstrap list or properties file that cannot be read."""


def parse_bootstrap(text: str | None) -> list[tuple[str, int]]:
    """"host:port,[v6::1]:port,..." -> [(host, port)]; an empty host is 127.0.0.1."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ClientConfigError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ClientConfigError("no bootstrap server given (HOST:PORT)")
    return out


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """Java-properties subset: key=value or key: value (the key ends at the
    first of the two, as in java.util.Properties), # and ! comments."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            raise ClientConfigError(f"{source}: not a key=value line: {line!r}")
        out[line[:min(seps)].strip()] = line[min(seps) + 1:].strip()
    return out


def read_properties(path) -> dict[str, str]:
    """parse_properties of a file; ClientConfigError if it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ClientConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_properties(text, str(path))
