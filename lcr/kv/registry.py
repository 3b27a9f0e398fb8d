"""The radix policies and the tree engines that run them: one table every consumer reads.

An entry (``RadixPolicy``) says how a replay builds the policy, which declaration owns
its options (the keyword parameters of its constructor or factory: an option removed
there is gone everywhere), whether it takes predictions, which tree engines run it and,
for the policies SGLang serves, how the serving backend builds it. ``lcr sim-kv
--policies`` and ``--engine``, ``lcr.kv.sim``, the SGLang backends and ``--cache-policy``
names (``lcr.integrations.sglang``), their options (``sglang_config``) and the
launcher's flags (``sglang_patch``) are all derived from it.

Layers look down only: this module knows lcr's own policies. LPC's policies
(``lcr.lpc.sim``), SGLang's tree engine and SGLang's own strategies
(``lcr.integrations.sglang_sim``) register themselves from their modules, which the
places that use them import. Registration happens at import; reads are thread-safe
once it is done.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Callable, Iterator

from lcr.errors import LcrInputError

Declaration = object  # a class, a function, or "module:attribute" (loaded when first asked)


@dataclass(frozen=True)
class Serving:
    """How SGLang serves a policy: ``declares`` is called with the checked options
    (after the predictor, for a predictive policy) and ``fixed``."""

    declares: Declaration
    fixed: dict = field(default_factory=dict)

    @property
    def target(self) -> Callable:
        return load(self.declares)

    def options(self) -> tuple[str, ...]:
        return declared_options(self.declares, skip=("predictor", *self.fixed))


@dataclass(frozen=True)
class RadixPolicy:
    name: str
    build: Callable  # (workload, predictor, seed, **options) -> the policy a replay runs
    declares: tuple  # declarations whose keyword parameters are the options
    summary: str
    predictive: bool = False
    engines: tuple[str, ...] = ("lcr", "sglang")
    fixed: tuple[str, ...] = ()  # parameters the replay fills itself, not options
    serving: Serving | None = None  # None: not an SGLang --cache-policy
    offline: bool = False  # reads the workload's exact future: only a replay of one cache knows it

    def options(self) -> tuple[str, ...]:
        return declared_options(*self.declares, skip=self.fixed)

    def check(self, options, engine: str | None = None) -> None:
        """One-line refusal of an engine that does not run this policy, or of an option
        its declaration does not take."""
        if engine is not None and engine not in self.engines:
            raise LcrInputError(f"policy {self.name!r} runs only with --engine "
                                f"{' or '.join(self.engines)} ({self.summary})")
        valid = self.options() if options else ()  # loads a lazy declaration only when needed
        unknown = [name for name in options if name not in valid]
        if unknown:
            valid = ", ".join(valid) or "none"
            raise LcrInputError(f"policy {self.name!r}: unknown option {unknown[0]!r}; valid: {valid}")


@dataclass(frozen=True)
class TreeEngine:
    name: str
    replay: Callable  # (workload, capacity_tokens, policy) -> hit tokens
    summary: str
    check: Callable[[], None] = lambda: None  # raises LcrInputError when it cannot run here


_POLICIES: dict[str, RadixPolicy] = {}
_ENGINES: dict[str, TreeEngine] = {}


def register_policy(entry: RadixPolicy) -> RadixPolicy:
    if entry.name in _POLICIES:
        raise ValueError(f"radix policy {entry.name!r} is registered twice")
    _POLICIES[entry.name] = entry
    return entry


def register_engine(entry: TreeEngine) -> TreeEngine:
    if entry.name in _ENGINES:
        raise ValueError(f"tree engine {entry.name!r} is registered twice")
    _ENGINES[entry.name] = entry
    return entry


def policy(name: str) -> RadixPolicy:
    try:
        return _POLICIES[name]
    except KeyError:
        raise LcrInputError(f"unknown policy {name!r}; valid: {', '.join(_POLICIES)}") from None


def engine(name: str) -> TreeEngine:
    try:
        return _ENGINES[name]
    except KeyError:
        raise LcrInputError(f"unknown engine {name!r}; valid: {', '.join(_ENGINES)}") from None


class Names:
    """A live, ordered view of the registered names an entry test admits (``in``,
    iteration, ``len``): policies registered later show up in it."""

    def __init__(self, table: dict, admit: Callable = lambda entry: True):
        self._table, self._admit = table, admit

    def __iter__(self) -> Iterator[str]:
        return (name for name, entry in list(self._table.items()) if self._admit(entry))

    def __contains__(self, name) -> bool:
        entry = self._table.get(name)
        return entry is not None and self._admit(entry)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Names({', '.join(self)})"


POLICIES = Names(_POLICIES)
PREDICTIVE = Names(_POLICIES, lambda entry: entry.predictive)
SERVED = Names(_POLICIES, lambda entry: entry.serving is not None)
ENGINES = Names(_ENGINES)


def engine_only(engine_name: str) -> Names:
    """Policies that run on ``engine_name`` and no other (e.g. SGLang's own strategies)."""
    return Names(_POLICIES, lambda entry: entry.engines == (engine_name,))


def runs_on(engine_name: str, offline: bool = True) -> Names:
    """Policies that ``engine_name`` runs (others may run them too); ``offline=False``
    leaves out those that read the workload's exact future (OPT)."""
    return Names(_POLICIES, lambda entry: engine_name in entry.engines and (offline or not entry.offline))


def load(declaration: Declaration):
    """A declaration itself, or the attribute that ``"module:attribute"`` names."""
    if not isinstance(declaration, str):
        return declaration
    module, _, attribute = declaration.partition(":")
    return getattr(importlib.import_module(module), attribute)


def declared_parameters(*declarations: Declaration, skip=()) -> dict[str, inspect.Parameter]:
    """Keyword parameters of each declaration, in order: a function's own, a class's
    constructor's, following the bases while a constructor forwards ``**options``."""
    found: dict[str, inspect.Parameter] = {}
    for declaration in declarations:
        for signature in _signatures(load(declaration)):
            for param in signature.parameters.values():
                if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY) \
                        and param.name not in ("self", *skip):
                    found.setdefault(param.name, param)
    return found


