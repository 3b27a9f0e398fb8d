"""`lcr bench sls`: SparseLengthsSum throughput through SlabHashCache (paper Figure 9 and
the DLRM experiment: lookups shaped by Meta's production locality statistics)."""
from __future__ import annotations

import argparse
import json

from lcr.atomic import write_output
from lcr.embedding.slab_policies import SLAB_POLICIES, describe_slab_policies, parse_slab_policy
from lcr.errors import LcrInputError

TILE_ROWS = 1 << 16  # distinct random rows of a generated table


def _list(text: str, kind, flag: str) -> list:
    try:
        values = [kind(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise LcrInputError(f"{flag}: {text!r} is not a comma-separated list of {kind.__name__}") from None
    if not values:
        raise LcrInputError(f"{flag}: give at least one value")
    return values


def model_factory(predictor: str, lookups, rows: int, noise: float, seed: int):
    """A function building a fresh predictor model per benchmark cell from the lookups a
    batch holds (None: no predictor). Oracle and noisy predictions are read from the
    trace (free); ``lightgbm`` is the paper's four-feature DLRM model, trained online on
    the predictor thread, so its observing, fitting and predicting are on the benchmark's
    clock. It fits at most once per batch: its answers are taken at the end of a batch, so
    more fits are work the cache never sees (t856 over 2x10^7 rows, batches of 102,400
    lookups: the same hit ratios at 1% and 3% for ~2 against 12-13 us per lookup)."""
    from dataclasses import replace

    from lcr.embedding.predictions import OnlineModel, TracePredictor

    if predictor.startswith("lightgbm"):
        from lcr.predict import learned_config
        from lcr.predict.lightgbm_model import LightGBMPredictor

        config = learned_config("lightgbm-weak" if predictor == "lightgbm-weak" else "lightgbm-compact", seed)
        return lambda batch_lookups: OnlineModel(LightGBMPredictor(
            replace(config, retrain_every=max(config.retrain_every, batch_lookups))))
    from lcr.predict.experimental import oracle_predictions
    from lcr.traces import Trace

    values = oracle_predictions(Trace(lookups), noise, seed)
    return lambda batch_lookups: TracePredictor(values, rows)


def parse_sls_predictor(text: str) -> tuple[str, float]:
    """``oracle``, ``noisy:P`` (oracle with a fraction P inverted), ``lightgbm`` (the paper's
    four-feature DLRM model, trained online, queried asynchronously) or ``lightgbm-weak``."""
    if text == "oracle":
        return "oracle", 0.0
    if text.startswith("noisy:"):
        try:
            noise = float(text.split(":", 1)[1])
        except ValueError:
            noise = -1.0
        if not 0 <= noise <= 1:
            raise LcrInputError(f"--predictor: {text!r}: noisy:P needs 0 <= P <= 1")
        return "noisy", noise
    if text in ("lightgbm", "lightgbm-weak"):
        return text, 0.0
    raise LcrInputError(f"--predictor: {text!r}; valid: oracle, noisy:P, lightgbm, lightgbm-weak")


def register(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks of lcr's engines")
    kinds = bench.add_subparsers(dest="bench", required=True)
    p = kinds.add_parser(
        "sls", help="SparseLengthsSum latency through SlabHashCache per policy",
        description="Average SLS latency per batch, hit ratio, samples/s and the stage "
                    "breakdown (query, fetch, insert, reduce) for each policy, cache ratio "
                    "and batch size.")
    p.add_argument("--trace", default="zipf",
                   help="dlrm (lookups shaped by Meta's DLRM table t856), dlrm:STATS_FILE[:TABLE] "
                        "(a dlrm_datasets locality_stats.txt), zipf, zipf:alpha=A, or a trace file "
                        "(keys mapped onto dense row ids)")
    p.add_argument("--table-rows", type=int, default=None,
                   help="rows of a generated table (default: zipf 100,000; dlrm 1,000,000 on cpu, "
                        "20,000,000 on cuda)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--pooling", type=int, default=50, help="lookups per sample")
    p.add_argument("--batch-sizes", default="128,512,2048")
    p.add_argument("--cache-ratio", default="0.01,0.02,0.03",
                   help="cache slots as a fraction of the table's rows (dlrm, zipf) or of a trace "
                        "file's distinct keys")
    p.add_argument("--policies", default=",".join(SLAB_POLICIES),
                   help="slab policies, comma-separated, each NAME or NAME:OPTION=VALUE;... "
                        f"(defaults: {describe_slab_policies()})")
    p.add_argument("--predictor", default="oracle",
                   help="oracle, noisy:P, lightgbm or lightgbm-weak, or several comma-separated: "
                        "each policy that reads predictions runs once per predictor, the others once")
    p.add_argument("--prediction-mode", choices=("sync", "async"), default="sync",
                   help="sync: batch i's predictions are in before batch i + 2, the loop waits for "
                        "the predictor thread when it is behind (the same decisions every run); "
                        "async: the loop never waits and the thread skips batches it has no time for")
    p.add_argument("--store", default="host", help="host, or a redis URL (redis://..., unix://...)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--batches", type=int, default=10, help="timed batches per configuration")
    p.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true",
                   help="synchronise after every stage and report the stage breakdown (slower)")
    p.add_argument("--json", help="write the results as JSON here")
    p.add_argument("--plot", help="write a Figure-9-style PNG here")
    p.set_defaults(func=run)


def table_rows(args) -> int:
    if args.table_rows is not None:
        return args.table_rows
    if args.trace == "dlrm" or args.trace.startswith("dlrm:"):
        return 20_000_000 if args.device == "cuda" else 1_000_000
    return 100_000


def load_workload(args):
    import numpy as np

    from lcr.embedding.bench import SlsWorkload
    from lcr.traces import generate, load_trace

    batch_max = max(_list(args.batch_sizes, int, "--batch-sizes"))
    needed = (args.warmup + args.batches) * batch_max * args.pooling
    rows = table_rows(args)
    if args.trace == "dlrm" or args.trace.startswith("dlrm:"):
        from lcr.embedding.locality import locality_lookups, locality_table

        lookups = locality_lookups(locality_table(args.trace), rows, needed, args.seed)
    elif args.trace == "zipf" or args.trace.startswith("zipf:"):
        params = dict(item.split("=", 1) for item in args.trace[5:].split(",") if "=" in item)
        params.setdefault("alpha", "1.05")
        spec = f"zipf:requests={needed},keys={rows},alpha={params['alpha']},seed={args.seed}"
        lookups = generate(spec).keys
    else:
        _, lookups = np.unique(load_trace(args.trace).keys, return_inverse=True)
        rows = int(lookups.max()) + 1
    lookups = np.ascontiguousarray(lookups, dtype=np.int64)
    generated = args.trace.split(":", 1)[0] in ("dlrm", "zipf")
    return SlsWorkload(lookups, rows, int(len(np.unique(lookups))), args.pooling,
                       cache_base=rows if generated else 0)


def make_store(args, rows: int):
    """(the store, the full table as a tensor on the host)."""
    import numpy as np
    import torch

    from lcr.embedding.stores import HostStore, RedisStore

    # Random rows, repeating every TILE_ROWS: a 2x10^7-row table is a copy, not 10 GB of
    # random draws (throughput does not depend on the values; the tests check the sums).
    block = np.random.default_rng(args.seed).standard_normal((min(rows, TILE_ROWS), args.dim),
                                                             dtype=np.float32)
    block = torch.from_numpy(block.astype(args.dtype))
    table = block.repeat(-(-rows // len(block)), 1)[:rows] if rows > len(block) else block
    if store_kind(args.store) == "host":
        return HostStore(table), table
    store = RedisStore(args.store, args.dim, args.dtype)
    store.load(table.numpy())
    return store, table


def store_kind(text: str) -> str:
    """``host`` or ``redis``; anything else is refused (with any password hidden)."""
    if text == "host":
        return "host"
    if text.startswith(("redis://", "rediss://", "unix://")):
        return "redis"
    from lcr.redact import redact_url

    raise LcrInputError(f"--store: {redact_url(text)!r}; valid: host or a redis URL")


def check_args(args: argparse.Namespace) -> tuple[list[str], list[float], list[int]]:
    """Every flag checked, and the run's memory estimated, before any work starts."""
    import math

    from lcr.guards import check_memory, check_output_path

    try:
        policies = [str(parse_slab_policy(text)) for text in _list(args.policies, str, "--policies")]
    except ValueError as err:
        raise LcrInputError(f"--policies: {err}") from None
    ratios = _list(args.cache_ratio, float, "--cache-ratio")
    bad = [r for r in ratios if not (math.isfinite(r) and 0 < r <= 1)]
    if bad:
        raise LcrInputError(f"--cache-ratio: {bad[0]} is not a fraction in (0, 1]")
    sizes = _list(args.batch_sizes, int, "--batch-sizes")
    for flag, values, low in (("--batch-sizes", sizes, 1), ("--table-rows", [table_rows(args)], 1),
                              ("--dim", [args.dim], 1), ("--pooling", [args.pooling], 1),
                              ("--batches", [args.batches], 1), ("--warmup", [args.warmup], 0),
                              ("--seed", [args.seed], 0)):
        if min(values) < low:
            raise LcrInputError(f"{flag} must be at least {low}, got {min(values)}")
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            check_output_path(path, flag)
    store_kind(args.store)
    itemsize = 2 if args.dtype == "float16" else 4
    lookups = (args.warmup + args.batches) * max(sizes) * args.pooling
    table = table_rows(args) * args.dim * itemsize
    # the lookups (int64, and a few working copies), the table twice (store, reference), the largest cache
    check_memory(8 * 4 * lookups + 2 * table + max(ratios) * table, "this benchmark")
    return policies, ratios, sizes


def run(args: argparse.Namespace) -> int:
    policies, ratios, sizes = check_args(args)
    predictors = [(text, *parse_sls_predictor(text)) for text in _list(args.predictor, str, "--predictor")]
    if args.device == "cuda":
        from lcr.cuda import gpu_available
        if not gpu_available():
            raise LcrInputError("--device cuda: no CUDA GPU (or lcr was built without nvcc)")

    from lcr.embedding.bench import format_table, plot_latency, run_sls_bench
    from lcr.redact import redact_url

    workload = load_workload(args)
    store, table = make_store(args, workload.rows)
    # Only a URL can hold a secret (and redact_url turns "host" into ":host").
    store_name = redact_url(args.store) if store_kind(args.store) == "redis" else args.store
    print(f"lcr bench sls: {len(workload.lookups)} lookups over {workload.distinct} distinct rows, "
          f"dim {args.dim} {args.dtype}, pooling {args.pooling}, store {store_name}, "
          f"device {args.device}, predictor {args.predictor}", flush=True)
    results = []
    for i, (name, predictor, noise) in enumerate(predictors):
        # The policies that ignore predictions (and the resident baseline) run once.
        todo = policies if i == 0 else [p for p in policies if parse_slab_policy(p).policy.predictive]
        results += run_sls_bench(workload, store, policies=todo, cache_ratios=ratios, batch_sizes=sizes,
                                 dim=args.dim, dtype=args.dtype, device=args.device,
                                 make_model=model_factory(predictor, workload.lookups, workload.rows, noise,
                                                          args.seed),
                                 warmup=args.warmup, batches=args.batches, profile=args.profile,
                                 table=table if i == 0 else None, predictor=name,
                                 prediction_mode=args.prediction_mode)
    print(format_table(results))
    if args.json:
        arguments = {k: v for k, v in vars(args).items() if k != "func"}
        write_output(args.json, json.dumps({"args": {**arguments, "store": store_name},
                                            "results": [r.as_dict() for r in results]}, indent=1), "JSON")
    if args.plot:
        plot_latency(results, args.plot, title=f"SLS via SlabHashCache ({args.device}, {args.predictor})")
    return 0
