"""The models DeskScribe offers, and where each comes from.

Sizes are the download sizes of the checkpoints on the Hugging Face hub (approximate; the
store asks the hub for the exact file list and sizes before it starts). Any other Hugging
Face repo id holding a Whisper checkpoint (HF or CTranslate2 layout) can be used as well.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CatalogEntry:
    id: str  # short name used on the command line and as the store folder prefix
    repo_id: str
    layout: str  # "huggingface" (safetensors) or "ctranslate2" (model.bin)
    size_mb: int
    multilingual: bool
    parameters_m: int
    good_for: str
    hardware: str


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        "large-v3-turbo",
        "openai/whisper-large-v3-turbo",
        "huggingface",
        1620,
        True,
        809,
        "best accuracy for its speed; 100 languages; no translation",
        "a GPU with 6 GB or more; a fast CPU for files (not live)",
    ),
    CatalogEntry(
        "large-v3",
        "openai/whisper-large-v3",
        "huggingface",
        3090,
        True,
        1550,
        "highest accuracy, translation to English; slow",
        "a GPU with 10 GB or more",
    ),
    CatalogEntry(
        "distil-large-v3",
        "distil-whisper/distil-large-v3",
        "huggingface",
        1510,
        False,
        756,
        "English only, close to large-v3, fast",
        "a GPU with 6 GB or more",
    ),
    CatalogEntry(
        "medium",
        "openai/whisper-medium",
        "huggingface",
        3060,
        True,
        769,
        "good accuracy in many languages, translation",
        "a GPU with 6 GB or more",
    ),
    CatalogEntry(
        "small",
        "openai/whisper-small",
        "huggingface",
        967,
        True,
        244,
        "a good balance on CPUs with 8 cores or more",
        "any computer; live on 8+ cores",
    ),
    CatalogEntry(
        "base",
        "openai/whisper-base",
        "huggingface",
        290,
        True,
        74,
        # bench/live_latency.py, 2 cores: base fell up to 4.2 s behind live speech (committed
        # text 4.3 s after the word, median); tiny.en kept up (under 1 s behind).
        "fast files everywhere; live on 2 CPU cores it falls up to ~4 s behind (tiny.en keeps up)",
        "any computer",
    ),
    CatalogEntry(
        "base.en",
        "openai/whisper-base.en",
        "huggingface",
        290,
        False,
        74,
        "English only, a little more accurate than base",
        "any computer",
    ),
    CatalogEntry(
        "tiny",
        "openai/whisper-tiny",
        "huggingface",
        151,
        True,
        39,
        "quick drafts, slow computers",
        "any computer",
    ),
    CatalogEntry(
        "tiny.en",
        "openai/whisper-tiny.en",
        "huggingface",
        151,
        False,
        39,
        "quick English drafts, slow computers, live captions on 2 CPU cores",
        "any computer",
    ),
    CatalogEntry(
        "faster-whisper-large-v3",
        "Systran/faster-whisper-large-v3",
        "ctranslate2",
        3090,
        True,
        1550,
        "large-v3 in CTranslate2 format (the faster-whisper world)",
        "a GPU with 10 GB or more",
    ),
    CatalogEntry(
        "faster-whisper-small",
        "Systran/faster-whisper-small",
        "ctranslate2",
        484,
        True,
        244,
        "small in CTranslate2 float16",
        "any computer",
    ),
    CatalogEntry(
        "faster-whisper-base",
        "Systran/faster-whisper-base",
        "ctranslate2",
        145,
        True,
        74,
        "base in CTranslate2 float16",
        "any computer",
    ),
)


def find_entry(name: str) -> CatalogEntry | None:
    """A catalog entry by short id or by repo id."""
    for entry in CATALOG:
        if name in (entry.id, entry.repo_id):
            return entry
    return None


def wanted_files(all_files: list[str]) -> list[str]:
    """The files of a repo that a build needs (weights, config, tokenizer, vocabulary)."""
    names = set(all_files)
    wanted = [f for f in ("config.json", "generation_config.json", "tokenizer.json") if f in names]
    if "model.safetensors.index.json" in names:
        wanted.append("model.safetensors.index.json")
        wanted += sorted(f for f in names if f.startswith("model-") and f.endswith(".safetensors"))
    elif "model.safetensors" in names:
        wanted.append("model.safetensors")
    elif "model.bin" in names:
        wanted.append("model.bin")
        wanted += [f for f in ("vocabulary.json", "vocabulary.txt") if f in names]
    else:
        parts = sorted(f for f in names if f.startswith("model.bin.part"))
        wanted += parts + [f for f in ("vocabulary.json", "vocabulary.txt") if f in names]
    return wanted


# --------------------------------------------------------------------------- speaker models


@dataclass(frozen=True)
class SpeakerCatalogEntry:
    """A speaker-embedding model on the hub: one ONNX file, placed as is (no build step)."""

    id: str
    repo_id: str
    onnx_file: str  # the file in the repo
    folder: str  # the store folder it is installed into
    size_mb: int
    good_for: str
    aliases: tuple[str, ...] = ()


SPEAKER_CATALOG: tuple[SpeakerCatalogEntry, ...] = (
    SpeakerCatalogEntry(
        "wespeaker",
        "Wespeaker/wespeaker-voxceleb-resnet34-LM",
        "voxceleb_resnet34_LM.onnx",
        "speaker-wespeaker-resnet34",
        27,
        "speaker labels: WeSpeaker ResNet34-LM (VoxCeleb), 256-dim embeddings; the default",
        ("wespeaker-resnet34", "wespeaker-voxceleb-resnet34-LM"),
    ),
)


def find_speaker_entry(name: str) -> SpeakerCatalogEntry | None:
    """A speaker catalog entry by id, alias or repo id."""
    for entry in SPEAKER_CATALOG:
        if name in (entry.id, entry.repo_id, *entry.aliases):
            return entry
    return None


def speaker_onnx_file(all_files: list[str], preferred: str | None = None) -> str | None:
    """The ONNX file of a speaker repo: ``preferred`` when present, else ``onnx/model.onnx``
    (the onnx-community layout), else the only full-precision ``.onnx`` file."""
    names = set(all_files)
    for wanted in (preferred, "onnx/model.onnx", "model.onnx"):
        if wanted and wanted in names:
            return wanted
    reduced = ("quant", "int8", "uint8", "fp16", "q4", "bnb")
    full = sorted(f for f in names if f.endswith(".onnx") and not any(r in f for r in reduced))
    return full[0] if len(full) == 1 else None


# --------------------------------------------------------------------------- overlap-aware


@dataclass(frozen=True)
class HubPart:
    """Files of one hub repository that make up part of a model folder."""

    repo_id: str
    files: tuple[str, ...]
    licence: str
    gated: bool  # the repository asks users to accept its conditions (a token is needed)
    size_mb: int


@dataclass(frozen=True)
class SegmentationCatalogEntry:
    """Overlap-aware speaker labels (``speakers/segmentation.py``): a segmentation model, a
    WeSpeaker embedding model and a PLDA, from three repositories, in one store folder."""

    id: str
    folder: str
    good_for: str
    segmentation: HubPart
    embedding: HubPart
    plda: HubPart
    aliases: tuple[str, ...] = ()

    @property
    def parts(self) -> tuple[HubPart, HubPart, HubPart]:
        return (self.segmentation, self.embedding, self.plda)

    @property
    def size_mb(self) -> int:
        return sum(p.size_mb for p in self.parts)


SEGMENTATION_CATALOG: tuple[SegmentationCatalogEntry, ...] = (
    SegmentationCatalogEntry(
        "community-1",
        "segmentation-community-1",
        "speaker labels with overlap: pyannote community-1's recipe (segmentation-3.0, "
        "WeSpeaker ResNet34, PLDA + VBx); needs a free hub token for its PLDA",
        HubPart("onnx-community/pyannote-segmentation-3.0", ("onnx/model.onnx",), "MIT", False, 6),
        HubPart(
            "Wespeaker/wespeaker-voxceleb-resnet34-LM",
            ("voxceleb_resnet34_LM.onnx",),
            "CC-BY-4.0",
            False,
            27,
        ),
        HubPart(
            "pyannote/speaker-diarization-community-1",
            ("plda/xvec_transform.npz", "plda/plda.npz"),
            "CC-BY-4.0",
            True,
            1,
        ),
        ("pyannote-community-1", "speaker-diarization-community-1", "segmentation"),
    ),
)


def find_segmentation_entry(name: str) -> SegmentationCatalogEntry | None:
    """A segmentation catalog entry by id or alias."""
    for entry in SEGMENTATION_CATALOG:
        if name in (entry.id, *entry.aliases):
            return entry
    return None
