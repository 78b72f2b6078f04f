"""The OpenAPI 3.1 document of the HTTP API, served at ``/openapi.json``.

Written as data next to the routes it describes; ``tests/test_openapi.py`` validates it
(openapi-spec-validator) and checks that every route the server registers is in it and nothing
else is.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from contract.version import __version__
from server.kserve.protocol import DECODING_PARAMETERS

DECODING_TYPES = {name: {int: "integer", float: "number", bool: "boolean", str: "string"}[kind]
                  for name, kind in DECODING_PARAMETERS.items()}

_ERROR = {"description": "The request was refused or failed; `error` says why.",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}

# The text switches of translation models (docs/DECODING.md#protected-spans-and-long-inputs), on every door.
TEXT_SWITCHES = {
    "protect_spans": "keep placeholders, markup, URLs and e-mail addresses byte for byte (false: off)",
    "keep_numbers": "keep numbers written as digits (false: off)",
    "split_long": "translate inputs longer than the model reads piece by piece, up to max_input_chars (false: refuse)",
}


# A request's language, on the KServe doors (docs/KSERVE.md#languages).
LANGUAGE_CODE = ("ISO 639-1 (ja) or the model's own code (__ja__, jpn_Jpan), for models that know their languages "
                 "(config parameters source_languages / target_languages); absent: the model's default. A "
                 "multilingual model needs a target")


def _errors(*codes: int) -> dict[str, Any]:
    what = {400: "Malformed or out-of-range input (the message names the field and the limit).",
            401: "Missing or wrong bearer token (`--auth-token`).",
            403: "A browser's request from a page of another site, not JSON (without `--auth-token`).",
            404: "Unknown model, version or path.",
            413: "Body over `--max-message-bytes`.",
            415: "Not `Content-Type: application/json`, which a load or unload needs without `--auth-token`.",
            429: "The model's queue is full: retry with backoff.",
            503: "Not ready: shutting down, or no engine core of the model running. Retry elsewhere or later.",
            504: "The deadline (`X-Timeout-Seconds` header or `timeout` parameter) passed."}
    return {str(c): {**_ERROR, "description": what[c]} for c in codes}


_MODEL = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}, "example": "translate-en-ja"}
_VERSION = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}, "example": "1"}
_TIMEOUT = {"name": "X-Timeout-Seconds", "in": "header", "required": False, "schema": {"type": "number", "exclusiveMinimum": 0},
            "description": "Deadline for this request, in seconds (504 when it passes)."}


def _json(schema_ref: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}}}}


def _model_ops(versioned: bool) -> dict[str, dict]:
    params = [_MODEL, _VERSION] if versioned else [_MODEL]
    base = "/v2/models/{model}/versions/{version}" if versioned else "/v2/models/{model}"
    which = "that version" if versioned else "the latest version"
    return {
        base: {"get": {"summary": f"Model metadata ({which})", "tags": ["KServe v2"], "parameters": params,
                       "responses": {"200": _json("ModelMetadata", "Inputs, outputs and versions."), **_errors(401, 404)}}},
        base + "/ready": {"get": {"summary": f"Is the model ({which}) ready?", "tags": ["KServe v2"], "parameters": params,
                                  "responses": {"200": {"description": "Ready."},
                                                "404": {"description": "No such model or version."},
                                                "503": {"description": "Not ready."}, **_errors(401)}}},
        base + "/config": {"get": {"summary": f"Model configuration and limits ({which})", "tags": ["KServe v2"],
                                   "parameters": params,
                                   "responses": {"200": {"description": "Triton's model configuration as JSON; "
                                                                        "`parameters` holds the limits as strings.",
                                                         "content": {"application/json": {"schema": {"type": "object"}}}},
                                                 **_errors(401, 404)}}},
        base + "/stats": {"get": {"summary": f"Inference statistics ({which}), as Triton reports them",
                                  "tags": ["KServe v2"], "parameters": params,
                                  "responses": {"200": _json("ModelStatistics", "Counts and cumulative times."),
                                                **_errors(401, 404)}}},
        base + "/infer": {"post": {
            "summary": f"Generate: one output text per input text ({which})", "tags": ["KServe v2"],
            "parameters": [*params, _TIMEOUT,
                           {"name": "Inference-Header-Content-Length", "in": "header", "required": False,
                            "schema": {"type": "integer", "minimum": 0},
                            "description": "Triton's binary tensor data extension: the length of the JSON header; "
                                           "the tensors' bytes follow it."}],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/InferRequest"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary",
                                                        "description": "JSON header, then binary tensor data."}}}},
            "responses": {"200": {"description": "The outputs, as JSON or (when asked) binary tensor data.",
                                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InferResponse"}},
                                              "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
                          **_errors(400, 401, 404, 413, 429, 503, 504)}}},
    }


def document() -> dict[str, Any]:
    """The whole document: the paths of each door, the bodies they take and answer."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "s2s HTTP API", "version": __version__,
                 "description": "KServe v2 REST (as Triton serves it on :8000), the LibreTranslate API and the playground. "
                                "With --auth-token every call but health, the page and this document needs "
                                "`Authorization: Bearer <token>` (LibreTranslate clients may send `api_key`). The gRPC "
                                "APIs (seq2seq.v1, KServe v2) are on :8001."},
        "servers": [{"url": "http://localhost:8000"}],
        "paths": {**_kserve_paths(), **_repository_paths(), **_libretranslate_paths(), **_page_paths()},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {**_kserve_schemas(), **_libretranslate_schemas()},
        },
        "security": [{"bearer": []}, {}],
    }


