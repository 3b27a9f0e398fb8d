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
