"""Read Whisper checkpoints into numpy, under one naming scheme.

Two sources are understood:

* Hugging Face checkpoints: ``config.json`` + ``model.safetensors`` (or sharded, with
  ``model.safetensors.index.json``). Tensors are read lazily from the memory-mapped files.
* CTranslate2 Whisper folders: ``model.bin`` (binary format v6, possibly split into
  ``model.bin.part1``, ``model.bin.part2`` …, joined by streaming) + ``config.json``.
  CTranslate2 fuses self-attention q/k/v and cross-attention k/v; they are split here.
  int8 weights come back as :class:`QuantizedTensor` (int8 values and one scale per row).

Every reader returns a :class:`Checkpoint`: the model dimensions plus a mapping from our
canonical tensor names (see ``canonical_names``) to arrays. Linear weights keep the
PyTorch layout ``[out_features, in_features]``.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import DeskScribeError
from ..fsutil import UnsafePathError, inside


class CheckpointError(DeskScribeError):
    """A folder that does not hold a Whisper checkpoint we can read."""


@dataclass(frozen=True)
class Dims:
    n_mels: int
    n_vocab: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class QuantizedTensor:
    """int8 weight ``[out, in]`` with one scale per output row: ``float = int8 / scale``."""

    values: np.ndarray
    scale: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def dequantize(self) -> np.ndarray:
        return self.values.astype(np.float32) / self.scale.astype(np.float32)[:, None]


Tensor = np.ndarray | QuantizedTensor


@dataclass
class Checkpoint:
    dims: Dims
    tensors: Mapping[str, Callable[[], Tensor]]
    alignment_heads: list[tuple[int, int]] | None = None
    source_files: list[Path] = field(default_factory=list)
    kind: str = ""

    def get(self, name: str) -> Tensor:
        try:
            loader = self.tensors[name]
        except KeyError:
            raise CheckpointError(f"the checkpoint has no tensor {name!r}") from None
        return loader()

    def float(self, name: str) -> np.ndarray:
        t = self.get(name)
        return t.dequantize() if isinstance(t, QuantizedTensor) else t.astype(np.float32)


def canonical_names(dims: Dims) -> list[str]:
    """Every tensor name a complete checkpoint provides, in build order."""
    names = ["enc.conv1.w", "enc.conv1.b", "enc.conv2.w", "enc.conv2.b", "enc.pos"]

    def attn(prefix: str, bias_k: bool = False) -> list[str]:
        out = []
        for p in ("q", "k", "v", "o"):
            out.append(f"{prefix}.{p}.w")
            if p != "k" or bias_k:
                out.append(f"{prefix}.{p}.b")
        return out

    def block(prefix: str, cross: bool) -> list[str]:
        out = [f"{prefix}.attn_ln.g", f"{prefix}.attn_ln.b", *attn(f"{prefix}.attn")]
        if cross:
            out += [f"{prefix}.cross_ln.g", f"{prefix}.cross_ln.b", *attn(f"{prefix}.cross")]
        out += [f"{prefix}.mlp_ln.g", f"{prefix}.mlp_ln.b"]
        out += [f"{prefix}.mlp1.w", f"{prefix}.mlp1.b", f"{prefix}.mlp2.w", f"{prefix}.mlp2.b"]
        return out

    for i in range(dims.n_audio_layer):
        names += block(f"enc.{i}", cross=False)
    names += ["enc.ln.g", "enc.ln.b", "dec.embed", "dec.pos"]
    for i in range(dims.n_text_layer):
        names += block(f"dec.{i}", cross=True)
    names += ["dec.ln.g", "dec.ln.b"]
    return names


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Open a Hugging Face or CTranslate2 Whisper checkpoint folder."""
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder holding a Whisper checkpoint")
    if (folder / "model.safetensors").exists() or (
        folder / "model.safetensors.index.json"
    ).exists():
        return _load_hf(folder)
    if (folder / "model.bin").exists() or (folder / "model.bin.part1").exists():
        try:
            return _load_ct2(folder)
        except KeyError as err:
            raise CheckpointError(
                f"{folder}: model.bin has no {err}; it is not a CTranslate2 Whisper model"
            ) from None
    raise CheckpointError(
        f"{folder} holds neither model.safetensors (Hugging Face) nor model.bin (CTranslate2); "
        "point to the folder of a Whisper checkpoint"
    )


