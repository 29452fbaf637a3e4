"""Definitions kept as one JSON document, replaced atomically on every change."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class FileDefinitionStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any] | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        data: dict[str, Any] = json.loads(text)
        return data

    def save(self, definitions: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(definitions, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
