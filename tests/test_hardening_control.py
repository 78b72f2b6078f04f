"""Model control under pressure: an unload whose caller gives up, loads and unloads during the SIGTERM drain,
a browser on another site, reloads under html translations, and an unloaded model on the LibreTranslate door.

Real servers on loopback (explicit model control), raw KServe gRPC stubs, urllib over HTTP.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import threading
import urllib.error
import urllib.request

import grpc
import pytest
from conftest import ServerThread, alive, english, make_repo, server_config, wait_for

from protos.inference import grpc_service_pb2 as kpb
from protos.inference import grpc_service_pb2_grpc as kgrpc
from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

ADD, JA = "addition", "translate-en-ja"


JSON = {"Content-Type": "application/json"}  # what a load or unload needs on a server without a token


def post(
    srv, path: str, body: bytes = b"", headers: dict | None = None, timeout: float = 120
) -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.config.http_port}{path}",
        data=body,
        method="POST",
        headers=JSON if headers is None else headers,
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()).get("error", "")


def translate(srv, q: str, fmt: str = "text") -> tuple[int, str]:
    body = json.dumps({"q": q, "source": "en", "target": "ja", "format": fmt}).encode()
    return post(srv, "/translate", body)


@pytest.mark.serial
def test_an_unload_whose_caller_gives_up_still_stops_its_processes(tmp_path, model_repo):
    srv = ServerThread(
        server_config(
            model_repo=make_repo(tmp_path), model_control_mode="explicit", load_model=(JA,), instances=1
        )
    )
    try:
        model = srv.running.repo.get(JA)
        pids = [c.state.pid for c in model.cores]
        options = pb.GenerateOptions(beam_size=8, num_hypotheses=8, distinct_hypotheses=True)
        with grpc.insecure_channel(srv.address) as ch, concurrent.futures.ThreadPoolExecutor(2) as pool:
            call = pool.submit(
                pb_grpc.Seq2SeqStub(ch).Generate,
                pb.GenerateRequest(model=JA, inputs=english(64), options=options),
                timeout=300,
            )
            assert wait_for(
                lambda: model._multi_pass > 0, 60
            )  # between its passes: the unload must wait for it
            with pytest.raises(grpc.RpcError) as e:
                kgrpc.GRPCInferenceServiceStub(ch).RepositoryModelUnload(
                    kpb.RepositoryModelUnloadRequest(model_name=JA), timeout=0.3
                )
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert len(call.result().outputs) == 64  # accepted before the unload: answered
        assert wait_for(lambda: not [p for p in pids if alive(p)], 60), "the unloaded version's core lives on"
        assert JA not in srv.running.repo.models and JA in srv.running.repo.unloaded
    finally:
        srv.stop()


def test_model_control_is_refused_during_the_drain_and_http_answers_503(tmp_path, model_repo):
    srv = ServerThread(
        server_config(
            model_repo=make_repo(tmp_path),
            model_control_mode="explicit",
            load_model=(JA,),
            instances=1,
            grace_s=120,
        )
    )
    stopping = None
    try:
        core = srv.running.repo.get(JA).cores[0]
        with grpc.insecure_channel(srv.address) as ch, concurrent.futures.ThreadPoolExecutor(2) as pool:
            long = pool.submit(
                pb_grpc.Seq2SeqStub(ch).Generate,
                pb.GenerateRequest(model=JA, inputs=english(64), options=pb.GenerateOptions(beam_size=8)),
                timeout=300,
            )
            assert wait_for(lambda: core.inflight, 30)  # only gRPC work in flight
            stopping = asyncio.run_coroutine_threadsafe(srv.running.stop(), srv.loop)  # SIGTERM's drain
            assert wait_for(lambda: srv.running.control.closing, 10)
            with pytest.raises(grpc.RpcError) as e:
                kgrpc.GRPCInferenceServiceStub(ch).RepositoryModelLoad(
                    kpb.RepositoryModelLoadRequest(model_name=ADD), timeout=60
                )
            # gRPC takes no new call once its drain began: grpc's core refuses it UNAVAILABLE, or CANCELLED where the
            # call reached the server after its listener closed (a race inside grpc, seen on a loaded machine)
            assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
            assert ADD not in srv.running.repo.models
            status, error = post(srv, f"/v2/repository/models/{ADD}/load")
            assert status == 503 and "shutting down" in error
            status, error = translate(srv, "Save")  # the HTTP port is open while gRPC work drains
            assert status == 503 and "shutting down" in error
            assert not long.done()
            assert len(long.result().outputs) == 64
        stopping.result(120)
        assert ADD not in srv.running.repo.models  # nothing was loaded during the drain
    finally:
        if stopping is None:
            srv.stop()
        else:
            srv.loop.call_soon_threadsafe(srv.loop.stop)
            srv.thread.join(10)


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    """No token: anyone on the network, and any page in a browser, can reach it."""
    srv = ServerThread(
        server_config(
            model_repo=make_repo(tmp_path_factory.mktemp("open")),
            model_control_mode="explicit",
            load_model=(ADD, JA),
            instances=1,
        )
    )
    yield srv
    srv.stop()


def test_a_page_of_another_site_cannot_unload_a_model(open_server):
    path = f"/v2/repository/models/{ADD}/unload"
    for headers in (
        {"Origin": "http://evil.example", "Content-Type": "text/plain"},  # fetch(..., {mode: "no-cors"})
        {"Origin": "null", "Content-Type": "application/x-www-form-urlencoded"},  # a sandboxed form
        {"Sec-Fetch-Site": "cross-site"},
    ):
        status, error = post(open_server, path, b"", headers)
        assert status == 403 and "another site" in error, (headers, status, error)
    assert ADD in open_server.running.repo.models
    status, _ = post(
        open_server, path, b"{}", {"Origin": "http://evil.example", "Content-Type": "application/json"}
    )
    assert (
        status == 200
    )  # JSON: a page could only have sent it after a CORS preflight the server did not grant
    assert post(open_server, f"/v2/repository/models/{ADD}/load")[0] == 200  # curl: no Origin, goes through


def test_a_load_or_unload_without_a_token_must_be_json(open_server):
    """Without --auth-token, a load or unload that is not JSON is refused 415 naming the header to send, whatever
    else it says or omits (here neither Origin nor Sec-Fetch-Site: an old browser's form sends neither), and the
    model goes on serving; JSON, with an empty body or one, goes through."""
    for action in ("unload", "load"):
        path = f"/v2/repository/models/{ADD}/{action}"
        for kind in (
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/plain",
            None,
        ):
            conn = http.client.HTTPConnection("127.0.0.1", open_server.config.http_port, timeout=30)
            try:  # http.client sends no Content-Type unless told (urllib would add a form's)
                conn.request("POST", path, b"", {"Content-Type": kind} if kind else {})
                r = conn.getresponse()
                status, error = r.status, json.loads(r.read())["error"]
            finally:
                conn.close()
            assert status == 415 and "Content-Type: application/json" in error, (kind, status, error)
            assert (kind or "came with none") in error  # what it sent, named
        assert ADD in open_server.running.repo.models and infer_add(open_server, "12+30") == (200, "42")
    assert post(open_server, f"/v2/repository/models/{ADD}/unload", b"")[0] == 200  # JSON, empty
    assert post(open_server, f"/v2/repository/models/{ADD}/load", b'{"parameters": {}}')[0] == 200
    assert infer_add(open_server, "12+30") == (200, "42")


def infer_add(srv, text: str) -> tuple[int, str]:
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [text]}]}
    status, answer = post(srv, f"/v2/models/{ADD}/infer", json.dumps(body).encode())
    return status, json.loads(answer)["outputs"][0]["data"][0] if status == 200 else answer


def test_libretranslate_answers_503_for_an_unloaded_model(open_server):
    assert post(open_server, f"/v2/repository/models/{JA}/unload")[0] == 200
    try:
        status, error = translate(open_server, "Save")
        assert status == 503 and "unloaded" in error, (status, error)
    finally:
        assert post(open_server, f"/v2/repository/models/{JA}/load")[0] == 200
    assert translate(open_server, "Save")[0] == 200


def test_reloads_fail_no_html_translation(open_server):
    page = "<p>Save</p>" + "<i></i>" * 6000  # a few tens of ms of parsing in the worker thread
    statuses: list[tuple[int, str]] = []
    done = threading.Event()

    def client():
        while not done.is_set():
            statuses.append(translate(open_server, page, "html"))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(4):
            assert post(open_server, f"/v2/repository/models/{JA}/load")[0] == 200  # a reload
    finally:
        done.set()
        for t in threads:
            t.join(60)
    failed = [s for s in statuses if s[0] != 200]
    assert len(statuses) > 20 and not failed, (len(statuses), failed[:3])
