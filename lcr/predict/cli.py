"""`lcr serve-predictor`: run the shared LightGBM predictor service.

Startup problems are one line naming the flag, exit 2, before anything starts: the
token (``--token``, ``--token-file`` or ``$LCR_PREDICTOR_TOKEN``; empty is an error, not
"no token"), the TLS files (loaded once here), and the address (the socket is bound here
and handed to uvicorn, so a port in use or a host that does not resolve is reported here).
"""
from __future__ import annotations

import contextlib
import errno
import importlib.util
import math
import os
import socket
import sys

from lcr.errors import LcrInputError
from lcr.predict.token import TOKEN_ENV, check_token, read_token_file


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve-predictor", help="serve a shared online predictor (LightGBM, or residual-life) over HTTP",
        description="Serve observe/predict/train/health/metrics for caches in other processes. "
                    "Binds loopback unless told otherwise; set a token and TLS before binding elsewhere. "
                    f"The token comes from --token-file PATH or ${TOKEN_ENV} (or --token, which every "
                    "local user sees in ps: it warns); an empty token is an error, not 'no token'.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token-file", metavar="PATH",
                   help="require 'Authorization: Bearer TOKEN', TOKEN read from this file (surrounding "
                        f"whitespace dropped); or set ${TOKEN_ENV}")
    p.add_argument("--token", help=f"the token on the command line (prefer --token-file or ${TOKEN_ENV}: "
                                   "a command line is visible to every local user)")
    p.add_argument("--max-time-jump", type=int, default=None, metavar="N",
                   help="refuse times more than N past the service's clock, so one client cannot drag it "
                        "(default 65536: access counters; raise it for timestamps with longer gaps)")
    p.add_argument("--model", choices=("lightgbm", "residual"), default="lightgbm",
                   help="lightgbm: the online LightGBM model (item caches); residual: the residual-life "
                        "predictor the radix (KV) caches serve with in process, shared (SGLang --predictor-url); "
                        "the LightGBM flags below do not apply to it")
    p.add_argument("--features", choices=("full", "compact"), default="full")
    p.add_argument("--weak", action="store_true", help="the one-tree, one-feature robustness model")
    p.add_argument("--objective", choices=("regression", "belady"), default="regression",
                   help="regression: answers are predicted next-access times; belady: the relaxed-Belady "
                        "classifier lcr sim measures best, answers are P(not back within the boundary) "
                        "(larger = evict first either way)")
    p.add_argument("--capacity", type=int,
                   help="the cache size (keys) the model's boundary is for; default: 5%% of the keys seen")
    p.add_argument("--retrain-every", type=int, default=10_000)
    p.add_argument("--window", type=int, default=25_000)
    p.add_argument("--max-body-mb", type=float, default=16.0)
    p.add_argument("--max-keys", type=int, default=1_000_000,
                   help="per-key state kept; past it the least recently seen keys are forgotten")
    p.add_argument("--max-queued", type=int, default=64, help="requests waiting per worker lane before 503")
    p.add_argument("--header-timeout", type=float, default=10.0, help="seconds for a request's headers")
    p.add_argument("--body-timeout", type=float, default=30.0, help="seconds for a request's body")
    p.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (uvicorn's TLS)")
    p.add_argument("--ssl-keyfile", help="the certificate's private key")
    p.set_defaults(func=run)


def _at_least(flag: str, value, low) -> None:
    if value < low:
        raise LcrInputError(f"{flag} must be at least {low}, got {value}")


def _positive_seconds(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise LcrInputError(f"{flag} must be a positive number of seconds, got {value}")


def limits_from_args(args):
    from lcr.predict.service import ServiceLimits

    jump = {}
    if args.max_time_jump is not None:
        _at_least("--max-time-jump", args.max_time_jump, 1)
        jump = {"max_time_jump": args.max_time_jump}
    if not (math.isfinite(args.max_body_mb) and 0 < args.max_body_mb <= 1024):
        raise LcrInputError(f"--max-body-mb must lie in (0, 1024], got {args.max_body_mb}")
    _at_least("--max-keys", args.max_keys, 1)
    _at_least("--max-queued", args.max_queued, 1)
    _positive_seconds("--header-timeout", args.header_timeout)
    _positive_seconds("--body-timeout", args.body_timeout)
    body = int(args.max_body_mb * (1 << 20))
    return ServiceLimits(max_body_bytes=body, max_queued=args.max_queued, max_queued_bytes=4 * body,
                         max_keys=args.max_keys, header_timeout_s=args.header_timeout,
                         body_timeout_s=args.body_timeout, **jump)


def service_model_config(args):
    """The served model from the command line: a ``LightGBMConfig``, or the
    ``ServedResidual`` class (built in the model process)."""
    if args.model == "residual":
        from lcr.predict.served_residual import ServedResidual

        lightgbm_only = {"--weak": args.weak, "--objective": args.objective != "regression",
                         "--capacity": args.capacity is not None, "--features": args.features != "full"}
        for flag, given in lightgbm_only.items():
            if given:
                raise LcrInputError(f"{flag} is a LightGBM option; --model residual takes none")
        return ServedResidual
    from lcr.predict.features import FeatureConfig
    from lcr.predict.lightgbm_model import BELADY_CLASSIFIER, LightGBMConfig

    if args.capacity is not None:
        _at_least("--capacity", args.capacity, 1)
    if args.weak and args.objective != "regression":
        raise LcrInputError("--weak is the regression robustness model; drop --objective belady")
    rank = BELADY_CLASSIFIER if args.objective == "belady" else {}
    return LightGBMConfig(features=FeatureConfig(mode=args.features), weak=args.weak, capacity=args.capacity,
                          retrain_every=args.retrain_every, window=args.window, background=True, **rank)


def resolve_token(args) -> "str | None":
    """The bearer token: from --token-file, $LCR_PREDICTOR_TOKEN or --token (one of them);
    None when none is given. Checked by the client's rule (``lcr.predict.token``): empty,
    or not one word of printable ASCII, is an error naming the source."""
    if args.token is not None and args.token_file is not None:
        raise LcrInputError("give --token or --token-file, not both")
    if args.token_file is not None:
        token = check_token(read_token_file(args.token_file, "--token-file"), f"--token-file {args.token_file}")
        with contextlib.suppress(OSError):
            if os.stat(args.token_file).st_mode & 0o077:
                print(f"lcr serve-predictor: warning: --token-file {args.token_file} is readable by other "
                      "users; chmod 600 it", flush=True)
        return token
    if args.token is not None:
        print("lcr serve-predictor: warning: --token on the command line is visible to other local users "
              f"(ps); prefer --token-file PATH or ${TOKEN_ENV}", flush=True)
        return check_token(args.token, "--token")
    if TOKEN_ENV in os.environ:
        return check_token(os.environ[TOKEN_ENV], f"${TOKEN_ENV}")
    return None


def check_tls(certfile: "str | None", keyfile: "str | None") -> None:
    """Load the certificate and key once now, so a bad one is one line, not a traceback."""
    import ssl

    if bool(certfile) != bool(keyfile):
        raise LcrInputError("--ssl-certfile and --ssl-keyfile go together")
    if not certfile:
        return
    for flag, path in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile)):
        if not os.path.isfile(path):
            raise LcrInputError(f"{flag}: no such file", source=path)
    try:  # a password callback: an encrypted key fails here instead of prompting
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certfile, keyfile, password=lambda: b"")
    except (ssl.SSLError, OSError) as err:
        reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or str(err)
        raise LcrInputError(f"--ssl-certfile/--ssl-keyfile: cannot load {certfile} with {keyfile} as a "
                            f"certificate and its unencrypted private key ({reason})") from None


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (as uvicorn would make it), or one line naming the flag."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except socket.gaierror as err:
        sock.close()
        raise LcrInputError(f"--host {host!r}: cannot resolve it ({err.strerror})") from None
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise LcrInputError(f"--port {port}: address already in use on {host}") from None
        if err.errno == errno.EACCES:
            raise LcrInputError(f"--port {port}: permission denied (ports below 1024 need privileges)") from None
        if err.errno == errno.EADDRNOTAVAIL:
            raise LcrInputError(f"--host {host!r}: not an address of this machine") from None
        raise LcrInputError(f"--host {host!r} --port {port}: cannot listen there ({err.strerror or err})") from None
    sock.set_inheritable(True)
    return sock


