"""`s2s client` and Seq2SeqClient.generate_many against the real server on loopback: inputs of any number,
chunked to the model's limit, several requests in flight, outputs in input order, failures named by line."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import threading
import urllib.request

import grpc
import pytest
from conftest import ROOT, ServerThread, server_config

from s2s.seq2seq_client import GenerateManyError, Seq2SeqClient
from server.config import SchedulerConfig

ADD = "addition"
LIMIT = 64  # the default server's max_inputs_per_request (ListModels)


def problems(n: int, seed: int = 0) -> list[tuple[int, int]]:
    r = random.Random(seed)
    return [(r.randrange(1000), r.randrange(1000)) for _ in range(n)]


def texts(n: int, seed: int = 0) -> list[str]:
    return [f"{a}+{b}" for a, b in problems(n, seed)]


def direct(server, inputs: list[str], size: int = LIMIT) -> list[str]:
    """What plain Generate requests (of ``size`` inputs, one at a time) answer for ``inputs``."""
    with Seq2SeqClient(server.address) as c:
        return [out for i in range(0, len(inputs), size) for out in c.generate(ADD, inputs[i : i + size])]


def cli(server, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "s2s.cli", "client", "--server", server.address, "--model", ADD, *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=120)


def metric(server, name: str, **labels) -> float:
    """Sum of a metric's samples whose labels include ``labels``, scraped from the server's /metrics."""
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{server.config.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
    return total


def ok_generates(server) -> float:
    return metric(server, "s2s_requests_total", model=ADD, method="Generate", code="OK")


def wide_steps(server) -> float:
    """Decoder steps of the addition model with more than 8 rows so far."""
    return metric(server, "s2s_batch_size_count", model=ADD) - metric(
        server, "s2s_batch_size_bucket", model=ADD, le="8.0"
    )


def test_cli_answers_1200_stdin_lines_in_order(server):
    inputs = texts(1200)
    expected = direct(server, inputs)
    before = ok_generates(server)
    p = cli(server, stdin="".join(t + "\n" for t in inputs))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == expected  # same answers, same order, as direct Generate requests
    wrong = [(a, b, out) for (a, b), out in zip(problems(1200), p.stdout.splitlines()) if out != str(a + b)]
    assert len(wrong) <= 6, wrong  # the model is >= 99.5% exact: the arithmetic is checked, not trusted
    # Sent in requests of the advertised max_inputs_per_request (the old client sent one and was refused).
    assert ok_generates(server) - before == math.ceil(1200 / LIMIT)


def test_cli_small_requests_are_in_flight_together(server):
    inputs = texts(300, seed=1)
    expected = direct(server, inputs)
    before = ok_generates(server)
    steps_before = wide_steps(server)
    p = cli(
        server, "--inputs-per-request", "7", "--concurrency", "4", stdin="\n".join(inputs)
    )  # no final newline
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == expected
    assert ok_generates(server) - before == math.ceil(300 / 7)
    # A request holds 7 inputs, so decoder steps of more than 8 rows decoded several requests at once.
    assert wide_steps(server) > steps_before


@pytest.mark.parametrize("mode", [[], ["--stream"]], ids=["unary", "stream"])
def test_cli_bad_line_is_named_and_earlier_outputs_are_printed(server, mode):
    lines = texts(100, seed=2)
    lines[9] = ""  # line 10: blank, answered by a blank line
    lines[59] = "12+ab"  # line 60: 'a' and 'b' are not in the addition vocabulary; mid-request (lines 57-63)
    p = cli(server, "--inputs-per-request", "7", *mode, stdin="\n".join(lines) + "\n")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "s2s client: line 60: INVALID_ARGUMENT: input has characters outside the model's vocabulary: 'a', 'b'"
    ]
    out = p.stdout.splitlines()
    assert len(out) == 59 and out[9] == ""
    assert out[:9] + out[10:] == direct(server, lines[:9] + lines[10:59])


def test_cli_blank_lines_text_arguments_and_streaming(server):
    p = cli(server, stdin="\n1+1\n  \n2+2\n\n")
    assert (p.returncode, p.stdout) == (0, "\n2\n\n4\n\n")  # output line N answers input line N
    p = cli(server, "1+2", "30+12")
    assert (p.returncode, p.stdout) == (0, "3\n42\n")
    p = cli(server, "1+2", "3+x", "5+5")
    assert p.returncode == 1 and p.stderr.startswith("s2s client: input 2: INVALID_ARGUMENT: ")
    assert p.stdout == "3\n"
    p = cli(server, "--stream", "12+30")
    assert (p.returncode, p.stdout) == (0, "42\n")
    inputs = texts(150, seed=3)  # more than one request's worth: --stream chunks too
    p = cli(server, "--stream", stdin="\n".join(inputs) + "\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == direct(server, inputs)
    p = cli(server, stdin="")
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")


class InFlight(grpc.UnaryUnaryClientInterceptor):
    """Counts the unary calls sent and not yet answered, and the most seen at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.most = self.calls = 0

    def _done(self, _call) -> None:
        with self.lock:
            self.now -= 1

    def intercept_unary_unary(self, continuation, details, request):
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        call = continuation(details, request)
        call.add_done_callback(self._done)
        return call


