"""Predictor latency: batch prediction, retraining, and a service round trip.

    nice -n 5 python benchmarks/predictor_latency.py [--quick] [--no-service] [--threads N] [--out FILE]
                                                     [--evaluations | --fit-parts]

Targets (issues 4 and 11): predict 25,000 keys <= 2 ms median (stretch 1 ms), end to end
(``LightGBMPredictor.predict``: key lookup, then one native pass: the forest reading each
key's feature row in place, in row order, and the answer rule), beside LightGBM's own
``Booster.predict`` on the same rows (already gathered) and the forest's previous
evaluation (``walk``, tree by tree) in the same run. Models: the belady classifier with the
``probability`` rank that LARU's best learned_gap variant uses, the regression model, both
over the full layout (16 deltas, 8 EDCs, count, age), and the paper's DLRM ``compact``
layout (time, key, count, last interval). Retrain on 25,000 samples <= 100 ms (regression
and belady); service round trip for 1,000 keys on loopback <= 2 ms median.

``--threads N`` gives our predict and fits (``LightGBMConfig.num_threads``) and LightGBM's
own predict the same N threads (default 1); with more than one, read the wall medians (the
CPU column is the calling thread's only).

Each timing is repeated; the table shows the median with the 25th-75th percentile and the
median thread CPU time (on a shared machine wall time includes waiting for a core), and
the load average before and after. Writes the entry ``threads_N`` of benchmarks/results/predictor.json.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

from results_file import update_entry

import numpy as np

from lcr.predict.features import FeatureConfig
from lcr.predict.forest import compile_booster
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.predict.wire import encode_observations
from lcr.sim.report import machine_description

RESULTS = Path(__file__).parent / "results" / "predictor.json"


def timed(fn, repeats: int, setup=None) -> dict:
    """Wall-clock median, quartiles and minimum (ms) of ``fn`` and its median thread CPU
    time; ``setup`` runs untimed before each call."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        if setup is not None:
            setup()
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    q25, median, q75 = np.percentile(wall, [25, 50, 75]) * 1e3
    return {"median": median, "p25": q25, "p75": q75, "min": min(wall) * 1e3,
            "cpu_median": float(np.median(cpu)) * 1e3, "repeats": repeats}


def trained_model(config: LightGBMConfig, accesses: int, keys: int, seed: int = 0) -> LightGBMPredictor:
    model = LightGBMPredictor(config)
    stream = np.random.default_rng(seed).zipf(1.1, accesses) % keys
    for t, key in enumerate(stream.tolist()):
        model.observe(key, t)
    model.fit()
    return model


#: The models timed: (name, config changes). ``belady_p`` is LARU's best learned variant.
PREDICT_MODELS = [
    ("belady_p", dict(objective="belady", rank="probability", capacity=2_000)),
    ("full", dict()),
    ("compact", dict(features=FeatureConfig(mode="compact"))),
]


def bench_predict(repeats: int, threads: int = 1) -> dict:
    out = {}
    for name, changes in PREDICT_MODELS:
        config = LightGBMConfig(background=False, retrain_every=10**9, cache_predictions=False,
                                num_threads=threads, **changes)
        model = trained_model(config, 150_000, 60_000)
        # 25k of the 60k keys seen, in random order: rows scattered over the feature store.
        seen = np.fromiter(model.features._slot, dtype=np.int64)
        keys = np.random.default_rng(1).permutation(seen)[:25_000]
        now = 150_000
        slots = model.features.slots(keys)
        rows = model.features.rows(slots)
        booster, forest = model._model.booster, model._model.forest
        answers = model.predict(keys, now)
        lightgbm_answers = model._model.answers(booster.predict(rows, raw_score=True, num_threads=threads),
                                                model.features.last_times(slots))
        # Bit for bit for one booster; a mix's forest scales its leaves by 1 / members (rounding).
        assert np.allclose(answers, lightgbm_answers, rtol=1e-12, atol=0), "native predictions differ from LightGBM's"
        out[f"predict_25k_{name}"] = timed(lambda: model.predict(keys, now), repeats)
        out[f"predict_25k_{name}_lightgbm_own"] = timed(
            lambda: booster.predict(rows, raw_score=True, num_threads=threads), repeats)
        out[f"predict_25k_{name}_native_forest_rows"] = timed(lambda: forest.predict(rows, None, threads), repeats)
        out[f"predict_25k_{name}_native_forest_in_place"] = timed(
            lambda: forest.predict(model.features.matrix, slots, threads), repeats)
        walk = compile_booster(booster, model.features.width, "walk")
        out[f"predict_25k_{name}_native_walk_in_place"] = timed(
            lambda: walk.predict(model.features.matrix, slots, threads), repeats)
        out[f"predict_25k_{name}_key_lookup"] = timed(lambda: model.features.slots(keys), repeats)
        # Memoised (the default): the first call after a fit predicts every key, later
        # calls only keys observed since.
        model.config = replace(config, cache_predictions=True)
        out[f"predict_25k_{name}_memo_first_call"] = timed(
            lambda: model.predict(keys, now), repeats,
            setup=lambda: model._memo.fill(np.nan))
        out[f"predict_25k_{name}_memoised"] = timed(lambda: model.predict(keys, now), repeats)
    return out


