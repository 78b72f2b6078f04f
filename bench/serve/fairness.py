"""How long a small request waits while other clients send long inputs back to back, against one `s2s serve`.

--clients LibreTranslate clients each send a --chars-character input (held-out en->ja sentences joined on one
line; the server splits it into pieces, all of them one submission) to `/translate`, back to back, while --probes
small `/translate` requests (one held-out sentence each), one after another, measure their time to the answer.
The same probes on the idle server first give the baseline; the figure is the ratio of the medians (loaded / idle),
measured in the same run, so that the machine's speed cancels out. The long clients' characters answered per
second show what fairness costs them. Each --tree (another commit's server) and --serve (this tree's, flags added)
runs in turn (ABBA over --rounds), for a before/after on one machine in one sitting:

    python -m bench.serve.fairness [--tree main=main] [--serve 'batch 16=--max-batch-size 16'] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from bench import ROOT
from bench.harness.load import abba
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
        idle = await probes(session, url, small, args.probes)
        stop, answered = asyncio.Event(), [0]

        async def client(k: int) -> None:
            n = 0
            while not stop.is_set():
                text = long_text(lines, 997 * k + 131 * n, args.chars)
                await translate(session, url, text)
                answered[0] += len(text)
                n += 1

        loaders = [asyncio.ensure_future(client(k)) for k in range(args.clients)]
        await asyncio.sleep(2)  # the load is on
        chars0, t0 = answered[0], time.perf_counter()
        loaded = await probes(session, url, small, args.probes)
        chars_s = (answered[0] - chars0) / (time.perf_counter() - t0)
        stop.set()
        await asyncio.gather(*loaders)
    return {"idle": idle, "loaded": loaded, "chars_s": chars_s}


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.serve.fairness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--tree",
        action="append",
        default=[],
        help="LABEL=REF: the server of git REF, measured beside this tree's (repeat)",
    )
    p.add_argument(
        "--serve",
        action="append",
        default=[],
        help="LABEL=FLAGS: this tree's server with these flags added, measured beside it (repeat)",
    )
    p.add_argument("--clients", type=int, default=4, help="clients sending long inputs back to back")
    p.add_argument("--chars", type=int, default=4096, help="characters of each long input")
    p.add_argument("--probes", type=int, default=30, help="small requests per measurement, idle and loaded")
    p.add_argument("--rounds", type=int, default=1, help="rounds; the servers take turns (ABBA)")
    args = p.parse_args()
    with contextlib.ExitStack() as stack:
        trees = {"this tree": (ROOT, [])} | {
            label: (ROOT, shlex.split(flags)) for label, flags in (s.split("=", 1) for s in args.serve)
        }
        for label, ref in (t.split("=", 1) for t in args.tree):
            into = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"fairness-{label}-")))
            trees[label] = (source_tree(ref, into), [])
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
    ms = lambda xs, q: statistics.quantiles(xs, n=100)[q - 1] * 1000 if q < 100 else max(xs) * 1000  # noqa: E731
    print(
        f"\n{args.clients} clients x {args.chars}-character /translate inputs back to back; {args.probes} small "
        f"/translate probes per measurement, {args.rounds} round(s)"
    )
    print(
        "| server | idle p50 ms | loaded p50 ms | loaded p90 ms | loaded max ms | loaded / idle p50 | long chars/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, runs in got.items():
        idle = [x for m in runs for x in m["idle"]]
        loaded = [x for m in runs for x in m["loaded"]]
        ratio = statistics.median(loaded) / statistics.median(idle)
        chars = statistics.median(m["chars_s"] for m in runs)
        print(
            f"| {label} | {ms(idle, 50):.0f} | {ms(loaded, 50):.0f} | {ms(loaded, 90):.0f} | {ms(loaded, 100):.0f} | "
            f"{ratio:.2f}x | {chars:.0f} |"
        )


if __name__ == "__main__":
    main()
