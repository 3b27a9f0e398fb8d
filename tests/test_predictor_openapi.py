"""The predictor service is a FastAPI app: /docs serves the interactive docs and
/openapi.json describes every route as it behaves (binary bodies, ``now``'s bounds, the
bearer token, the refusals and the 503's ``X-LCR-Reason``). One real service with a
token; run time ~3 s (most of it the model process starting)."""
from __future__ import annotations

import json
import urllib.request

import pytest

pytest.importorskip("lightgbm")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from lcr.predict.service import create_app  # noqa: E402
from test_predictor_service import ServerThread, small_model  # noqa: E402

TOKEN = "openapi-token"
OCTET = "application/octet-stream"
GUARDED = {("/observe", "post"), ("/predict", "post"), ("/train", "post"), ("/metrics", "get")}


@pytest.fixture(scope="module")
def service():
    with ServerThread(create_app(small_model(), token=TOKEN)) as server:
        yield server


def get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:  # no token: the docs are public
        return response.status, response.headers["content-type"], response.read()


@pytest.fixture(scope="module")
def schema(service) -> dict:
    status, kind, body = get(service.url + "/openapi.json")
    assert status == 200 and kind.startswith("application/json")
    return json.loads(body)


def resolve(schema: dict, node):
    """``node`` with its ``$ref`` followed (they must point into the schema's components)."""
    while isinstance(node, dict) and "$ref" in node:
        section, kind, name = node["$ref"].removeprefix("#/").split("/")
        node = schema[section][kind][name]
    return node


def test_docs_serve_the_interactive_page_for_the_schema(service):
    status, kind, body = get(service.url + "/docs")
    assert status == 200 and kind.startswith("text/html")
    assert b"swagger" in body.lower() and b"/openapi.json" in body


def test_the_schema_lists_every_route_with_its_refusals(schema):
    operations = {(path, method): op for path, item in schema["paths"].items() for method, op in item.items()}
    assert set(operations) == GUARDED | {("/health", "get")}
    for (path, method), op in operations.items():
        busy = op["responses"]["503"]  # every route can be refused now, and says why
        assert set(busy["headers"]["X-LCR-Reason"]["schema"]["enum"]) == {"busy", "model-down"}, path
        refusal = resolve(schema, busy["content"]["application/json"]["schema"])
        assert refusal["properties"]["detail"]["type"] == "string" and refusal["required"] == ["detail"]
        assert ("security" in op) == ((path, method) in GUARDED), path  # /health needs no token
        if (path, method) in GUARDED:
            assert op["responses"]["401"]
    schemes = schema["components"]["securitySchemes"]
    assert [scheme["scheme"] for scheme in schemes.values()] == ["bearer"]


def test_binary_bodies_and_answers_are_documented_as_octets(schema):
    for path in ("/observe", "/predict"):
        body = schema["paths"][path]["post"]["requestBody"]
        assert body["required"] and list(body["content"]) == [OCTET]
        assert body["content"][OCTET]["schema"] == {"type": "string", "format": "binary"}
    predict = schema["paths"]["/predict"]["post"]
    assert list(predict["responses"]["200"]["content"]) == [OCTET]
    assert list(predict["responses"]["422"]["content"]) == ["application/json"]  # refusals stay JSON
    for status in ("400", "413", "415"):
        assert status in predict["responses"] and status in schema["paths"]["/observe"]["post"]["responses"]


def test_now_is_documented_with_its_bounds(schema):
    (now,) = schema["paths"]["/predict"]["post"]["parameters"]
    assert (now["name"], now["in"], now["required"]) == ("now", "query", True)
    assert now["schema"]["type"] == "integer"
    assert now["schema"]["minimum"] == 0 and now["schema"]["exclusiveMaximum"] == 1 << 63


def test_json_answers_are_documented(schema):
    def fields(path, method):
        answer = schema["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        return set(resolve(schema, answer)["properties"])

    assert fields("/health", "get") == {"status", "model_version", "keys"}
    assert fields("/observe", "post") == {"observed"}
    assert fields("/train", "post") == {"fitted", "model_version"}
