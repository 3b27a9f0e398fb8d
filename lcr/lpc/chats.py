"""ShareGPT conversations as lists of (user, assistant) turns.

ShareGPT V3 splits long conversations into records ``<base>_0``, ``<base>_1``, ...;
they are rejoined here by base id in chunk order. A chunk may start with an
assistant message (its user message sits at the end of the previous chunk) or a
record may be missing, so messages are paired greedily: each human message opens a
turn and the assistant messages up to the next human message are its reply.
Assistant text before the first human message has no prompt and is dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lcr.sharegpt import read_records


@dataclass(frozen=True)
class Turn:
    user: str
    assistant: str


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[Turn, ...]

    def continues_after(self, turn: int) -> bool:
        """The label LPC learns: does a user turn follow turn ``turn`` (0-based)?"""
        return turn < len(self.turns) - 1


def _base_and_chunk(record_id: str) -> tuple[str, int]:
    base, sep, chunk = record_id.rpartition("_")
    if sep and chunk.isdigit():
        return base, int(chunk)
    return record_id, 0


def load_conversations(path: str | Path, limit: int | None = None) -> list[Conversation]:
    """Conversations of a ShareGPT JSONL file, in order of first appearance; those
    without a user turn are skipped. ``limit`` keeps the first N conversations."""
    chunks: dict[str, list[tuple[int, list[dict]]]] = {}
    for record_id, messages in read_records(path):
        base, chunk = _base_and_chunk(record_id)
        chunks.setdefault(base, []).append((chunk, messages))
    out = []
    for base, parts in chunks.items():
        parts.sort(key=lambda part: part[0])
        turns = pair_messages([m for _, messages in parts for m in messages])
        if turns:
            out.append(Conversation(base, tuple(turns)))
        if limit is not None and len(out) >= limit:
            break
    return out


def pair_messages(messages: list[dict]) -> list[Turn]:
    """Greedy pairing (module docstring); also splits served prompts (``lcr.lpc.templates``)."""
    turns: list[list[str]] = []
    for m in messages:
        role = m["from"]
        if role in ("human", "user"):
            turns.append([m["value"], ""])
        elif turns and role in ("gpt", "assistant", "bard", "chatgpt"):
            turns[-1][1] = (turns[-1][1] + "\n" + m["value"]) if turns[-1][1] else m["value"]
    return [Turn(user, assistant) for user, assistant in turns]


def split_conversations(conversations: list[Conversation], seed: int = 0
                        ) -> tuple[list[Conversation], list[Conversation]]:
    """(training half, held-out half), decided per conversation by a seeded hash of its
    id, so a conversation never has turns on both sides."""
    import hashlib

    train, held_out = [], []
    for conv in conversations:
        digest = hashlib.sha256(f"{seed}:{conv.id}".encode()).digest()
        (train if digest[0] & 1 else held_out).append(conv)
    return train, held_out
