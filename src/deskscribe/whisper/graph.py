"""Build our Whisper encoder and decoder ONNX graphs from a :class:`Checkpoint`.

Encoder: ``mel [B, n_mels, F]`` → ``cross_k_i [B, H, dh, S]`` and ``cross_v_i [B, H, S, dh]``
(fp16; the CPU variants fp32 and int8 the other way round, see ``cross_layout``) for each
decoder layer i: the cross-attention keys/values, computed once per window. They are
separate tensors, not one stacked array, so that a decoder step reads each layer's in place
instead of copying the whole stack. ``F`` is 3000 frames (a 30 s window, ``S`` = 1500) for
everything but live passes, which may encode a shorter context (an even ``F`` < 3000: the
positional embedding is cut to ``S`` = F / 2, as whisper.cpp's ``audio_ctx``).

Decoder: ``tokens [B, T]`` + ``cache_index [B]`` + self-attention cache (``past_k [L, B, H, dh, P]``, ``past_v
[L, B, H, P, dh]``) + the cross K/V → ``logits [B, V]`` of the last position, ``present_k/v``
(the cache grown by T) and ``alignment [B, A, T, S]``: the cross-attention weights of the
alignment heads, used for word timestamps. The self-attention keys are kept transposed so
that each step is a plain MatMul. The softmax scale is folded into the query weights.

Variants: ``fp32``; ``fp16`` (weights, activations and caches in float16, logits float32);
``int8`` (linear weights in 7 bits per output channel with ORT's DynamicQuantizeMatMul,
activations float32, the encoder's convolutions left in float; see ``INT8_WEIGHT_LEVELS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import TensorProto

from .graph_version import GRAPH_VERSION  # noqa: F401 (re-exported: the builder's)
from .onnx_writer import GraphWriter
from .weights import Checkpoint

VARIANTS = ("fp32", "fp16", "int8")


@dataclass
class _Cfg:
    variant: str

    @property
    def np_dtype(self) -> type:
        return np.float16 if self.variant == "fp16" else np.float32

    @property
    def onnx_dtype(self) -> int:
        return TensorProto.FLOAT16 if self.variant == "fp16" else TensorProto.FLOAT

    @property
    def keys_first(self) -> bool:
        """The cross-attention keys as rows (the CPU variants; see ``cross_layout``)."""
        return self.variant != "fp16"


def cross_layout(cfg: _Cfg, H: int, dh: int, S: int | str) -> tuple[list, list]:
    """The per-audio dims of the cross K and V: ``[H, dh, S]`` and ``[H, S, dh]`` (q · K and
    p · V, as the fp16 graphs for GPUs have them), or, for the CPU variants, ``[H, S, dh]`` and
    ``[H, dh, S]``, read transposed by ``FusedMatMul``. With several query rows per audio (beam
    search) ONNX Runtime's CPU MatMul packs its whole right operand, all 1500 positions of
    every head, at every step; read transposed, it takes the path that does not.
    ``bench/cross_attention.py`` (turbo's shape, one layer, 2 threads): 5 rows 1.66 → 1.36 ms,
    8 windows of 5 rows 10.3 → 8.5 ms (0.69-0.92x over five runs), one row 0.97-1.08x
    (noise); K · qᵀ was faster still at 5 rows but 1.2-1.8x slower at one row (greedy, the
    live path)."""
    if cfg.keys_first:
        return [H, S, dh], [H, dh, S]
    return [H, dh, S], [H, S, dh]


def heads_perm(dims: list, S: int | str) -> list[int]:
    """The Transpose from ``[B, S, H, dh]`` (split heads) to ``[B, *dims]``."""
    return [0, 2, 1, 3] if dims[1] == S else [0, 2, 3, 1]


class _Builder:
    def __init__(self, ckpt: Checkpoint, g: GraphWriter, cfg: _Cfg) -> None:
        self.ck = ckpt
        self.g = g
        self.cfg = cfg

    # -- weights -----------------------------------------------------------------
    def float_weight(self, name: str, scale: float = 1.0, transpose: bool = False) -> str:
        w = self.ck.float(name)
        if scale != 1.0:
            w = w * scale
        if transpose:
            w = w.T
        return self.g.weight(w.astype(self.cfg.np_dtype))

    def matmul(self, x: str, w: np.ndarray, b: np.ndarray | None = None) -> str:
        """``x @ w.T (+ b)`` for a float weight ``w [out, in]``: in the int8 variant
        ``DynamicQuantizeMatMul`` with ``w`` quantized per output row to 7 bits (weights
        already int8 in the checkpoint, from CTranslate2, are re-quantized too: 8-bit values
        would saturate on CPUs without VNNI), else ``MatMul`` (+ ``Add``) in the variant's type."""
        g = self.g
        if self.cfg.variant == "int8":
            q, row_scale = quantize_rows(w)
            zero = np.zeros(q.shape[0], dtype=np.int8)
            inputs = [x, g.weight(np.ascontiguousarray(q.T)), g.weight(row_scale), g.weight(zero)]
            if b is not None:
                inputs.append(g.weight(b.astype(np.float32)))
            return g.op("DynamicQuantizeMatMul", *inputs, domain="com.microsoft")
        y = g.op("MatMul", x, g.weight(np.ascontiguousarray(w.T).astype(self.cfg.np_dtype)))
        if b is not None:
            y = g.op("Add", y, g.weight(b.astype(self.cfg.np_dtype)))
        return y

    def linear(self, x: str, prefix: str, bias: bool = True, scale: float = 1.0) -> str:
        """``x @ W.T + b`` for the weight ``prefix.w`` (layout ``[out, in]``)."""
        b = None
        if bias and f"{prefix}.b" in self.ck.tensors:
            b = self.ck.float(f"{prefix}.b") * scale
        return self.matmul(x, self.ck.float(f"{prefix}.w") * scale, b)

    def linears(self, x: str, parts: list[tuple[str, bool, float]]) -> list[str]:
        """``linear`` of each ``(prefix, bias, scale)`` of ``parts`` on the same ``x``, as one
        matmul whose output is split (the CPU variants). A decoder step is memory-bound and
        made of small operators: each matmul dispatched costs a wake-up of the threads and,
        in int8, quantizes ``x`` again. In int8 the outputs are bit for bit the separate
        ones: ``x`` is quantized with one scale per tensor either way, and each output column
        is its own integer sum. The fp16 variant (GPUs) keeps separate matmuls."""
        if self.cfg.variant == "fp16" or len(parts) == 1:
            return [self.linear(x, pre, bias=bias, scale=sc) for pre, bias, sc in parts]
        weights, biases = [], []
        for pre, bias, sc in parts:
            w = self.ck.float(f"{pre}.w") * sc
            weights.append(w)
            has = bias and f"{pre}.b" in self.ck.tensors
            biases.append(self.ck.float(f"{pre}.b") * sc if has else np.zeros(w.shape[0]))
        y = self.matmul(x, np.concatenate(weights), np.concatenate(biases).astype(np.float32))
        sizes = [w.shape[0] for w in weights]
        return self.g.op("Split", y, self.g.const(sizes), axis=-1, outputs=len(parts))

    def layer_norm(self, x: str, prefix: str) -> str:
        return self.g.op(
            "LayerNormalization",
            x,
            self.float_weight(f"{prefix}.g"),
            self.float_weight(f"{prefix}.b"),
            axis=-1,
            epsilon=1e-5,
        )

    def gelu(self, x: str) -> str:
        g = self.g
        dt = self.cfg.np_dtype
        inner = g.op("Erf", g.op("Div", x, g.weight(np.array(np.sqrt(2.0), dtype=dt))))
        one_plus = g.op("Add", inner, g.weight(np.array(1.0, dtype=dt)))
        return g.op("Mul", g.op("Mul", x, one_plus), g.weight(np.array(0.5, dtype=dt)))

    def mlp(self, x: str, prefix: str) -> str:
        h = self.gelu(self.linear(x, f"{prefix}.mlp1"))
        return self.linear(h, f"{prefix}.mlp2")

    # -- attention helpers ---------------------------------------------------------
    def split_heads(self, x: str, n_head: int, d_head: int, perm: list[int]) -> str:
        g = self.g
        shaped = g.op("Reshape", x, g.const([0, 0, n_head, d_head]))
        return g.op("Transpose", shaped, perm=perm)

    def merge_heads(self, x: str, d_model: int) -> str:
        g = self.g
        t = g.op("Transpose", x, perm=[0, 2, 1, 3])
        return g.op("Reshape", t, g.const([0, 0, d_model]))

    def attend(self, q: str, k_t: str, v: str, mask: str | None = None) -> tuple[str, str]:
        """q [B,H,T,dh] · k_t [B,H,dh,S] → softmax → · v [B,H,S,dh]; returns (out, probs)."""
        g = self.g
        scores = g.op("MatMul", q, k_t)
        if mask is not None:
            scores = g.op("Add", scores, mask)
        probs = g.op("Softmax", scores, axis=-1)
        return g.op("MatMul", probs, v), probs


# int8 weights use 7 bits (-63..63), on every CPU. ONNX Runtime multiplies the dynamically
# quantized activations (uint8, 0..255) by int8 weights; on x86 CPUs without VNNI (most laptops
# before 2021) its kernel adds each pair of products into a saturating int16 (VPMADDUBSW):
# 255 * (|w_k| + |w_k+1|) must stay <= 32767, so |w| <= 64. Full 8-bit weights overflowed there
# and garbled words (an apostrophe became a segment end: "I didn t", "I didn."), while VNNI
# CPUs gave the right text. With 7 bits every kernel computes the same exact integer sums.
INT8_WEIGHT_LEVELS = 63


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output row within +-INT8_WEIGHT_LEVELS: (int8 [out, in], scale [out])."""
    levels = INT8_WEIGHT_LEVELS
    peak = np.abs(w).max(axis=1)
    scale = np.where(peak > 0, peak / levels, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -levels, levels).astype(np.int8)
    return q, scale


def build_encoder(ckpt: Checkpoint, path: Path, variant: str) -> None:
    d = ckpt.dims
    cfg = _Cfg(variant)
    g = GraphWriter(path, "whisper_encoder")
    b = _Builder(ckpt, g, cfg)
    try:
        dh_a = d.n_audio_state // d.n_audio_head
        mel = g.add_input("mel", TensorProto.FLOAT, ["batch", d.n_mels, "frames"])
        # The convolutions stay in float even in the int8 variant (quantizing them costs accuracy).
        x = g.op("Cast", mel, to=cfg.onnx_dtype)
        for conv, stride in (("conv1", 1), ("conv2", 2)):
            x = g.op(
                "Conv",
                x,
                b.float_weight(f"enc.{conv}.w"),
                b.float_weight(f"enc.{conv}.b"),
                kernel_shape=[3],
                pads=[1, 1],
                strides=[stride],
            )
            x = b.gelu(x)
        x = g.op("Transpose", x, perm=[0, 2, 1])
        # The positions of the frames there are (all 1500 for a 30 s window).
        n_pos = g.op("Shape", x, start=1, end=2)
        pos = g.op("Slice", b.float_weight("enc.pos"), g.const([0]), n_pos, g.const([0]))
        x = g.op("Add", x, pos)
        scale = dh_a**-0.5
        for i in range(d.n_audio_layer):
            p = f"enc.{i}"
            h = b.layer_norm(x, f"{p}.attn_ln")
            q = b.linear(h, f"{p}.attn.q", scale=scale)
            k = b.linear(h, f"{p}.attn.k", bias=False)
            v = b.linear(h, f"{p}.attn.v")
            if cfg.variant == "fp16":
                q = b.split_heads(q, d.n_audio_head, dh_a, [0, 2, 1, 3])
                k = b.split_heads(k, d.n_audio_head, dh_a, [0, 2, 3, 1])
                v = b.split_heads(v, d.n_audio_head, dh_a, [0, 2, 1, 3])
                out = b.merge_heads(b.attend(q, k, v)[0], d.n_audio_state)
            else:
                # The CPU variants: ONNX Runtime's fused attention (the softmax scale is
                # already in the query weights). Measured on tiny.en int8, one thread: a
                # window encodes in 274 instead of 313 ms, at a peak of 154 instead of 208 MiB
                # (the scores and the probabilities, n_head x 1500 x 1500 each, are never
                # both held). The fp16 variant, built for GPUs, keeps the plain operators
                # that every provider runs (CoreML has no fused attention).
                out = g.op(
                    "MultiHeadAttention",
                    q,
                    k,
                    v,
                    domain="com.microsoft",
                    num_heads=d.n_audio_head,
                    scale=1.0,
                )
            x = g.op("Add", x, b.linear(out, f"{p}.attn.o"))
            x = g.op("Add", x, b.mlp(b.layer_norm(x, f"{p}.mlp_ln"), p))
        x = b.layer_norm(x, "enc.ln")

        dh_t = d.n_text_state // d.n_text_head
        H = d.n_text_head
        k_dims, v_dims = cross_layout(cfg, H, dh_t, "positions")
        k_perm, v_perm = heads_perm(k_dims, "positions"), heads_perm(v_dims, "positions")
        for i in range(d.n_text_layer):
            p = f"dec.{i}.cross"
            k = b.split_heads(b.linear(x, f"{p}.k", bias=False), H, dh_t, k_perm)
            v = b.split_heads(b.linear(x, f"{p}.v"), H, dh_t, v_perm)
            g.identity(k, f"cross_k_{i}")
            g.identity(v, f"cross_v_{i}")
            g.add_output(f"cross_k_{i}", cfg.onnx_dtype, ["batch", *k_dims])
            g.add_output(f"cross_v_{i}", cfg.onnx_dtype, ["batch", *v_dims])
        g.save()
    except BaseException:
        g.abort()
        raise


def default_alignment_heads(ckpt: Checkpoint) -> list[tuple[int, int]]:
    """The checkpoint's alignment heads, or (as openai/whisper does) all heads of the upper half."""
    d = ckpt.dims
    if ckpt.alignment_heads:
        return [(int(layer), int(head)) for layer, head in ckpt.alignment_heads]
    return [
        (layer, h)
        for layer in range(d.n_text_layer // 2, d.n_text_layer)
        for h in range(d.n_text_head)
    ]


def build_decoder(
    ckpt: Checkpoint, path: Path, variant: str, alignment_heads: list[tuple[int, int]]
) -> None:
    d = ckpt.dims
    cfg = _Cfg(variant)
    g = GraphWriter(path, "whisper_decoder")
    b = _Builder(ckpt, g, cfg)
    try:
        L, H, dh = d.n_text_layer, d.n_text_head, d.n_text_state // d.n_text_head
        S = "positions"  # the encoder's: 1500, or fewer for a shorter context
        ft = cfg.onnx_dtype
        tokens = g.add_input("tokens", TensorProto.INT64, ["batch", "tokens"])
        # The self-attention cache is a buffer per layer with room to spare: slots at and after
        # past_len are ignored (masked), and only the new tokens' keys/values come out, so no
        # step copies the cache (the caller writes new_k/new_v into the buffer).
        past_len = g.add_input("past_len", TensorProto.INT64, [1])
        past_k = [g.add_input(f"past_k_{i}", ft, ["batch", H, dh, "slots"]) for i in range(L)]
        past_v = [g.add_input(f"past_v_{i}", ft, ["batch", H, "slots", dh]) for i in range(L)]
        # Cross K/V per audio: rows [j * G, (j + 1) * G) of the batch read audio j, where
        # G = batch / audio_batch (1 for one sequence per window, the beam size for beam search).
        k_dims, v_dims = cross_layout(cfg, H, dh, S)
        cross_k = [g.add_input(f"cross_k_{i}", ft, ["audio_batch", *k_dims]) for i in range(L)]
        cross_v = [g.add_input(f"cross_v_{i}", ft, ["audio_batch", *v_dims]) for i in range(L)]

        n_new = g.op("Shape", tokens, start=1, end=2)
        n_batch = g.op("Shape", tokens, start=0, end=1)
        n_audio = g.op("Shape", cross_k[0], start=0, end=1)
        slots = g.op("Shape", past_k[0], start=3, end=4)
        pos_axis = 1 + k_dims.index(S)
        n_pos = g.op("Shape", cross_k[0], start=pos_axis, end=pos_axis + 1)
        zero, one, axis0 = g.const(0), g.const(1), g.const([0])
        start = g.op("Squeeze", past_len, axis0)
        stop = g.op("Squeeze", g.op("Add", past_len, n_new), axis0)
        positions = g.op("Range", start, stop, one)
        embed = b.float_weight("dec.embed")
        x = g.op(
            "Add",
            g.op("Gather", embed, tokens, axis=0),
            g.op("Gather", b.float_weight("dec.pos"), positions, axis=0),
        )
        # Mask [T, slots + T]: a cached slot counts when it is below past_len; among the new
        # tokens, query i may not see key j > i.
        neg = g.weight(np.array(-np.inf, dtype=cfg.np_dtype))
        nil = g.weight(np.array(0, dtype=cfg.np_dtype))
        slot_ids = g.op("Range", zero, g.op("Squeeze", slots, axis0), one)
        cached = g.op("Where", g.op("Less", slot_ids, past_len), nil, neg)
        cached = g.op(
            "Expand", g.op("Unsqueeze", cached, axis0), g.op("Concat", n_new, slots, axis=0)
        )
        new_ids = g.op("Range", zero, g.op("Squeeze", n_new, axis0), one)
        blocked = g.op(
            "Greater", g.op("Unsqueeze", new_ids, axis0), g.op("Unsqueeze", new_ids, g.const([1]))
        )
        mask = g.op("Concat", cached, g.op("Where", blocked, neg, nil), axis=1)
        split_sizes = g.op("Concat", slots, n_new, axis=0)
        # [audio_batch, -1, H, dh] groups the rows of one audio; [batch, T, d] undoes it.
        grouped = g.op("Concat", n_audio, g.const([-1, H, dh]), axis=0)
        ungrouped = g.op("Concat", n_batch, n_new, g.const([d.n_text_state]), axis=0)

        scale = dh**-0.5
        new_k, new_v, align = [], [], []
        for i in range(L):
            p = f"dec.{i}"
            h = b.layer_norm(x, f"{p}.attn_ln")
            q, k, v = b.linears(
                h,
                [
                    (f"{p}.attn.q", True, scale),
                    (f"{p}.attn.k", False, 1.0),
                    (f"{p}.attn.v", True, 1.0),
                ],
            )
            q = b.split_heads(q, H, dh, [0, 2, 1, 3])
            k = b.split_heads(k, H, dh, [0, 2, 3, 1])
            v = b.split_heads(v, H, dh, [0, 2, 1, 3])
            new_k.append(k)
            new_v.append(v)
            scores = g.op("Concat", g.op("MatMul", q, past_k[i]), g.op("MatMul", q, k), axis=-1)
            probs = g.op("Softmax", g.op("Add", scores, mask), axis=-1)
            p_past, p_new = g.op("Split", probs, split_sizes, axis=-1, outputs=2)
            out = g.op("Add", g.op("MatMul", p_past, past_v[i]), g.op("MatMul", p_new, v))
            x = g.op("Add", x, b.linear(b.merge_heads(out, d.n_text_state), f"{p}.attn.o"))

            h = b.layer_norm(x, f"{p}.cross_ln")
            q = g.op("Reshape", b.linear(h, f"{p}.cross.q", scale=scale), grouped)
            q = g.op("Transpose", q, perm=[0, 2, 1, 3])  # [audio_batch, H, G*T, dh]
            if cfg.keys_first:
                # q · Kᵀ and p · Vᵀ with K [S, dh] and V [dh, S] read transposed (see
                # ``cross_layout``).
                scores = g.op("FusedMatMul", q, cross_k[i], domain="com.microsoft", transB=1)
                probs = g.op("Softmax", scores, axis=-1)
                out = g.op("FusedMatMul", probs, cross_v[i], domain="com.microsoft", transB=1)
            else:
                out, probs = b.attend(q, cross_k[i], cross_v[i])
            out = g.op("Reshape", g.op("Transpose", out, perm=[0, 2, 1, 3]), ungrouped)
            x = g.op("Add", x, b.linear(out, f"{p}.cross.o"))
            heads = [hd for layer, hd in alignment_heads if layer == i]
            if heads:
                # [audio_batch, A_i, G*T, S] -> [batch, A_i, T, S]
                picked = g.op("Gather", probs, g.const(heads), axis=1)
                shape5 = g.op("Concat", n_audio, g.const([len(heads), -1]), n_new, n_pos, axis=0)
                picked = g.op("Transpose", g.op("Reshape", picked, shape5), perm=[0, 2, 1, 3, 4])
                shape4 = g.op("Concat", n_batch, g.const([len(heads)]), n_new, n_pos, axis=0)
                align.append(g.op("Reshape", picked, shape4))
            x = g.op("Add", x, b.mlp(b.layer_norm(x, f"{p}.mlp_ln"), p))

        x = b.layer_norm(x, "dec.ln")
        last = g.op("Gather", x, g.const(-1), axis=1)  # [B, d]
        if cfg.variant == "int8":
            logits = b.matmul(last, b.ck.float("dec.embed"))
        else:
            # The same embedding matrix, read transposed: no second copy on disk or on the GPU.
            logits = g.op("Gemm", last, embed, transB=1)
        g.identity(g.op("Cast", logits, to=TensorProto.FLOAT), "logits")
        g.add_output("logits", TensorProto.FLOAT, ["batch", d.n_vocab])
        for i in range(L):
            g.identity(new_k[i], f"new_k_{i}")
            g.identity(new_v[i], f"new_v_{i}")
            g.add_output(f"new_k_{i}", ft, ["batch", H, dh, "tokens"])
            g.add_output(f"new_v_{i}", ft, ["batch", H, "tokens", dh])
        g.identity(g.op("Cast", g.op("Concat", *align, axis=1), to=TensorProto.FLOAT), "alignment")
        g.add_output("alignment", TensorProto.FLOAT, ["batch", len(alignment_heads), "tokens", S])
        g.save()
    except BaseException:
        g.abort()
        raise
