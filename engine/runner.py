"""The graph runner: one bundle's ONNX Runtime sessions, verified against config.json, running encoder and decoder steps.

It knows ids and arrays only (no tokenizer, no text, no search): the step loop (``engine.step_loop``) drives it,
and the text API (``engine.translator``) sits on top of both.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from contract import bundle, names
from contract.bundle import BundleConfig, BundleError
from contract.graph_files import external_data_files
from engine.device import disabled_optimizers, log_provider_once, providers_for
from engine.encoder_groups import length_groups, measure_call_tokens
from engine.screen import Top1Screen, choose, mode_of, split_decoder
from engine.topk import TopLogprobs

log = logging.getLogger("s2s.engine")


@dataclass(frozen=True)
class EngineOptions:
    device: str = "auto"  # auto (CUDA when it really runs, else CPU) | cpu | cuda
    # One intra-op thread per session beat two on small CPUs at these model sizes (docs/BENCHMARKS.md, the
    # threads table); parallelism comes from batching and several engine cores instead.
    intra_op_threads: int = 1
    verify_hashes: bool = True
    # Files whose sha256 the caller checked, with their contract.bundle.stamp then ((name, stamp) pairs): one that
    # still has that stamp is not hashed again (s2s serve's front end checks a bundle once for all its cores).
    hashed: tuple = ()
    # Keep the KV cache in ONNX Runtime's own buffers between steps (IOBinding + OrtValue) instead
    # of numpy arrays. "auto": when the decoder runs on CUDA, where numpy inputs and outputs would
    # cross host memory on every step. On CPU numpy already is the device memory; "on" there runs
    # the same code path (the tests do).
    io_binding: str = "auto"  # auto | on | off
    # Greedy rows' tokens from an int8 screen of the output projection, each proven to be the argmax or computed in
    # full (engine/screen.py): float32 bundles on the CPU only. auto: where the projection is large enough to pay
    # (engine.screen.choose); on | off (True | False too).
    greedy_screen: bool | str = "auto"


class Runner:
    """The two ONNX graphs of a bundle: encoder and decoder steps on ids and arrays."""

    def __init__(self, folder: Path, options: EngineOptions = EngineOptions()):
        self.folder = Path(folder)
        self.config: BundleConfig = bundle.read_bundle(
            self.folder, verify_hashes=options.verify_hashes, hashed=dict(options.hashed)
        )
        m = self.config.model
        self.n_layers, self.n_heads, self.d_head, self.special = (
            m.n_decoder_layers,
            m.n_heads,
            m.d_head,
            m.special,
        )
        so = ort.SessionOptions()
        so.intra_op_num_threads = options.intra_op_threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        providers = providers_for(options.device)
        self.encoder = self._session(bundle.ENCODER_FILE, so, providers, self.config.encoder_io)
        self.decoder = self._session(bundle.DECODER_FILE, so, providers, self.config.decoder_io)
        # What really runs (get_available_providers() lists CUDA even without a GPU).
        self.provider = self.decoder.get_providers()[0]
        log_provider_once(options.device, self.provider)
        if options.device == "cuda" and self.provider != "CUDAExecutionProvider":
            raise BundleError(
                f"{self.folder}: --device cuda asked, but ONNX Runtime runs {self.provider} (CUDA 13/cuDNN 9 missing?)"
            )
        self.device_type = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
        self.io_binding = options.io_binding == "on" or (
            options.io_binding == "auto" and self.device_type == "cuda"
        )
        log.info(
            "loaded %s v%s from %s on %s%s",
            self.config.name,
            self.config.version,
            self.folder,
            self.provider,
            " (KV cache in device memory via IOBinding)" if self.io_binding else "",
        )
        self._threads = options.intra_op_threads
        self.screen: Top1Screen | None = None
        self.head: ort.InferenceSession | None = None  # the split-off output projection (with ``screen``)
        self.screen_why = self._split(so, providers, mode_of(options.greedy_screen))
        self._top: TopLogprobs | None = None  # built when the first beam runs
        # Tokens the model never generates (task.suppressed_ids): out of greedy's argmax, and out of the beams'
        # candidates after their log-softmax (engine.topk).
        self.suppressed = np.array(self.config.task.suppressed_ids, np.int64)
        self._past_names = [n for i in range(self.n_layers) for n in (names.past_key(i), names.past_value(i))]
        self._cross_names = [
            n for i in range(self.n_layers) for n in (names.cross_key(i), names.cross_value(i))
        ]
        self._present_names = [
            n for i in range(self.n_layers) for n in (names.present_key(i), names.present_value(i))
        ]
        # An encoder call's fixed cost in positions' work, measured here, before any request: how rows of different
        # lengths are grouped (engine.encoder_groups); outputs do not depend on it.
        self._call_tokens = measure_call_tokens(self._probe)
        log.info("%s: an encoder call costs about %.0f positions' work", self.folder.name, self._call_tokens)

    def _split(self, so: ort.SessionOptions, providers: list[str], mode: str) -> str:
        """Where the screen runs (``engine.screen.choose``): the decoder as trunk (up to its last hidden state) and
        head (the output projection), and the screen. Returns why it runs or not, as logged."""
        m = self.config.model
        on_cpu = self.device_type == "cpu" and not self.io_binding
        external = bool(external_data_files(self.folder / bundle.DECODER_FILE))
        on, why = choose(mode, self.config.quantization, m.d_model, m.tgt_vocab_size, on_cpu, external)
        split, failed = None, None
        if on:
            try:
                split = split_decoder(self.folder / bundle.DECODER_FILE)
            except (
                Exception
            ) as e:  # onnx's own errors (a graph past protobuf's 2 GB once cut, say): decode unsplit
                failed = (
                    f"its decoder could not be split ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
                )
        if on and split is None:
            on, why = False, failed or "its logits are not a plain projection"
        # asked for and not possible: a warning; auto's choice, or off: information
        (log.warning if mode == "on" and not on else log.info)(
            "%s: greedy_screen %s: %s", self.folder, "on" if on else "off", why
        )
        if not on:
            return why
        off = disabled_optimizers(providers)
        self.decoder = ort.InferenceSession(split.trunk, so, providers=providers, disabled_optimizers=off)
        self.head = ort.InferenceSession(split.head, so, providers=providers, disabled_optimizers=off)
        self._hidden = split.hidden
        self.screen = Top1Screen(split.weight, split.bias, self.config.task.suppressed_ids, self._threads)
        return why

    def _session(
        self, file: str, so: ort.SessionOptions, providers: list[str], io: names.GraphIO
    ) -> ort.InferenceSession:
        path = self.folder / file
        try:
            sess = ort.InferenceSession(
                str(path), so, providers=providers, disabled_optimizers=disabled_optimizers(providers)
            )
        except Exception as e:  # ORT raises its own exception types for unreadable models
            raise BundleError(f"{path}: ONNX Runtime cannot load it ({str(e).splitlines()[0][:300]})") from e
        got_in, got_out = [i.name for i in sess.get_inputs()], [o.name for o in sess.get_outputs()]
        if got_in != list(io.inputs) or got_out != list(io.outputs):
            raise BundleError(
                f"{path}: tensor names {got_in} -> {got_out} differ from config.json "
                f"{list(io.inputs)} -> {list(io.outputs)}"
            )
        return sess

    def top_logprobs(self, logits: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Each row's n best tokens by log-probability (float64), best first: ``engine.topk``."""
        if self._top is None:
            self._top = TopLogprobs(self._threads, self.config.task.suppressed_ids)
        return self._top(logits, n)

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> list[np.ndarray]:
        """(B, S) ids and mask -> cross K/V of every decoder layer, flat [k0, v0, k1, v1, ...], each (B, H, S, Dh).

        Rows are encoded in runs of similar length, each padded to its longest, split where a call's fixed cost
        is worth less than the padding it would add (``engine.encoder_groups``: equal lengths only for a small
        encoder, whose calls cost little; newcomers together for a larger one). Columns past a row's length stay
        zero: cross-attention masks them.
        """
        lengths = src_mask.sum(axis=1)
        if lengths.min() == src_ids.shape[1]:  # no padding (batch 1, or equal lengths)
            return self._encode(src_ids, src_mask)
        out: list[np.ndarray] | None = None
        for rows in length_groups(lengths, self._call_tokens):
            s = int(lengths[rows].max())
            part = self._encode(src_ids[rows, :s], src_mask[rows, :s])
            if out is None:
                out = [
                    np.zeros((len(lengths), p.shape[1], src_ids.shape[1], p.shape[3]), p.dtype) for p in part
                ]
            keep = src_mask[rows, None, :s, None].astype(bool)  # a padded row's columns past its length: zero
            padded = not keep.all()
            for o, p in zip(out, part):
                o[rows, :, :s] = np.where(keep, p, 0) if padded else p
        return out

    def _probe(self, rows: int, length: int) -> None:
        ids = np.full((rows, length), self.special.unk, np.int64)
        self._encode(ids, np.ones_like(ids))

    def _encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> list[np.ndarray]:
        return self.encoder.run(self._cross_names, {names.SRC_IDS: src_ids, names.SRC_MASK: src_mask})

    def to_device(self, arrays: list[np.ndarray]) -> list[ort.OrtValue]:
        """Copy host arrays into the decoder's device memory (once per batch change, not per step)."""
        return [
            ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a), self.device_type, 0) for a in arrays
        ]

    def decode_bound(
        self,
        tgt_ids: np.ndarray,
        positions: np.ndarray,
        past_mask: np.ndarray,
        past: list[ort.OrtValue],
        cross: list[ort.OrtValue],
        src_mask: np.ndarray,
    ) -> tuple[np.ndarray, list[ort.OrtValue]]:
        """``decode`` with the cache in device memory: past and cross K/V are OrtValues bound as they are, the present
        K/V stay on the device for the next step, and only ids, masks and the logits cross to or from the host."""
        binding = self.decoder.io_binding()
        for name, a in (
            (names.TGT_IDS, tgt_ids),
            (names.POSITIONS, positions),
            (names.PAST_MASK, past_mask),
            (names.SRC_MASK, src_mask),
        ):
            binding.bind_cpu_input(name, np.ascontiguousarray(a))
        for name, v in zip(self._past_names, past):
            binding.bind_ortvalue_input(name, v)
        for name, v in zip(self._cross_names, cross):
            binding.bind_ortvalue_input(name, v)
        binding.bind_output(names.LOGITS, "cpu")
        for name in self._present_names:
            binding.bind_output(name, self.device_type, 0)
        self.decoder.run_with_iobinding(binding)
        logits, *present = binding.get_outputs()
        return logits.numpy(), present

    def decode(
        self,
        tgt_ids: np.ndarray,
        positions: np.ndarray,
        past_mask: np.ndarray,
        past: list[np.ndarray],
        cross: list[np.ndarray],
        src_mask: np.ndarray,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One decoder step -> logits (B, T, V) and present K/V, flat like ``past``."""
        out, present = self._decode(tgt_ids, positions, past_mask, past, cross, src_mask)
        if self.head is not None:  # a split decoder (greedy_screen): its output is the hidden state
            out = self.head.run(None, {self._hidden: out})[0]
        return out, present

    def decode_top1(
        self,
        tgt_ids: np.ndarray,
        positions: np.ndarray,
        past_mask: np.ndarray,
        past: list[np.ndarray],
        cross: list[np.ndarray],
        src_mask: np.ndarray,
        banned: list[tuple[int, np.ndarray]],
    ) -> tuple[list[np.ndarray], np.ndarray]:
        """One decoder step of one new token per row, for rows that take their argmax: present K/V and each row's
        token (B,), never a suppressed one nor one ``banned`` to its row ((token, rows (B,) bool) pairs). Needs
        ``screen``: the rows it does not settle get their logits from ``head``."""
        hidden, present = self._decode(tgt_ids, positions, past_mask, past, cross, src_mask)
        h = hidden[:, -1]  # (B, d_model)
        tokens, settled = self.screen.top1(h, banned)
        rest = np.flatnonzero(~settled)
        if rest.size:
            logits = self.head.run(None, {self._hidden: hidden[rest]})[0][:, -1]  # (R, V)
            logits[:, self.suppressed] = -np.inf
            for token, rows in banned:
                logits[rows[rest], token] = -np.inf
            tokens[rest] = logits.argmax(-1)
        return present, tokens

    def _decode(self, tgt_ids, positions, past_mask, past, cross, src_mask):
        feed = {
            names.TGT_IDS: tgt_ids,
            names.POSITIONS: positions,
            names.PAST_MASK: past_mask,
            names.SRC_MASK: src_mask,
        }
        feed.update(zip(self._past_names, past))
        feed.update(zip(self._cross_names, cross))
        out, *present = self.decoder.run(None, feed)
        return out, present
