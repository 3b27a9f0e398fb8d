"""The predictor's input for one user turn: the new prompt and up to ``history``
earlier user prompts (replies are left out, as in the paper), fitted into the
encoder's token budget, plus the number of turns so far. lcr adds two lengths the paper does not use (feature
set ``paper+length``): the new prompt's tokens and the conversation's tokens so far.

The budget is split evenly over the prompts present (a first turn gets the whole
budget; the paper splits over N+1 slots, which wastes budget on short conversations),
and each share keeps half its tokens from the prompt's head and half from its tail:
a long prompt's middle matters least to a small encoder.
"""
from __future__ import annotations

from dataclasses import dataclass

from lcr.lpc.chats import Conversation

HISTORY = 4
SEPARATOR = " | "


@dataclass(frozen=True)
class Example:
    text: str
    turns: int        # user turns so far, this one included
    continues: bool   # the label
    conversation: int  # index into the conversation list
    prompt_tokens: int = 0   # the new prompt's length
    context_tokens: int = 0  # user and assistant tokens before it


def head_tail(ids: list[int], budget: int) -> list[int]:
    if len(ids) <= budget:
        return ids
    head = (budget + 1) // 2
    return ids[:head] + ids[len(ids) - (budget - head):] if budget > head else ids[:head]


def turn_text(prompts: list[str], tokenizer, budget: int) -> str:
    """The prompts (oldest first) cut to ``budget`` tokens in all, joined."""
    share = max(budget // max(len(prompts), 1), 2)
    parts = []
    for prompt in prompts:
        ids = tokenizer.encode(prompt, add_special_tokens=False).ids
        parts.append(tokenizer.decode(head_tail(ids, share)))
    return SEPARATOR.join(parts)


def token_count(tokenizer, text: str) -> int:
    """A text's length feature: its tokens, special tokens not counted."""
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def _lengths(texts: list[str], tokenizer) -> list[int]:
    return [token_count(tokenizer, t) for t in texts]


def turn_example(users: list[str], replies: list[str], i: int, tokenizer, budget: int, *,
                 history: int = HISTORY, continues: bool = False, conversation: int = -1,
                 user_len: list[int] | None = None, reply_len: list[int] | None = None,
                 text: bool = True) -> Example:
    """The features of user turn ``i`` (0-based) of a conversation given as its user
    prompts and replies: the one rule training (``examples``) and serving
    (``lcr.lpc.serving``) share. Only turns up to ``i`` are read. ``text=False`` skips
    building the encoder text (models without text features never read it)."""
    user_len = _lengths(users[:i + 1], tokenizer) if user_len is None else user_len
    reply_len = _lengths(replies[:i], tokenizer) if reply_len is None else reply_len
    prompts = users[max(0, i - history):i + 1]
    return Example(turn_text(prompts, tokenizer, budget) if text else "", i + 1, continues, conversation,
                   user_len[i], sum(user_len[:i]) + sum(reply_len[:i]))


def examples(conversations: list[Conversation], tokenizer, budget: int,
             history: int = HISTORY) -> list[Example]:
    out = []
    for c, conv in enumerate(conversations):
        users = [t.user for t in conv.turns]
        replies = [t.assistant for t in conv.turns]
        user_len, reply_len = _lengths(users, tokenizer), _lengths(replies, tokenizer)
        for i in range(len(users)):
            out.append(turn_example(users, replies, i, tokenizer, budget, history=history,
                                    continues=conv.continues_after(i), conversation=c,
                                    user_len=user_len, reply_len=reply_len))
    return out
