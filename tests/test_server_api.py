"""The team server's OpenAI-compatible REST API, through the official ``openai`` SDK against a
real ``deskscribe serve`` process with the real test models (tiny.en, base, the speaker
model) and real media: every response format, timestamps, streaming, translation, diarized
output, the errors as the SDK's typed exceptions, limits, keys and concurrency."""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import openai
import pytest

from conftest import EVAL, espeak, normalize, wer
from server_support import make_store, serve

JFK = EVAL / "jfk.flac"
JFK_TEXT = (
    "and so my fellow americans ask not what your country can do for you "
    "ask what you can do for your country"
)
DE = (
    "Guten Morgen zusammen. Heute sprechen wir über das Wetter im Norden des Landes. Es "
    "regnet seit drei Tagen, und die Flüsse sind sehr hoch. Die Bauern machen sich Sorgen um "
    "ihre Felder, und viele Straßen sind gesperrt."
)


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_fp32, base_fp32, speaker_model):
    root = tmp_path_factory.mktemp("server")
    store = make_store(root, {"tiny.en-fp32": tiny_fp32, "base-fp32": base_fp32,
                              "speaker-resemblyzer": speaker_model})  # fmt: skip
    # Batches shared between requests on the CPU too: every answer below must still be its
    # own request's (tests/test_shared_batches.py forces the merges themselves).
    server = serve(store, root / "data", "--model", "tiny.en-fp32", "--workers", "2",
                   "--shared-batch-cpu")  # fmt: skip
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=300)


def test_json_and_text_are_the_words_said(client) -> None:
    with open(JFK, "rb") as fh:
        result = client.audio.transcriptions.create(file=fh, model="whisper-1")
    assert wer(JFK_TEXT, result.text) <= 0.1, result.text
    assert result.usage is not None and result.usage.seconds == 11
    text = client.audio.transcriptions.create(
        file=JFK.open("rb"), model="tiny.en-fp32", response_format="text"
    )
    assert isinstance(text, str) and normalize(text) == normalize(result.text)


def test_verbose_json_has_openais_segment_fields_and_word_timestamps(client) -> None:
    v = client.audio.transcriptions.create(
        file=JFK.open("rb"), model="whisper-1", response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )  # fmt: skip
    assert v.language == "english" and abs(v.duration - 11.0) < 0.1
    assert v.segments and v.words
    for i, s in enumerate(v.segments):
        assert s.id == i and s.start < s.end and s.tokens and s.avg_logprob < 0
        assert 0 <= s.no_speech_prob <= 1 and s.compression_ratio > 0 and s.temperature == 0
        assert s.seek == round(s.start * 100)
    words = [w.word.lower().strip(",.") for w in v.words]
    assert words[:4] == ["and", "so", "my", "fellow"], words
    # Word times are where the words are: in order, inside the audio, "country" at the end.
    assert all(a.start <= b.start for a, b in zip(v.words, v.words[1:], strict=False))
    assert v.words[-1].end <= 11.0 and v.words[-1].word.strip(".").lower() == "country"
    assert 9.0 < v.words[-1].start < 11.0, v.words[-1]
    # Words only: no segments; the default (no granularity): segments, no words.
    only_words = client.audio.transcriptions.create(
        file=JFK.open("rb"), model="whisper-1", response_format="verbose_json",
        timestamp_granularities=["word"],
    )  # fmt: skip
    assert only_words.words and not only_words.segments
    default = client.audio.transcriptions.create(
        file=JFK.open("rb"), model="whisper-1", response_format="verbose_json"
    )
    assert default.segments and not default.words


def test_subtitles(client) -> None:
    srt = client.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1",
                                             response_format="srt")  # fmt: skip
    assert re.match(r"1\n00:00:0\d,\d{3} --> 00:00:0\d,\d{3}\n\S", srt), srt
    vtt = client.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1",
                                             response_format="vtt")  # fmt: skip
    assert vtt.startswith("WEBVTT") and "-->" in vtt
    said = " ".join(line for line in srt.splitlines() if re.search(r"[a-z]", line))
    assert wer(JFK_TEXT, said) <= 0.1, srt


