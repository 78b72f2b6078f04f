"""What a model looks like through KServe v2: its tensors, the decoding parameters it takes, and the
metadata, configuration and repository index answers, as plain JSON-shaped data (Triton's REST form).
The gRPC servicer builds its messages from the same data (``json_format.ParseDict``), so both
bindings describe a model alike. No transport here."""

from __future__ import annotations

from server.models.registry import ServedModels
from server.models.served_version import ServedVersion

TEXT_INPUT, TEXT_OUTPUT = "text_input", "text_output"
# Optional INT64 outputs of text_input's shape, sent only when asked for by name in `outputs`: the
# token counts that seq2seq.v1's Output carries.
COUNT_OUTPUTS = ("input_tokens", "output_tokens")
# The n-best lists, [N, num_hypotheses] (padded with "" and 0 where a tiny vocabulary left fewer): texts, scores.
NBEST_OUTPUTS = {"hypotheses": "BYTES", "scores": "FP32"}
# Per input, text_input's shape: the spans kept as they were (a JSON list of {"kind", "text", "start", "end"},
# offsets in characters) and the pieces the input was translated as.
SPAN_OUTPUTS = {"protected_spans": "BYTES", "pieces": "INT64"}
PER_INPUT_OUTPUTS = (*COUNT_OUTPUTS, *SPAN_OUTPUTS)
EXTRA_OUTPUTS = {**dict.fromkeys(COUNT_OUTPUTS, "INT64"), **NBEST_OUTPUTS, **SPAN_OUTPUTS}
TARGET_PREFIX = "target_prefix"  # optional BYTES input, text_input's shape
OPTIONS = ("max_tokens", "beam_width")  # request parameters or optional inputs
ALIASES = {"max_tokens": "max_new_tokens", "beam_width": "beam_size"}  # Triton's name -> ours
# Request parameters -> DecodingOptions fields, by the kind of value each takes.
DECODING_PARAMETERS = {
    "beam_size": int,
    "num_hypotheses": int,
    "max_new_tokens": int,
    "min_new_tokens": int,
    "no_repeat_ngram_size": int,
    "sampling_topk": int,
    "seed": int,
    "length_penalty": float,
    "repetition_penalty": float,
    "sampling_topp": float,
    "sampling_temperature": float,
    "return_scores": bool,
    "disable_unk": bool,
    "distinct_hypotheses": bool,
    "length_penalty_type": str,
}
# A request with this parameter true gets its timings as response parameters (queue_seconds,
# time_to_first_token_seconds, total_seconds); without it the answer carries none, as Triton's: every
# client pays for decoding what an answer carries.
TIMINGS = "timings"
# Request parameters -> TextOptions (translation models; absent = on).
TEXT_PARAMETERS = ("protect_spans", "keep_numbers", "split_long")
# Request parameters (string_param): the request's languages, a code each ("" or absent: the model's default);
# the model configuration lists the ones a model knows as source_languages / target_languages.
LANGUAGE_PARAMETERS = ("source_language", "target_language")
PLATFORM, BACKEND = "s2s", "onnxruntime"
EXTENSIONS = ("model_configuration", "parameters", "statistics")
# Triton echoes a request's id in its response; a longer one is refused rather than copied into
# every answer and error of a stream.
MAX_ID_CHARS = 256
_TYPES = {"BYTES": "TYPE_STRING", "INT64": "TYPE_INT64", "FP32": "TYPE_FP32"}


def model_metadata(repo: ServedModels, model: ServedVersion) -> dict:
    def tensor(name: str, datatype: str, shape: list[int]) -> dict:
        return {"name": name, "datatype": datatype, "shape": shape}

    return {
        "name": model.name,
        "versions": sorted(repo.models[model.name], key=int),
        "platform": PLATFORM,
        "inputs": [
            tensor(TEXT_INPUT, "BYTES", [-1]),
            tensor(TARGET_PREFIX, "BYTES", [-1]),
            *(tensor(key, "INT64", [1]) for key in OPTIONS),
        ],
        "outputs": [
            tensor(TEXT_OUTPUT, "BYTES", [-1]),
            *(tensor(key, "INT64", [-1]) for key in COUNT_OUTPUTS),
            *(tensor(key, dt, [-1, -1]) for key, dt in NBEST_OUTPUTS.items()),
            *(tensor(key, dt, [-1]) for key, dt in SPAN_OUTPUTS.items()),
        ],
    }


def _languages(model: ServedVersion) -> dict:
    """The languages a request may name, comma-separated (a multilingual model translates each source to each
    other target), and the bundle's defaults; nothing for a model without languages."""
    offered, b = model.offered, model.bundle
    if offered is None:
        return {}
    out = {"source_languages": ",".join(offered.sources), "target_languages": ",".join(offered.targets)}
    for key, code in (
        ("default_source_language", b.source_language),
        ("default_target_language", b.target_language),
    ):
        if code:
            out[key] = code
    return out


def model_config(model: ServedVersion) -> dict:
    info = model.info()
    lim = info.limits
    params = {
        "version": model.version,
        "task": info.task,
        "provider": info.provider,
        "quantization": info.quantization,
        "max_input_tokens": lim.max_input_tokens,
        "max_tokens": lim.max_new_tokens,
        "max_inputs_per_request": lim.max_inputs,
        "max_beam_width": lim.max_beam,
        "default_beam_width": lim.default_beam,
        "batching": model.sched.mode,
        "max_input_chars": lim.max_input_chars,
        "max_rows_per_request": lim.max_rows,
        "max_id_chars": MAX_ID_CHARS,
        "scheduler_max_batch_size": model.sched.max_batch_size,
        "engine_cores": info.cores,
        **_languages(model),
        # Each decoding parameter's accepted range: "min..max (default D)".
        **{f"{r.name}_range": f"{r.min:g}..{r.max:g} (default {r.default:g})" for r in lim.options},
    }

    def tensor(name: str, datatype: str, dims: list[int], optional: bool = False) -> dict:
        return {
            "name": name,
            "data_type": _TYPES[datatype],
            "dims": dims,
            **({"optional": True} if optional else {}),
        }

    # max_batch_size 0 (left out, as protobuf's JSON mapping does): text_input's own dimension is the batch.
    return {
        "name": model.name,
        "platform": PLATFORM,
        "backend": BACKEND,
        "input": [
            tensor(TEXT_INPUT, "BYTES", [-1]),
            tensor(TARGET_PREFIX, "BYTES", [-1], True),
            *(tensor(key, "INT64", [1], True) for key in OPTIONS),
        ],
        "output": [
            tensor(TEXT_OUTPUT, "BYTES", [-1]),
            *(tensor(key, "INT64", [-1]) for key in COUNT_OUTPUTS),
            *(tensor(key, dt, [-1, -1]) for key, dt in NBEST_OUTPUTS.items()),
            *(tensor(key, dt, [-1]) for key, dt in SPAN_OUTPUTS.items()),
        ],
        "parameters": {k: {"string_value": str(v)} for k, v in params.items()},
    }
