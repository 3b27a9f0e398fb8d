"""`lcr sim-ckpt`: checkpoint planners on a trace or a synthetic overlap law, over a budget sweep."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lcr.checkpoints.law import OverlapLaw
from lcr.checkpoints.planners import PLANNERS, get_planner
from lcr.checkpoints.report import format_table, plot_reduction, write_json
from lcr.checkpoints.sweep import add_online_curve, sweep_law
from lcr.checkpoints.synthetic import SYNTHETIC_LAWS, law_from_spec
from lcr.checkpoints.traces import overlap_depths, read_mooncake_blocks
from lcr.errors import LcrInputError
from lcr.guards import check_output_path

DEFAULT_BUDGETS = "1,2,4,...,256"
MAX_BUDGETS = 4096  # each budget is one plan per planner: more is a typo, not a sweep
ONLINE = "online"


def parse_budgets(text: str) -> list[int]:
    """A comma list of budgets; ``a,b,c,...,z`` continues a geometric run (``1,2,4,...,256``)
    and ``a,b,...,z`` an arithmetic one (``16,32,...,128``), ending with ``z``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if "..." not in parts:
        if not parts:
            _fail(text)
        if len(parts) > MAX_BUDGETS:
            _too_many(text)
        return [_budget(p) for p in parts]
    at = parts.index("...")
    head, tail = [_budget(p) for p in parts[:at]], [_budget(p) for p in parts[at + 1:]]
    if len(head) < 2 or len(tail) != 1 or head[-1] <= head[-2]:
        _fail(text)
    a, b, end = head[-2], head[-1], tail[0]
    geometric = len(head) >= 3 and b % a == 0 and head[-3] * (b // a) == a
    step = (lambda x: x * (b // a)) if geometric else (lambda x: x + (b - a))
    if not geometric and (end - b) // (b - a) > MAX_BUDGETS:  # refuse before expanding
        _too_many(text)
    out = head[:]
    while step(out[-1]) <= end:
        out.append(step(out[-1]))
        if len(out) > MAX_BUDGETS:
            _too_many(text)
    if out[-1] != end:
        out.append(end)
    return out


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise LcrInputError(f"--budgets: {text!r} is not an integer") from None
    if value < 1:
        raise LcrInputError(f"--budgets: checkpoint budget must be >= 1, got {value}")
    return value


def _too_many(text: str):
    raise LcrInputError(f"--budgets: {text!r} gives more than {MAX_BUDGETS} budgets")


def _fail(text: str):
    raise LcrInputError(f"--budgets: cannot read {text!r}; write e.g. 1,2,4,...,256 or 8,16,32")


def _load(source: str, cache_entries: int, requests: int, seed: int) -> tuple[OverlapLaw, np.ndarray]:
    """The law and an ordered stream of depths (the trace's own, or seeded samples of the law)."""
    if Path(source).exists():
        depths = overlap_depths(read_mooncake_blocks(source), cache_entries)
        if depths.max() == 0:
            raise LcrInputError("no request overlaps a retained cache entry", source=source)
        return OverlapLaw.from_samples(depths), depths
    law = law_from_spec(source)
    if requests < 1:
        raise LcrInputError(f"--requests must be >= 1, got {requests}")
    depths = np.random.default_rng(seed).choice(law.length + 1, size=requests, p=law.probabilities)
    return law, depths


def run(args: argparse.Namespace) -> int:
    budgets = parse_budgets(args.budgets)
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            check_output_path(path, flag)
    for flag, value, low in (("--block-interval", args.block_interval, 1), ("--cache-entries", args.cache_entries, 1),
                             ("--refresh-every", args.refresh_every, 1), ("--seed", args.seed, 0)):
        if value < low:
            raise LcrInputError(f"{flag} must be at least {low}, got {value}")
    if not 0 < args.decay <= 1:
        raise LcrInputError(f"--decay must lie in (0, 1], got {args.decay}")
    names = [n.strip() for n in args.planners.split(",") if n.strip()]
    if not names:
        raise LcrInputError("--planners: name at least one planner")
    planners = [get_planner(n, block_interval=args.block_interval) for n in names if n != ONLINE]
    law, depths = _load(args.source, args.cache_entries, args.requests, args.seed)
    result = sweep_law(args.source, law, planners, budgets)
    if ONLINE in names:
        add_online_curve(result, depths, decay=args.decay, refresh_every=args.refresh_every)
        result.curves = {n: result.curves[n] for n in names}  # keep the order asked for
    print(format_table(result))
    if args.json:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        plot_reduction(result, args.plot)
        print(f"wrote {args.plot}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sim-ckpt",
        help="sparse prefix checkpoints: recompute reduction vs checkpoint budget, per planner",
        description=__doc__,
    )
    p.add_argument("source", metavar="TRACE_OR_LAW",
                   help="a Mooncake JSONL trace, or a synthetic law: "
                        f"{', '.join(SYNTHETIC_LAWS)}[:length=L,seed=S]")
    p.add_argument("--budgets", default=DEFAULT_BUDGETS, help=f"checkpoint budgets (default {DEFAULT_BUDGETS})")
    p.add_argument("--planners", default="balanced,block,last,dp",
                   help=f"comma list from {', '.join([*PLANNERS, ONLINE])} (default balanced,block,last,dp)")
    p.add_argument("--block-interval", type=int, default=1, help="blocks between checkpoints for 'block'")
    p.add_argument("--cache-entries", type=int, default=1024,
                   help="traces: requests retained by the last-K cache that overlaps are measured against")
    p.add_argument("--requests", type=int, default=10_000, help="synthetic laws: depths sampled for 'online'")
    p.add_argument("--seed", type=int, default=0, help="synthetic laws: seed of the sampled depths")
    p.add_argument("--decay", type=float, default=0.995, help="online: weight decay per request")
    p.add_argument("--refresh-every", type=int, default=10, help="online: requests between histogram checks")
    p.add_argument("--json", metavar="OUT.json", help="also write the sweep as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="also plot reduction factor vs budget")
    p.set_defaults(func=run)