def test_streaming_gives_deltas_then_the_whole_text(client) -> None:
    stream = client.audio.transcriptions.create(
        file=JFK.open("rb"), model="whisper-1", stream=True, include=["logprobs"]
    )
    events = list(stream)
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    done = [e for e in events if e.type == "transcript.text.done"]
    assert len(deltas) >= 2 and len(done) == 1 and events[-1].type == "transcript.text.done"
    assert "".join(d.delta for d in deltas) == done[0].text
    assert wer(JFK_TEXT, done[0].text) <= 0.1
    assert all(d.logprobs and d.logprobs[0].logprob <= 0 for d in deltas)


def test_logprobs_on_json(client) -> None:
    result = client.audio.transcriptions.create(
        file=JFK.open("rb"), model="whisper-1", include=["logprobs"]
    )
    assert result.logprobs and all(p.logprob <= 0 for p in result.logprobs)
    assert "".join(p.token for p in result.logprobs).strip() == result.text.strip()


def test_diarized_json_labels_the_two_voices_of_a_real_call(client) -> None:
    d = client.audio.transcriptions.create(
        file=(EVAL / "two-speakers.wav").open("rb"), model="whisper-1",
        response_format="diarized_json",
    )  # fmt: skip
    assert d.segments and {s.speaker for s in d.segments} == {"A", "B"}, d.segments
    assert all(s.type == "transcript.text.segment" and s.start < s.end for s in d.segments)
    assert d.segments[0].id == "seg_0" and d.duration > 25


def test_translation_on_base_and_a_clear_refusal_on_english_only(client, speech_dir) -> None:
    german = espeak(DE, speech_dir / "server-de.wav", voice="de", speed=140)
    english = client.audio.translations.create(file=german.open("rb"), model="base-fp32")
    # base translates espeak-ng German loosely ("Good morning to you. Today I speak about the
    # weather in Northern Ireland. ..."), but in English.
    said = set(normalize(english.text).split())
    assert len(said & {"good", "morning", "today", "weather", "days", "north"}) >= 3, english.text
    assert not said & {"morgen", "heute", "wetter", "regnet", "tagen"}, english.text
    with pytest.raises(openai.BadRequestError, match=r"English-only|translate"):
        client.audio.translations.create(file=JFK.open("rb"), model="tiny.en-fp32")


def test_languages_limits_detection_to_the_ones_given(client, speech_dir) -> None:
    """Our extension ``languages`` (the app's Languages setting, sent by its file queue):
    German speech is German among de/en, and, with German left out, one of those given."""
    german = espeak(DE, speech_dir / "server-de.wav", voice="de", speed=140)

    def heard(languages: str) -> str:
        return client.audio.transcriptions.create(
            file=german.open("rb"), model="base-fp32", response_format="verbose_json",
            extra_body={"languages": languages},
        ).language  # fmt: skip

    assert heard("de,en") == "german"
    assert heard("en,fr") in ("english", "french")
    with pytest.raises(openai.BadRequestError, match="languages"):
        client.audio.transcriptions.create(file=german.open("rb"), model="base-fp32",
                                           language="de", extra_body={"languages": "de,en"})  # fmt: skip