def test_generate_many_reads_a_generator_lazily_with_a_bounded_window(server):
    inputs = texts(500, seed=4)
    expected = direct(server, inputs)
    pulled = 0

    def gen():
        nonlocal pulled
        for t in inputs:
            pulled += 1
            yield t

    counter = InFlight()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.address), counter)
    got = []
    with Seq2SeqClient(channel=channel) as c:
        for out in c.generate_many(ADD, gen(), inputs_per_request=10, concurrency=3):
            got.append(out)
            assert pulled - len(got) <= 3 * 10  # never more than the window read ahead of the outputs
    assert got == expected
    assert counter.calls == 1 + 50  # ListModels, then 500 inputs in requests of 10
    assert 2 <= counter.most <= 1 + 3  # several Generate requests were in flight, never more than 3


def test_generate_many_errors_and_limits(server):
    inputs = texts(130, seed=5)
    with Seq2SeqClient(server.address) as c:
        assert c.max_inputs_per_request(ADD) == LIMIT
        expected = direct(server, inputs)
        before = ok_generates(server)
        assert list(c.generate_many(ADD, iter(inputs), inputs_per_request=1000)) == expected
        assert ok_generates(server) - before == 3  # capped at the model's limit: 64 + 64 + 2

        bad = inputs[:25] + ["7+y"] + inputs[26:]
        got = []
        with pytest.raises(GenerateManyError) as e:
            for out in c.generate_many(ADD, bad, inputs_per_request=10, concurrency=2):
                got.append(out)
        assert got == direct(
            server, inputs[:25]
        )  # the inputs before the bad one, including those of its request
        assert (e.value.code(), e.value.index, e.value.first, e.value.count) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            25,
            20,
            10,
        )
        assert e.value.details().startswith("input 5: ") and isinstance(e.value, grpc.RpcError)

        assert c.max_inputs_per_request("nope") == 64  # not listed: the default
        with pytest.raises(GenerateManyError) as e:
            list(c.generate_many("nope", ["1+1"]))
        assert (e.value.code(), e.value.index, e.value.first, e.value.count) == (
            grpc.StatusCode.NOT_FOUND,
            None,
            0,
            1,
        )
        with pytest.raises(ValueError):
            list(c.generate_many(ADD, inputs, concurrency=0))


def test_cli_wide_beams_fit_the_row_limit(model_repo):
    """A row limit (the queue's 256 rows) below 64 inputs x 8 beams: the CLI sends fewer inputs a request."""
    server = ServerThread(
        server_config(scheduler=SchedulerConfig(max_queue_size=256), models=(ADD,), instances=1)
    )
    try:
        inputs = texts(100, seed=6)
        with Seq2SeqClient(server.address) as c:
            info = next(m for m in c.models() if m.name == ADD)
            assert info.max_rows_per_request < LIMIT * 8  # 64 inputs of 8 beams would be refused
            assert c.max_inputs_per_request(ADD, beam_size=8) == info.max_rows_per_request // 8
            expected = [
                out for i in range(0, 100, 16) for out in c.generate(ADD, inputs[i : i + 16], beam_size=8)
            ]
        p = cli(server, "--beam-size", "8", stdin="\n".join(inputs))
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines() == expected
    finally:
        server.stop()


def test_generate_many_backs_off_while_the_queue_is_full(model_repo):
    """Two bulk clients against a queue of 8 rows decoded one at a time: refusals are resent, not errors."""
    srv = ServerThread(
        server_config(
            scheduler=SchedulerConfig(max_queue_size=8, max_batch_size=1), models=(ADD,), instances=1
        )
    )
    try:
        inputs = texts(40, seed=7)
        results: dict[int, list[str]] = {}
        start = threading.Barrier(2)

        def bulk(k: int) -> None:
            with Seq2SeqClient(srv.address) as c:
                start.wait()
                results[k] = list(c.generate_many(ADD, inputs))

        threads = [threading.Thread(target=bulk, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results[0] == results[1] == direct(srv, inputs, size=8)
        assert metric(srv, "s2s_requests_total", model=ADD, method="Generate", code="RESOURCE_EXHAUSTED") > 0
    finally:
        srv.stop()


def test_cli_decoding_option_flags_reach_the_server(server):
    inputs = texts(40, seed=5)
    # top-k 1 is greedy whatever the seed and temperature
    p = cli(
        server,
        "--sampling-topk",
        "1",
        "--sampling-temperature",
        "0.7",
        "--seed",
        "3",
        stdin="\n".join(inputs) + "\n",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == direct(server, inputs)
    seeded = [
        cli(server, "--sampling-topk", "0", "--sampling-temperature", "2", "--seed", "11", *inputs[:8]).stdout
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1] and seeded[0].splitlines() != direct(
        server, inputs[:8]
    )  # sampled, reproducibly
    p = cli(server, "--sampling-topp", "1.5", "1+1")
    assert p.returncode == 1 and "sampling_topp" in p.stderr
