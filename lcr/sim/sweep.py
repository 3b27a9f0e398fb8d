"""Sweeps: policies x cache sizes x noise levels over one trace, with OPT as the yardstick."""
from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field

from lcr.errors import LcrInputError
from lcr.policies import POLICIES, make_policy
from lcr.predict import ArrayPredictor, PredictorSpec, make_predictor
from lcr.sim.native import NATIVE_POLICIES, native_replay
from lcr.sim.predictions import PredictionCache, replay_predictor
from lcr.sim.runner import Progress, replay
from lcr.traces import Trace

#: Who replays an item-cache trace (`lcr sim --engine`); the radix engines are lcr.kv's.
ITEM_ENGINES = ("auto", "python", "native")
ORACLE = PredictorSpec("oracle")  # the default predictor: exact next-access times


@dataclass(frozen=True)
class PolicySpec:
    """A policy name with parameters, written ``laru`` or ``laru:b=4,mode=async``."""

    name: str
    params: tuple[tuple[str, object], ...] = ()

    @property
    def label(self) -> str:
        return self.name + ("" if not self.params else ":" + ",".join(f"{k}={v}" for k, v in self.params))

    @property
    def uses_predictions(self) -> bool:
        return POLICIES[self.name].uses_predictions

    @property
    def kwargs(self) -> dict:
        return dict(self.params)

    @classmethod
    def parse(cls, text: str, registry=POLICIES) -> "PolicySpec":
        """``name`` or ``name:param=value,...``; ``name`` must be in ``registry``."""
        name, _, rest = text.strip().partition(":")
        if name not in registry:
            raise LcrInputError(f"unknown policy {name!r}; valid: {', '.join(registry)}")
        params = []
        for item in filter(None, rest.split(",")):
            key, sep, value = item.partition("=")
            if not sep:
                raise LcrInputError(f"policy parameter {item!r} in {text!r}: expected name=value")
            params.append((key, _literal(value)))
        return cls(name, tuple(params))


