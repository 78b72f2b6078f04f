"""How long a small request waits while other clients send long inputs back to back, against one `s2s serve`.

--fairness-clients LibreTranslate clients each send a --fairness-chars-character input (held-out en->ja sentences
joined on one line; the server splits it into pieces, all of them one submission) to `/translate`, back to back,
while --fairness-probes small `/translate` requests (one held-out sentence each), one after another, measure their
time to the answer. The same probes on the idle server first give the baseline; the figure is the ratio of the
medians (loaded / idle), measured in the same run, so that the machine's speed cancels out. The long clients'
characters answered per second, over their whole run, show what fairness costs them. Each --fairness-tree (another
commit's server) and --fairness-serve (this tree's, flags added) runs in turn (ABBA over --rounds), for a
before/after on one machine in one sitting; writes fairness.json, a row per server:

    python -m bench serve --only fairness [--fairness-tree main=main]
        [--fairness-serve 'batch 16=--max-batch-size 16'] [--rounds 2]
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from bench import ROOT
from bench.harness.load import abba, pct
from bench.harness.results import Report, provenance
from bench.harness.server import s2s_serve, source_tree

JA = "translate-en-ja"


def sentences() -> list[str]:
    rows = (ROOT / "checkpoints" / JA / "test.tsv").read_text(encoding="utf-8").splitlines()
    return [r.split("\t")[0] for r in rows]


def long_text(lines: list[str], start: int, chars: int) -> str:
    """Held-out sentences from ``start`` joined with spaces, cut to ``chars`` at a word."""
    out, i = "", start
    while len(out) < chars:
        out += lines[i % len(lines)] + " "
        i += 1
    return out[:chars].rsplit(" ", 1)[0]


async def translate(session: aiohttp.ClientSession, url: str, q: str) -> None:
    async with session.post(f"{url}/translate", json={"q": q, "source": "en", "target": "ja"}) as r:
        body = await r.json()
        if r.status != 200:
            raise RuntimeError(f"/translate answered {r.status}: {body}")


async def probes(session, url: str, small: list[str], n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await translate(session, url, small[i % len(small)])
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(0.02)  # one after another, a moment apart
    return out


async def measure(root: Path, flags: list[str], args) -> dict:
    """One server from the source tree ``root`` with ``flags``: the probes idle, then under the long clients' load."""
    with s2s_serve(
        ROOT / "models", "--models", JA, "--log-level", "WARNING", *flags, root=root, model=JA, http=True
    ) as srv:
        return await _measure(f"http://127.0.0.1:{srv.http_port}", args)


async def _measure(url: str, args) -> dict:
    lines = sentences()
    small = [s for s in lines[:200] if 20 <= len(s) <= 60][:20]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await probes(session, url, small, 10)  # warm
        idle = await probes(session, url, small, args.fairness_probes)
        stop, answered = asyncio.Event(), [0]

        async def client(k: int) -> None:
            n = 0
            while not stop.is_set():
                text = long_text(lines, 997 * k + 131 * n, args.fairness_chars)
                await translate(session, url, text)
                answered[0] += len(text)
                n += 1

        t0 = time.perf_counter()
        loaders = [asyncio.ensure_future(client(k)) for k in range(args.fairness_clients)]
        await asyncio.sleep(2)  # the load is on
        loaded = await probes(session, url, small, args.fairness_probes)
        stop.set()
        await asyncio.gather(*loaders)
        # Over the long clients' whole run, their last inputs answered included: a window of the probes alone can
        # end before a long input does (few probes, a busy machine) and would read 0.
        chars_s = answered[0] / (time.perf_counter() - t0)
    return {"idle": idle, "loaded": loaded, "chars_s": chars_s}


def add_arguments(a) -> None:
    """The fairness part's options of `python -m bench serve` (``a``: its parser's add_argument)."""
    a(
        "--fairness-tree",
        action="append",
        default=[],
        metavar="LABEL=REF",
        help="fairness: the server of git REF, measured beside this tree's (repeat)",
    )
    a(
        "--fairness-serve",
        action="append",
        default=[],
        metavar="LABEL=FLAGS",
        help="fairness: this tree's server with these flags added, measured beside it (repeat)",
    )
    a("--fairness-clients", type=int, default=4, help="fairness: clients sending long inputs back to back")
    a("--fairness-chars", type=int, default=4096, help="fairness: characters of each long input")
    a(
        "--fairness-probes",
        type=int,
        default=30,
        help="fairness: small requests per measurement, idle and loaded",
    )


def fairness(args) -> Report:
    """Every server's probes, idle and loaded, over --rounds (ABBA): the fairness report."""
    started = time.time()
    with contextlib.ExitStack() as stack:
        trees = servers(args, stack)
        got: dict[str, list[dict]] = {label: [] for label in trees}
        for r in range(args.rounds):
            for label in abba(list(trees), r):
                got[label].append(asyncio.run(measure(*trees[label], args)))
                m = got[label][-1]
                print(
                    f"round {r + 1} {label}: idle p50 {statistics.median(m['idle']) * 1000:.0f} ms, loaded p50 "
                    f"{statistics.median(m['loaded']) * 1000:.0f} ms, long inputs {m['chars_s']:.0f} chars/s",
                    flush=True,
                )
    report = Report("fairness")
    report.heading("A small request beside long inputs")
    report.text(
        f"{args.fairness_clients} clients send {args.fairness_chars}-character `/translate` inputs ({JA}) back to "
        f"back; {args.fairness_probes} small `/translate` probes per measurement, one after another, idle and then "
        f"under that load; {args.rounds} round(s), the servers taking turns (ABBA), the probes pooled. *loaded / idle "
        "p50*: how much longer a small request waits beside the long ones; *long chars/s*: what the long clients get, "
        "over their whole run."
    )
    table(report, got)
    report.text(provenance(started))
    return report


def servers(args, stack: contextlib.ExitStack) -> dict[str, tuple[Path, list[str]]]:
    """label -> (source tree, flags added): this tree's, --fairness-serve's, and --fairness-tree's checked out
    under temporary folders that ``stack`` removes."""
    trees = {"this tree": (ROOT, [])} | {
        label: (ROOT, shlex.split(flags)) for label, flags in (s.split("=", 1) for s in args.fairness_serve)
    }
    for label, ref in (t.split("=", 1) for t in args.fairness_tree):
        into = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"fairness-{label}-")))
        trees[label] = (source_tree(ref, into), [])
    return trees


def table(report: Report, got: dict[str, list[dict]]) -> None:
    """One row per server: its probes pooled over the rounds, idle and loaded."""
    t = report.table("fairness", "server", ("idle p50 ms", "{:.0f}"), ("loaded p50 ms", "{:.0f}"), ("loaded p90 ms", "{:.0f}"),
                     ("loaded max ms", "{:.0f}"), ("loaded / idle p50", "{:.2f}x"), ("long chars/s", "{:.0f}"))  # fmt: skip
    for label, runs in got.items():
        idle = [x for m in runs for x in m["idle"]]
        loaded = [x for m in runs for x in m["loaded"]]
        chars = statistics.median(m["chars_s"] for m in runs)
        p50 = pct(idle, 50), pct(loaded, 50)
        t.row(
            label,
            1e3 * p50[0],
            1e3 * p50[1],
            1e3 * pct(loaded, 90),
            1e3 * max(loaded),
            p50[1] / p50[0],
            chars,
        )
