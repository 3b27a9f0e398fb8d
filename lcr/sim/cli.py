"""`lcr sim`: replay a trace or a generated workload through policies and report."""
from __future__ import annotations

import argparse

from lcr.errors import LcrInputError
from lcr.guards import check_output_path
from lcr.sim.args import (PLOT_SUFFIXES, check_limit, check_seed, parse_noises,
                          parse_sizes)
from lcr.predict import PREDICTOR_HELP
from lcr.sim import moe as moe_sim
from lcr.sim.progress import maybe_progress
from lcr.sim.predictions import PredictionCache, check_cache_directory, replay_predictor
from lcr.sim.sweep import ITEM_ENGINES, PolicySpec, run_sweep, sweep_size
from lcr.traces import FORMAT_NAMES, GENERATORS, format_label, load_trace


def parse_capacities(text: str, distinct_keys: int) -> list[int]:
    """``1%,5%,100``: percentages of the distinct keys, or item counts."""
    return parse_sizes(text, distinct_keys, "--cache")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sim", help="replay a trace through caching policies",
        description="Replay a trace file or a generated workload through policies and print "
                    "hit ratio, misses, cost ratio (misses / OPT) and predictor calls.")
    p.add_argument("trace", help="a trace file, or a generator spec such as "
                                 f"zipf:requests=100000,alpha=1.0 (generators: {', '.join(GENERATORS)})")
    p.add_argument("--format", choices=FORMAT_NAMES, metavar="FORMAT",
                   help="trace format: int32-be|int32-le|int64-be|int64-le|uint32-be|... (binary keys), "
                        "cache2k (int32-be), scarab (int64-be), cloudphysics (uint32-be), oracleGeneral, "
                        "csv, text|lirs|txt, arc, adapt_size, mooncake, criteo, moe-router. Default: from "
                        "the file name where it is unambiguous, else from the content (refused if "
                        "the content fits several)")
    p.add_argument("--limit", type=int, help="replay only the first N requests, counted as the summary "
                                             "line counts them (keys looked up: a Mooncake prompt is "
                                             "one request per block, an ARC line one per block)")
    p.add_argument("--domain", choices=("cache", "moe"), default="cache",
                   help="moe: a MoE routing trace (router capture or the moe/mixtral/llama_moe "
                        "generators); layered policies get layers/experts from it")
    p.add_argument("--cache", help="cache sizes: item counts or %% of distinct keys "
                                   "(default 1%%,5%%,10%%; moe: 25%%,50%%,75%% of all experts)")
    p.add_argument("--policies", help="comma-separated policy names, each optionally name:param=value,... "
                                      "(separate those with ';'); default lru,opt,fpb,hf,laru "
                                      "(moe: opt,lru,llru,lru_dist,marker,opt_dist)")
    p.add_argument("--predictor", default="oracle", metavar="NAME",
                   help=f"{PREDICTOR_HELP}. oracle/lognormal/constant: experiments, with --noise. "
                        "lightgbm: the online relaxed-Belady classifier, its boundary learned for each "
                        "cache size; lightgbm-compact: the paper's 4-feature DLRM regression; "
                        "lightgbm-weak: 1 tree, 1 feature. Learned models are queried async, computed "
                        "in one exact pass per trace (per size for lightgbm) shared by every policy "
                        "and cached on disk; :sync queries the model at each eviction instead (Python "
                        "engine, slow). retrain_every/window: accesses between fits and samples kept "
                        "(default 5000, 40000; docs/predictor.md's best: 2500, 80000)")
    p.add_argument("--prediction-cache", default=None, metavar="DIR|off",
                   help="where learned prediction passes are kept between runs, keyed by the trace's "
                        "content and the predictor settings (default: $LCR_CACHE_DIR or "
                        "~/.cache/lcr/predictions); 'off' computes them afresh")
    p.add_argument("--jobs", type=int, default=1,
                   help="learned prediction passes computed at once, in worker processes (lightgbm "
                        "has one per cache size; default 1)")
    p.add_argument("--noise", default="0", help="noise levels for the predictor, e.g. 0,0.1,0.5,1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", choices=ITEM_ENGINES, default="auto",
                   help="python: the spec classes; native: the C++ cores; auto (default): native "
                        "for every policy that has one (same decisions, much faster)")
    p.add_argument("--json", help="write results as JSON here")
    p.add_argument("--plot", help="write a PNG plot here")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar (default: on a terminal, for long sweeps)")
    p.set_defaults(func=run)


def split_policies(text: str) -> list[str]:
    """``laru:b=4;mode=async,lru``: commas separate policies; ';' separates one policy's params."""
    return [item.replace(";", ",") for item in text.split(",") if item.strip()]


def run(args) -> int:
    moe = args.domain == "moe"
    if args.policies is None:
        args.policies = moe_sim.DEFAULT_POLICIES if moe else "lru,opt,fpb,hf,laru"
    if args.cache is None:
        args.cache = moe_sim.DEFAULT_CACHE if moe else "1%,5%,10%"
    specs = [PolicySpec.parse(item) for item in split_policies(args.policies)]
    if not specs:
        raise LcrInputError("--policies: give at least one policy")
    noises = parse_noises(args.noise)
    check_seed(args.seed)
    check_limit(args.limit)
    if args.jobs < 1:
        raise LcrInputError(f"--jobs must be at least 1, got {args.jobs}")
    check_output_path(args.json, "--json")
    check_output_path(args.plot, "--plot", PLOT_SUFFIXES)
    predictor = replay_predictor(args.predictor)  # the one place the name is read
    check_cache_directory(args.prediction_cache)
    trace = load_trace(args.trace, args.format, args.limit)
    if moe:
        specs = moe_sim.prepare(trace, specs)
    # MoE cache sizes are shares of all the model's experts, seen or not.
    universe = moe_sim.pages(trace) if moe else trace.distinct_keys
    capacities = parse_capacities(args.cache, universe)
    bar = maybe_progress(sweep_size(trace, specs, capacities, noises), "lcr sim", args.progress)
    cache = PredictionCache(args.prediction_cache, progress=args.progress)
    results = run_sweep(trace, specs, capacities, predictor, noises, args.seed, bar, args.engine,
                        predictions=cache, jobs=args.jobs)
    if bar:
        bar.close()
    print(f"# {trace.name} [{format_label(trace)}]: {len(trace):,} requests, "
          f"{trace.distinct_keys:,} distinct keys; predictor {predictor}"
          + (f" ({cache.summary()})" if cache.used else ""))
    from lcr.sim.report import format_table, write_json

    print(format_table(results))
    if args.json:
        write_json(args.json, results, trace=trace.name, trace_format=trace.meta.get("format"),
                   requests=len(trace), distinct_keys=trace.distinct_keys, predictor=str(predictor),
                   seed=args.seed, prediction_passes=cache.passes)
    if args.plot:
        from lcr.sim.plot import plot_sweep

        plot_sweep(results, args.plot, title=f"{trace.name} ({predictor} predictions)")
    return 0
