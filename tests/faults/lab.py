"""A private network of network namespaces for the fault harness.

One namespace per host (etcd, n1-n3, the clients), each with a veth whose
other end is on a bridge that lives in a namespace of its own: nothing is
attached to the machine's own interfaces or routes, and the addresses
(10.231.7.0/24 by default) exist only inside these namespaces.  Faults are
nftables rules in a host's own namespace (drops by peer address, random
loss) and a token-bucket qdisc on its veth (a slow link: this kernel has
no netem, so delay comes from a queue, not a fixed latency).

Every namespace's name starts with the lab's prefix, which carries the
owning process's id: runs at the same time keep apart, and a killed run's
leftovers (its owner gone) are removed by name at the next start.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

PREFIX = "kfx"
SUBNET = "10.231.7"
HOSTS = {"etcd": 10, "n1": 11, "n2": 12, "n3": 13, "cli": 20}
CLONE_NEWNET = 0x40000000

NFT_TABLE = """table inet kfx {
  chain out {
    type filter hook output priority 0; policy accept;
  }
  chain in {
    type filter hook input priority 0; policy accept;
  }
}
"""


def _run(argv: list[str], stdin: str | None = None, check: bool = True) -> str:
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (Debian: iproute2 / nftables)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    try:
        _run(["ip", "netns", "add", probe])
        _run(["ip", "netns", "exec", probe, "nft", "-f", "-"], stdin=NFT_TABLE)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot make a network namespace with nftables: {exc}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_dead_labs() -> None:
    """Remove the labs of runs whose process is gone (never a live run's)."""
    owners = set()
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        m = re.match(rf"{PREFIX}(\d+)-", line)
        if m and not _alive(int(m.group(1))):
            owners.add(m.group(1))
    for owner in owners:
        remove_leftovers(f"{PREFIX}{owner}")


def remove_leftovers(prefix: str) -> None:
    """Delete every namespace named with `prefix` (a killed run's), after
    killing the processes a harness started in it."""
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix + "-"):
            for pid in _run(["ip", "netns", "pids", name], check=False).split():
                if pid == str(os.getpid()):  # the harness itself lives in the clients' one
                    continue
                try:
                    os.kill(int(pid), 9)
                except (ValueError, OSError):
                    pass
            _run(["ip", "netns", "del", name], check=False)


@dataclass(frozen=True)
class Cut:
    """Packets from src to dst are dropped (a one-way cut)."""
    src: str
    dst: str


class Lab:
    def __init__(self, prefix: str | None = None, subnet: str = SUBNET) -> None:
        # the addresses live only inside the lab's namespaces: the name alone keeps runs apart
        self.prefix, self.subnet = prefix or f"{PREFIX}{os.getpid()}", subnet
        self.hosts = dict(HOSTS)
        self.cuts: set[Cut] = set()
        self.lossy: dict[str, int] = {}
        self.slow: set[str] = set()
        self.up = False

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def addr(self, host: str) -> str:
        return f"{self.subnet}.{self.hosts[host]}"

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host), *argv]

    # ------------------------------------------------------------ build
    def create(self) -> "Lab":
        remove_dead_labs()
        remove_leftovers(self.prefix)
        atexit.register(self.destroy)
        bridge = self.ns("br")
        _run(["ip", "netns", "add", bridge])
        self.up = True
        _run(["ip", "-n", bridge, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", bridge, "link", "set", "br0", "up"])
        for i, host in enumerate(self.hosts):
            ns, peer = self.ns(host), f"v{i}"
            _run(["ip", "netns", "add", ns])
            # both ends are made inside the lab's namespaces: nothing on the host side
            _run(["ip", "-n", bridge, "link", "add", peer, "type", "veth", "peer", "name",
                  "eth0", "netns", ns])
            _run(["ip", "-n", bridge, "link", "set", peer, "master", "br0", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(self.exec_argv(host, ["nft", "-f", "-"]), stdin=NFT_TABLE)
        return self

    def destroy(self) -> None:
        if self.up:
            remove_leftovers(self.prefix)
            self.up = False

    def enter(self, host: str) -> None:
        """Move this thread (and the threads it starts later) into `host`'s
        namespace: sockets made afterwards live there."""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/var/run/netns/{self.ns(host)}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {self.ns(host)}")
        finally:
            os.close(fd)

    # ------------------------------------------------------------ faults
    def _nft(self, host: str, script: str) -> None:
        _run(self.exec_argv(host, ["nft", "-f", "-"]), stdin=script)

    def _rewrite(self, host: str) -> None:
        """Rebuild `host`'s rules from the lab's fault state (one atomic nft batch)."""
        lines = ["flush chain inet kfx out", "flush chain inet kfx in"]
        for cut in sorted(self.cuts, key=lambda c: (c.src, c.dst)):
            # a cut is enforced on both ends, so a packet that one end let out
            # before the rule (or one in flight) is dropped on arrival too
            if cut.src == host:
                lines.append(f"add rule inet kfx out ip daddr {self.addr(cut.dst)} drop")
            if cut.dst == host:
                lines.append(f"add rule inet kfx in ip saddr {self.addr(cut.src)} drop")
        if host in self.lossy:
            lines.append(f"add rule inet kfx out oifname \"eth0\" numgen random mod 100 < "
                         f"{self.lossy[host]} drop")
        self._nft(host, "\n".join(lines) + "\n")

    def set_cuts(self, cuts: set[Cut]) -> None:
        touched = {c.src for c in cuts ^ self.cuts} | {c.dst for c in cuts ^ self.cuts}
        self.cuts = set(cuts)
        for host in sorted(touched):
            self._rewrite(host)

    def set_loss(self, host: str, percent: int) -> None:
        if percent:
            self.lossy[host] = percent
        else:
            self.lossy.pop(host, None)
        self._rewrite(host)

    def set_slow(self, host: str, on: bool) -> None:
        """A slow link out of `host`: 256 kbit/s with up to 300 ms of queue."""
        if on and host not in self.slow:
            _run(self.exec_argv(host, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
                                       "rate", "256kbit", "burst", "16kb", "latency", "300ms"]))
            self.slow.add(host)
        elif not on and host in self.slow:
            _run(self.exec_argv(host, ["tc", "qdisc", "del", "dev", "eth0", "root"]), check=False)
            self.slow.discard(host)

    def heal(self) -> None:
        """Every network fault off."""
        self.set_cuts(set())
        for host in list(self.lossy):
            self.set_loss(host, 0)
        for host in list(self.slow):
            self.set_slow(host, False)


def partition(side_a, side_b) -> set[Cut]:
    """Both directions between every host of side_a and every host of side_b."""
    return {Cut(a, b) for a in side_a for b in side_b} | {Cut(b, a) for a in side_a
                                                        for b in side_b}
