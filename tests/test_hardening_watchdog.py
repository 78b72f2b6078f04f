"""The watchdog tells a hung engine core from a paused front end: the server's own process stopped
(SIGSTOP) for longer than --core-stall-s while its core decodes kills no core and loses no request.

`s2s serve` runs in a child process (the signal stops it, not the test); its engine core is a process of
its own that keeps decoding while the front end is stopped, its reports piling up unread in the pipe.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import time

import grpc
from conftest import Served, english

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

JA = "translate-en-ja"


def test_a_paused_front_end_kills_no_core_and_loses_no_request(tmp_path, model_repo):
    srv = Served(tmp_path, "--models", JA, "--instances", "1", "--core-stall-s", "2")
    try:
        pids = re.findall(r"engine core translate-en-ja#0 up \(pid (\d+)", srv.log())
        assert len(pids) == 1, srv.log()
        texts = english(64)
        with grpc.insecure_channel(srv.address) as ch, concurrent.futures.ThreadPoolExecutor(8) as pool:
            stub = pb_grpc.Seq2SeqStub(ch)

            def call(i: int):  # a 64-input beam-8 request among them: seconds of decoding on this machine
                inputs = texts if i == 0 else texts[i * 4 : (i + 1) * 4]
                return stub.Generate(
                    pb.GenerateRequest(
                        model=JA, inputs=inputs, options=pb.GenerateOptions(beam_size=8 if i == 0 else 4)
                    ),
                    timeout=300,
                )

            calls = [pool.submit(call, i) for i in range(8)]
            time.sleep(1.0)  # accepted and decoding
            os.kill(srv.proc.pid, signal.SIGSTOP)  # the front end only: its core decodes on
            time.sleep(6.0)  # three times --core-stall-s
            os.kill(srv.proc.pid, signal.SIGCONT)
            answers = [f.result() for f in calls]
        assert [len(a.outputs) for a in answers] == [64] + [4] * 7
        assert all(o.text for a in answers for o in a.outputs)
        log = srv.log()
        assert "killing it" not in log and "died" not in log, log
        assert (
            re.findall(r"engine core translate-en-ja#0 up \(pid (\d+)", log) == pids
        )  # the same core, never restarted
    finally:
        srv.stop()