def require_service_deps() -> None:
    """One line naming what to install when the service's packages are missing."""
    try:
        import fastapi  # noqa: F401
        import httptools  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise LcrInputError(f"the predictor service needs {err.name or 'fastapi, httptools and uvicorn'}: "
                            "pip install 'lcr[service]'") from None
    # The model process imports LightGBM; found here, a missing one is one line up front
    # (found, not imported: the front never runs the model).
    if importlib.util.find_spec("lightgbm") is None:
        raise LcrInputError("the predictor service needs lightgbm: pip install 'lcr[service]'")


def run(args) -> int:
    if not 0 < args.port < 65536:
        raise LcrInputError(f"--port {args.port} is not a TCP port")
    _at_least("--retrain-every", args.retrain_every, 1)
    _at_least("--window", args.window, 2)  # labels need an access and a later one
    token = resolve_token(args)
    check_tls(args.ssl_certfile, args.ssl_keyfile)
    require_service_deps()  # before lcr.predict.service, which imports them
    limits = limits_from_args(args)
    config = service_model_config(args)

    import uvicorn

    from lcr.predict.service import bind_warning, create_app, server_config, tune_gc

    warning = bind_warning(args.host, token, tls=bool(args.ssl_certfile))
    if warning:
        print(f"lcr serve-predictor: warning: {warning}", flush=True)
    listener = bind(args.host, args.port)  # before the model process starts: errors are one line
    app = create_app(config, token=token, limits=limits)  # the model runs in its own process
    tls = {"ssl_certfile": args.ssl_certfile, "ssl_keyfile": args.ssl_keyfile} if args.ssl_certfile else {}
    server = uvicorn.Server(server_config(app, args.host, args.port, **tls))
    tune_gc()
    server.run(sockets=[listener])
    if not server.started:  # e.g. the model process could not build the model
        print(f"lcr serve-predictor: error: the service did not start: {app.state.service.model.exited}",
              file=sys.stderr)
        return 1
    return 0

