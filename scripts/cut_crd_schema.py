#!/usr/bin/env python3
"""Cut an upstream CustomResourceDefinition's schema to the fields our manifests use, for tests/test_deploy*.py.

KServe's InferenceService CRD alone is 2 MB (every pod and container field, several times over); the tests need
only the subtrees that deploy/ fills in. This keeps, from the CRD version's openAPIV3Schema, every property that
some manifest of that kind sets (recursively, with its type, enum, pattern, format, required and int-or-string
alternatives), drops descriptions and the rest, and closes each object it cut with ``additionalProperties:
false``: a field our manifests gain later, or a misspelt one, then fails validation until this is rerun, as
``kubectl apply --validate=strict`` would refuse a field the CRD does not know. Maps (``additionalProperties``
schemas) and ``x-kubernetes-preserve-unknown-fields`` objects are kept open, as upstream has them.

    python scripts/cut_crd_schema.py UPSTREAM_CRD.yaml --source "kserve/kserve v0.20.0 (commit ...) PATH" \\
        --out tests/crd_schemas/NAME.json deploy/kserve/*.yaml

The upstream file: e.g. `git show v0.20.0:config/crd/full/serving.kserve.io_inferenceservices.yaml` in a clone
of kserve/kserve. Deterministic: the same inputs give the same file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

KEEP = (
    "type",
    "enum",
    "pattern",
    "format",
    "required",
    "nullable",
    "minimum",
    "maximum",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
)
ALTERNATIVES = ("anyOf", "oneOf", "allOf")


def cut(schema: dict, values: list) -> dict:
    """``schema`` with only the properties that ``values`` (the manifests' values at this point) set."""
    out = {k: schema[k] for k in KEEP if k in schema}
    for k in ALTERNATIVES:
        if k in schema:
            out[k] = schema[k]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return {k: v for k, v in schema.items() if k != "description"}
    dicts = [v for v in values if isinstance(v, dict)]
    if "properties" in schema:
        used = sorted({k for d in dicts for k in d if k in schema["properties"]})
        out["properties"] = {k: cut(schema["properties"][k], [d[k] for d in dicts if k in d]) for k in used}
        if "additionalProperties" not in schema:
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = cut(
            schema["additionalProperties"], [v for d in dicts for v in d.values()]
        )
    elif "additionalProperties" in schema:
        out["additionalProperties"] = schema["additionalProperties"]
    if "items" in schema:
        out["items"] = cut(schema["items"], [x for v in values if isinstance(v, list) for x in v])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("crd", type=Path, help="the upstream CustomResourceDefinition (YAML)")
    p.add_argument(
        "manifests", type=Path, nargs="+", help="our manifests (documents of other kinds are skipped)"
    )
    p.add_argument("--source", required=True, help="where the CRD comes from: repository, tag, commit, path")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    crd = yaml.safe_load(args.crd.read_text())
    kind, group = crd["spec"]["names"]["kind"], crd["spec"]["group"]
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    docs = [
        d
        for path in args.manifests
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") == kind and d.get("apiVersion") == f"{group}/{version['name']}"
    ]
    if not docs:
        print(f"no {kind} ({group}/{version['name']}) in {[str(m) for m in args.manifests]}", file=sys.stderr)
        return 2
    schema = cut(version["schema"]["openAPIV3Schema"], docs)
    schema = {
        "$comment": f"{group}/{version['name']} {kind} from {args.source}, cut by scripts/cut_crd_schema.py to "
        "the fields deploy/ uses (rerun it when a manifest uses another field)",
        **schema,
    }
    args.out.write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
