"""A served prompt, rendered by a chat template, split back into its user turns.

LPC's predictor reads the user prompts and the replies between them
(``lcr.lpc.features``); a server sees one rendered string. Each template is known by
its role markers; ``auto`` tries them in order and takes the first that finds a user
turn. Whitespace around markers is free, so text decoded from token ids (where a
word-level tokenizer joins tokens with spaces) splits the same way.

``chatml``   ``<|im_start|>user\\n...<|im_end|>`` (Qwen, Yi, many fine-tunes; lcr's tiny
             serving model, ``tests/sglang_e2e_model.py``)
``llama3``   ``<|start_header_id|>user<|end_header_id|>\\n\\n...<|eot_id|>``
``llama2``   ``<s>[INST] ... [/INST] reply </s>`` (also Mistral; a ``<<SYS>>`` block is dropped)
``gemma``    ``<start_of_turn>user\\n...<end_of_turn>`` (the assistant is ``model``)
``phi3``     ``<|user|>\\n...<|end|>``
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lcr.lpc.chats import pair_messages

USER, ASSISTANT, OTHER = "user", "assistant", "other"


@dataclass(frozen=True)
class Template:
    name: str
    marker: re.Pattern          # one match per message start; group "role" names it
    roles: dict                 # marker role -> USER / ASSISTANT (anything else: OTHER)
    noise: re.Pattern           # end-of-message and special tokens removed from content


def _template(name, marker, roles, noise) -> Template:
    return Template(name, re.compile(marker), roles, re.compile(noise, re.S))


TEMPLATES = {t.name: t for t in (
    _template("chatml", r"<\|im_start\|>\s*(?P<role>\w+)", {"user": USER, "assistant": ASSISTANT},
              r"<\|im_end\|>|<\|endoftext\|>"),
    _template("llama3", r"<\|start_header_id\|>\s*(?P<role>\w+)\s*<\|end_header_id\|>",
              {"user": USER, "assistant": ASSISTANT}, r"<\|eot_id\|>|<\|begin_of_text\|>"),
    _template("llama2", r"(?P<role>\[/?INST\])", {"[INST]": USER, "[/INST]": ASSISTANT},
              r"<s>|</s>|<<SYS>>.*?<</SYS>>"),
    _template("gemma", r"<start_of_turn>\s*(?P<role>\w+)", {"user": USER, "model": ASSISTANT},
              r"<end_of_turn>|<bos>|<eos>"),
    _template("phi3", r"<\|(?P<role>user|assistant|system)\|>", {"user": USER, "assistant": ASSISTANT},
              r"<\|end\|>|<\|endoftext\|>"),
)}
SPLITTERS = ("auto", *TEMPLATES, "none")


@dataclass(frozen=True)
class Turns:
    users: list[str]       # user prompts, the new one last
    replies: list[str]     # the reply after each earlier prompt (len(users) - 1)
    template: str | None   # the template that split it; None: no marker, one turn


def messages(text: str, template: Template) -> list[tuple[str, str]]:
    """(USER / ASSISTANT / OTHER, content) for each marker of ``template`` in ``text``."""
    marks = list(template.marker.finditer(text))
    out = []
    for m, following in zip(marks, marks[1:] + [None]):
        body = text[m.end():following.start() if following else len(text)]
        out.append((template.roles.get(m.group("role"), OTHER), template.noise.sub("", body).strip()))
    return out


def split_turns(text: str, splitter: str = "auto") -> Turns:
    """The user turns of a rendered prompt. Replies between two user prompts are joined;
    system and other messages are dropped; without a user marker (or with splitter
    ``none``) the whole text is one prompt."""
    names = list(TEMPLATES) if splitter == "auto" else [] if splitter == "none" else [splitter]
    for name in names:
        turns = pair_messages([{"from": role, "value": content}
                               for role, content in messages(text, TEMPLATES[name])])
        if turns:
            return Turns([t.user for t in turns], [t.assistant for t in turns[:-1]], name)
    return Turns([text.strip()], [], None)