def _literal(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclass
class SimResult:
    trace: str
    policy: str
    capacity: int
    predictor: str | None
    noise: float | None
    requests: int
    hits: int
    misses: int
    hit_ratio: float
    seconds: float
    cost_ratio: float | None = None
    stats: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def uses_native(spec: PolicySpec, engine: str = "auto", predictor_name: "str | PredictorSpec" = ORACLE) -> bool:
    """Whether ``engine`` (auto, python or native) replays ``spec`` with its C++ core. The
    cores read predictions as an array, which the sync online model does not have."""
    if engine not in ITEM_ENGINES:
        raise LcrInputError(f"unknown engine {engine!r}; valid: {', '.join(ITEM_ENGINES)}")
    predictor = PredictorSpec.parse(predictor_name)
    native = spec.name in NATIVE_POLICIES and (not spec.uses_predictions or predictor.has_array)
    if engine == "native" and not native:
        why = (f"policy {spec.name!r} has no native engine; native: {', '.join(sorted(NATIVE_POLICIES))}"
               if spec.name not in NATIVE_POLICIES else
               f"predictor {str(predictor)!r} runs in Python; the native engine takes the experiment "
               f"predictors and learned ones queried async (e.g. lightgbm:async)")
        raise LcrInputError(f"{why} (use --engine auto or python)")
    return engine != "python" and native


def run_one(trace: Trace, spec: PolicySpec, capacity: int, predictor_name: "str | PredictorSpec" = ORACLE,
            noise: float = 0.0, seed: int = 0, progress: Progress | None = None,
            engine: str = "auto", predictions: PredictionCache | None = None) -> SimResult:
    """One policy at one size. ``predictor_name``: a ``PredictorSpec`` or a name, taken as
    given (``run_sweep`` replays a learned model named without a mode async; this does
    not). ``predictions``: where prediction arrays come from (a sweep passes one cache to
    all its runs; default: a fresh in-memory one)."""
    predictor = PredictorSpec.parse(predictor_name)
    params = dict(spec.params)
    if predictions is None:
        predictions = PredictionCache("off")
    if "seed" in inspect.signature(POLICIES[spec.name]).parameters:  # randomised policies
        params.setdefault("seed", seed)
    if spec.uses_predictions and predictor.mode:  # ``lightgbm:async`` picks the policy's mode
        params.setdefault("mode", predictor.mode)
    if uses_native(spec, engine, predictor):
        values = predictions.get(predictor, trace, noise, seed, capacity) if spec.uses_predictions else None
        try:
            run = native_replay(trace, spec.name, capacity, values, **params)
        except (TypeError, ValueError) as err:
            raise LcrInputError(f"policy {spec.label!r}: {err}") from None
        if progress is not None:
            progress(len(trace))
    else:
        run = _replay_python(trace, spec, capacity, predictor, noise, seed, params, progress, predictions)
    hits = int(run.hits.sum())
    predicted = spec.uses_predictions
    return SimResult(trace.name, spec.label, capacity, str(predictor) if predicted else None,
                     noise if predicted else None, len(trace), hits, len(trace) - hits,
                     hits / len(trace), run.seconds, stats=run.stats)


def _replay_python(trace: Trace, spec: PolicySpec, capacity: int, predictor_spec: PredictorSpec, noise: float,
                   seed: int, params: dict, progress: Progress | None, predictions: PredictionCache):
    predictor = None
    if spec.uses_predictions and predictor_spec.has_array:
        predictor = ArrayPredictor(predictions.get(predictor_spec, trace, noise, seed, capacity),
                                   name=str(predictor_spec))
    elif spec.uses_predictions:  # the sync online model answers during the replay
        predictor = make_predictor(predictor_spec, trace, noise, seed, capacity)
    try:
        policy = make_policy(spec.name, capacity, predictor=predictor, next_use=trace.next_use, **params)
    except (TypeError, ValueError) as err:
        raise LcrInputError(f"policy {spec.label!r}: {err}") from None
    try:
        run = replay(trace, policy, predictor, progress=progress)
    finally:
        close = getattr(predictor, "close", None)
        if close is not None:
            close()
    for name, value in getattr(predictor, "metrics", {}).items():
        run.stats[f"predictor_{name}"] = value
    return run


def run_sweep(trace: Trace, specs: list[PolicySpec], capacities: list[int],
              predictor: "str | PredictorSpec" = ORACLE,
              noises: list[float] = (0.0,), seed: int = 0, progress: Progress | None = None,
              engine: str = "auto", predictions: PredictionCache | None = None, jobs: int = 1) -> list[SimResult]:
    """Every policy at every capacity; predictive ones at every noise level too.
    Cost ratios are misses / OPT misses at the same capacity (OPT is run if not asked).
    ``engine``: ``python`` (the spec), ``native`` (C++ cores) or ``auto`` (native where one exists).
    ``predictions``: shared by every run, so each prediction array is computed once
    (default: in memory for this sweep; pass a ``PredictionCache(dir)`` to keep them).
    ``predictor``: a ``PredictorSpec`` or a name; a learned one without a mode is its async
    replay (``replay_predictor``); ``run_one`` takes predictors as given. ``jobs``: learned
    passes computed at once in worker processes (one per cache size for a per-size model),
    before the replays."""
    predictions = predictions if predictions is not None else PredictionCache("off")
    predictor = replay_predictor(predictor)
    if any(spec.uses_predictions for spec in specs) and predictor.has_array:
        predictions.prefetch(predictor, trace, 0.0, seed, capacities, jobs)
    results = []
    opt = PolicySpec("opt")
    for capacity in capacities:
        baseline = run_one(trace, opt, capacity, progress=progress, engine=engine)
        for spec in specs:
            for noise in (noises if spec.uses_predictions else [None]):
                if spec == opt:
                    result = baseline
                else:
                    result = run_one(trace, spec, capacity, predictor, noise or 0.0, seed, progress, engine,
                                     predictions)
                result.cost_ratio = result.misses / baseline.misses if baseline.misses else 1.0
                results.append(result)
    return results


def sweep_size(trace: Trace, specs: list[PolicySpec], capacities: list[int], noises: list[float]) -> int:
    """Requests a sweep will replay, for the progress bar."""
    runs = sum(len(noises) if s.uses_predictions else 1 for s in specs if s != PolicySpec("opt"))
    return len(trace) * len(capacities) * (runs + 1)
