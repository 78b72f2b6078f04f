"""What the server exports to Prometheus, and what the deployment's Prometheus rules and Grafana dashboard
query: read by the deployment checks (tests/test_deploy_monitoring.py, tests/test_deploy_k8s.py) and the
live-Prometheus tests (tests/test_prometheus.py).

EXPORTED_METRICS is the set of metric families the server exports (docs/DEPLOYMENT.md, the server's
metrics module). Every metric that the dashboard or the recording rules query must be one of them.
"""

from __future__ import annotations

import json
import re

import yaml
from conftest import ROOT

DEPLOY = ROOT / "deploy"
PROM_DIR = DEPLOY / "prometheus"
GRAFANA_DIR = DEPLOY / "grafana"
K8S_DIR = DEPLOY / "k8s"
DOCKER_DIR = DEPLOY / "docker"
DASHBOARD = GRAFANA_DIR / "dashboards" / "s2s.json"

# --------------------------------------------------------------------------------------------------
# What the server exports: family name -> (type, labels). Histograms are in seconds except
# s2s_batch_size (sequences per decode step); their series are NAME_bucket (+ le), NAME_sum, NAME_count.
EXPORTED_METRICS: dict[str, tuple[str, frozenset[str]]] = {
    "s2s_request_duration_seconds": ("histogram", frozenset({"model", "method", "protocol"})),
    "s2s_queue_duration_seconds": ("histogram", frozenset({"model"})),
    "s2s_time_to_first_token_seconds": ("histogram", frozenset({"model"})),
    "s2s_time_per_output_token_seconds": ("histogram", frozenset({"model"})),
    "s2s_decode_step_duration_seconds": ("histogram", frozenset({"model", "core"})),
    "s2s_batch_size": ("histogram", frozenset({"model", "core"})),
    "s2s_requests_total": ("counter", frozenset({"model", "method", "protocol", "code"})),
    "s2s_input_tokens_total": ("counter", frozenset({"model"})),
    "s2s_generated_tokens_total": ("counter", frozenset({"model"})),
    "s2s_queued_sequences": ("gauge", frozenset({"model", "core"})),
    "s2s_active_sequences": ("gauge", frozenset({"model", "core"})),
    "s2s_engine_cores_up": ("gauge", frozenset({"model"})),
    "s2s_engine_core_restarts_total": ("counter", frozenset({"model"})),
    "s2s_model_info": ("gauge", frozenset({"model", "version", "provider", "quantization"})),
    "s2s_build_info": ("gauge", frozenset({"version"})),
}
# Labels Prometheus attaches at scrape time (target labels, and static labels of prometheus.yml).
TARGET_LABELS = frozenset({"job", "instance", "service", "namespace", "pod", "container", "endpoint"})
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def exported_family(series: str) -> str | None:
    """The exported family a series name belongs to, or None. `_bucket/_sum/_count` only for histograms."""
    if series in EXPORTED_METRICS and EXPORTED_METRICS[series][0] != "histogram":
        return series
    for suffix in HISTOGRAM_SUFFIXES:
        base = series[: -len(suffix)]
        if series.endswith(suffix) and EXPORTED_METRICS.get(base, ("",))[0] == "histogram":
            return base
    return None


def series_labels(series: str) -> frozenset[str]:
    family = exported_family(series)
    assert family is not None, series
    labels = EXPORTED_METRICS[family][1]
    return labels | {"le"} if series.endswith("_bucket") else labels


# --------------------------------------------------------------------------------------------------
# A small PromQL reader: enough to list the metric names, label matchers and grouping labels of an
# expression. Syntax itself is checked by promtool (test_dashboard_promql_parses).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_TOKEN = re.compile(
    r"0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|[A-Za-z_:][A-Za-z0-9_:]*"
)
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "inf",
    "nan",
    "start",
    "end",
}


def promql_parts(expr: str) -> tuple[set[str], list[tuple[str, set[str]]], set[str]]:
    """(metric names, [(metric name, matcher labels)], grouping labels) of a PromQL expression."""
    text = _STRING.sub('""', expr)
    grouping: set[str] = set()
    for _, labels in _GROUPING.findall(text):
        grouping |= {lab.strip() for lab in labels.split(",") if lab.strip()}
    text = _GROUPING.sub(" ", text)
    selectors = []
    for name, block in _SELECTOR.findall(text):
        selectors.append((name, set(_MATCHER.findall(block))))
    text = _SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries, [$__rate_interval]
    text = re.sub(r"\boffset\s+-?\S+", " ", text)
    text = re.sub(r"@\s*\S+", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables outside strings
    names = set()
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if tok[0].isdigit() or tok[0] == "." or tok.lower() in _KEYWORDS:
            continue
        if re.match(r"\s*\(", text[m.end() :]):  # a function or an aggregation
            continue
        names.add(tok)
    for name, _ in selectors:
        assert not name or name in names, (name, expr)
    return names, selectors, grouping


# --------------------------------------------------------------------------------------------------
# Recording rules and dashboard expressions


def load_rules() -> list[dict]:
    doc = yaml.safe_load((PROM_DIR / "rules.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def recording_rules() -> dict[str, frozenset[str]]:
    """Recorded name -> labels of its series (grouping labels of its expression + static labels)."""
    out: dict[str, frozenset[str]] = {}
    for rule in load_rules():
        if "record" not in rule:
            continue
        _, _, grouping = promql_parts(rule["expr"])
        labels = frozenset((grouping - {"le"}) | set(rule.get("labels", {})))
        out[rule["record"]] = out.get(rule["record"], frozenset()) | labels
    return out


def dashboard_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target, nested rows included."""
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p.get('id')} {p.get('title')!r} {t.get('refId')}", t["expr"]))
            walk(p.get("panels", []))

    walk(dash["panels"])
    return out


def dashboard_variable_metrics() -> list[tuple[str, str]]:
    """(variable, metric) for query variables of the form label_values(metric, label)."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*(\w+)\s*\)\s*", q)
        assert m, f"variable {var['name']}: unexpected query {q!r}"
        out.append((var["name"], m.group(1), m.group(2)))
    return out