# --------------------------------------------------------------------------- Hugging Face

_HF_ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


def _hf_name(name: str) -> str:
    """Canonical name -> Hugging Face ``WhisperForConditionalGeneration`` name."""
    part = name.split(".")
    side = "model.encoder" if part[0] == "enc" else "model.decoder"
    if name in ("enc.conv1.w", "enc.conv1.b", "enc.conv2.w", "enc.conv2.b"):
        return f"{side}.{part[1]}.{'weight' if part[2] == 'w' else 'bias'}"
    if name == "enc.pos":
        return "model.encoder.embed_positions.weight"
    if name == "dec.pos":
        return "model.decoder.embed_positions.weight"
    if name == "dec.embed":
        return "model.decoder.embed_tokens.weight"
    wb = {"w": "weight", "b": "bias", "g": "weight"}[part[-1]]
    if part[1] == "ln":
        return f"{side}.layer_norm.{wb}"
    layer = f"{side}.layers.{part[1]}"
    kind = part[2]
    if kind in ("attn", "cross"):
        mod = "self_attn" if kind == "attn" else "encoder_attn"
        return f"{layer}.{mod}.{_HF_ATTN[part[3]]}.{wb}"
    mod = {
        "attn_ln": "self_attn_layer_norm",
        "cross_ln": "encoder_attn_layer_norm",
        "mlp_ln": "final_layer_norm",
        "mlp1": "fc1",
        "mlp2": "fc2",
    }[kind]
    return f"{layer}.{mod}.{wb}"


def _load_hf(folder: Path) -> Checkpoint:
    from safetensors import safe_open

    config = _read_json(folder / "config.json")
    try:
        dims = Dims(
            n_mels=config["num_mel_bins"],
            n_vocab=config["vocab_size"],
            n_audio_ctx=config["max_source_positions"],
            n_audio_state=config["d_model"],
            n_audio_head=config["encoder_attention_heads"],
            n_audio_layer=config["encoder_layers"],
            n_text_ctx=config["max_target_positions"],
            n_text_state=config["d_model"],
            n_text_head=config["decoder_attention_heads"],
            n_text_layer=config["decoder_layers"],
        )
    except KeyError as err:
        raise CheckpointError(
            f"{folder / 'config.json'} lacks {err}: not a Whisper config"
        ) from None

    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map: dict[str, str] = _read_json(index)["weight_map"]
        try:
            files = sorted({inside(folder, f, resolve=False) for f in weight_map.values()})
        except UnsafePathError as err:
            raise CheckpointError(
                f"{index} names a weights file outside its folder: {err}"
            ) from None
    else:
        files = [folder / "model.safetensors"]
    handles = {f.name: safe_open(str(f), framework="np") for f in files}
    where = {key: name for name, h in handles.items() for key in h.keys()}  # noqa: SIM118 (safe_open is not iterable)

    def loader(hf_key: str) -> Callable[[], np.ndarray]:
        return lambda: handles[where[hf_key]].get_tensor(hf_key)

    tensors: dict[str, Callable[[], Tensor]] = {}
    for name in canonical_names(dims):
        key = _hf_name(name)
        if key in where:
            tensors[name] = loader(key)
        elif name.endswith(".k.b"):
            continue
        else:
            raise CheckpointError(f"{folder} is missing tensor {key}; the checkpoint is incomplete")

    heads = None
    gen = folder / "generation_config.json"
    if gen.exists():
        raw = _read_json(gen).get("alignment_heads")
        heads = [tuple(h) for h in raw] if raw else None
    return Checkpoint(dims, tensors, heads, files, kind="huggingface")


# --------------------------------------------------------------------------- CTranslate2

_CT2_DTYPES = {
    0: np.float32,
    1: np.int8,
    2: np.int16,
    3: np.int32,
    4: np.float16,
}


