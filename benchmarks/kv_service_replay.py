"""Radix LARU through a shared predictor service, in replay (docs/kv.md, "Predictors").

One ``lcr sim-kv`` workload and cache size: LARU's hit tokens over LRU's with the residual
predictor in process, then with the same LARU asking a real ``lcr serve-predictor`` process
per ``--models`` entry (``--model residual``, ``--model lightgbm``) through SGLang's client
path (``ServiceNodePredictor`` behind ``GuardedPredictor``, a 0.5 s timeout: a replay runs
faster than a server, and observations reach the service's model asynchronously, so
predictions may lag them as they would live).

    PYTHONPATH=. python benchmarks/kv_service_replay.py [--trace online_qa:conversations=300,seed=3]
        [--size 5%] [--models residual,lightgbm] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from sglang_ttft import PredictorService

from lcr.integrations.serving_predictor import GuardedPredictor, ServiceNodePredictor
from lcr.kv.cli import parse_cache_tokens
from lcr.kv.predictors import make_path_predictor
from lcr.kv.requests import build_workload
from lcr.kv.sim import make_radix_policy, replay_lcr
from lcr.traces import load_trace


def served_replay(workload, capacity: int, model: str) -> tuple[int, int]:
    """(hit tokens, predictor fallbacks) of LARU over a fresh ``lcr serve-predictor --model``."""
    with tempfile.TemporaryDirectory() as logdir:
        service = PredictorService(Path(logdir), model)
        service.ensure_up()
        try:
            predictor = GuardedPredictor(ServiceNodePredictor(service.url, timeout_s=0.5), timeout_s=0.5,
                                         backoff_s=5.0, pass_budget_s=2.0)
            policy = make_radix_policy("laru", workload, predictor=predictor)
            return replay_lcr(workload, capacity, policy), policy.stats.extra.get("predictor_fallbacks", 0)
        finally:
            service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="online_qa:conversations=300,seed=3")
    parser.add_argument("--size", default="5%")
    parser.add_argument("--models", default="residual,lightgbm")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    workload = build_workload(load_trace(args.trace, None, None), 512)
    [capacity] = parse_cache_tokens(args.size, workload.distinct_tokens)
    lru = replay_lcr(workload, capacity, make_radix_policy("lru", workload))
    local = replay_lcr(workload, capacity,
                       make_radix_policy("laru", workload, predictor=make_path_predictor("residual", workload, 0.0, 0)))
    print(f"{args.trace}, {args.size}: LRU {lru} hit tokens; LARU over LRU, residual in process {local / lru:.3f}x")
    for model in args.models.split(","):
        runs = [served_replay(workload, capacity, model) for _ in range(args.repeats)]
        ratios = [hits / lru for hits, _ in runs]
        print(f"  through lcr serve-predictor --model {model}: median {statistics.median(ratios):.3f}x "
              f"(runs {', '.join(f'{r:.3f}' for r in ratios)}; fallbacks {', '.join(str(f) for _, f in runs)})",
              flush=True)


if __name__ == "__main__":
    main()
