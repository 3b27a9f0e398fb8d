"""Replays of a block workload through radix caches, and sweeps over policies x noise."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

from lcr.errors import LcrInputError
from lcr.kv import policies as P
from lcr.kv.predictors import make_path_predictor
from lcr.kv.requests import BlockWorkload
from lcr.kv.spec import LARUSpec
from lcr.kv.tree import RadixTree


PREDICTIVE = ("laru", "fpb", "hf", "laru-spec")
ENGINES = ("lcr", "sglang")


# Each factory takes (workload, predictor, seed, **params); the workload serves OPT's exact future.
_FACTORIES: dict[str, Callable[..., P.LeafPolicy]] = {
    "lru": lambda workload, predictor, seed, **params: P.LRU(**params),
    "laru": lambda workload, predictor, seed, **params: P.LARU(predictor, **params),
    "fpb": lambda workload, predictor, seed, **params: P.FPB(predictor, **params),
    "hf": lambda workload, predictor, seed, **params: P.HF(predictor, **params),
    "rlt": lambda workload, predictor, seed, **params: P.RLT(seed=seed, **params),
    "opt": lambda workload, predictor, seed, **params: P.FurthestNextUse(workload.next_use, **params),
    "laru-spec": lambda workload, predictor, seed, **params: LARUSpec(predictor, **params),
}
POLICIES = tuple(_FACTORIES)


def make_policy(name: str, workload: BlockWorkload, *, predictor=None, seed: int = 0,
                **params) -> P.LeafPolicy:
    """A fresh policy of the registry above."""
    if name not in _FACTORIES:
        raise LcrInputError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}")
    return _FACTORIES[name](workload, predictor, seed, **params)


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


def replay_lcr(workload: BlockWorkload, capacity_tokens: int, policy: P.LeafPolicy) -> int:
    """Hit tokens of ``workload`` through lcr's own tree."""
    tree = RadixTree(capacity_tokens, policy)
    return sum(tree.serve(request, now) for now, request in enumerate(workload.requests))


def replay_engine(engine: str) -> Callable[[BlockWorkload, int, P.LeafPolicy], int]:
    if engine == "lcr":
        return replay_lcr
    if engine == "sglang":
        try:
            from lcr.integrations.sglang_sim import replay_sglang
            import sglang.srt.mem_cache.unified_radix_cache  # noqa: F401
        except ImportError as err:
            hint = ("pip install --no-deps -r sglang_patch/requirements-cpu.txt"
                    if getattr(err, "name", None) != "torchvision" else
                    "CPU-only machines lack a usable torchvision; put tests/sglang_stubs on PYTHONPATH")
            raise LcrInputError(f"--engine sglang needs SGLang 0.5.23 ({err}); {hint}") from None
        return replay_sglang
    raise LcrInputError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")


def run_sweep(workload: BlockWorkload, capacities: list[int], policies: list, noises: list[float],
              *, predictor: str = "oracle", engine: str = "lcr", seed: int = 0,
              progress: Callable[[str], None] | None = None) -> list[KVResult]:
    replay = replay_engine(engine)
    results = []
    for capacity in capacities:
        # OPT runs once per size: it is every cost ratio's denominator.
        opt_policy = make_policy("opt", workload)
        opt = _result(workload, engine, "opt", capacity, None,
                      replay(workload, capacity, opt_policy), opt_policy)
        opt_missed = opt.missed_tokens
        for spec in policies:
            name, label, params = _spec_parts(spec)
            levels = noises if name in PREDICTIVE else [None]
            for noise in levels:
                if name == "opt":
                    result = opt
                else:
                    pred = make_path_predictor(predictor, workload, noise or 0.0, seed) \
                        if name in PREDICTIVE else None
                    try:
                        policy = make_policy(name, workload, predictor=pred, seed=seed, **params)
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
