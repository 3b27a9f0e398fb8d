"""A multi-turn chat replay from ShareGPT conversations, as prefix blocks.

Each conversation becomes a session: its k-th request is the whole dialogue up to the
k-th user message (earlier turns, model answers included, are the prefix a chat server
would find cached). Sessions are interleaved: ``active`` of them are open at once and
each step serves the next turn of a randomly chosen open session, so a session's turns
are separated by other sessions' traffic, as on a shared server.

Tokens are whitespace words (a stand-in for a tokenizer; block boundaries are what
matter to a prefix cache); a block is ``block_tokens`` words and its identity is its
words, so two sessions with the same opening (a shared system prompt) share blocks.
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from lcr.errors import LcrInputError
from lcr.kv.requests import BlockRequest, BlockWorkload
from lcr.sharegpt import read_records

CHAT_BLOCK_TOKENS = 32


def read_sessions(path: str | Path, limit: int | None = None) -> list[list[str]]:
    """Records as lists of message texts (only those starting with a user turn)."""
    sessions = []
    for _, messages in read_records(path):
        if messages and messages[0]["from"] == "human":
            sessions.append([m["value"] for m in messages])
        if limit is not None and len(sessions) >= limit:
            break
    return sessions


def chat_workload(path: str | Path, *, sessions: int | None = None, active: int = 32,
                  block_tokens: int = CHAT_BLOCK_TOKENS, seed: int = 0) -> BlockWorkload:
    if active < 1 or block_tokens < 1:
        raise LcrInputError("chat workload: active and block_tokens must be at least 1")
    rng = np.random.default_rng(seed)
    path_ids: dict[tuple[int, int], int] = {}
    queues = []
    for texts in read_sessions(path, sessions):
        words: list[str] = []
        turns = []
        for i, text in enumerate(texts):
            words.extend(text.split())
            if i % 2 == 0 and words:  # a user message ends: the prompt so far is a request
                turns.append(_blocks(words, block_tokens))
        queues.append(turns)
    requests, waiting, open_ = [], list(reversed(queues)), []
    while waiting or open_:
        while waiting and len(open_) < active:
            open_.append(waiting.pop())
        i = int(rng.integers(len(open_)))
        blocks = open_[i].pop(0)
        if not open_[i]:
            open_.pop(i)
        parent, paths = -1, []
        for block in blocks:
            parent = path_ids.setdefault((parent, block[0]), len(path_ids))
            paths.append(parent)
        requests.append(BlockRequest(tuple(paths), tuple(b[1] for b in blocks)))
    if not requests:
        raise LcrInputError(f"{path}: no ShareGPT conversation starting with a user turn")
    return BlockWorkload(requests, f"sharegpt-chat({len(queues)} sessions)")


def _blocks(words: list[str], size: int) -> list[tuple[int, int]]:
    """(content hash, tokens) of each block of ``words``."""
    return [(zlib.crc32(" ".join(words[i:i + size]).encode()), len(words[i:i + size]))
            for i in range(0, len(words), size)]
