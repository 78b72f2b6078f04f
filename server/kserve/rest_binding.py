"""KServe v2 REST (the binding Triton serves on :8000): HTTP <-> the KServe protocol's plain data.

An inference body is read straight into the same protocol-neutral ``InferRequest`` the gRPC door
builds from protobuf (``server/kserve/json_codec.py``), and goes through the same parsing
(``server/kserve/parse.py``) and model API, so both bindings accept and refuse exactly the same
things; no protobuf on this path. Tensors travel as JSON (``"data": [...]``) or with Triton's binary
tensor data extension, which ``tritonclient.http`` uses by default: the body is a JSON header of
``Inference-Header-Content-Length`` bytes followed by the tensors' raw bytes, an input saying its
size in ``parameters.binary_data_size``; a BYTES element is a 4-byte little-endian length and the
bytes. The answer is binary when an output asks for it (``parameters.binary_data``) or the request
does (``parameters.binary_data_output``), JSON otherwise.
"""

from __future__ import annotations

import json

from aiohttp import web

from contract.version import __version__
from server.doors.http_door import HttpDoor
from server.errors import InvalidInput, ModelNotFound, ModelNotReady
from server.kserve.infer import InferAnswer, infer
from server.kserve.json_codec import from_json, to_json
from server.kserve.protocol import EXTENSIONS, model_config, model_metadata
from server.kserve.statistics import model_statistics
from server.transport.http_body import deadline_of, json_response, parse_json_off_loop, read_body, read_json

HEADER_LENGTH = "Inference-Header-Content-Length"


async def _body(request: web.Request) -> tuple[dict, bytes]:
    length = request.headers.get(HEADER_LENGTH)
    if length is None:
        return await read_json(request), b""
    if not (
        length.isascii() and length.isdigit() and len(length) <= 12
    ):  # int() would take "+1", " 1", "1_0" and "²"
        raise InvalidInput(f"header {HEADER_LENGTH} must be a non-negative integer, not {length[:40]!r}")
    body = await read_body(request)
    n = int(length)
    if n > len(body):
        raise InvalidInput(f"header {HEADER_LENGTH} says {n} bytes of JSON but the body has {len(body)}")
    header = await parse_json_off_loop(body[:n], f"the JSON header ({n} bytes)")
    if not isinstance(header, dict):
        raise InvalidInput("the JSON header must be a JSON object")
    return header, body[n:]


def _answer(a: InferAnswer, binary: bool) -> web.Response:
    head, blobs = to_json(a, binary)
    if not binary:
        return json_response(head)
    header = json.dumps(head, ensure_ascii=False).encode()
    return web.Response(
        body=header + b"".join(blobs),
        content_type="application/octet-stream",
        headers={HEADER_LENGTH: str(len(header))},
    )


def routes(door: HttpDoor) -> list[web.RouteDef]:
    repo = door.repo

    def _model(request: web.Request):
        # NOT_FOUND, or UNAVAILABLE for an unloaded model: the error middleware maps it
        return repo.get(request.match_info["model"], request.match_info.get("version", ""))

    async def live(request: web.Request) -> web.Response:
        return json_response({"live": True})

    async def ready(request: web.Request) -> web.Response:
        ok, loading = repo.ready, repo.loading  # loading: the models whose engine cores are still starting
        return json_response(
            {"ready": ok, **({"loading": loading} if loading else {})}, status=200 if ok else 503
        )

    async def server_metadata(request: web.Request) -> web.Response:
        return json_response({"name": "s2s", "version": __version__, "extensions": list(EXTENSIONS)})

    async def metadata(request: web.Request) -> web.Response:
        return json_response(model_metadata(repo, _model(request)))

    async def model_ready(request: web.Request) -> web.Response:
        try:
            model = repo.get(request.match_info["model"], request.match_info.get("version", ""))
        except ModelNotFound:
            return json_response({"ready": False}, status=404)
        except ModelNotReady:  # unloaded
            return json_response(
                {"name": request.match_info["model"], "ready": False}, status=503
            )  # tritonclient: anything but 200 is "not ready"
        body = {"name": model.name, "ready": model.ready, **({"loading": True} if model.loading else {})}
        return json_response(body, status=200 if model.ready else 503)

    async def config(request: web.Request) -> web.Response:
        return json_response(model_config(_model(request)))

    async def statistics(request: web.Request) -> web.Response:
        info = request.match_info
        stats = model_statistics(
            repo, door.tracker.statistics, info.get("model", ""), info.get("version", "")
        )
        return json_response(stats)

    async def infer_route(request: web.Request) -> web.Response:
        name, version = request.match_info["model"], request.match_info.get("version", "")
        async with door.track(name, "ModelInfer"):
            repo.get(name, version)  # an unknown model is 404 whatever the body holds (as Triton answers)
            header, binary = await _body(request)
            req, binary_out = from_json(name, version, header, binary)
            answer = await infer(
                repo, req, deadline_of(request)
            )  # X-Timeout-Seconds; the 'timeout' parameter too
            return _answer(answer, binary_out)

    m, v = "/v2/models/{model}", "/v2/models/{model}/versions/{version}"
    return [
        web.get("/v2/models/stats", statistics),  # before {model}: "stats" is no model's metadata
        web.get(m + "/stats", statistics),
        web.get(v + "/stats", statistics),
        web.get("/v2/health/live", live),
        web.get("/v2/health/ready", ready),
        web.get("/v2", server_metadata),
        web.get(m, metadata),
        web.get(v, metadata),
        web.get(m + "/ready", model_ready),
        web.get(v + "/ready", model_ready),
        web.get(m + "/config", config),
        web.get(v + "/config", config),
        web.post(m + "/infer", infer_route),
        web.post(v + "/infer", infer_route),
    ]
