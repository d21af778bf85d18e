"""The security state kept in the metadata log: SCRAM credentials and ACLs.

State changes only by `replay(record)`: live writes replay exactly the
records they appended (after the fsync), and a start replays the log.
"""
from __future__ import annotations

import asyncio
import base64
import secrets
from pathlib import Path

from .acl import AclBinding, Authorizer
from .metadata_log import MetadataLog
from .sasl_mechanisms import SCRAM_HASHES, salted_password, scram_keys

SCRAM_MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
SCRAM_CODES = {v: k for k, v in SCRAM_MECHANISM_CODES.items()}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def scram_record(user: str, mechanism: str, salt: bytes, salted: bytes,
                 iterations: int) -> dict:
    """A credential record from a salted password (as AlterUserScramCredentials
    carries it): the password itself is never stored."""
    stored_key, server_key = scram_keys(mechanism, salted)
    return {"type": "scram", "user": user, "mechanism": mechanism, "salt": _b64(salt),
            "stored_key": _b64(stored_key), "server_key": _b64(server_key),
            "iterations": iterations}


def scram_record_from_password(user: str, mechanism: str, password: str,
                               iterations: int = 4096, salt: bytes | None = None) -> dict:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return scram_record(user, mechanism, salt,
                        salted_password(mechanism, password, salt, iterations), iterations)


class StoreUnavailable(Exception):
    """The cluster's shared store (etcd) did not accept a change: the client
    gets an error, never an answer that it was stored."""


class SecurityStore:
    def __init__(self, data_dir: Path, authorizer: Authorizer | None = None) -> None:
        self.log = MetadataLog(data_dir)
        # in a cluster: async callable(records) that stores them in etcd and
        # applies them (kcoord/cluster/security_sync.py); None: the local log
        self.backend = None
        self.scram: dict[tuple[str, str], tuple[bytes, bytes, bytes, int]] = {}
        # ACLs are kept (and replayed) even when no authorizer is configured,
        # so turning the authorizer on later finds them
        self.authorizer = authorizer or Authorizer()
        self._lock = asyncio.Lock()

    def load(self) -> None:
        for record in self.log.load():
            self.replay(record)

    def replay(self, r: dict) -> None:
        kind = r["type"]
        if kind == "scram":
            self.scram[(r["user"], r["mechanism"])] = (
                base64.b64decode(r["salt"]), base64.b64decode(r["stored_key"]),
                base64.b64decode(r["server_key"]), r["iterations"])
        elif kind == "scram-delete":
            self.scram.pop((r["user"], r["mechanism"]), None)
        elif kind == "acl":
            self.authorizer.add(AclBinding.from_record(r["acl"]))
        elif kind == "acl-delete":
            self.authorizer.remove(AclBinding.from_record(r["acl"]))
        else:
            raise ValueError(f"unknown security metadata record type {kind!r}")

    def write_now(self, records: list[dict]) -> None:
        """Append, fsync and apply, blocking (start-up: --add-scram)."""
        if records:
            self.log.append(records)
            for r in records:
                self.replay(r)

    async def write(self, records: list[dict]) -> None:
        """Append and fsync in a worker thread, then apply: a change is
        answered only once it is durable."""
        if not records:
            return
        async with self._lock:
            if self.backend is not None:
                await self.backend(records)
                return
            await asyncio.to_thread(self.log.append, records)
            for r in records:
                self.replay(r)

    def credential(self, user: str, mechanism: str):
        return self.scram.get((user, mechanism))

    def users(self) -> dict[str, list[tuple[int, int]]]:
        """user -> [(mechanism code, iterations)]"""
        out: dict[str, list[tuple[int, int]]] = {}
        for (user, mech), cred in sorted(self.scram.items()):
            out.setdefault(user, []).append((SCRAM_CODES[mech], cred[3]))
        return out


def parse_add_scram(spec: str) -> dict:
    """`SCRAM-SHA-256=[name=alice,password=secret]` (kafka-storage format
    --add-scram; also iterations, salt, saltedpassword) -> a credential record."""
    mech, sep, rest = spec.partition("=")
    mech = mech.strip().upper()
    if mech not in SCRAM_HASHES or not sep:
        raise ValueError(f"--add-scram: {spec!r}: expected SCRAM-SHA-256=[name=...,password=...] "
                         f"or SCRAM-SHA-512=[...]")
    rest = rest.strip()
    if not (rest.startswith("[") and rest.endswith("]")):
        raise ValueError(f"--add-scram: {spec!r}: the settings go in [...]")
    fields: dict[str, str] = {}
    for item in rest[1:-1].split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--add-scram: {item!r} is not key=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        fields[key.strip().lower()] = value
    name = fields.get("name")
    if not name:
        raise ValueError("--add-scram: name= is required")
    iterations = int(fields.get("iterations", 4096))
    if not 4096 <= iterations <= 16384:
        raise ValueError(f"--add-scram: iterations {iterations} outside 4096..16384")
    salt = base64.b64decode(fields["salt"]) if "salt" in fields else secrets.token_bytes(32)
    if "saltedpassword" in fields:
        return scram_record(name, mech, salt, base64.b64decode(fields["saltedpassword"]),
                            iterations)
    if "password" not in fields:
        raise ValueError("--add-scram: password= (or saltedpassword=) is required")
    return scram_record_from_password(name, mech, fields["password"], iterations, salt)


def add_scram(config, specs: list[str]) -> None:
    """`kcoord serve --add-scram SPEC`: store credentials before serving; in
    a cluster they go to etcd once the node joined (if absent there), so the
    config carries them to the server."""
    records = [parse_add_scram(spec) for spec in specs]
    if config["etcd.endpoints"]:
        config.bootstrap_scram = records
        return
    SecurityStore(config.data_dir).write_now(records)