def bench_evaluations(repeats: int) -> dict:
    """The forest over the same 25k scattered rows, each variant in turn within every
    repeat (thread CPU ms, median and min): the tree-by-tree walk in the caller's order
    (the previous code: batches below the size the forest sorts), the walk in row order,
    the leaf masks in row order (now), and both on contiguous rows (compute only)."""
    out = {}
    for name, changes in PREDICT_MODELS:
        config = LightGBMConfig(background=False, retrain_every=10**9, cache_predictions=False, **changes)
        model = trained_model(config, 150_000, 60_000)
        seen = np.fromiter(model.features._slot, dtype=np.int64)
        slots = model.features.slots(np.random.default_rng(1).permutation(seen)[:25_000])
        matrix, rows = model.features.matrix, model.features.rows(slots)
        forest = {method: compile_booster(model._model.booster, model.features.width, method)
                  for method in ("walk", "masks")}
        chunks = [slots[i:i + 1000] for i in range(0, len(slots), 1000)]
        variants = {"walk_callers_order": lambda: [forest["walk"].predict(matrix, c) for c in chunks],
                    "walk_row_order": lambda: forest["walk"].predict(matrix, slots),
                    "masks_row_order": lambda: forest["masks"].predict(matrix, slots),
                    "walk_contiguous": lambda: forest["walk"].predict(rows),
                    "masks_contiguous": lambda: forest["masks"].predict(rows)}
        cpu = {variant: [] for variant in variants}
        for _ in range(repeats):
            for variant, fn in variants.items():
                start = time.thread_time()
                fn()
                cpu[variant].append((time.thread_time() - start) * 1e3)
        out[name] = {variant: (float(np.median(v)), min(v)) for variant, v in cpu.items()}
    return out


def bench_fit(repeats: int, threads: int = 1) -> dict:
    out = {}
    for objective in ("regression", "belady"):
        model = trained_model(LightGBMConfig(background=False, retrain_every=10**9, window=120_000,
                                             objective=objective, capacity=2_000, num_threads=threads),
                              150_000, 20_000)
        # A retrain as the model runs it, on 25,000 samples: every member (belady: two, by
        # default) on its share of them, its latest ripe ones; and, for a mix, every member
        # on 25,000 of its own.
        members = model.training_sets()
        share = 25_000 // len(members)
        sets = [(X[-share:], y[-share:], boundary) for X, y, boundary in members]
        suffix = "" if objective == "regression" else "_belady"
        out[f"fit_samples{suffix}"] = [len(y) for _, y, _ in sets]
        out[f"fit_25k{suffix}"] = timed(lambda: model._fit_on(sets), repeats)
        if len(members) > 1:
            each = [(X[-25_000:], y[-25_000:], boundary) for X, y, boundary in members]
            out[f"fit_25k_each{suffix}"] = timed(lambda: model._fit_on(each), repeats)
    return out