def test_errors_are_the_sdks_typed_exceptions_with_our_message(client, served, tmp_path) -> None:
    with pytest.raises(openai.NotFoundError, match=r"not installed.*tiny\.en-fp32") as e:
        client.audio.transcriptions.create(file=JFK.open("rb"), model="large-v9")
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError, match=r"could not be read.*notes\.wav"):
        client.audio.transcriptions.create(file=("notes.wav", b"this is not audio"),
                                           model="whisper-1")  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="response_format 'xml'"):
        client.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1",
                                           response_format="xml")  # fmt: skip
    with pytest.raises(openai.BadRequestError, match=r"timestamp_granularities.*verbose_json"):
        client.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1",
                                           timestamp_granularities=["word"])  # fmt: skip
    # Not through the SDK (it would not send these): the envelope on a missing file and on
    # an unknown route.
    r = httpx.post(served.base_url + "/audio/transcriptions", data={"model": "whisper-1"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "file", r.text
    r = httpx.get(served.base_url + "/audio/nothing")
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_eight_concurrent_requests_are_all_right(client, speech_dir) -> None:
    sentences = [
        "The meeting starts at nine tomorrow.", "Please send the report before Friday.",
        "Our budget for the quarter is fixed.", "The new office has a large kitchen.",
        "Maria will lead the design review.", "We ship the installer next week.",
        "The printer on the second floor is broken.", "Lunch is served in the garden today.",
    ]  # fmt: skip
    files = [espeak(s, speech_dir / f"server-c{i}.wav") for i, s in enumerate(sentences)]

    def one(path: Path) -> str:
        return client.audio.transcriptions.create(file=path.open("rb"), model="whisper-1").text

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(one, files))
    # Each answer is its own file's text (closest to its sentence of the eight, none
    # swapped or mixed), as tiny.en hears espeak-ng (one of these came back "We ship, and
    # install our next week").
    for i, heard in enumerate(texts):
        errors = [wer(s, heard) for s in sentences]
        assert min(errors) == errors[i] and errors[i] <= 0.5, (sentences[i], heard)


def test_models_health_and_metrics(client, served) -> None:
    ids = sorted(m.id for m in client.models.list())
    assert ids == ["base-fp32", "tiny.en-fp32"]
    health = httpx.get(served.url + "/health").json()
    assert health["status"] == "ok"
    metrics = httpx.get(served.url + "/metrics").text
    assert re.search(r'deskscribe_requests_total\{method="POST",route="/v1/audio/'
                     r'transcriptions",status="200"\} [1-9]', metrics), metrics[:2000]  # fmt: skip
    assert (
        'deskscribe_request_seconds_bucket{le="0.05",route="/v1/audio/transcriptions"}' in metrics
    )
    seconds = float(re.search(r'deskscribe_audio_seconds_total\{kind="file"\} (\S+)', metrics)[1])
    assert seconds >= 11.0
    assert re.search(r"deskscribe_real_time_factor_count [1-9]", metrics)
    assert re.search(r"deskscribe_model_loads [1-9]", metrics)
    assert re.search(r"deskscribe_memory_rss_bytes [1-9]", metrics)
    assert "deskscribe_queue_depth 0.0" in metrics
    assert re.search(r"deskscribe_shared_batches [1-9]", metrics), "no batch went through sharing"


def test_keys_limits_and_a_full_queue(tmp_path, tiny_fp32) -> None:
    keys = tmp_path / "keys.txt"
    made = subprocess.run([sys.executable, "-m", "deskscribe", "serve", "--new-key", str(keys)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    key = made.stdout.strip()
    assert key.startswith("ds-") and key not in keys.read_text()  # only its hash is stored
    assert keys.stat().st_mode & 0o077 == 0
    store = make_store(tmp_path, {"tiny.en-fp32": tiny_fp32})
    server = serve(store, tmp_path / "data", "--api-key-file", str(keys), "--workers", "1",
                   "--max-queue", "0", "--max-upload-mb", "2")  # fmt: skip
    try:
        good = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=120)
        bad = openai.OpenAI(base_url=server.base_url, api_key="ds-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="incorrect API key"):
            bad.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1")
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        assert [m.id for m in good.models.list()] == ["tiny.en-fp32"]
        big = tmp_path / "big.wav"
        big.write_bytes(b"RIFF" + bytes(3 * 1024 * 1024))
        with pytest.raises(openai.APIStatusError, match="at most 2 MB") as e:
            good.audio.transcriptions.create(file=big.open("rb"), model="whisper-1")
        assert e.value.status_code == 413

        # One worker and no queue: of three at once, the ones that find it busy get 429 with
        # Retry-After; at least one is served.
        def one(_):
            try:
                return good.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1")
            except openai.RateLimitError as err:
                return err

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            results = list(pool.map(one, range(3)))
        refused = [r for r in results if isinstance(r, openai.RateLimitError)]
        served_ok = [r for r in results if not isinstance(r, Exception)]
        assert refused and served_ok, results
        assert int(refused[0].response.headers["retry-after"]) >= 1
        assert "busy" in refused[0].message
    finally:
        server.stop()
    # A key file with a key in the clear is refused, and so is a public address without keys.
    plain = tmp_path / "plain.txt"
    plain.write_text(key + "\n")
    for args, message in (
        (["--api-key-file", str(plain)], "not a key hash"),
        (["--host", "0.0.0.0"], "without an API key"),
    ):
        run = subprocess.run([sys.executable, "-m", "deskscribe", "serve", *args],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert run.returncode == 2 and message in run.stderr, run.stderr


def test_a_model_loads_on_first_use_and_is_released_when_idle(tmp_path, tiny_fp32) -> None:
    store = make_store(tmp_path, {"tiny.en-fp32": tiny_fp32})
    server = serve(store, tmp_path / "data", "--idle-ttl", "2")
    try:
        assert httpx.get(server.url + "/health").json()["models_loaded"] == []  # not preloaded
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0)
        client.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1")
        assert httpx.get(server.url + "/health").json()["models_loaded"] == ["tiny.en-fp32"]
        deadline = time.monotonic() + 20
        while httpx.get(server.url + "/health").json()["models_loaded"]:
            assert time.monotonic() < deadline, "the idle model was not released"
            time.sleep(0.5)
        # Released, not broken: the next request loads it again.
        text = client.audio.transcriptions.create(file=JFK.open("rb"), model="whisper-1").text
        assert wer(JFK_TEXT, text) <= 0.1
        metrics = httpx.get(server.url + "/metrics").text
        assert "deskscribe_model_loads 2.0" in metrics, metrics
    finally:
        server.stop()


ARENAS = """
import ctypes, sys, threading
if sys.argv[1] == "limit":
    from deskscribe.cli_server import _fewer_malloc_arenas
    _fewer_malloc_arenas()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
start, held = threading.Barrier(8), []
def work():
    start.wait()  # all at once: each thread that finds the arenas busy makes a new one
    held.extend(libc.malloc(4096) for _ in range(200))
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.malloc_stats()  # "Arena N:" per arena, on stderr
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
def test_the_server_process_keeps_to_two_malloc_arenas() -> None:
    """``serve`` limits glibc's arenas before its threads start (the memory it saves is in
    bench/soak.py's figures); eight threads allocating at once then share two. The control,
    without the limit, makes more, so this fails if the call does nothing."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    counts = {}
    for mode in ("limit", "control"):
        out = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True,
                             text=True, timeout=60, env=env)  # fmt: skip
        assert out.returncode == 0, out.stderr
        counts[mode] = sum(line.startswith("Arena ") for line in out.stderr.splitlines())
    assert counts["limit"] == 2 and counts["control"] > 2, counts


def test_the_work_pool_takes_workers_plus_max_queue_and_refuses_the_next() -> None:
    """Exactly ``workers`` run and ``max_queue`` wait; the next is refused (429) with a
    Retry-After; once they end there is room again. (The end-to-end test above only
    sees that one of three is refused, which an off-by-one limit also gives.)"""
    import threading

    from deskscribe.server.state import QueueFull, WorkPool

    pool = WorkPool(workers=2, max_queue=3)
    release = threading.Event()
    started = threading.Semaphore(0)

    def held() -> str:
        started.release()
        release.wait(60)
        return "done"

    try:
        running = [pool.submit(held) for _ in range(2)]
        for _ in range(2):
            assert started.acquire(timeout=30)
        waiting = [pool.submit(held) for _ in range(3)]
        assert (pool.running, pool.waiting) == (2, 3)
        with pytest.raises(QueueFull) as refused:
            pool.submit(held)
        assert refused.value.retry_after >= 1
        assert (pool.running, pool.waiting) == (2, 3)  # the refused one left no trace
        release.set()
        assert [f.result(timeout=30) for f in running + waiting] == ["done"] * 5
        assert (pool.running, pool.waiting) == (0, 0)
        assert [pool.submit(held).result(timeout=30) for _ in range(2)] == ["done"] * 2
    finally:
        release.set()
        pool.shutdown()