class _JoinedParts:
    """Read several files as one stream, in order (``model.bin.part1``, ``.part2`` …)."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths = paths
        self._index = 0
        self._fh: BinaryIO | None = self._open(0)

    def _open(self, index: int) -> BinaryIO | None:
        return open(self._paths[index], "rb") if index < len(self._paths) else None

    def read(self, n: int) -> bytes:
        chunks = []
        while n > 0 and self._fh is not None:
            data = self._fh.read(n)
            chunks.append(data)
            n -= len(data)
            if n > 0:
                self._fh.close()
                self._index += 1
                self._fh = self._open(self._index)
        if n > 0:
            raise CheckpointError(f"{self._paths[-1]} ends early: the model file is truncated")
        return b"".join(chunks)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def _ct2_parts(folder: Path) -> list[Path]:
    if (folder / "model.bin").exists():
        return [folder / "model.bin"]
    parts = []
    i = 1
    while (folder / f"model.bin.part{i}").exists():
        parts.append(folder / f"model.bin.part{i}")
        i += 1
    return parts


def read_ct2_variables(paths: list[Path]) -> Iterator[tuple[str, np.ndarray]]:
    """Stream ``(name, array)`` from a CTranslate2 model.bin (v6), then its aliases. A damaged
    or crafted file is a ``CheckpointError``, whatever is wrong in it."""
    try:
        yield from _ct2_variables(paths)
    except (ValueError, struct.error, KeyError, MemoryError, OverflowError) as e:
        raise CheckpointError(
            f"{paths[0].parent}: the CTranslate2 model file is damaged or not one "
            f"({type(e).__name__}: {e}); download or convert it again"
        ) from None


def _ct2_variables(paths: list[Path]) -> Iterator[tuple[str, np.ndarray]]:
    stream = _JoinedParts(paths)
    try:
        (version,) = struct.unpack("<I", stream.read(4))
        if version < 5:
            raise CheckpointError(f"{paths[0]}: CTranslate2 model format v{version} is too old")
        _read_string(stream)  # spec name
        stream.read(4)  # spec revision
        (count,) = struct.unpack("<I", stream.read(4))
        arrays: dict[str, np.ndarray] = {}
        for _ in range(count):
            name = _read_string(stream)
            (rank,) = struct.unpack("<B", stream.read(1))
            shape = struct.unpack(f"<{rank}I", stream.read(4 * rank))
            (dtype_id,) = struct.unpack("<B", stream.read(1))
            (nbytes,) = struct.unpack("<I", stream.read(4))
            dtype = _CT2_DTYPES.get(dtype_id)
            if dtype is None:
                raise CheckpointError(
                    f"{name}: unsupported CTranslate2 dtype id {dtype_id} (bfloat16?)"
                )
            if math.prod(shape) * np.dtype(dtype).itemsize != nbytes:
                raise CheckpointError(f"{name}: shape {shape} does not match its {nbytes} bytes")
            array = np.frombuffer(stream.read(nbytes), dtype=dtype).reshape(shape)
            arrays[name] = array
            yield name, array
        (n_alias,) = struct.unpack("<I", stream.read(4))
        for _ in range(n_alias):
            alias, target = _read_string(stream), _read_string(stream)
            yield alias, arrays[target]
    finally:
        stream.close()


def _read_string(stream: _JoinedParts) -> str:
    (n,) = struct.unpack("<H", stream.read(2))
    return stream.read(n).rstrip(b"\0").decode("utf-8")


def _load_ct2(folder: Path) -> Checkpoint:
    parts = _ct2_parts(folder)
    raw = dict(read_ct2_variables(parts))

    def scalar(name: str) -> int:
        return int(raw[name].reshape(-1)[0])

    def count_layers(side: str) -> int:
        n = 0
        while f"{side}/layer_{n}/ffn/linear_0/bias" in raw:
            n += 1
        return n

    emb = raw["decoder/embeddings/weight"]
    conv1 = raw["encoder/conv1/weight"]
    d = conv1.shape[0]
    dims = Dims(
        n_mels=conv1.shape[1],
        n_vocab=emb.shape[0],
        n_audio_ctx=raw["encoder/position_encodings/encodings"].shape[0],
        n_audio_state=d,
        n_audio_head=scalar("encoder/num_heads"),
        n_audio_layer=count_layers("encoder"),
        n_text_ctx=raw["decoder/position_encodings/encodings"].shape[0],
        n_text_state=emb.shape[1],
        n_text_head=scalar("decoder/num_heads"),
        n_text_layer=count_layers("decoder"),
    )

    def weight(key: str) -> Tensor:
        w = raw[key]
        scale = raw.get(key + "_scale")
        if w.dtype == np.int8 and scale is not None:
            return QuantizedTensor(w, np.asarray(scale, dtype=np.float32).reshape(-1))
        return w

    def rows(t: Tensor, i: int, n: int) -> Tensor:
        d_ = t.shape[0] // n
        if isinstance(t, QuantizedTensor):
            return QuantizedTensor(t.values[i * d_ : (i + 1) * d_], t.scale[i * d_ : (i + 1) * d_])
        return t[i * d_ : (i + 1) * d_]

    tensors: dict[str, Callable[[], Tensor]] = {}

    def put(name: str, fn: Callable[[], Tensor]) -> None:
        tensors[name] = fn

    def ln(canon: str, key: str) -> None:
        put(f"{canon}.g", lambda: raw[f"{key}/gamma"])
        put(f"{canon}.b", lambda: raw[f"{key}/beta"])

    def linear(canon: str, key: str) -> None:
        put(f"{canon}.w", lambda: weight(f"{key}/weight"))
        put(f"{canon}.b", lambda: raw[f"{key}/bias"])

    def fused(canons: list[str], key: str, skip_bias: set[str]) -> None:
        n = len(canons)
        for i, c in enumerate(canons):
            put(f"{c}.w", lambda i=i: rows(weight(f"{key}/weight"), i, n))
            if c not in skip_bias:
                put(f"{c}.b", lambda i=i: rows(raw[f"{key}/bias"], i, n))

    for name in ("conv1", "conv2"):
        put(f"enc.{name}.w", lambda name=name: weight(f"encoder/{name}/weight"))
        put(f"enc.{name}.b", lambda name=name: raw[f"encoder/{name}/bias"])
    put("enc.pos", lambda: raw["encoder/position_encodings/encodings"])
    put("dec.pos", lambda: raw["decoder/position_encodings/encodings"])
    put("dec.embed", lambda: weight("decoder/embeddings/weight"))
    ln("enc.ln", "encoder/layer_norm")
    ln("dec.ln", "decoder/layer_norm")
    for side, short, n_layers in (
        ("encoder", "enc", dims.n_audio_layer),
        ("decoder", "dec", dims.n_text_layer),
    ):
        for i in range(n_layers):
            c, k = f"{short}.{i}", f"{side}/layer_{i}"
            ln(f"{c}.attn_ln", f"{k}/self_attention/layer_norm")
            fused(
                [f"{c}.attn.q", f"{c}.attn.k", f"{c}.attn.v"],
                f"{k}/self_attention/linear_0",
                {f"{c}.attn.k"},
            )
            linear(f"{c}.attn.o", f"{k}/self_attention/linear_1")
            ln(f"{c}.mlp_ln", f"{k}/ffn/layer_norm")
            linear(f"{c}.mlp1", f"{k}/ffn/linear_0")
            linear(f"{c}.mlp2", f"{k}/ffn/linear_1")
            if short == "dec":
                ln(f"{c}.cross_ln", f"{k}/attention/layer_norm")
                linear(f"{c}.cross.q", f"{k}/attention/linear_0")
                fused([f"{c}.cross.k", f"{c}.cross.v"], f"{k}/attention/linear_1", {f"{c}.cross.k"})
                linear(f"{c}.cross.o", f"{k}/attention/linear_2")

    config = _read_json(folder / "config.json") if (folder / "config.json").exists() else {}
    heads = config.get("alignment_heads")
    return Checkpoint(
        dims,
        tensors,
        [tuple(h) for h in heads] if heads else None,
        parts,
        kind="ctranslate2",
    )


def read_ct2_vocabulary(folder: Path) -> list[str] | None:
    """The CTranslate2 vocabulary (``vocabulary.json`` list or ``vocabulary.txt`` lines), if any."""
    if (folder / "vocabulary.json").exists():
        data = json.loads((folder / "vocabulary.json").read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise CheckpointError(f"{folder / 'vocabulary.json'} is not a list of tokens")
        return [str(t) for t in data]
    if (folder / "vocabulary.txt").exists():
        return (folder / "vocabulary.txt").read_text(encoding="utf-8").split("\n")[:-1]
    return None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing: the checkpoint folder is incomplete") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not valid JSON ({err}); re-download the model") from None
