"""Log-mel against an independent implementation, and the tokenizer's special tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deskscribe.whisper.features import N_FRAMES, log_mel
from deskscribe.whisper.tokenizer import TokenizerError, WhisperTokenizer


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("seconds", [0.3, 7.0, 30.0])
def test_log_mel_matches_faster_whisper(n_mels: int, seconds: float) -> None:
    fw = pytest.importorskip("faster_whisper.feature_extractor")
    rng = np.random.default_rng(n_mels)
    t = np.arange(int(16000 * seconds)) / 16000
    audio = (
        0.3 * np.sin(2 * np.pi * 300 * t) * np.sin(2 * np.pi * 0.7 * t)
        + 0.02 * rng.standard_normal(t.size)
    ).astype(np.float32)
    ours = log_mel(audio, n_mels)
    padded = np.pad(audio, (0, 480000 - audio.size))
    ref = fw.FeatureExtractor(feature_size=n_mels)(padded, padding=0)[:, :N_FRAMES]
    assert ours.shape == (n_mels, N_FRAMES) == ref.shape
    assert np.max(np.abs(ours - ref)) < 1e-5  # the issue asks < 1e-3; we measure ~1e-7


def test_tiny_en_special_tokens(tiny_ct2: Path) -> None:
    tk = WhisperTokenizer(tiny_ct2 / "tokenizer.json")
    assert not tk.multilingual
    assert (tk.eot, tk.sot, tk.no_speech, tk.no_timestamps, tk.timestamp_begin) == (
        50256,
        50257,
        50361,
        50362,
        50363,
    )
    assert tk.sot_sequence("en") == [50257]
    assert tk.decode(tk.encode(" Hello, world!")) == " Hello, world!"


def test_multilingual_special_tokens(base_ct2: Path) -> None:
    tk = WhisperTokenizer(base_ct2 / "tokenizer.json")
    assert tk.multilingual
    assert (
        tk.eot,
        tk.sot,
        tk.translate,
        tk.transcribe,
        tk.sot_prev,
        tk.no_speech,
        tk.no_timestamps,
    ) == (
        50257,
        50258,
        50358,
        50359,
        50361,
        50362,
        50363,
    )
    assert tk.language_ids["en"] == 50259 and tk.language_ids["de"] == 50261
    assert len(tk.language_ids) == 99  # base predates large-v3's Cantonese
    assert tk.sot_sequence("fr", "translate") == [50258, tk.language_ids["fr"], 50358]
    with pytest.raises(TokenizerError, match="unknown language 'xx'"):
        tk.sot_sequence("xx")
    assert tk.decode_with_timestamps([50364, 2425, 50414]) == "<|0.00|> Hello<|1.00|>"


@pytest.mark.parametrize("which", ["tiny_ct2", "base_ct2"])
def test_suppressed_tokens_match_the_reference_list(
    which: str, request: pytest.FixtureRequest
) -> None:
    """The non-speech symbols we derive equal the list the CTranslate2 converter wrote."""
    from deskscribe.whisper.decoding import DecodingOptions, WindowDecoder

    folder = request.getfixturevalue(which)
    config = json.loads((folder / "config.json").read_text())
    tk = WhisperTokenizer(folder / "tokenizer.json")

    class _Model:  # only what WindowDecoder reads to list tokens
        tokenizer = tk
        dims = type("D", (), {"n_text_ctx": 448})()

    ids = WindowDecoder(_Model(), DecodingOptions()).suppress_ids()
    assert ids == sorted(config["suppress_ids"])
    assert [*tk.encode(" "), tk.eot] == config["suppress_ids_begin"]


def test_missing_tokenizer_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="rebuild the model"):
        WhisperTokenizer(tmp_path / "tokenizer.json")
