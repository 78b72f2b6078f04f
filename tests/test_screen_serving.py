"""``s2s serve --greedy-screen``: the engine cores screen greedy rows as asked, and the served answers equal the
engine's without the screen (it is exact: each screened token is proven to be the argmax)."""

from __future__ import annotations

import logging

from conftest import ServerThread, english, served_version, server_config

import engine
from s2s.seq2seq_client import Seq2SeqClient

JA = "translate-en-ja"


def test_served_greedy_answers_with_the_screen_equal_the_engines_without(caplog):
    """A float32 bundle served with --greedy-screen on (auto leaves one this small off: measured, its float32
    projection costs less than the screen): its cores say so at start, and greedy answers to held-out inputs,
    decoded together under continuous batching, with a minimum length (a per-row ban) or without, are the
    in-process engine's with the screen off (the server's span protection off, as the engine has none)."""
    texts = english(48)
    plain = engine.load(served_version(JA), device="cpu", greedy_screen="off")
    assert plain.runner.screen is None and "greedy_screen off" in plain.runner.screen_why
    assert engine.load(served_version(JA), device="cpu").runner.screen is None  # auto: too small to pay
    with caplog.at_level(logging.INFO, logger="s2s"):
        srv = ServerThread(server_config(models=(JA,), greedy_screen="on", instances=1))
    try:
        (core,) = srv.running.repo.get(JA).cores
        m = plain.config.model
        assert core.state.greedy_screen.startswith(
            f"on (greedy_screen on, output projection {m.d_model} x {m.tgt_vocab_size}"
        )
        assert "greedy screen on (" in caplog.text  # the start log says which and why
        with Seq2SeqClient(srv.address) as c:
            for options in ({}, {"min_new_tokens": 3}):
                want = [r.text for r in plain.generate(texts, beam_size=1, **options)]
                # one input a request, 16 in flight: rows join and leave the running batch between steps
                got = list(
                    c.generate_many(
                        JA,
                        texts,
                        inputs_per_request=1,
                        concurrency=16,
                        beam_size=1,
                        protect_spans=False,
                        **options,
                    )
                )
                assert got == want, options
    finally:
        srv.stop()
