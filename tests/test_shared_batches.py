"""Batches shared between transcriptions (whisper/shared_batches.py): the chunks of several
real recordings transcribed at the same time are decoded in one batch, and each caller gets
exactly its own text."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from conftest import EVAL
from deskscribe.whisper.shared_batches import SharedBatches
from deskscribe.whisper.transcribe import TranscribeOptions, TranscriptionCancelled, transcribe_file

# Greedy: the rows of a beam-search batch are as independent, but greedy keeps the test short.
OPTIONS = TranscribeOptions(language="en", batched=True, beam_size=None)
# Real recordings of different lengths and voices (one, two and four speakers).
FILES = [EVAL / "jfk.flac", EVAL / "two-speakers.wav", EVAL / "ami" / "dev00.wav"]


def _texts(transcript) -> str:
    return " ".join(s.text.strip() for s in transcript.segments)


@pytest.fixture(scope="module")
def alone(tiny_model):
    """Each file transcribed on its own, batches not shared."""
    return [_texts(transcribe_file(tiny_model, f, OPTIONS)) for f in FILES]


def _together(model, shared: SharedBatches, files, cancel=None):
    start = threading.Barrier(len(files))

    def one(i: int):
        with shared.member() as member:
            start.wait()  # every member is in before anyone decodes: they may merge
            try:
                return _texts(transcribe_file(model, files[i], OPTIONS, shared=member,
                                              cancel=(cancel or {}).get(i)))  # fmt: skip
            except TranscriptionCancelled:
                return None

    with concurrent.futures.ThreadPoolExecutor(len(files)) as pool:
        return list(pool.map(one, range(len(files))))


def test_concurrent_transcriptions_share_batches_and_each_gets_its_own_text(
    tiny_model, alone
) -> None:
    # A generous wait, so that the three reach their first decode within it on a slow CI
    # machine too: this test is about what merging does, not about its timing policy.
    shared = SharedBatches(max_rows=16, linger_s=2.0, on_cpu=True)
    texts = _together(tiny_model, shared, FILES)
    assert shared.merged_calls >= 1, "no decode call was merged with another's"
    for f, got, want in zip(FILES, texts, alone, strict=True):
        assert got == want, (f.name, got, want)


def test_a_cancelled_member_stops_only_its_own_work(tiny_model, alone) -> None:
    shared = SharedBatches(max_rows=16, linger_s=2.0, on_cpu=True)
    stop = threading.Event()

    def cancel_once_decoding() -> None:  # the call is cancelled inside a (shared) batch
        while not shared.batches and not stop.wait(0.005):
            pass
        stop.set()

    watcher = threading.Thread(target=cancel_once_decoding)
    watcher.start()
    texts = _together(tiny_model, shared, FILES, cancel={1: stop})
    stop.set()
    watcher.join()
    assert texts[1] is None
    assert texts[0] == alone[0] and texts[2] == alone[2]


def test_not_merged_on_the_cpu_unless_asked(tiny_model, alone) -> None:
    shared = SharedBatches(max_rows=16, linger_s=2.0)
    texts = _together(tiny_model, shared, FILES)
    assert shared.merged_calls == 0 and shared.batches == 0
    assert texts == alone


def test_a_batch_is_never_larger_than_asked(tiny_model, alone) -> None:
    shared = SharedBatches(max_rows=1, linger_s=2.0, on_cpu=True)
    texts = _together(tiny_model, shared, FILES)
    assert shared.merged_calls == 0
    assert texts == alone
