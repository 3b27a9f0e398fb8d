"""`lcr serve-predictor`: run the shared LightGBM predictor service."""
from __future__ import annotations

import os

from lcr.errors import LcrInputError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve-predictor", help="serve a shared online LightGBM predictor over HTTP",
        description="Serve observe/predict/train/health/metrics for caches in other processes. "
                    "Binds loopback unless told otherwise; set a token before binding elsewhere.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", default=os.environ.get("LCR_PREDICTOR_TOKEN"),
                   help="require 'Authorization: Bearer TOKEN' (default: $LCR_PREDICTOR_TOKEN)")
    p.add_argument("--features", choices=("full", "compact"), default="full")
    p.add_argument("--weak", action="store_true", help="the one-tree, one-feature robustness model")
    p.add_argument("--retrain-every", type=int, default=10_000)
    p.add_argument("--window", type=int, default=25_000)
    p.add_argument("--max-body-mb", type=float, default=16.0)
    p.set_defaults(func=run)
    register_eval(subparsers)


def run(args) -> int:
    from lcr.predict.features import FeatureConfig
    from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
    from lcr.predict.service import create_app, require_service_deps

    _, uvicorn = require_service_deps()
    if not 0 < args.port < 65536:
        raise LcrInputError(f"--port {args.port} is not a TCP port")
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.token:
        print(f"lcr serve-predictor: warning: binding {args.host} without a token", flush=True)
    config = LightGBMConfig(features=FeatureConfig(mode=args.features), weak=args.weak,
                            retrain_every=args.retrain_every, window=args.window, background=True)
    app = create_app(LightGBMPredictor(config), token=args.token,
                     max_body_bytes=int(args.max_body_mb * (1 << 20)))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def register_eval(subparsers) -> None:
    p = subparsers.add_parser(
        "predict-eval", help="offline quality of the online model's predictions on a trace",
        description="Replay the online LightGBM model over a trace (async, as the simulator does) and "
                    "report: how often OPT's victim is in the top of the model's ranking of OPT's "
                    "cache, against recency alone; the boundary classifier's ROC-AUC; calibration.")
    p.add_argument("trace")
    p.add_argument("--format", help="trace format (default: from the extension)")
    p.add_argument("--limit", type=int, help="only the first N requests")
    p.add_argument("--cache", default="5%", help="cache size: items or %% of distinct keys (default 5%%)")
    p.add_argument("--samples", type=int, default=2000, help="OPT evictions to rank (evenly spaced)")
    p.add_argument("--plot", help="write the calibration plot (PNG) here")
    p.set_defaults(func=run_eval)


def run_eval(args) -> int:
    import numpy as np

    from lcr.predict.evaluate import (boundary_quality, opt_victim_ranks, plot_calibration, recency_answers,
                                      top_rate)
    from lcr.predict.lightgbm_model import LightGBMConfig
    from lcr.predict.replayed import replay_model
    from lcr.sim.args import parse_sizes
    from lcr.traces import load_trace

    trace = load_trace(args.trace, args.format, args.limit)
    capacity = parse_sizes(args.cache, trace.distinct_keys, "--cache")[0]
    print(f"# {trace.name}: {len(trace):,} requests, {trace.distinct_keys:,} keys, cache {capacity:,}")
    rows = []
    for name, config in (("regression", LightGBMConfig(background=False, capacity=capacity)),
                         ("belady", LightGBMConfig(background=False, capacity=capacity, objective="belady"))):
        model = replay_model(trace, config)
        rows.append((name, model.values))
        if name == "belady":
            quality = boundary_quality(trace, 1 / (1 + np.exp(-model.raw)), model.boundary)
    rows.append(("recency", recency_answers(trace)))
    print(f"{'ranking':12s} {'OPT victim in top 10%':>22s} {'top 1%':>8s} {'mean rank':>10s}")
    for name, answers in rows:
        ranks = opt_victim_ranks(trace, answers, capacity, args.samples)
        print(f"{name:12s} {top_rate(ranks, 0.1):22.1%} {top_rate(ranks, 0.01):8.1%} {ranks.mean():10.3f}")
    print(f"boundary classifier: ROC-AUC {quality.auc:.3f}; beyond the boundary: {quality.positives:.1%}")
    print("calibration (predicted -> observed, count): " +
          ", ".join(f"{p:.2f}->{o:.2f} ({n})" for p, o, n in quality.calibration))
    if args.plot:
        plot_calibration(quality.calibration, args.plot, f"{trace.name}, cache {capacity}")
        print(f"wrote {args.plot}")
    return 0