def bench_fit_parts(repeats: int) -> dict:
    """Where a retrain on 25k samples goes (thread CPU ms, median): LightGBM's Dataset
    binning (with the training parameters, as ``lgb.train`` builds it), the boosting rounds
    on a built Dataset, and compiling the booster to the native forest."""
    import lightgbm

    out = {}
    for objective in ("regression", "belady"):
        config = LightGBMConfig(background=False, retrain_every=10**9, window=120_000, objective=objective,
                                capacity=2_000)
        model = trained_model(config, 150_000, 20_000)
        X, y, _ = model.training_set()
        X, y = X[-25_000:], y[-25_000:]
        params = config.lgb_params()
        dataset_params = {"max_bin": config.max_bin, "bin_construct_sample_cnt": config.bin_sample, **params}
        built = lightgbm.Dataset(X, y, params=dataset_params).construct()
        booster = lightgbm.train(params, built, num_boost_round=config.num_trees, keep_training_booster=True)
        parts = {"dataset": lambda: lightgbm.Dataset(X, y, params=dataset_params).construct(),
                 "rounds": lambda: lightgbm.train(params, built, num_boost_round=config.num_trees,
                                                  keep_training_booster=True),
                 "compile": lambda: compile_booster(booster, X.shape[1])}
        for part, fn in parts.items():
            out[f"{objective}_{part}"] = timed(fn, repeats)["cpu_median"]
    return out


def bench_service(repeats: int) -> dict:
    import uvicorn

    from lcr.predict.remote import RemotePredictor, ServiceBusy
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
        result = {"service_predict_1k": timed(lambda: client.predict(keys, 50_000), repeats)}
        assert client.metrics["fallbacks"] == 0, "service benchmark fell back"
        observations = (np.arange(1000), np.full(1000, 50_000))
        try:
            result["service_observe_1k"] = timed(
                lambda: client._post(0, "/observe", encode_observations(*observations), time.monotonic() + 1.0),
                repeats)
        except ServiceBusy as busy:  # the service sheds observes faster than it drains them: say so
            result["service_observe_1k_refused"] = str(busy)
        client.close()
        return result
    finally:
        server.should_exit = True
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--no-service", action="store_true", help="skip the service round trip")
    parser.add_argument("--evaluations", action="store_true",
                        help="only compare the forest's evaluations and row orders (thread CPU ms, median (min))")
    parser.add_argument("--fit-parts", action="store_true", help="only split a retrain into its parts")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for our predict and fits and for LightGBM's own predict (default 1)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    repeats = 7 if args.quick else 31
    if args.fit_parts:
        print(f"load average before {os.getloadavg()}")
        for part, ms in bench_fit_parts(max(3, repeats // 3)).items():
            print(f"{part:24s} {ms:8.2f} ms CPU")
        print(f"load average after {os.getloadavg()}")
        return
    if args.evaluations:
        print(f"load average before {os.getloadavg()}")
        for name, variants in bench_evaluations(max(repeats, 41)).items():
            print(name, "  ".join(f"{v}: {median:.2f} ({least:.2f})" for v, (median, least) in variants.items()))
        print(f"load average after {os.getloadavg()}")
        return
    load_before = os.getloadavg()
    results = {**bench_predict(repeats, args.threads), **bench_fit(max(3, repeats // 3), args.threads)}
    if not args.no_service:
        results.update(bench_service(repeats * 3))
    load_after = os.getloadavg()
    targets = {"predict_25k_belady_p": 2.0, "predict_25k_full": 2.0, "predict_25k_compact": 2.0,
               "predict_25k_belady_p_memo_first_call": 2.0, "fit_25k": 100.0, "fit_25k_belady": 100.0,
               "service_predict_1k": 2.0}
    print(f"load average (1/5/15 min) before {load_before}, after {load_after}; {args.threads} thread(s)")
    print(f"{'ms':44s} {'median':>8s} {'p25-p75':>17s} {'min':>7s} {'cpu med':>8s}")
    for name, t in results.items():
        if not isinstance(t, dict):
            print(f"{name:44s} {t}")
            continue
        target = f"  (target <= {targets[name]:g})" if name in targets else ""
        print(f"{name:44s} {t['median']:8.3f} {t['p25']:8.3f}-{t['p75']:<8.3f} {t['min']:7.3f} "
              f"{t['cpu_median']:8.3f}{target}")
    for name, _ in PREDICT_MODELS:
        ratio = results[f"predict_25k_{name}_lightgbm_own"]["median"] / results[f"predict_25k_{name}"]["median"]
        print(f"{name}: LightGBM's own predict / ours (medians, same run): {ratio:.1f}x")
    update_entry(args.out, f"threads_{args.threads}", {
        "machine": machine_description(), "threads": args.threads, "load_average_before": load_before,
        "load_average_after": load_after, "timings_ms": results,
        "medians": {k: v["median"] for k, v in results.items() if isinstance(v, dict)}, "targets_ms": targets})
    print(f"wrote {args.out} (threads_{args.threads})")


if __name__ == "__main__":
    main()
