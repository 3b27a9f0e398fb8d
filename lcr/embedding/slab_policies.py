"""The slab policies of SlabHashCache: one registry, from which every list of them derives.

A slab policy picks, inside one slabset of 64 slots, the unpinned slot a miss evicts. Each
entry declares once:

- ``engine_id``: its value in the engines' enum (``LCR_SLAB_POLICIES`` in
  csrc/common/slab_table.h). Every engine module exports that enum by name
  (``slab_policy_ids()``); SlabHashCache refuses an engine that disagrees, and
  tests/test_slab_policies.py checks each one built here;
- ``predictive``: whether it reads the predictions ``set_predictions`` stores (only those
  get a predictor in ``lcr bench sls``);
- ``options``: option -> default, each a whole number >= 1 (``hf:window=8``);
- ``spec``: the pure-Python policy of one slabset that ``lcr.embedding.reference`` runs.

A policy is named ``NAME`` or ``NAME:OPTION=VALUE;...`` (``parse_slab_policy``): by
``SlabHashCache(policy=...)``, ``SlabsetReference`` and ``lcr bench sls --policies``.

To add a slab policy: its entry here (and a spec class if ``lcr.policies`` has none), its
name in ``LCR_SLAB_POLICIES``, its victim rule in csrc/common/slab_kernels.h (GPU and warp
model) and csrc/cpu/slab_cache.cpp (CPU engine), and its tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from lcr.embedding.fifo import FIFO
from lcr.embedding.hashing import record_bit_of
from lcr.policies import FPB, HF, LARU, LFU, LRU, Policy

LARU_B = 2.0  # the paper's b for k = 64: the engines run Algorithm 1


class BitsetRecord:
    """LARU's record of prediction-evicted keys as an 8192-bit bitset (``record_bit_of``).

    Membership is approximate with false positives only: a key reads as recorded when
    another key sharing its bit was evicted by prediction in this phase, or when the key
    itself was, then came back and left again by recency. ``discard`` keeps the bit,
    since clearing it would also forget the keys that share it. A false positive makes
    LARU evict by LRU once and shrink lambda, a choice that keeps its robustness bound.
    """

    def __init__(self) -> None:
        self.bits = 0

    def add(self, key: int) -> None:
        self.bits |= 1 << record_bit_of(key)

    def discard(self, key: int) -> None:
        pass

    def clear(self) -> None:
        self.bits = 0

    def __contains__(self, key: object) -> bool:
        return bool(self.bits >> record_bit_of(int(key)) & 1)

    def __len__(self) -> int:
        return bin(self.bits).count("1")


# spec(capacity, predictions, options) -> the slabset's policy; predictions answer
# ``predict(keys, now)`` from the slots' metadata (``reference.SlotPredictions``).
SpecFactory = Callable[[int, object, Mapping[str, int]], Policy]


@dataclass(frozen=True)
class SlabPolicy:
    name: str
    engine_id: int
    predictive: bool
    spec: SpecFactory
    options: Mapping[str, int] = field(default_factory=dict)


SLAB_POLICIES: dict[str, SlabPolicy] = {p.name: p for p in (
    SlabPolicy("lru", 0, False, lambda k, predictions, o: LRU(k)),
    SlabPolicy("fpb", 1, True, lambda k, predictions, o: FPB(k, predictions, mode="sync")),
    SlabPolicy("hf", 2, True, lambda k, predictions, o: HF(k, predictions, mode="sync", window=o["window"]),
               options={"window": 4}),
    # Algorithm 1 with the bitset record: what the engines decide.
    SlabPolicy("laru", 3, True, lambda k, predictions, o: LARU(
        k, predictions, mode="sync", b=LARU_B, credit=False, guard=None, intervals=False,
        record=BitsetRecord())),
    # libCacheSim's LFU; the engines keep minus each key's count in its prediction slot.
    SlabPolicy("lfu", 4, False, lambda k, predictions, o: LFU(k)),
    # The engines keep minus each key's insertion stamp in its prediction slot.
    SlabPolicy("fifo", 5, False, lambda k, predictions, o: FIFO(k)),
)}


def describe_slab_policies() -> str:
    """Every registered name with its options' defaults: ``lru, fpb, hf:window=4, ...``."""
    return ", ".join(p.name + (":" + ";".join(f"{k}={v}" for k, v in p.options.items()) if p.options else "")
                     for p in SLAB_POLICIES.values())


@dataclass(frozen=True)
class SlabPolicyChoice:
    """A registered slab policy with every option set (defaults filled in)."""

    policy: SlabPolicy
    options: tuple[tuple[str, int], ...]

    @property
    def name(self) -> str:
        return self.policy.name

    def __str__(self) -> str:
        """The name, plus the options that differ from their defaults."""
        changed = [f"{k}={v}" for k, v in self.options if v != self.policy.options[k]]
        return self.name + (":" + ";".join(changed) if changed else "")

    def spec(self, capacity: int, predictions) -> Policy:
        return self.policy.spec(capacity, predictions, dict(self.options))

    def engine_args(self) -> tuple[int, int]:
        """(policy id, window): the settings of the engines' ``SlabTable``."""
        return self.policy.engine_id, dict(self.options).get("window", 1)


def parse_slab_policy(text) -> SlabPolicyChoice:
    """``NAME`` or ``NAME:OPTION=VALUE;...`` (or a choice, returned as is). Raises
    ``ValueError`` with one line naming the unknown policy, option or bad value."""
    if isinstance(text, SlabPolicyChoice):
        return text
    if not isinstance(text, str):
        raise ValueError(f"slab policy must be a name such as 'lru', got {type(text).__name__}")
    name, _, rest = text.strip().partition(":")
    policy = SLAB_POLICIES.get(name)
    if policy is None:
        raise ValueError(f"unknown slab policy {name!r}; valid: {describe_slab_policies()}")
    options = dict(policy.options)
    for item in filter(None, (part.strip() for part in rest.split(";"))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if key not in policy.options:
            valid = f"valid: {', '.join(policy.options)}" if policy.options else "it takes none"
            raise ValueError(f"slab policy {name}: unknown option {key!r}; {valid}")
        try:
            number = int(value)
        except ValueError:
            number = 0
        if not eq or number < 1:
            raise ValueError(f"slab policy {name}: {key} must be a whole number >= 1, got {value.strip()!r}")
        options[key] = number
    return SlabPolicyChoice(policy, tuple(options.items()))
