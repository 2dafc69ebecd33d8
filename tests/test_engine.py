"""The engine against an oracle: ctranslate2 running the very same weights.

Greedy decoding without fallback must give exactly ctranslate2's tokens, and the logits of
the first step must be close; for the CTranslate2 folders as shipped, for a Hugging Face
checkpoint written from them, and for model.bin split into parts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from checkpoints import ct2_variables, write_ct2, write_hf
from conftest import built, espeak, load, wer
from deskscribe.whisper.decoding import DecodingOptions, WindowDecoder
from deskscribe.whisper.features import log_mel
from deskscribe.whisper.model import WhisperModel
from deskscribe.whisper.weights import (
    CheckpointError,
    QuantizedTensor,
    canonical_names,
    load_checkpoint,
)

ctranslate2 = pytest.importorskip("ctranslate2")

CLIPS = [
    ("The quick brown fox jumps over the lazy dog near the river bank.", "en-us", 150),
    ("Please send the quarterly report to the finance team before Friday afternoon.", "en-gb", 170),
    (
        "We measured the temperature every morning and wrote the numbers in a notebook.",
        "en-us+f3",
        135,
    ),
]


@pytest.fixture(scope="module")
def clips(speech_dir: Path) -> list[np.ndarray]:
    mels = []
    for i, (text, voice, speed) in enumerate(CLIPS):
        wav = espeak(text, speech_dir / f"oracle-{i}.wav", voice=voice, speed=speed)
        mels.append(load(wav))
    return mels


def _ct2_greedy(folder: Path, mel: np.ndarray, prompt: list[int], compute_type: str = "float32"):
    model = ctranslate2.models.Whisper(str(folder), device="cpu", compute_type=compute_type)
    res = model.generate(
        ctranslate2.StorageView.from_array(mel[None]),
        [prompt],
        beam_size=1,
        return_logits_vocab=True,
        return_no_speech_prob=True,
    )[0]
    return res.sequences_ids[0], np.asarray(res.logits[0][0]).reshape(-1), res.no_speech_prob


def _ours_greedy(model: WhisperModel, mel: np.ndarray, language: str):
    features = model.encode(mel[None])
    result = WindowDecoder(model, DecodingOptions()).decode(features, language)
    state = model.start(features, 1)
    tk = model.tokenizer
    logits, _ = state.step(np.array([[*tk.sot_sequence(language), tk.no_timestamps]]))
    return result, logits[0]


def _check_against_ct2(
    model: WhisperModel, ct2_folder: Path, clips: list[np.ndarray], language: str
) -> None:
    tk = model.tokenizer
    sot = tk.sot_sequence(language)
    for audio in clips:
        mel = log_mel(audio, model.n_mels)
        ours, our_logits = _ours_greedy(model, mel, language)
        ref_tokens, _, ref_no_speech = _ct2_greedy(ct2_folder, mel, sot)
        assert ours.tokens == ref_tokens, (tk.decode(ours.tokens), tk.decode(ref_tokens))
        assert len(ref_tokens) > 5 and any(t >= tk.timestamp_begin for t in ours.tokens)
        _, ref_logits, _ = _ct2_greedy(ct2_folder, mel, [*sot, tk.no_timestamps])
        # ctranslate2 reports logits after its suppression rules (-FLT_MAX); compare the rest.
        allowed = ref_logits > -1e30
        assert allowed.sum() > 1000
        assert np.max(np.abs(our_logits[allowed] - ref_logits[allowed])) < 2e-2
        assert ours.no_speech_prob == pytest.approx(ref_no_speech, abs=2e-3)


def test_tiny_en_matches_ctranslate2(tiny_model: WhisperModel, tiny_ct2: Path, clips) -> None:
    _check_against_ct2(tiny_model, tiny_ct2, clips, "en")


def test_base_multilingual_matches_ctranslate2(
    base_model: WhisperModel, base_ct2_joined: Path, clips
) -> None:
    _check_against_ct2(base_model, base_ct2_joined, clips, "en")


def test_huggingface_checkpoint_matches_ctranslate2(tiny_ct2: Path, clips, tmp_path: Path) -> None:
    hf = write_hf(tiny_ct2, tmp_path / "hf-tiny", shards=2)
    assert (hf / "model.safetensors.index.json").exists()
    ckpt = load_checkpoint(hf)
    assert ckpt.kind == "huggingface"
    assert ckpt.alignment_heads == load_checkpoint(tiny_ct2).alignment_heads
    model = WhisperModel(built(hf, "hf-tiny", "fp32"), device="cpu")
    _check_against_ct2(model, tiny_ct2, clips, "en")


def test_split_model_bin_reads_the_same_tensors(tiny_ct2: Path, tmp_path: Path) -> None:
    split = write_ct2(tiny_ct2, tmp_path / "split", parts=3)
    assert sorted(p.name for p in split.glob("model.bin*")) == [
        "model.bin.part1",
        "model.bin.part2",
        "model.bin.part3",
    ]
    whole, parts = load_checkpoint(tiny_ct2), load_checkpoint(split)
    assert whole.dims == parts.dims
    for name in canonical_names(whole.dims):
        if name in whole.tensors:
            np.testing.assert_array_equal(whole.get(name), parts.get(name))


def test_truncated_split_model_says_so(tiny_ct2: Path, tmp_path: Path) -> None:
    split = write_ct2(tiny_ct2, tmp_path / "split", parts=2)
    (split / "model.bin.part2").write_bytes((split / "model.bin.part2").read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(split)


def test_int8_ct2_checkpoint_is_read_and_transcribes_as_well_as_ctranslate2(
    tiny_ct2: Path, clips, tmp_path: Path
) -> None:
    q = write_ct2(tiny_ct2, tmp_path / "tiny-int8", quantize=True)
    ckpt = load_checkpoint(q)
    w = ckpt.get("enc.0.attn.q.w")
    assert isinstance(w, QuantizedTensor) and w.values.dtype == np.int8
    # int8 values / scale reproduce the float weights to within one quantization step.
    ref = ct2_variables(tiny_ct2)["encoder/layer_0/self_attention/linear_0/weight"].astype(
        np.float32
    )
    step = np.abs(ref[:384]).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(w.dequantize() - ref[:384]) <= step * 0.51 + 1e-6)
    # Our build re-quantizes them to 7 bits (see graph.INT8_WEIGHT_LEVELS), so its text is
    # not token for token ctranslate2's; it must be as close to what was said.
    ours = WhisperModel(built(q, "tiny-int8ckpt", "int8"), device="cpu")
    ref_model = ctranslate2.models.Whisper(str(q), device="cpu", compute_type="int8")
    ours_wer = ct2_wer = 0.0
    for (spoken, _, _), audio in zip(CLIPS, clips, strict=True):
        mel = log_mel(audio, 80)
        text = (
            WindowDecoder(ours, DecodingOptions(without_timestamps=True))
            .decode(ours.encode(mel[None]), "en")
            .text
        )
        res = ref_model.generate(
            ctranslate2.StorageView.from_array(mel[None]), [[50257, 50362]], beam_size=1
        )[0]
        ours_wer += wer(spoken, text)
        ct2_wer += wer(spoken, ours.tokenizer.decode(res.sequences_ids[0]))
    assert ours_wer <= ct2_wer + 0.1, (ours_wer, ct2_wer)  # within one word in three clips


@pytest.mark.parametrize("variant", ["fp16", "int8"])
def test_reduced_precision_variants_keep_the_words(
    variant: str, tiny_ct2: Path, tiny_model: WhisperModel, clips
) -> None:
    model = WhisperModel(built(tiny_ct2, "tiny.en", variant), device="cpu")
    assert model.variant == variant
    full, reduced = [], []
    for audio, (truth, _, _) in zip(clips, CLIPS, strict=True):
        mel = log_mel(audio, 80)[None]
        opts = DecodingOptions(without_timestamps=True)
        full.append(
            wer(truth, WindowDecoder(tiny_model, opts).decode(tiny_model.encode(mel), "en").text)
        )
        reduced.append(wer(truth, WindowDecoder(model, opts).decode(model.encode(mel), "en").text))
    # Same accuracy within one word in ten of the fp32 build, over the three clips.
    assert np.mean(reduced) <= np.mean(full) + 0.1, (full, reduced)


def test_beam_search_matches_ctranslate2(tiny_model: WhisperModel, tiny_ct2: Path, clips) -> None:
    ct = ctranslate2.models.Whisper(str(tiny_ct2), device="cpu", compute_type="float32")
    for audio in clips:
        mel = log_mel(audio, 80)
        ours = WindowDecoder(tiny_model, DecodingOptions(beam_size=5)).decode(
            tiny_model.encode(mel[None]), "en"
        )
        ref = ct.generate(ctranslate2.StorageView.from_array(mel[None]), [[50257]], beam_size=5)[0]
        assert ours.tokens == ref.sequences_ids[0]


def test_a_reordered_cache_gives_each_row_its_own_history(tiny_model: WhisperModel, clips) -> None:
    """Beam search hands ``step`` the row each new row continues; the cache is then reordered
    in place, row by row. After chains, swaps, a three-cycle, two cycles at once, one row
    copied everywhere and the identity, every row's logits are those of its whole history fed
    at once to a fresh state (no cache to reorder)."""
    tk = tiny_model.tokenizer
    audio = tiny_model.encode(log_mel(clips[1], 80)[None])
    prompt = [*tk.sot_sequence("en"), tk.no_timestamps]
    state = tiny_model.start(audio, 5)
    state.step(np.array([prompt] * 5, dtype=np.int64))
    history = [list(prompt) for _ in range(5)]
    orders = [
        [0, 1, 2, 3, 4],  # the rows part ways (each its own token)
        [0, 0, 1, 2, 3],  # a chain: row 4 must read row 3 before row 3 is overwritten
        [1, 0, 2, 3, 4],  # a swap
        [1, 2, 0, 3, 4],  # a three-cycle
        [1, 0, 3, 2, 4],  # two swaps
        [4, 3, 2, 1, 0],
        [0, 1, 2, 3, 4],
        [3, 3, 4, 0, 0],
        [2, 2, 2, 2, 2],
    ]
    rng = np.random.default_rng(7)
    for index in orders:
        new = rng.integers(300, 3000, size=5)
        history = [[*history[src], int(tok)] for src, tok in zip(index, new, strict=True)]
        logits, _ = state.step(new[:, None], np.array(index))
        fresh, _ = tiny_model.start(audio, 5).step(np.array(history, dtype=np.int64))
        np.testing.assert_allclose(logits, fresh, atol=2e-3, err_msg=str(index))
    assert len({tuple(h) for h in history}) > 1  # the rows still differ


def test_beam_candidates_are_the_best_tokens_with_their_log_probabilities(
    tiny_model: WhisperModel, clips
) -> None:
    """``top_candidates`` (ONNX Runtime's LogSoftmax and TopK) against float64 numpy on the
    real first-step logits of five rows, filtered by the timestamp rules as beam search
    filters them: the text tokens of some rows all -inf, a row whose timestamps are all -inf
    too, and a candidate count past the finite tokens of a row."""
    from deskscribe.whisper.decoding import ApplyTimestampRules, top_candidates

    tk = tiny_model.tokenizer
    audio = tiny_model.encode(log_mel(clips[0], 80)[None])
    prompt = [tk.sot]
    logits, _ = tiny_model.start(audio, 1).step(np.array([prompt], dtype=np.int64))
    rows = np.repeat(np.asarray(logits, dtype=np.float32), 5, axis=0)
    begin = tk.timestamp_begin
    # rows 0-1: the first step (a timestamp first); row 2: after a text token; rows 3-4:
    # after a timestamp, after a pair (no timestamps: text only)
    rule = ApplyTimestampRules(tk, len(prompt), 50)
    tails = [[], [], [400], [begin + 30], [begin + 30, begin + 30]]
    for r, tail in enumerate(tails):
        rule.apply(rows[r : r + 1], np.array([[*prompt, *tail]]))
    rows[1, :] = -np.inf
    rows[1, [11, 13, 400]] = [2.0, 1.0, 3.0]  # three finite tokens, six asked for
    ref = rows.astype(np.float64)
    peak = np.max(ref, axis=1, keepdims=True)
    ref = ref - peak - np.log(np.exp(ref - peak).sum(axis=1, keepdims=True))
    top, lps = top_candidates(rows, 6)
    assert top.shape == lps.shape == (5, 6)
    for r in range(5):
        finite = np.isfinite(ref[r])
        want = np.argsort(-ref[r], kind="stable")[: min(6, finite.sum())]
        got = top[r][np.isfinite(lps[r])]
        assert got.tolist() == want.tolist(), r
        np.testing.assert_allclose(lps[r][: len(want)], ref[r][want], atol=2e-5)
        assert np.all(np.isneginf(lps[r][len(want) :]))
    assert not np.isfinite(rows[4, begin:]).any()  # the row the rules left no stamps


def test_vocabulary_that_disagrees_with_the_tokenizer_is_refused(
    tiny_ct2: Path, base_ct2: Path, tmp_path: Path
) -> None:
    from deskscribe.models.build import build_model
    from deskscribe.whisper.weights import CheckpointError

    mixed = write_ct2(tiny_ct2, tmp_path / "mixed")
    (mixed / "vocabulary.txt").unlink()
    (mixed / "vocabulary.json").write_bytes((base_ct2 / "vocabulary.json").read_bytes())
    with pytest.raises(CheckpointError, match="disagree"):
        build_model(mixed, tmp_path / "out", "fp32")
    assert not (tmp_path / "out").exists()