def declared_options(*declarations: Declaration, skip=()) -> tuple[str, ...]:
    return tuple(declared_parameters(*declarations, skip=skip))


def _signatures(target) -> Iterator[inspect.Signature]:
    if not isinstance(target, type):
        yield inspect.signature(target)
        return
    for klass in target.__mro__:
        init = klass.__dict__.get("__init__")
        if klass is object:
            return
        if init is None:
            continue
        signature = inspect.signature(init)
        yield signature
        if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            return


# lcr's own policies and tree ------------------------------------------------------------
_REFERENCE = "lcr.kv.laru_reference:ReferenceRadixLARU"  # loaded when used: only tests and benchmarks run it


def _register_own() -> None:
    from lcr.kv.policies import FurthestNextUse, RadixFPB, RadixHF, RadixLARU, RadixLRU, RadixRLT
    from lcr.kv.tree import replay_lcr

    register_engine(TreeEngine("lcr", replay_lcr, "lcr's own tree"))
    for entry in (
        RadixPolicy("lru", lambda w, pred, seed, **o: RadixLRU(**o), (RadixLRU,),
                    "the least recently used leaf (SGLang's default)"),
        RadixPolicy("laru", lambda w, pred, seed, **o: RadixLARU(pred, **o), (RadixLARU,),
                    "LARU, Algorithm 1 of the LCR paper, over the evictable leaves",
                    predictive=True, fixed=("predictor",), serving=Serving(RadixLARU)),
        RadixPolicy("fpb", lambda w, pred, seed, **o: RadixFPB(pred, **o), (RadixFPB,),
                    "follow the predicted Belady among all leaves", predictive=True,
                    fixed=("predictor",), serving=Serving(RadixFPB)),
        RadixPolicy("hf", lambda w, pred, seed, **o: RadixHF(pred, **o), (RadixHF,),
                    "predictions decide among a window of oldest leaves", predictive=True,
                    fixed=("predictor",), serving=Serving(RadixHF)),
        # A replay seeds RLT from --seed; SGLang's tree evicts whole nodes, so it serves
        # RLT's whole-leaf variant with the seed as its option.
        RadixPolicy("rlt", lambda w, pred, seed, **o: RadixRLT(seed=seed, **o), (RadixRLT,),
                    "randomized leaf eviction (the LBGR paper)", fixed=("seed",),
                    serving=Serving(RadixRLT, {"whole_leaf": True})),
        RadixPolicy("opt", lambda w, pred, seed, **o: FurthestNextUse(w.next_use, **o), (FurthestNextUse,),
                    "leaf-OPT: the leaf used furthest in the future (offline)", fixed=("next_use",),
                    offline=True),
        RadixPolicy("laru-reference", lambda w, pred, seed, **o: load(_REFERENCE)(pred, **o), (_REFERENCE,),
                    "LARU's executable reference, by sorting (lcr.kv.laru_reference)", predictive=True,
                    fixed=("predictor",)),
    ):
        register_policy(entry)


_register_own()
