"""`lcr sim-kv`: replay prefix-block traces through radix caches and report token hit rates."""
from __future__ import annotations

import sys

from lcr.errors import LcrInputError
from lcr.guards import check_output_path
from lcr.sim.args import (PLOT_SUFFIXES, check_limit, check_seed, parse_noises,
                          parse_sizes)
from lcr.sim.cli import split_policies
from lcr.sim.report import write_json
from lcr.sim.sweep import PolicySpec
import lcr.integrations.sglang_sim  # noqa: F401  (registers --engine sglang and SGLang's own strategies)
import lcr.lpc.sim  # noqa: F401  (registers the LPC policies)
from lcr.kv import registry
from lcr.kv.predictors import parse_radix_predictor
from lcr.kv.requests import BLOCK_TOKENS, build_workload
from lcr.kv.sim import POLICIES, RADIX_ENGINES, run_radix_sweep


def parse_cache_tokens(text: str, distinct_tokens: int) -> list[int]:
    """``200000,5%``: token counts, or percentages of the trace's distinct tokens."""
    return parse_sizes(text, distinct_tokens, "--cache-tokens", unit="token")


def parse_policies(text: str, engine: str | None = None) -> list[PolicySpec]:
    """``lru,laru:b=4;slack=0.02``: commas separate policies, ';' their parameters;
    each checked against the registry (and ``engine``, if given)."""
    specs = [PolicySpec.parse(item, registry=POLICIES) for item in split_policies(text)]
    if not specs:
        raise LcrInputError("--policies: give at least one policy")
    for spec in specs:
        registry.policy(spec.name).check(spec.kwargs, engine)
    return specs


def policies_help() -> str:
    builtins = registry.engine_only("sglang")
    own = [name for name in POLICIES if name not in builtins]
    return (f"comma-separated, from {', '.join(own)}; parameters after ':' separated by ';'. "
            f"SGLang's own eviction strategies (--engine sglang only): {', '.join(builtins) or 'none'}")


def load_chat(spec: str, limit: int | None):
    """``chat:PATH[,sessions=N,active=M,block_tokens=B,seed=S]``: the ShareGPT chat replay."""
    from lcr.kv.chat import chat_workload
    from lcr.kv.requests import BlockWorkload

    path, *options = spec[len("chat:"):].split(",")
    params = {}
    for option in options:
        name, _, value = option.partition("=")
        if name not in ("sessions", "active", "block_tokens", "seed") or not value.isdigit():
            raise LcrInputError(f"{spec!r}: unknown or non-integer option {option!r}; "
                                "valid: sessions, active, block_tokens, seed")
        params[name] = int(value)
    workload = chat_workload(path, **params)
    if limit is not None:
        workload = BlockWorkload(workload.requests[:limit], workload.name)
    return workload


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sim-kv", help="replay prefix-block traces through radix (KV prefix) caches",
        description="Replay a prefix-block trace (Mooncake JSONL, or the online_qa/aibrix "
                    "generators) through a radix cache of a token capacity; print token hit "
                    "rate and cost ratio (missed tokens / OPT's) per policy and noise level.")
    p.add_argument("trace", help="a Mooncake JSONL file, a generator spec (e.g. online_qa:conversations=500), "
                        "or chat:SHAREGPT.jsonl[,sessions=N,active=M] (interleaved chat replay)")
    p.add_argument("--cache-tokens", required=True,
                   help="cache sizes in tokens, or %% of the trace's distinct tokens (comma-separated)")
    p.add_argument("--policies", default="lru,laru,fpb,hf,rlt,opt", help=policies_help())
    p.add_argument("--predictor", default="oracle",
                   help="oracle, noisy:P, residual (serving's default: an online survival model of "
                        "reuse intervals), lightgbm (early first fit, recent intervals until then), "
                        "intervals, lightgbm-late (first fit after 10,000 accesses), or lightgbm-belady "
                        "(relaxed-Belady classifier, ranked by age plus a learned bonus)")
    p.add_argument("--noise", default=None,
                   help="worst-case noise probabilities for oracle predictions, e.g. 0,0.5,1")
    p.add_argument("--engine", default="lcr",
                   help="; ".join(f"{e}: {registry.engine(e).summary}" for e in RADIX_ENGINES))
    p.add_argument("--block-tokens", type=int, default=BLOCK_TOKENS, help="tokens per full block")
    p.add_argument("--limit", type=int, help="replay only the first N requests, counted as the summary "
                                             "line counts them (prompts, each a chain of blocks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write results as JSON here")
    p.add_argument("--plot", help="write the robustness plot (hit rate vs noise) here")
    p.set_defaults(func=run)


def run(args) -> int:
    from lcr.traces import load_trace

    registry.engine(args.engine).check()  # can it run here? (before a policy's options load its code)
    policies = parse_policies(args.policies, args.engine)
    kind, fixed_noise = parse_radix_predictor(args.predictor)
    if fixed_noise is not None and args.noise is not None:
        raise LcrInputError("give the noise either as --predictor noisy:P or as --noise, not both")
    noises = [fixed_noise] if fixed_noise is not None else parse_noises(args.noise or "0", probability=True)
    check_limit(args.limit, "prompts")
    check_seed(args.seed)
    check_output_path(args.json, "--json")
    check_output_path(args.plot, "--plot", PLOT_SUFFIXES)
    if args.trace.startswith("chat:"):
        workload = load_chat(args.trace, args.limit)
    else:
        trace = load_trace(args.trace, None, None)
        if args.limit is not None and trace.request_offsets is not None:  # build_workload refuses the rest
            trace = trace.first_prompts(args.limit)
        workload = build_workload(trace, args.block_tokens)
    capacities = parse_cache_tokens(args.cache_tokens, workload.distinct_tokens)
    results = run_radix_sweep(workload, capacities, policies, noises, predictor=kind, engine=args.engine,
                        seed=args.seed)
    print(f"# {workload.name}: {len(workload):,} requests, {workload.total_tokens:,} tokens "
          f"({workload.distinct_tokens:,} distinct); engine {args.engine}, predictor {args.predictor}")
    print(format_table(results))
    if args.json:
        write_json(args.json, results, trace=workload.name, requests=len(workload),
                   total_tokens=workload.total_tokens, distinct_tokens=workload.distinct_tokens,
                   engine=args.engine, predictor=args.predictor, seed=args.seed)
    if args.plot:
        from lcr.kv.plot import plot_robustness

        plot_robustness(results, args.plot, title=f"{workload.name} ({args.predictor} predictions)")
    sys.stdout.flush()
    return 0


def format_table(results) -> str:
    header = ("policy", "cache tokens", "noise", "token hit rate", "cost ratio", "pred evictions",
              "pred calls")
    rows = [(r.policy, str(r.cache_tokens), "-" if r.noise is None else f"{r.noise:g}",
             f"{r.hit_rate:.4f}", "-" if r.cost_ratio is None else f"{r.cost_ratio:.3f}",
             str(r.stats.get("prediction_evictions", 0)), str(r.stats.get("predictor_calls", 0)))
            for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
