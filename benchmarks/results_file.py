"""One results file per benchmark: each setting is an entry, and a re-run of a setting
replaces its own entry (written atomically), leaving the others as they were."""
from __future__ import annotations

import json
from pathlib import Path


def update_entry(path: str | Path, setting: str, doc: dict) -> None:
    """Write ``doc`` as ``path``'s entry ``setting`` (``{"settings": {name: doc}}``)."""
    from lcr.atomic import write_atomic

    path = Path(path)
    whole = json.loads(path.read_text()) if path.exists() else {}
    whole.setdefault("settings", {})[setting] = doc
    write_atomic(path, json.dumps(whole, indent=1, default=str))


def entry(path: str | Path, setting: str) -> dict:
    return json.loads(Path(path).read_text())["settings"][setting]
