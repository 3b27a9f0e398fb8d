"""The shared predictor service: one CPU LightGBM model behind HTTP for many processes.

Endpoints (binary bodies: see ``lcr.predict.wire``):

- ``POST /observe``  keys+times -> ``{"observed": n}``
- ``POST /predict?now=T``  keys -> float64 next-access times (NaN = unknown)
- ``POST /train``  fit now on the current window -> ``{"fitted": bool, "model_version": v}``
- ``GET /health``  liveness and model version (no token needed)
- ``GET /metrics``  counters as JSON

Bad input gets 400 with ``{"detail": message}``; a body over the limit gets 413; a
missing or wrong bearer token (when one is set) gets 401.
"""
# No `from __future__ import annotations`: FastAPI reads the route annotations, which
# name classes imported lazily inside create_app.

import hmac
import time

from lcr.errors import LcrInputError
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.predict.wire import CONTENT_TYPE, decode_keys, decode_observations, encode_float64

DEFAULT_MAX_BODY = 16 << 20  # 1M observations or 2M keys per request


def require_service_deps():
    try:
        import fastapi
        import uvicorn
    except ImportError:
        raise LcrInputError("the predictor service needs FastAPI and uvicorn: pip install 'lcr[service]'") from None
    return fastapi, uvicorn


def create_app(predictor: "LightGBMPredictor | None" = None, token: "str | None" = None,
               max_body_bytes: int = DEFAULT_MAX_BODY):
    fastapi, _ = require_service_deps()
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import Response

    model = predictor or LightGBMPredictor(LightGBMConfig(background=True))
    started = time.time()
    counters = {"observe_requests": 0, "predict_requests": 0, "rejected_requests": 0}
    app = FastAPI(title="lcr predictor", docs_url=None, redoc_url=None)
    app.state.predictor = model

    def reject(status: int, message: str):
        counters["rejected_requests"] += 1
        raise HTTPException(status_code=status, detail=message)

    def check_token(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            reject(401, "missing or wrong bearer token")

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            reject(413, f"body of {declared} bytes is over the {max_body_bytes}-byte limit")
        body = bytearray()
        async for chunk in request.stream():  # also bounds bodies sent without a length
            body += chunk
            if len(body) > max_body_bytes:
                reject(413, f"body is over the {max_body_bytes}-byte limit")
        return bytes(body)

    guarded = [Depends(check_token)]

    @app.post("/observe", dependencies=guarded)
    async def observe(request: Request):
        try:
            keys, times = decode_observations(await read_body(request))
        except LcrInputError as err:
            reject(400, str(err))
        model.observe_many(keys, times)
        counters["observe_requests"] += 1
        return {"observed": len(keys)}

    @app.post("/predict", dependencies=guarded)
    async def predict(request: Request, now: int):
        try:
            keys = decode_keys(await read_body(request))
        except LcrInputError as err:
            reject(400, str(err))
        counters["predict_requests"] += 1
        return Response(encode_float64(model.predict(keys, now)), media_type=CONTENT_TYPE)

    @app.post("/train", dependencies=guarded)
    async def train():
        fitted = model.fit()
        return {"fitted": fitted, "model_version": model.model_version}

    @app.get("/health")
    async def health():
        return {"status": "ok", "model_version": model.model_version, "keys": len(model.features)}

    @app.get("/metrics", dependencies=guarded)
    async def metrics():
        return {**model.metrics, **counters, "model_version": model.model_version,
                "keys": len(model.features), "uptime_s": time.time() - started}

    return app
