"""Offline checks of the monitoring files: Prometheus's configuration and recording rules, the Grafana
dashboard and its provisioning.

Nothing here needs Docker or the network. `promtool` (Debian package `prometheus`, installed by
`make system-deps`, part of `make test`) checks the configuration, the rules and every dashboard query; the
tests that need it skip without it.

Every metric that the dashboard or the recording rules query must be one the server exports
(tests/monitoring.py: EXPORTED_METRICS).
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import ROOT
from deploy_tools import check_expr, need, run
from monitoring import (
    DASHBOARD,
    GRAFANA_DIR,
    PROM_DIR,
    dashboard_exprs,
    dashboard_variable_metrics,
    exported_family,
    load_rules,
    promql_parts,
    recording_rules,
    series_labels,
)


def test_promql_reader():
    names, selectors, grouping = promql_parts(
        'histogram_quantile(0.95, sum by (model, le) (rate(s2s_batch_size_bucket{model=~"$model"}[$__rate_interval])))'
        ' / on (model) group_left sum(rate(a:b:c{quantile="0.5", x!="y{"}[5m] offset 1m)) > bool 1e3'
    )
    assert names == {"s2s_batch_size_bucket", "a:b:c"}
    assert selectors == [("s2s_batch_size_bucket", {"model"}), ("a:b:c", {"quantile", "x"})]
    assert grouping == {"model", "le"}
    assert exported_family("s2s_batch_size_count") == "s2s_batch_size"
    assert exported_family("s2s_requests_total_count") is None
    assert exported_family("s2s_queued_sequences_sum") is None
    assert exported_family("s2s_requests") is None


def test_rules_use_exported_metrics():
    rules = recording_rules()
    used = set()
    for rule in load_rules():
        used |= check_expr(rule.get("record") or rule.get("alert"), rule["expr"], rules)
    assert "s2s_request_duration_seconds_bucket" in used
    assert "s2s_time_to_first_token_seconds_bucket" in used


@pytest.mark.parametrize("family", ["s2s_request_duration_seconds", "s2s_time_to_first_token_seconds"])
def test_rules_record_percentiles_per_model(family):
    quantiles = {}
    for rule in load_rules():
        m = re.fullmatch(
            rf"\s*histogram_quantile\(\s*([0-9.]+)\s*,\s*sum by \(model, le\) \(rate\({family}_bucket\[\w+\]\)\)\)\s*",
            rule["expr"],
        )
        if m and rule.get("record", "").startswith("model:"):
            assert rule["labels"]["quantile"] == m.group(1), rule
            quantiles[m.group(1)] = rule["record"]
    assert set(quantiles) == {"0.5", "0.95", "0.99"}, quantiles
    assert len(set(quantiles.values())) == 1, "one recorded name, told apart by the quantile label"


def test_dashboard_uses_exported_metrics():
    rules = recording_rules()
    used: set[str] = set()
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    for where, expr in exprs:
        used |= check_expr(where, expr, rules)
    for var, metric, label in dashboard_variable_metrics():
        assert exported_family(metric), f"variable {var}: {metric} is not exported"
        assert label in series_labels(metric), f"variable {var}: {metric} has no label {label}"
    families = {exported_family(n) or n for n in used}
    # What the issue asks the dashboard to show.
    for needed in (
        "s2s_requests_total",
        "model:s2s_request_duration_seconds:quantile_rate1m",
        "model:s2s_time_to_first_token_seconds:quantile_rate1m",
        "s2s_queued_sequences",
        "s2s_active_sequences",
        "s2s_batch_size",
        "s2s_generated_tokens_total",
    ):
        assert needed in families, f"the dashboard shows nothing of {needed}"


def test_dashboard_structure():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for p in dash["panels"]:
        assert set(p["gridPos"]) >= {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p[
            "title"
        ]
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            if "$model" not in t["expr"] and "s2s_build_info" not in t["expr"]:
                pytest.fail(f"panel {p['title']!r} ignores the model variable: {t['expr']}")
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for topic in (
        "status code",
        "latency",
        "first token",
        "queue",
        "active sequences",
        "batch size",
        "tokens/s",
    ):
        assert topic in titles, f"no panel about {topic}"


def test_promtool_check_config():
    promtool = need("promtool", "prometheus")
    r = run([promtool, "check", "config", str(PROM_DIR / "prometheus.yml")])
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_check_rules():
    promtool = need("promtool", "prometheus")
    r = run([promtool, "check", "rules", str(PROM_DIR / "rules.yml")])
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_test_rules():
    promtool = need("promtool", "prometheus")
    r = run([promtool, "test", "rules", "rules_test.yml"], cwd=PROM_DIR)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboard_promql_parses(tmp_path):
    """Every dashboard query, Grafana variables substituted, is valid PromQL for promtool."""
    promtool = need("promtool", "prometheus")
    subst = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "${datasource}": "x"}
    rules = []
    for i, (_where, expr) in enumerate(dashboard_exprs()):
        for k, v in subst.items():
            expr = expr.replace(k, v)
        expr = re.sub(r"\$\{?(\w+)\}?", ".*", expr)  # $model -> a regex that matches all
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    (tmp_path / "dash.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = run([promtool, "check", "rules", str(tmp_path / "dash.yml")])
    assert r.returncode == 0, r.stdout + r.stderr


def test_prometheus_scrapes_the_server_every_5s():
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    job = next(
        j
        for j in cfg["scrape_configs"]
        if any("8002" in t for sc in j.get("static_configs", []) for t in sc["targets"])
    )
    assert job["scrape_interval"] == "5s"
    assert job.get("metrics_path", "/metrics") == "/metrics"
    host = job["static_configs"][0]["targets"][0].split(":")[0]
    assert host in compose["services"], f"scrape target {host} is not a compose service"
    assert cfg["rule_files"] == ["rules.yml"]


# --------------------------------------------------------------------------------------------------
# Grafana provisioning


def test_grafana_provisioning_matches_compose():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    ds = yaml.safe_load((GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert re.fullmatch(r"http://prometheus:9090/?", source["url"])
    assert "prometheus" in compose["services"]
    providers = yaml.safe_load((GRAFANA_DIR / "provisioning" / "dashboards" / "dashboards.yml").read_text())
    (provider,) = providers["providers"]
    path = provider["options"]["path"]
    assert mounts[path] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/{DASHBOARD.name}"
