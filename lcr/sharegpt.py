"""Records of a ShareGPT JSONL file (one conversation record a line), checked line by line.

Both chat replays read through here: ``lcr.kv.chat`` (words as tokens, one session a
record) and ``lcr.lpc.chats`` (records rejoined into whole conversations).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from lcr.errors import LcrInputError


def read_records(path: str | Path) -> Iterator[tuple[str, list[dict]]]:
    """(record id, messages) per record; a message is a dict with ``from``
    and a string ``value``. A record without an ``id`` is named by its line number."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as err:
        raise LcrInputError(f"cannot read chats: {err.strerror}", source=str(path)) from None
    with f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = dict(source=str(path), line=number)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise LcrInputError(f"malformed JSON ({err.msg})", **where) from None
            if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
                raise LcrInputError("field 'conversations': expected a list of messages", **where)
            messages = record["conversations"]
            for m in messages:
                if not isinstance(m, dict) or not isinstance(m.get("value"), str) or "from" not in m:
                    raise LcrInputError("field 'conversations': each message needs 'from' and a "
                                        "string 'value'", **where)
            yield str(record.get("id", number)), messages
