"""`s2s client`: its options; the client itself is s2s/seq2seq_client.py."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "client",
        help="call a running server: one output line per input line",
        description="Send TEXT arguments (or stdin, one input per line) to a model; prints one output "
        "per line, in input order. Stdin is read as a stream, so it may be any length: its lines go "
        "in requests of at most --inputs-per-request, with up to --concurrency requests in flight, "
        "and each output is printed as soon as it and those before it are answered. Blank (or "
        "all-whitespace) lines of stdin are not sent; each prints a blank output line, so output "
        "line N answers input line N. On a failure the outputs of the inputs before the failed one are "
        "printed, the error names its stdin line (or TEXT position) and the gRPC status, and the exit "
        "status is 1.",
    )
    p.add_argument("text", nargs="*", help="inputs (default: read stdin)")
    p.add_argument("--server", default="localhost:8001", help="HOST:PORT")
    p.add_argument("--model", help="model name (see --list)")
    p.add_argument("--list", action="store_true", help="list the served models and their limits")
    p.add_argument(
        "--stream",
        action="store_true",
        help="use GenerateStream: a single input's text is printed as it is generated; more inputs are "
        "printed line by line as each finishes, one request at a time (--concurrency does not apply)",
    )
    p.add_argument(
        "--inputs-per-request",
        "--batch-size",
        type=int,
        default=0,
        metavar="N",
        help="inputs per request; 0 = as many as the model allows (ListModels: max_inputs_per_request, "
        "and max_rows_per_request / --beam-size; 64 if the model is not listed), which is also the most "
        "used. When stdin is a terminal, 0 sends each line alone",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="K",
        help="requests in flight at once, fewer if together they would hold more than the model's "
        "max_rows_per_request rows (memory stays bounded: K x N inputs). A request refused with "
        "RESOURCE_EXHAUSTED (queue full) is resent after a backoff",
    )
    p.add_argument("--max-new-tokens", type=int, default=0, help="0 = model default")
    p.add_argument(
        "--beam-size", type=int, default=0, help="0 = the model's default (ListModels shows it); 1 = greedy"
    )
    p.add_argument(
        "--source-lang",
        default="",
        metavar="CODE",
        help="the inputs' language, for a multilingual model (ISO 639-1 such as en, or the model's own code; "
        "--list shows them); default: the model's",
    )
    p.add_argument(
        "--target-lang",
        default="",
        metavar="CODE",
        help="the language to translate to, for a multilingual model (a multilingual model needs one "
        "unless its bundle names a default)",
    )
    _add_decoding_options(p)
    _add_text_handling(p)
    p.add_argument("--timeout", type=float, default=60.0, help="deadline in seconds")
    p.add_argument("--token", default=None, help="bearer token, if the server requires one")
    p.add_argument("--tls-ca", default=None, help="PEM CA to verify a TLS server")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from s2s.seq2seq_client import run_cli

    return run_cli(args)


def _add_decoding_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "decoding options (CTranslate2's names; docs/DECODING.md has defaults and ranges)"
    )
    for flag, typ, hlp in (
        ("--length-penalty", float, "length penalty alpha (default: the rule's, gnmt 0.6, ctranslate2 1)"),
        ("--length-penalty-type", str, "gnmt (the paper's beam) | ctranslate2 (default: the model's)"),
        ("--repetition-penalty", float, "CTranslate2's repetition penalty (1 = off)"),
        ("--no-repeat-ngram-size", int, "forbid repeating any n-gram of this size (0 = off)"),
        ("--min-new-tokens", int, "generate at least this many tokens (after a prefix)"),
        ("--disable-unk", None, "never generate <unk>"),
        (
            "--sampling-topk",
            int,
            "sample from the k most likely tokens (1 = greedy, 0 = the whole vocabulary)",
        ),
        ("--sampling-topp", float, "sample from the smallest set of tokens with this much probability"),
        ("--sampling-temperature", float, "divide the logits by this before sampling"),
        ("--seed", int, "seed of the sampling: the same seed gives the same output, alone or batched"),
    ):
        if typ is None:
            g.add_argument(flag, action="store_true", default=None, help=hlp)
        else:
            g.add_argument(flag, type=typ, default=None, help=hlp)


def _add_text_handling(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group(
        "text handling (translation models; each on unless turned off: docs/DECODING.md)"
    )
    t.add_argument(
        "--no-protect-spans",
        action="store_true",
        help="let the model see placeholders, markup, URLs and e-mail addresses as they are, unprotected",
    )
    t.add_argument("--no-keep-numbers", action="store_true", help="do not protect numbers written as digits")
    t.add_argument(
        "--no-split-long",
        action="store_true",
        help="refuse inputs longer than the model reads instead of translating them piece by piece",
    )
