"""Screenshot of Prometheus graphing the server's latency percentiles, from a real run on this machine.

Starts `s2s serve` on the default models, Debian's `prometheus` with deploy/prometheus/ (targets
pointed at the server), sends bounded loopback traffic, then has headless Chromium capture the
graph of the recording rule for p50/p95/p99 request latency into docs/img/prometheus_latency.png.

    .venv/bin/python scripts/prometheus_screenshot.py [--seconds 120]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness.server import free_port, s2s_serve  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=120, help="traffic duration")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "prometheus_latency.png")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="s2s-prom-"))
    pport, stack = free_port(), contextlib.ExitStack()
    server = stack.enter_context(s2s_serve(ROOT / "models", metrics=True))  # ready once it returns
    prom = start_prometheus(tmp, server.metrics_port, pport)
    try:
        time.sleep(5)
        traffic(server.address, args.seconds)
        time.sleep(16)  # one more rule evaluation
        screenshot(tmp, pport, args.seconds, args.out)
        print(args.out)
        return 0
    finally:
        prom.terminate()
        prom.wait(20)
        stack.close()
        shutil.rmtree(tmp, ignore_errors=True)


def start_prometheus(tmp: Path, metrics_port: int, pport: int) -> subprocess.Popen:
    """Prometheus on 127.0.0.1:``pport`` with deploy/prometheus/'s s2s job (pointed at ``metrics_port``) and
    recording rules, its config and data under ``tmp``."""
    cfg = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == "s2s")
    job["static_configs"][0]["targets"] = [f"127.0.0.1:{metrics_port}"]
    cfg["scrape_configs"] = [job]
    cfg["rule_files"] = [str(ROOT / "deploy/prometheus/rules.yml")]
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    return subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{pport}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def traffic(address: str, seconds: int) -> None:
    """8 seq2seq.v1 clients, addition and translate-en-ja requests, for ``seconds``, the load varying every 20 s."""
    from s2s.seq2seq_client import Seq2SeqClient

    texts = [
        line.split("\t")[0]
        for line in (ROOT / "checkpoints/translate-en-ja/test.tsv").read_text().splitlines()[:200]
    ]
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        with Seq2SeqClient(address) as c:
            i = k
            while time.monotonic() < stop:
                if i % 3:
                    c.generate("addition", [f"{i % 1000}+{(i * 7) % 1000}"])
                else:
                    c.generate("translate-en-ja", [texts[i % len(texts)]])
                i += 8
                # Varying load so the percentiles move on the graph.
                time.sleep(0.02 if (time.monotonic() // 20) % 2 else 0.1)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, range(8)))


def screenshot(tmp: Path, pport: int, seconds: int, out: Path) -> None:
    """Headless Chromium's capture of Prometheus graphing the latency percentiles' recording rule into ``out``."""
    expr = "model:s2s_request_duration_seconds:quantile_rate1m"
    q = urllib.parse.urlencode(
        {"g0.expr": expr, "g0.tab": "0", "g0.range_input": f"{max(2, seconds // 60 + 1)}m"}
    )
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp / 'chrome'}",
            "--window-size=1400,900",
            "--virtual-time-budget=15000",
            f"--screenshot={out}",
            f"http://127.0.0.1:{pport}/graph?{q}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )


if __name__ == "__main__":
    sys.exit(main())
