"""Durable dynamic config overrides of brokers and groups (topic overrides
live with the topic catalogue).

One JSON file in the data dir, {entity type: {entity name: {key: value}}},
replaced atomically (write, fsync, rename, fsync dir): a crash leaves the
old or the new set, never a torn one.  Values are kept as the strings the
AlterConfigs request carried (canonical form).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

STORE_FILE = "kcoord-configs.json"


class ConfigStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / STORE_FILE
        self.entities: dict[str, dict[str, dict[str, str]]] = {}
        if self.path.exists():
            self.entities = json.loads(self.path.read_text())

    def get(self, entity_type: str, name: str) -> dict[str, str]:
        return dict(self.entities.get(entity_type, {}).get(name, {}))

    def names(self, entity_type: str) -> list[str]:
        return list(self.entities.get(entity_type, {}))

    def put(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        """Replace one entity's overrides (none: forget it) and persist."""
        of_type = self.entities.setdefault(entity_type, {})
        if configs:
            of_type[name] = dict(configs)
        else:
            of_type.pop(name, None)
        self._save()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(self.entities, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
