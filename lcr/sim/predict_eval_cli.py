"""`lcr predict-eval`: the online model's offline quality on a trace (``lcr.predict.evaluate``),
with the simulator's flag parsing and plots (here because lcr.predict sits below lcr.sim)."""
from __future__ import annotations

from lcr.errors import LcrInputError
from lcr.guards import check_output_path
from lcr.sim.args import PLOT_SUFFIXES, check_limit, parse_sizes


def register(subparsers) -> None:
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
    p.add_argument("--no-static", dest="static", action="store_false",
                   help="leave out the trace's static metadata (table, tokens from root, size) as features")
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from lcr.predict.evaluate import boundary_quality, opt_victim_ranks, recency_answers, top_rate
    from lcr.predict.features import FeatureConfig
    from lcr.predict.lightgbm_model import LightGBMConfig
    from lcr.predict.replayed import replay_model
    from lcr.traces import load_trace
    from lcr.traces.static import static_fields

    if args.samples < 1:
        raise LcrInputError(f"--samples must be at least 1, got {args.samples}")
    check_limit(args.limit)
    check_output_path(args.plot, "--plot", PLOT_SUFFIXES)
    trace = load_trace(args.trace, args.format, args.limit)
    capacity = parse_sizes(args.cache, trace.distinct_keys, "--cache")[0]
    features = FeatureConfig(static_fields=static_fields(trace) if args.static else ())
    print(f"# {trace.name}: {len(trace):,} requests, {trace.distinct_keys:,} keys, cache {capacity:,}; "
          f"static features: {', '.join(features.static_fields) or 'none'}")
    rows = []
    for name, config in (("regression", LightGBMConfig(background=False, capacity=capacity, features=features)),
                         ("belady", LightGBMConfig(background=False, capacity=capacity, features=features,
                                                   objective="belady"))):
        model = replay_model(trace, config)
        if not model.fits:
            raise LcrInputError(f"{trace.name}: {len(trace):,} requests are too few to fit the model (its first "
                                f"fit needs {config.min_samples:,} samples a boundary old); give a longer trace")
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


def plot_calibration(points: list[tuple[float, float, int]], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lcr.sim.plot import save_figure

    fig, ax = plt.subplots(figsize=(4.2, 4))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    if points:
        predicted, observed, _ = zip(*points)
        ax.plot(predicted, observed, marker="o")
    ax.set(xlabel="predicted P(beyond boundary)", ylabel="observed frequency", xlim=(0, 1), ylim=(0, 1))
    save_figure(fig, path, title)
