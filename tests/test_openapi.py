"""The OpenAPI document at /openapi.json: valid OpenAPI 3.1, and exactly the routes the server registers."""

from __future__ import annotations

import json
import re
import urllib.request

from openapi_spec_validator import validate


def test_openapi_document_is_valid_and_matches_the_routes(server):
    doc = json.loads(
        urllib.request.urlopen(f"http://127.0.0.1:{server.running.web.port}/openapi.json", timeout=10).read()
    )
    validate(doc)  # raises naming the first problem
    app = server.running.web.runner.app
    served: set[tuple[str, str]] = set()
    for route in app.router.routes():
        if route.method == "HEAD":  # aiohttp adds HEAD for every GET
            continue
        info = route.resource.get_info()
        path = info.get("path") or info.get("formatter")
        served.add((re.sub(r"\{(\w+)\}", r"{\1}", path), route.method.lower()))
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert served == documented, (served - documented, documented - served)
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op.get("summary") and op.get("responses"), (path, method)
