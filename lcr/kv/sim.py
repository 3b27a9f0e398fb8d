"""Replays of a block workload through radix caches, and sweeps over policies x noise."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

from lcr.errors import LcrInputError
from lcr.kv import registry
from lcr.kv.policies import LeafPolicy
from lcr.kv.predictors import make_path_predictor
from lcr.kv.requests import BlockWorkload
from lcr.kv.tree import replay_lcr  # noqa: F401  (the lcr engine's replay, importable from here)

# Live views of lcr.kv.registry: policies and engines registered later show up in them.
POLICIES, PREDICTIVE, RADIX_ENGINES = registry.POLICIES, registry.PREDICTIVE, registry.ENGINES


def make_radix_policy(name: str, workload: BlockWorkload, *, predictor=None, seed: int = 0,
                **params) -> LeafPolicy:
    """A fresh policy of the registry (``lcr.kv.registry``); ``workload`` serves OPT's
    exact future and LPC's chat metadata."""
    return registry.policy(name).build(workload, predictor, seed, **params)


@dataclass
class KVResult:
    trace: str
    engine: str
    policy: str
    cache_tokens: int
    noise: float | None
    requests: int
    total_tokens: int
    hit_tokens: int
    cost_ratio: float | None = None  # missed tokens / OPT's missed tokens
    stats: dict = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.total_tokens if self.total_tokens else 0.0

    @property
    def missed_tokens(self) -> int:
        return self.total_tokens - self.hit_tokens

    def as_dict(self) -> dict:
        return {**asdict(self), "token_hit_rate": self.hit_rate}


def replay_engine(name: str) -> Callable[[BlockWorkload, int, LeafPolicy], int]:
    """The replay of a registered tree engine, once it has said it can run here."""
    engine = registry.engine(name)
    engine.check()
    return engine.replay


def run_radix_sweep(workload: BlockWorkload, capacities: list[int], policies: list, noises: list[float],
              *, predictor: str = "oracle", engine: str = "lcr", seed: int = 0,
              progress: Callable[[str], None] | None = None) -> list[KVResult]:
    replay = replay_engine(engine)
    specs = [_spec_parts(spec) for spec in policies]
    for name, _, params in specs:  # refused before anything runs
        registry.policy(name).check(params, engine)
    results = []
    for capacity in capacities:
        # OPT runs once per size: it is every cost ratio's denominator.
        opt_policy = make_radix_policy("opt", workload)
        opt = _result(workload, engine, "opt", capacity, None,
                      replay(workload, capacity, opt_policy), opt_policy)
        opt_missed = opt.missed_tokens
        for name, label, params in specs:
            levels = noises if name in PREDICTIVE else [None]
            for noise in levels:
                if name == "opt":
                    result = opt
                else:
                    pred = make_path_predictor(predictor, workload, noise or 0.0, seed) \
                        if name in PREDICTIVE else None
                    try:
                        policy = make_radix_policy(name, workload, predictor=pred, seed=seed, **params)
                    except (TypeError, ValueError) as err:
                        raise LcrInputError(f"policy {label!r}: {err}") from None
                    result = _result(workload, engine, label, capacity, noise,
                                     replay(workload, capacity, policy), policy)
                result.cost_ratio = result.missed_tokens / opt_missed if opt_missed else None
                results.append(result)
                if progress:
                    progress(f"{name} cache={capacity} noise={noise}")
    return results


def _spec_parts(spec) -> tuple[str, str, dict]:
    """(name, label, parameters) of a ``PolicySpec`` or a bare policy name."""
    if isinstance(spec, str):
        return spec, spec, {}
    return spec.name, spec.label, spec.kwargs


def _result(workload, engine, name, capacity, noise, hit_tokens, policy) -> KVResult:
    return KVResult(workload.name, engine, name, capacity, noise, len(workload),
                    workload.total_tokens, hit_tokens, stats=policy.stats.as_dict())
