"""Predictor latency: batch prediction, retraining, and a service round trip.

    python benchmarks/predictor_latency.py [--quick]

Targets (issues 4 and 11): predict 25,000 keys <= 2 ms median (stretch 1 ms) with the
paper's DLRM model (four features: time, key, count, last interval; the ``compact``
layout) and with the full layout (16 deltas, 8 EDCs, count, age), beside LightGBM's own
predict on the same rows; retrain on 25,000 samples <= 100 ms (regression and the belady
classifier); service round trip for 1,000 keys on loopback <= 2 ms median.
Prints medians and writes benchmarks/results/predictor.json.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.predict.wire import encode_observations
from lcr.sim.report import machine_description

RESULTS = Path(__file__).parent / "results" / "predictor.json"


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def trained_model(config: LightGBMConfig, accesses: int, keys: int, seed: int = 0) -> LightGBMPredictor:
    model = LightGBMPredictor(config)
    stream = np.random.default_rng(seed).zipf(1.1, accesses) % keys
    for t, key in enumerate(stream.tolist()):
        model.observe(key, t)
    model.fit()
    return model


def bench_predict(repeats: int) -> dict:
    out = {}
    for mode in ("full", "compact"):
        from lcr.predict.features import FeatureConfig

        config = LightGBMConfig(background=False, retrain_every=10**9, cache_predictions=False,
                                features=FeatureConfig(mode=mode))
        model = trained_model(config, 150_000, 60_000)
        keys = np.array(sorted(model.features._slot))[:25_000]
        now = 150_000
        out[f"predict_25k_{mode}_ms"] = median_ms(lambda: model.predict(keys, now), repeats)
        rows = model.features.rows(model.features.slots(keys))
        booster, forest = model._model.booster, model._model.forest
        out[f"predict_25k_{mode}_lightgbm_only_ms"] = median_ms(lambda: booster.predict(rows, num_threads=1), repeats)
        out[f"predict_25k_{mode}_native_forest_only_ms"] = median_ms(lambda: forest.predict(rows), repeats)
        model.config = LightGBMConfig(**{**config.__dict__, "cache_predictions": True})
        out[f"predict_25k_{mode}_memoised_ms"] = median_ms(lambda: model.predict(keys, now), repeats)
    return out


def bench_fit(repeats: int) -> dict:
    out = {}
    for objective in ("regression", "belady"):
        model = trained_model(LightGBMConfig(background=False, retrain_every=10**9, window=120_000,
                                             objective=objective, capacity=2_000), 150_000, 20_000)
        X, y, boundary = model.training_set()
        X, y = X[-25_000:], y[-25_000:]
        suffix = "" if objective == "regression" else "_belady"
        out[f"fit_samples{suffix}"] = len(y)
        out[f"fit_25k{suffix}_ms"] = median_ms(lambda: model.fit_arrays(X, y, boundary), repeats)
    return out


def bench_service(repeats: int) -> dict:
    import uvicorn

    from lcr.predict.remote import RemotePredictor
    from lcr.predict.service import create_app

    import functools

    # Built (and trained) in the service's model process.
    model = functools.partial(trained_model, LightGBMConfig(background=False, retrain_every=10**9), 50_000, 10_000)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(model), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        client = RemotePredictor(f"http://127.0.0.1:{port}", deadline_s=1.0)
        keys = np.arange(1000)
        result = {"service_predict_1k_ms": median_ms(lambda: client.predict(keys, 50_000), repeats)}
        assert client.metrics["fallbacks"] == 0, "service benchmark fell back"
        observations = (np.arange(1000), np.full(1000, 50_000))
        result["service_observe_1k_ms"] = median_ms(
            lambda: client._post(0, "/observe", encode_observations(*observations), time.monotonic() + 1.0),
            repeats)
        client.close()
        return result
    finally:
        server.should_exit = True
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 5 if args.quick else 21
    results = {**bench_predict(repeats), **bench_fit(max(3, repeats // 3)), **bench_service(repeats * 5)}
    targets = {"predict_25k_compact_ms": 2.0, "predict_25k_full_ms": 2.0, "fit_25k_ms": 100.0,
               "fit_25k_belady_ms": 100.0, "service_predict_1k_ms": 2.0}
    for name, value in results.items():
        target = f"  (target <= {targets[name]:g})" if name in targets else ""
        print(f"{name:36s} {value:10.3f}{target}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine_description(), "medians": results,
                                   "targets_ms": targets}, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
