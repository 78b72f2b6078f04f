"""Nothing accepted is lost when an engine core is killed: the requests it had not started (queued in it, or
still in its pipe) go to another core or wait for its restart; only those it had started fail (503, "retry").
A request waiting for a restart keeps its deadline, can be cancelled, and is answered when its model is
unloaded or its restart fails. Real servers on loopback, real core processes killed with SIGKILL, gRPC and HTTP clients."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import urllib.error
import urllib.request

import grpc
import pytest
from conftest import MODEL_REPO, ServerThread, alive, english, make_repo, server_config, wait_for

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from server.config import SchedulerConfig
from server.core_client import client as core_client

ADD, JA = "addition", "translate-en-ja"


def test_requests_queued_in_a_killed_core_are_answered_once_it_is_back(model_repo):
    """One core taking two rows at a time, 24 requests at once: when the first is answered the core is killed
    with at most two started and the others still queued in it. Every queued one is answered, with the
    text it gets when no core dies (it waited for the restart: there is no other core); a started one is
    answered or fails 503 naming the dead core."""
    batch = 2
    srv = ServerThread(
        server_config(instances=1, models=(JA,), scheduler=SchedulerConfig(max_batch_size=batch))
    )
    [core] = srv.running.repo.get(JA).cores
    texts = english(24)
    opts = pb.GenerateOptions(max_new_tokens=40, beam_size=1)

    async def main():
        async with grpc.aio.insecure_channel(srv.address) as ch:
            stub = pb_grpc.Seq2SeqStub(ch)

            def call(text: str):
                request = pb.GenerateRequest(model=JA, inputs=[text], options=opts)
                return asyncio.ensure_future(stub.Generate(request, timeout=120))

            reference = [r.outputs[0].text for r in await asyncio.gather(*map(call, texts))]
            calls = [call(t) for t in texts]
            await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
            held = len(core.inflight)
            core.kill()
            return reference, held, await asyncio.gather(*calls, return_exceptions=True)

    try:
        reference, held, results = asyncio.run(main())
        assert held > 2 * batch, held  # more were queued in the core than it was decoding when it died
        failed = [i for i, r in enumerate(results) if isinstance(r, grpc.aio.AioRpcError)]
        assert len(failed) <= batch, [results[i] for i in failed]  # only what was in its batch
        for i in failed:
            e = results[i]
            assert e.code() == grpc.StatusCode.UNAVAILABLE and "stopped while decoding" in e.details(), e
        print(
            f"killed with {held} requests on the core: {len(failed)} failed, {len(texts) - len(failed)} answered"
        )
        answered = {i: r.outputs[0].text for i, r in enumerate(results) if i not in failed}
        assert answered == {i: reference[i] for i in answered}
        assert core.state.restarts == 1 and core.state.up
        assert not srv.running.repo.get(JA).router.waiting
    finally:
        srv.stop()


def _on_loop(srv, fn):
    """``fn()`` run on the server's event loop, where the cores' state lives."""

    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), srv.loop).result(10)


def _post(srv, path: str, body: dict, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{srv.config.http_port}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()).get("error", "")


def _infer(srv, text: str, deadline: str | None = None) -> tuple[int, str]:
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [text]}]}
    return _post(srv, f"/v2/models/{ADD}/infer", body, {"X-Timeout-Seconds": deadline} if deadline else None)


@contextlib.contextmanager
def _one_core(tmp_path):
    """A server in explicit mode serving addition with one core: (repo, server, model, the core's pid)."""
    repo = make_repo(tmp_path, other=False)
    srv = ServerThread(
        server_config(model_repo=repo, model_control_mode="explicit", load_model=(ADD,), instances=1)
    )
    model = srv.running.repo.get(ADD)
    pid = model.cores[0].state.pid
    try:
        yield repo, srv, model, pid
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        srv.stop()


def _three_waiting(srv, model, pid):
    """SIGSTOP the core, send it three requests (a gRPC call, HTTP with a 5 s deadline, HTTP without), kill it:
    the three were not started, so they wait for its restart. Returns the calls and a probe of who waits."""
    [core] = model.cores
    texts = {tuple(model.codec.source_ids(t)): t for t in ("1+1", "2+2", "3+3")}

    def waiting() -> set[str]:
        return _on_loop(
            srv, lambda: {texts[tuple(r.submit.sequences[0][0])] for r in model.router.waiting.values()}
        )

    os.kill(pid, signal.SIGSTOP)
    ch = grpc.insecure_channel(srv.address)
    pool = concurrent.futures.ThreadPoolExecutor(2)
    gone = pb_grpc.Seq2SeqStub(ch).Generate.future(pb.GenerateRequest(model=ADD, inputs=["1+1"]))
    timed = pool.submit(_infer, srv, "2+2", "5")
    kept = pool.submit(_infer, srv, "3+3")
    assert wait_for(lambda: len(core.inflight) == 3)
    os.kill(pid, signal.SIGKILL)
    return ch, pool, gone, timed, kept, waiting


def test_a_request_waiting_for_a_restart_can_be_cancelled_keeps_its_deadline_and_is_answered_on_unload(
    tmp_path, monkeypatch
):
    """The core is stopped (SIGSTOP), three requests reach its pipe, and it is killed; its restart is 60 s away
    (the back-off set long here), so they wait. The caller of one goes away: it leaves the queue. One has a
    deadline: 504 once it passes. The last is answered 503 when the model is unloaded, naming the unload."""
    monkeypatch.setattr(core_client, "RESTART_DELAYS_S", (60.0,))
    with _one_core(tmp_path) as (repo, srv, model, pid):
        ch, pool, gone, timed, kept, waiting = _three_waiting(srv, model, pid)
        with ch, pool:
            assert wait_for(lambda: waiting() == {"1+1", "2+2", "3+3"})
            gone.cancel()
            assert wait_for(lambda: waiting() == {"2+2", "3+3"})
            status, error = timed.result()
            assert status == 504 and "deadline" in error, (status, error)
            assert waiting() == {"3+3"} and not kept.done()
            assert _post(srv, f"/v2/repository/models/{ADD}/unload", {})[0] == 200
            status, error = kept.result()
            assert status == 503 and "being unloaded" in error and "engine core" in error, (status, error)
        assert _post(srv, f"/v2/repository/models/{ADD}/load", {})[0] == 200
        status, answer = _infer(srv, "12+30")
        assert status == 200 and json.loads(answer)["outputs"][0]["data"] == ["42"]


def test_requests_waiting_for_a_restart_that_fails_are_answered_naming_why(tmp_path):
    """As above, but the restart cannot load the model (a bundle file no longer matches its hash): a request
    with no deadline would wait for a core that never comes, so every waiting one is answered 503 naming the
    failed restart. With the file restored, a load serves again."""
    with _one_core(tmp_path) as (repo, srv, model, pid):
        (repo / ADD / "1" / "decoder.onnx").write_bytes(b"not the file its hash names")
        ch, pool, gone, timed, kept, waiting = _three_waiting(srv, model, pid)
        with ch, pool:
            with pytest.raises(grpc.RpcError) as e:
                gone.result(60)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "failed to restart" in e.value.details()
            for call in (timed, kept):
                status, error = call.result(60)
                assert status == 503 and "failed to restart" in error and "sha256" in error, (status, error)
            assert not waiting()
        shutil.copy(MODEL_REPO / ADD / "1" / "decoder.onnx", repo / ADD / "1" / "decoder.onnx")
        assert _post(srv, f"/v2/repository/models/{ADD}/unload", {})[0] == 200
        assert _post(srv, f"/v2/repository/models/{ADD}/load", {})[0] == 200
        status, answer = _infer(srv, "12+30")
        assert status == 200 and json.loads(answer)["outputs"][0]["data"] == ["42"]
