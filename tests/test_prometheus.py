"""Metrics through a real Prometheus (Debian's `prometheus` binary) scraping a real server on loopback."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import free_port
from monitoring import EXPORTED_METRICS, PROM_DIR, dashboard_exprs, exported_family, load_rules, promql_parts

from s2s.seq2seq_client import Seq2SeqClient


def scrape(server) -> str:
    return (
        urllib.request.urlopen(f"http://127.0.0.1:{server.config.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )


def live_families(text: str) -> dict[str, set[str]]:
    """metric family -> label names seen, from a live exposition (histograms folded into their family)."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series = line.rsplit(" ", 1)[0]
        name = series.split("{", 1)[0]
        for suffix in ("_bucket", "_sum", "_count", "_created"):
            if name.endswith(suffix) and name[: -len(suffix)] in EXPORTED_METRICS:
                name = name[: -len(suffix)]
        labels = (
            {kv.split("=", 1)[0] for kv in series.split("{", 1)[1].rstrip("}").split(",") if kv}
            if "{" in series
            else set()
        )
        out.setdefault(name, set()).update(labels - {"le"})
    return out


def test_the_server_exports_exactly_what_dashboards_and_rules_query(server):
    with Seq2SeqClient(server.address) as c:
        c.generate("addition", ["1+2", "999+999"])  # a multi-token answer: time per output token needs two
        list(c.stream("addition", ["3+4"]))
    live = live_families(scrape(server))
    for family, (_, labels) in EXPORTED_METRICS.items():
        assert family in live, f"{family} is documented but not exported"
        assert labels <= live[family] | {"version"}, (family, labels, live[family])
    queried = set()
    for _, expr in dashboard_exprs():
        queried |= promql_parts(expr)[0]
    for rule in load_rules():
        queried |= promql_parts(rule["expr"])[0]
    recorded = {r["record"] for r in load_rules() if "record" in r}
    for name in queried - recorded:
        family = exported_family(name)
        assert family in live, f"{name} is queried by a dashboard or rule but the server does not export it"


def _get(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=5).read())


def test_real_prometheus_scrapes_the_server_and_computes_p99(server, tmp_path: Path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("Debian package `prometheus` is missing: `make test` installs it (make system-deps)")
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == "s2s")
    job["scrape_interval"], job["scrape_timeout"] = "1s", "1s"
    job["static_configs"][0]["targets"] = [f"127.0.0.1:{server.config.metrics_port}"]
    cfg["rule_files"] = [str(PROM_DIR / "rules.yml")]
    cfg["global"]["evaluation_interval"] = "1s"
    cfg["scrape_configs"] = [job]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    prom = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    stop = threading.Event()

    def traffic():
        with Seq2SeqClient(server.address) as c:
            i = 0
            while not stop.is_set() and i < 2000:  # bounded
                c.generate("addition", [f"{i % 997}+{i % 89}"])
                i += 1
                time.sleep(0.01)

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    base = f"http://127.0.0.1:{port}/api/v1"
    query = "histogram_quantile(0.99, sum by (le) (rate(s2s_request_duration_seconds_bucket[15s])))"
    try:
        up = value = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (up != "up" or value is None):
            time.sleep(1)
            try:
                targets = _get(f"{base}/targets")["data"]["activeTargets"]
                up = targets[0]["health"] if targets else None
                res = _get(f"{base}/query?query={urllib.parse.quote(query)}")["data"]["result"]
                if res and res[0]["value"][1] not in ("NaN", "+Inf"):
                    value = float(res[0]["value"][1])
            except OSError:
                continue  # Prometheus still starting
        assert up == "up", f"target health {up}"
        # a real quantile of the requests just made: finite and positive (not NaN, +Inf or 0 of an empty window)
        assert value is not None and math.isfinite(value) and value > 0, value
    finally:
        stop.set()
        t.join(10)
        prom.terminate()
        prom.wait(10)
