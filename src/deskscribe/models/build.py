"""Build a runnable model folder from a Whisper checkpoint (Hugging Face or CTranslate2).

The result is installed atomically: everything is written to a hidden sibling folder and
renamed into place at the end, so a model folder is either complete or absent.

Layout: ``manifest.json``, ``tokenizer.json``, ``encoder.onnx`` (+ ``.data``),
``decoder.onnx`` (+ ``.data``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from ..errors import Progress
from ..fsutil import fsync_dir, sha256_file
from ..whisper.graph import (
    GRAPH_VERSION,
    VARIANTS,
    build_decoder,
    build_encoder,
    default_alignment_heads,
)
from ..whisper.model import MANIFEST
from ..whisper.tokenizer import WhisperTokenizer
from ..whisper.weights import CheckpointError, load_checkpoint, read_ct2_vocabulary
from .store import check_replaceable

__all__ = ["BUILDER_VERSION", "build_model", "check_replaceable", "sha256_file"]

BUILDER_VERSION = GRAPH_VERSION


def build_model(
    source: str | Path,
    dest: str | Path,
    variant: str = "fp32",
    *,
    name: str | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    source_label: str | None = None,
) -> Path:
    """Build ``variant`` of the checkpoint in ``source`` into the folder ``dest``.

    ``overwrite`` replaces only a folder that holds a built model (or nothing at all): any
    other folder is the user's, and is never deleted. ``progress(fraction, 1.0, stage)``
    names the step ("hashing", "encoder", "decoder", "checksums", "done").
    """
    source, dest = Path(source), Path(dest)
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of: {', '.join(VARIANTS)}")
    check_replaceable(dest, overwrite, source)
    report = progress or (lambda done, total, stage="": None)
    ckpt = load_checkpoint(source)
    tokenizer_src = source / "tokenizer.json"
    if not tokenizer_src.exists():
        raise CheckpointError(
            f"{source} has no tokenizer.json; copy the tokenizer.json of the same Whisper model "
            "(e.g. from openai/whisper-base on the Hugging Face hub) into that folder"
        )
    tokenizer = WhisperTokenizer(tokenizer_src)
    vocabulary = read_ct2_vocabulary(source)
    if vocabulary is not None:
        for token_id in (tokenizer.eot, tokenizer.sot, tokenizer.no_timestamps):
            if token_id >= len(vocabulary) or vocabulary[token_id] != tokenizer.token(token_id):
                raise CheckpointError(
                    f"{source}: tokenizer.json and the vocabulary file disagree about token {token_id}; "
                    "the folder mixes files of different models"
                )
    if tokenizer.timestamp_begin + 1501 > ckpt.dims.n_vocab:
        raise CheckpointError(
            f"{tokenizer_src} does not match the model: its special tokens end past the model's "
            f"vocabulary of {ckpt.dims.n_vocab}"
        )

    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent))
    try:
        report(0.0, 1.0, "hashing")
        inputs = {p.name: sha256_file(p) for p in ckpt.source_files}
        report(0.1, 1.0, "encoder")
        build_encoder(ckpt, work / "encoder.onnx", variant)
        report(0.6, 1.0, "decoder")
        heads = default_alignment_heads(ckpt)
        build_decoder(ckpt, work / "decoder.onnx", variant, heads)
        shutil.copyfile(tokenizer_src, work / "tokenizer.json")
        report(0.95, 1.0, "checksums")
        outputs = {p.name: sha256_file(p) for p in sorted(work.iterdir()) if p.is_file()}
        manifest = {
            "name": name or dest.name,
            "builder_version": BUILDER_VERSION,
            "source": source_label or str(source.resolve()),
            "source_kind": ckpt.kind,
            "inputs_sha256": inputs,
            "files_sha256": outputs,
            "dims": ckpt.dims.to_dict(),
            "variant": variant,
            "alignment_heads": [list(h) for h in heads],
            "multilingual": tokenizer.multilingual,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        fsync_dir(work)
        os.chmod(work, 0o755)  # mkdtemp made it private; a model folder is ordinary data
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(work, dest)
        report(1.0, 1.0, "done")
        return dest
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