def _tensor() -> dict[str, Any]:
    """A KServe v2 tensor, as JSON."""
    return {"type": "object", "required": ["name", "datatype", "shape"], "properties": {
        "name": {"type": "string", "examples": ["text_input"]},
        "datatype": {"type": "string", "enum": ["BYTES", "INT64", "INT32"]},
        "shape": {"type": "array", "items": {"type": "integer"}},
        "parameters": {"type": "object", "properties": {"binary_data_size": {"type": "integer", "minimum": 0}}},
        "data": {"type": "array", "description": "Row-major values: texts for BYTES, integers for INT64/INT32."}}}


def _kserve_paths() -> dict[str, Any]:
    """KServe v2: health, server metadata and statistics, each model's (and version's) operations."""
    return {
        "/v2/health/live": {"get": {"summary": "Liveness", "tags": ["KServe v2"],
                                    "responses": {"200": {"description": "The server is live."}}}},
        "/v2/health/ready": {"get": {"summary": "Readiness: every model has an engine core up", "tags": ["KServe v2"],
                                     "responses": {"200": {"description": "Ready."}, "503": {"description": "Not ready."}}}},
        "/v2": {"get": {"summary": "Server metadata", "tags": ["KServe v2"],
                        "responses": {"200": _json("ServerMetadata", "Name, version, protocol extensions."), **_errors(401)}}},
        "/v2/models/stats": {"get": {"summary": "Inference statistics of every model version, as Triton reports "
                                                "them", "tags": ["KServe v2"],
                                     "responses": {"200": _json("ModelStatistics", "Counts and cumulative times."),
                                                   **_errors(401)}}},
        **_model_ops(False), **_model_ops(True),
    }


def _repository_paths() -> dict[str, Any]:
    """KServe v2's model repository extension: the index, load and unload."""
    return {
        "/v2/repository/index": {"post": {
            "summary": "The models of the repository, with their state", "tags": ["KServe v2"],
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "properties": {"ready": {"type": "boolean", "description": "only ready models"}}}}}},
            "responses": {"200": {"description": "One entry per model version.", "content": {"application/json": {"schema": {
                "type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "version": {"type": "string"}, "state": {"type": "string"},
                    "reason": {"type": "string"}}}}}}}, **_errors(400, 401)}}},
        **{f"/v2/repository/models/{{model}}/{op}": {"post": {
            "summary": summary, "tags": ["KServe v2"],
            "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "properties": {"parameters": {"type": "object"}}}}}},
            "responses": {"200": {"description": "Done (empty body)."}, **_errors(400, 401, 403, 404, 415, 503)}}}
           for op, summary in (("load", "Load or reload a model (--model-control-mode explicit): its latest or pinned "
                                        "version takes over once its engine cores answer a warm-up request"),
                               ("unload", "Unload a model (--model-control-mode explicit): new requests refused, "
                                          "those in flight finish, its processes stop"))},
    }


def _libretranslate_paths() -> dict[str, Any]:
    """The LibreTranslate API."""
    return {
        "/translate": {"post": {
            "summary": "LibreTranslate: translate text", "tags": ["LibreTranslate"], "parameters": [_TIMEOUT],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/TranslateRequest"}},
                "application/x-www-form-urlencoded": {"schema": {"$ref": "#/components/schemas/TranslateRequest"}}}},
            "responses": {"200": _json("TranslateResponse", "The translation(s), in the shape of `q`."),
                          **_errors(400, 401, 429, 503, 504)}}},
        "/languages": {"get": {
            "summary": "LibreTranslate: languages and their targets (every pair of every model that declares "
                       "languages: one pair, or each language of a multilingual model to each other)",
            "tags": ["LibreTranslate"],
            "responses": {"200": {"description": "One entry per language.", "content": {"application/json": {"schema": {
                "type": "array", "items": {"type": "object", "properties": {
                    "code": {"type": "string"}, "name": {"type": "string"},
                    "targets": {"type": "array", "items": {"type": "string"}}}}}}}}, **_errors(401)}}},
        "/detect": {"post": {
            "summary": "LibreTranslate: the source language, when the server can only translate from one",
            "tags": ["LibreTranslate"],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": {"type": "object", "properties": {"q": {"type": "string"},
                                                                                 "api_key": {"type": "string"}}}},
                "application/x-www-form-urlencoded": {"schema": {"type": "object", "properties": {
                    "q": {"type": "string"}, "api_key": {"type": "string"}}}}}},
            "responses": {"200": {"description": "The language, confidence 100.", "content": {"application/json": {"schema": {
                "type": "array", "items": {"type": "object", "properties": {
                    "language": {"type": "string"}, "confidence": {"type": "number"}}}}}}}, **_errors(400, 401)}}},
    }


def _page_paths() -> dict[str, Any]:
    """The playground's files and this document."""
    return {
        "/": {"get": {"summary": "The playground page", "tags": ["Playground"],
                      "responses": {"200": {"description": "HTML.", "content": {"text/html": {}}}}}},
        "/playground.js": {"get": {"summary": "The playground's script", "tags": ["Playground"],
                                   "responses": {"200": {"description": "JavaScript.",
                                                         "content": {"text/javascript": {}}}}}},
        "/playground.css": {"get": {"summary": "The playground's style sheet", "tags": ["Playground"],
                                    "responses": {"200": {"description": "CSS.", "content": {"text/css": {}}}}}},
        "/openapi.json": {"get": {"summary": "This document", "tags": ["Meta"],
                                  "responses": {"200": {"description": "OpenAPI 3.1.",
                                                        "content": {"application/json": {}}}}}},
    }


def _kserve_schemas() -> dict[str, Any]:
    """The error every door answers, and the KServe v2 doors' bodies."""
    tensor = _tensor()
    return {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
        "ServerMetadata": {"type": "object", "properties": {
            "name": {"type": "string"}, "version": {"type": "string"},
            "extensions": {"type": "array", "items": {"type": "string"}}}},
        "ModelMetadata": {"type": "object", "properties": {
            "name": {"type": "string"}, "versions": {"type": "array", "items": {"type": "string"}},
            "platform": {"type": "string"}, "inputs": {"type": "array", "items": tensor},
            "outputs": {"type": "array", "items": tensor}}},
        "ModelStatistics": {"type": "object", "properties": {"model_stats": {"type": "array", "items": {
            "type": "object", "description": "Triton's ModelStatistics: name, version, inference_count, "
                                             "execution_count and inference_stats (success, fail, queue, "
                                             "compute_infer: count and ns)"}}}},
        "InferRequest": {"type": "object", "required": ["inputs"], "properties": {
            "id": {"type": "string", "maxLength": 256},
            "parameters": {"type": "object", "properties": {
                "max_tokens": {"type": "integer", "minimum": 0, "description": "0 = the model's default"},
                "beam_width": {"type": "integer", "minimum": 0, "description": "0 = the model's default (its default_beam_width parameter); 1 = greedy"},
                # The decoding options as seq2seq.v1 and CTranslate2 name them (docs/DECODING.md); ranges:
                # GET /v2/models/{model}/config, parameters <name>_range.
                **{name: {"type": kind, "description": "see docs/DECODING.md"}
                   for name, kind in DECODING_TYPES.items()},
                **{name: {"type": "boolean", "default": True, "description": TEXT_SWITCHES[name]}
                   for name in TEXT_SWITCHES},
                **{name: {"type": "string", "description": LANGUAGE_CODE}
                   for name in ("source_language", "target_language")},
                "timeout": {"type": "integer", "minimum": 0, "description": "deadline in microseconds"},
                "binary_data_output": {"type": "boolean"}}},
            "inputs": {"type": "array", "items": tensor},
            "outputs": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string", "enum": ["text_output", "input_tokens", "output_tokens",
                                                    "hypotheses", "scores", "protected_spans", "pieces"],
                         "description": "text_output (BYTES) is always sent; the INT64 token counts, the "
                                        "n-best lists (hypotheses BYTES, scores FP32, [N, num_hypotheses]) "
                                        "and the spans kept (protected_spans BYTES: JSON per input; pieces "
                                        "INT64) only when asked for here"},
                "parameters": {"type": "object", "properties": {"binary_data": {"type": "boolean"}}}}}}}},
        "InferResponse": {"type": "object", "properties": {
            "model_name": {"type": "string"}, "model_version": {"type": "string"}, "id": {"type": "string"},
            "outputs": {"type": "array", "items": tensor}}},
    }


def _libretranslate_schemas() -> dict[str, Any]:
    """The LibreTranslate API's bodies."""
    return {
        "TranslateRequest": {"type": "object", "required": ["q", "target"], "properties": {
            "q": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "source": {"type": "string", "description": "ISO 639-1 code (GET /languages), or auto"},
            "target": {"type": "string", "description": "ISO 639-1 code: picks the model and, for a "
                                                        "multilingual one, the language it writes"},
            "format": {"type": "string", "enum": ["text", "html"], "default": "text"},
            "alternatives": {"type": "integer", "minimum": 0, "default": 0,
                             "description": "the next best translations (beam search, n-best)"},
            **{name: {"type": "boolean", "default": True, "description": TEXT_SWITCHES[name]}
               for name in TEXT_SWITCHES},
            "api_key": {"type": "string", "description": "the bearer token, for clients that cannot set headers"}}},
        "TranslateResponse": {"type": "object", "properties": {
            "translatedText": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "alternatives": {"type": "array"}}},
    }


def routes(doors) -> list[web.RouteDef]:
    doc = document()

    async def openapi(request: web.Request) -> web.Response:
        return web.json_response(doc)

    return [web.get("/openapi.json", openapi)]
