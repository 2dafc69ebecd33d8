"""The command line, end to end, as a user runs it (a real subprocess, real files)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import EVAL, espeak, run_cli, wer


def run(args: list[str], store: Path, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(args, store, cwd)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, tiny_ct2: Path) -> Path:
    folder = tmp_path_factory.mktemp("store")
    res = run(
        ["models", "build", str(tiny_ct2), "--name", "tiny.en", "--variant", "fp32"], folder, folder
    )
    assert res.returncode == 0, res.stderr
    return folder


def test_models_list_and_path(store: Path) -> None:
    res = run(["models", "list"], store, store)
    assert (
        res.returncode == 0
        and "tiny.en" in res.stdout
        and "fp32" in res.stdout
        and "English-only" in res.stdout
    )
    res = run(["models", "path", "tiny.en"], store, store)
    assert Path(res.stdout.strip()) == store / "tiny.en"
    assert (store / "tiny.en" / "manifest.json").exists()
    manifest = json.loads((store / "tiny.en" / "manifest.json").read_text())
    assert manifest["variant"] == "fp32" and len(manifest["inputs_sha256"]["model.bin"]) == 64
    assert not [p for p in store.iterdir() if p.name.startswith(".")]  # no half-built leftovers


def test_build_refuses_to_overwrite_and_rejects_non_checkpoints(
    store: Path, tiny_ct2: Path, tmp_path: Path
) -> None:
    res = run(["models", "build", str(tiny_ct2), "--name", "tiny.en"], store, store)
    assert res.returncode == 2 and "--overwrite" in res.stderr
    res = run(["models", "build", str(tmp_path), "--name", "nothing"], store, store)
    assert res.returncode == 2 and "neither model.safetensors" in res.stderr
    assert not (store / "nothing").exists()


def test_transcribe_many_files_one_bad(store: Path, tmp_path: Path) -> None:
    # espeak-ng's British voice: tiny.en hears it best (its en-us voice costs a word or two here).
    good1 = espeak("Please call me back tomorrow afternoon.", tmp_path / "first.wav", voice="en")
    good2 = espeak(
        "Remember to water the plants on Sunday.", tmp_path / "second.wav", voice="en-gb"
    )
    bad = tmp_path / "notes.mp3"
    bad.write_text("this is not audio")
    out = tmp_path / "out"
    args = [
        "transcribe",
        str(good1),
        str(bad),
        str(good2),
        "--format",
        "txt,srt,vtt,json,md,csv,docx",
        "--output-dir",
        str(out),
        "--word-timestamps",
    ]
    res = run(args, store, tmp_path)
    assert res.returncode == 1
    assert "notes.mp3" in res.stderr and "not an audio or video file" in res.stderr
    for stem, text in (
        ("first", "Please call me back tomorrow afternoon."),
        ("second", "Remember to water the plants on Sunday."),
    ):
        for fmt in ("txt", "srt", "vtt", "json", "md", "csv", "docx"):
            assert (out / f"{stem}.{fmt}").stat().st_size > 0
        assert wer(text, (out / f"{stem}.txt").read_text()) <= 0.2
        data = json.loads((out / f"{stem}.json").read_text())
        assert data["language"] == "en" and data["segments"][0]["words"]
    assert not (out / "notes.txt").exists()

    # Running again never overwrites silently; --overwrite does.
    before = (out / "first.txt").read_text()
    res = run(["transcribe", str(good1), "--output-dir", str(out)], store, tmp_path)
    assert res.returncode == 1 and "already exists" in res.stderr
    assert (out / "first.txt").read_text() == before
    res = run(
        [
            "transcribe",
            str(good1),
            "--output-dir",
            str(out),
            "--overwrite",
            "--timestamps",
            "--beam-size",
            "1",
        ],
        store,
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert (out / "first.txt").read_text().startswith("[00:00:0")


def test_no_model_installed_says_how_to_get_one(tmp_path: Path) -> None:
    wav = espeak("Hello.", tmp_path / "hello.wav")
    res = run(["transcribe", str(wav)], tmp_path / "empty-store", tmp_path)
    assert res.returncode == 2 and "deskscribe models download" in res.stderr
    assert "install-starter" in res.stderr


def test_import_copies_a_built_model(store: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-store"
    res = run(["models", "import", str(store / "tiny.en"), "--name", "copied"], other, tmp_path)
    assert res.returncode == 0, res.stderr
    assert (other / "copied" / "encoder.onnx").exists()


def test_unknown_format_is_a_usage_error(store: Path, tmp_path: Path) -> None:
    wav = espeak("Hello.", tmp_path / "hello.wav")
    res = run(["transcribe", str(wav), "--format", "pdf"], store, tmp_path)
    assert res.returncode == 2 and "docx" in res.stderr


def test_install_starter_works_offline(tmp_path: Path) -> None:
    store = tmp_path / "starter-store"
    res = run(
        ["models", "install-starter", "--which", "tiny.en", "--variant", "int8"], store, tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert (store / "tiny.en-int8" / "manifest.json").exists()
    assert [p.name for p in store.iterdir()] == ["tiny.en-int8"]  # no temporary folders left
    wav = espeak("Remember to water the plants on Sunday.", tmp_path / "plants.wav", voice="en")
    res = run(["transcribe", str(wav), "--quiet"], store, tmp_path)
    assert res.returncode == 0, res.stderr
    assert (
        wer("Remember to water the plants on Sunday.", (tmp_path / "plants.txt").read_text()) <= 0.2
    )


def test_language_an_english_only_model_cannot_do_is_refused(store: Path, tmp_path: Path) -> None:
    wav = espeak("Hello there.", tmp_path / "hello.wav", voice="en")
    res = run(["transcribe", str(wav), "--language", "de"], store, tmp_path)
    assert res.returncode == 1 and "English-only" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "hello.txt").exists()


def test_two_inputs_with_one_name_never_overwrite_each_other(store: Path, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = espeak(
        "Remember to water the plants on Sunday.", tmp_path / "a" / "talk.wav", voice="en"
    )
    second = espeak(
        "Please call me back tomorrow afternoon.", tmp_path / "b" / "talk.wav", voice="en"
    )
    out = tmp_path / "out"
    args = ["transcribe", str(first), str(second), "--output-dir", str(out), "--overwrite"]
    res = run(args, store, tmp_path)
    assert res.returncode == 1 and "would replace the transcript" in res.stderr
    assert wer("Remember to water the plants on Sunday.", (out / "talk.txt").read_text()) <= 0.2


def test_overwrite_never_deletes_a_folder_that_is_not_a_model(
    store: Path, tiny_ct2: Path, tmp_path: Path
) -> None:
    precious = tmp_path / "my-documents"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    res = run(
        ["models", "build", str(tiny_ct2), "--output", str(precious), "--overwrite"],
        store,
        tmp_path,
    )
    assert res.returncode == 2 and "not a built model" in res.stderr
    assert (precious / "thesis.txt").read_text() == "years of work"
    res = run(["models", "build", str(tiny_ct2), "--name", "../escape"], store, tmp_path)
    assert res.returncode == 2 and "not a usable model name" in res.stderr


def test_transcribe_with_library_keeps_the_transcripts_in_the_apps_library(
    store: Path, tmp_path: Path
) -> None:
    """Files transcribed in the terminal reach the library the window shows (`--library`,
    or the `transcribe_library` setting)."""
    from deskscribe.library import Library

    clip = espeak("Remember to water the plants on Sunday.", tmp_path / "plants.wav", voice="en-gb")
    env = {"DESKSCRIBE_DATA_DIR": str(tmp_path / "data"),
           "DESKSCRIBE_SETTINGS": str(tmp_path / "settings.json")}  # fmt: skip
    res = run_cli(["transcribe", str(clip), "--output-dir", str(tmp_path / "a")], store, tmp_path,
                  **env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "data" / "library.sqlite3").exists()  # not asked: not kept
    res = run_cli(["transcribe", str(clip), "--output-dir", str(tmp_path / "b"), "--library"],
                  store, tmp_path, **env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    library = Library(tmp_path / "data" / "library.sqlite3")
    [item] = library.search(kind="file")
    assert item.status == "done" and item.source == str(clip.resolve())
    assert wer("Remember to water the plants on Sunday.",
               library.load_transcript(item.id).text) <= 0.2  # fmt: skip
    assert library.search("plants")  # found by a word said, as in the window
    run_cli(["config", "transcribe_library", "true"], store, tmp_path, **env)
    res = run_cli(["transcribe", str(clip), "--output-dir", str(tmp_path / "c")], store, tmp_path,
                  **env)  # fmt: skip
    assert res.returncode == 0 and len(library.search(kind="file")) == 2


def _cues(srt: str) -> list[tuple[str, list[str]]]:
    """(the time line, the text lines) of each cue of an SRT file."""
    blocks = [b.split("\n") for b in srt.strip("\n").split("\n\n")]
    assert [int(b[0]) for b in blocks] == list(range(1, len(blocks) + 1))
    return [(b[1], b[2:]) for b in blocks]


def test_subtitle_rules_from_the_command_line_on_real_speech(store: Path, tmp_path: Path) -> None:
    """--max-line-chars 20 --max-lines 1 on JFK's speech: one line of at most 20 characters a
    cue, every word of the transcript in the cues, in order; the cues cut by word times, which
    srt asked for by itself (no --word-timestamps)."""
    out = tmp_path / "out"
    args = ["transcribe", str(EVAL / "jfk.flac"), "--format", "srt,vtt,txt,json", "--output-dir",
            str(out), "--max-line-chars", "20", "--max-lines", "1"]  # fmt: skip
    res = run(args, store, tmp_path)
    assert res.returncode == 0, res.stderr
    cues = _cues((out / "jfk.srt").read_text(encoding="utf-8"))
    lines = [line for _times, text in cues for line in text]
    assert all(len(text) == 1 for _times, text in cues)
    assert max(map(len, lines)) <= 20
    transcript = (out / "jfk.txt").read_text(encoding="utf-8")
    assert " ".join(lines).split() == transcript.split()  # no word lost, none added
    assert wer((EVAL / "jfk.txt").read_text(), transcript) < 0.2
    vtt = (out / "jfk.vtt").read_text(encoding="utf-8")
    assert vtt.count(" --> ") == len(cues)
    # Word timestamps were computed (srt asked for them), and each cue starts on a word.
    data = json.loads((out / "jfk.json").read_text())
    words = [w for s in data["segments"] for w in s["words"]]
    assert "".join(w["text"] for w in words).split() == transcript.split()
    assert len(cues) > len(data["segments"])  # segments were cut into cues
    starts = {round(w["start"] * 1000) for w in words}
    for times, _text in cues:
        h, m, rest = times.split(" --> ")[0].split(":")
        s, ms = rest.split(",")
        assert ((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(ms) in starts, times
    # The defaults (42 characters, two lines) give fewer, longer cues.
    res = run([*args[:6], "--overwrite"], store, tmp_path)
    assert res.returncode == 0, res.stderr
    default = _cues((out / "jfk.srt").read_text(encoding="utf-8"))
    assert len(default) < len(cues) and max(len(line) for _t, text in default for line in text) > 20
    assert all(len(text) <= 2 and max(map(len, text)) <= 42 for _t, text in default)


def test_word_timestamps_only_when_subtitles_or_asked(store: Path, tmp_path: Path) -> None:
    clip = espeak("Please call me back tomorrow afternoon.", tmp_path / "clip.wav", voice="en")
    for formats, flags, timed in (("json", [], False), ("json,vtt", [], True),
                                  ("json", ["--word-timestamps"], True)):  # fmt: skip
        out = tmp_path / formats.replace(",", "-") / "-".join(flags)
        res = run(["transcribe", str(clip), "--format", formats, "--output-dir", str(out),
                   *flags], store, tmp_path)  # fmt: skip
        assert res.returncode == 0, res.stderr
        segments = json.loads((out / "clip.json").read_text())["segments"]
        assert bool(segments) and all(bool(s["words"]) == timed for s in segments), formats


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--max-lines", "0", "argument --max-lines: must be a whole number from 1 to 10, not 0"),
        ("--max-line-chars", "wide", "argument --max-line-chars: must be a whole number"),
        ("--max-cue-seconds", "0", "must be a number of seconds from 0.5 to 600"),
        ("--min-cue-gap", "-1", "argument --min-cue-gap: must be a number of seconds from 0"),
    ],
)
def test_bad_subtitle_rules_are_usage_errors(store: Path, tmp_path: Path, flag, value, says):
    res = run(["transcribe", str(tmp_path / "any.wav"), "--format", "srt", flag, value], store,
              tmp_path)  # fmt: skip
    assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr
