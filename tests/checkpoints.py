"""Test-side checkpoint writers: turn the packaged CTranslate2 weights into other layouts.

* ``write_hf``: a Hugging Face ``WhisperForConditionalGeneration`` checkpoint (safetensors,
  optionally sharded), with the HF tensor names written out here independently of the reader.
* ``write_ct2``: a CTranslate2 model.bin v6 (optionally int8 with per-row scales, optionally
  split into parts), which ctranslate2 itself loads, so it doubles as a format check.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from deskscribe.whisper.weights import read_ct2_variables

_LAYER = re.compile(r"(encoder|decoder)/layer_(\d+)/(.*)")


def ct2_variables(folder: Path) -> dict[str, np.ndarray]:
    parts = (
        [folder / "model.bin"]
        if (folder / "model.bin").exists()
        else sorted(folder.glob("model.bin.part*"))
    )
    return dict(read_ct2_variables(parts))


def _hf_pairs(name: str, value: np.ndarray) -> list[tuple[str, np.ndarray]]:
    simple = {
        "encoder/conv1/weight": "model.encoder.conv1.weight",
        "encoder/conv1/bias": "model.encoder.conv1.bias",
        "encoder/conv2/weight": "model.encoder.conv2.weight",
        "encoder/conv2/bias": "model.encoder.conv2.bias",
        "encoder/position_encodings/encodings": "model.encoder.embed_positions.weight",
        "encoder/layer_norm/gamma": "model.encoder.layer_norm.weight",
        "encoder/layer_norm/beta": "model.encoder.layer_norm.bias",
        "decoder/embeddings/weight": "model.decoder.embed_tokens.weight",
        "decoder/position_encodings/encodings": "model.decoder.embed_positions.weight",
        "decoder/layer_norm/gamma": "model.decoder.layer_norm.weight",
        "decoder/layer_norm/beta": "model.decoder.layer_norm.bias",
    }
    if name in simple:
        return [(simple[name], value)]
    m = _LAYER.fullmatch(name)
    if not m:
        return []
    side, i, rest = m.groups()
    pre = f"model.{side}.layers.{i}."
    module, _, leaf = rest.rpartition("/")
    hf_leaf = {"gamma": "weight", "beta": "bias", "weight": "weight", "bias": "bias"}[leaf]
    table = {
        "self_attention/layer_norm": ["self_attn_layer_norm"],
        "self_attention/linear_0": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
        "self_attention/linear_1": ["self_attn.out_proj"],
        "attention/layer_norm": ["encoder_attn_layer_norm"],
        "attention/linear_0": ["encoder_attn.q_proj"],
        "attention/linear_1": ["encoder_attn.k_proj", "encoder_attn.v_proj"],
        "attention/linear_2": ["encoder_attn.out_proj"],
        "ffn/layer_norm": ["final_layer_norm"],
        "ffn/linear_0": ["fc1"],
        "ffn/linear_1": ["fc2"],
    }
    targets = table[module]
    pieces = np.split(value, len(targets), axis=0)
    return [
        (pre + t + "." + hf_leaf, p)
        for t, p in zip(targets, pieces, strict=True)
        if not (t.endswith("k_proj") and hf_leaf == "bias")  # Whisper's k projections have no bias
    ]


def write_hf(ct2_folder: Path, out: Path, shards: int = 1) -> Path:
    raw = ct2_variables(ct2_folder)
    tensors: dict[str, np.ndarray] = {}
    for name, value in raw.items():
        for hf_name, array in _hf_pairs(name, value):
            tensors[hf_name] = np.ascontiguousarray(array.astype(np.float32))
    d = raw["encoder/conv1/weight"].shape[0]
    n_layers = {
        s: len({k.split(".")[3] for k in tensors if k.startswith(f"model.{s}.layers.")})
        for s in ("encoder", "decoder")
    }
    ct2_config = json.loads((ct2_folder / "config.json").read_text())
    config = {
        "model_type": "whisper",
        "architectures": ["WhisperForConditionalGeneration"],
        "num_mel_bins": int(raw["encoder/conv1/weight"].shape[1]),
        "vocab_size": int(raw["decoder/embeddings/weight"].shape[0]),
        "max_source_positions": int(raw["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(raw["decoder/position_encodings/encodings"].shape[0]),
        "d_model": int(d),
        "encoder_attention_heads": int(raw["encoder/num_heads"].reshape(-1)[0]),
        "decoder_attention_heads": int(raw["decoder/num_heads"].reshape(-1)[0]),
        "encoder_layers": n_layers["encoder"],
        "decoder_layers": n_layers["decoder"],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config))
    (out / "generation_config.json").write_text(
        json.dumps({"alignment_heads": ct2_config["alignment_heads"]})
    )
    shutil.copyfile(ct2_folder / "tokenizer.json", out / "tokenizer.json")
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, str(out / "model.safetensors"))
    else:
        weight_map = {}
        for s, chunk in enumerate(np.array_split(np.array(names), shards)):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            save_file({k: tensors[k] for k in chunk}, str(out / fname))
            weight_map.update(dict.fromkeys(chunk.tolist(), fname))
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": weight_map})
        )
    return out


_DTYPE_IDS = {
    np.dtype(np.float32): 0,
    np.dtype(np.int8): 1,
    np.dtype(np.int16): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.float16): 4,
}


def _string(s: str) -> bytes:
    data = s.encode() + b"\0"
    return struct.pack("<H", len(data)) + data


def write_ct2(ct2_folder: Path, out: Path, quantize: bool = False, parts: int = 1) -> Path:
    """Rewrite a CT2 model (int8 per-row quantized linear weights when ``quantize``)."""
    raw = ct2_variables(ct2_folder)
    raw.pop("decoder/projection/weight", None)  # an alias, written as such below
    variables: dict[str, np.ndarray] = {}
    for name, value in raw.items():
        if quantize and "linear_" in name and name.endswith("/weight"):
            w = value.astype(np.float32)
            scale = 127.0 / np.maximum(np.abs(w).max(axis=1), 1e-8)
            variables[name] = np.clip(np.rint(w * scale[:, None]), -127, 127).astype(np.int8)
            variables[name + "_scale"] = scale.astype(np.float32)
        elif quantize and value.dtype == np.float16:
            variables[name] = value.astype(np.float32)
        else:
            variables[name] = value
    blob = bytearray(struct.pack("<I", 6) + _string("WhisperSpec") + struct.pack("<I", 3))
    blob += struct.pack("<I", len(variables))
    for name in sorted(variables):
        v = np.asarray(variables[name], order="C")
        blob += _string(name) + struct.pack("<B", v.ndim) + struct.pack(f"<{v.ndim}I", *v.shape)
        blob += struct.pack("<B", _DTYPE_IDS[v.dtype]) + struct.pack("<I", v.nbytes) + v.tobytes()
    blob += (
        struct.pack("<I", 1)
        + _string("decoder/projection/weight")
        + _string("decoder/embeddings/weight")
    )
    out.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "tokenizer.json"):
        shutil.copyfile(ct2_folder / f, out / f)
    for extra in ("vocabulary.json", "vocabulary.txt"):
        if (ct2_folder / extra).exists():
            shutil.copyfile(ct2_folder / extra, out / extra)
    if parts == 1:
        (out / "model.bin").write_bytes(bytes(blob))
    else:
        size = -(-len(blob) // parts)
        for p in range(parts):
            (out / f"model.bin.part{p + 1}").write_bytes(bytes(blob[p * size : (p + 1) * size]))
    return out
