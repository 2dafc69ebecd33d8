"""Ask: questions answered by a real language model (SmolLM2-135M-Instruct on the built-in
llama.cpp server, through the openai SDK) about the real phone call and across a real
library. A 135M model answers poorly; what is checked is the path and the guarantees:
citations name lines that exist, with their own start times, invented ones are dropped,
retrieval picks the recording that answers, cancel is quick, the CLI's messages."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest

from conftest import run_cli
from deskscribe.cli_ask import render
from deskscribe.library.db import Library
from deskscribe.llm.ask import (
    MAX_QUESTION,
    Citation,
    NothingToAsk,
    ask_transcripts,
    check_answer,
    keywords,
    retrieve,
)
from deskscribe.llm.endpoint import LLMCancelled, LLMError
from deskscribe.service.ask import ask_library, ask_sources, library_sources
from deskscribe.service.language_model import LLMOptions
from deskscribe.transcript import Transcript

pytest.register_assert_rewrite("files_support")  # shared with the app tests, which rewrite it
from files_support import made  # noqa: E402

BUDGET = [
    "Welcome everyone, let's go over the quarterly budget.",
    "Marketing spent forty thousand dollars last quarter.",
    "We agreed to cut the travel budget by ten percent.",
    "Finance will send the revised spreadsheet on Friday.",
    "Salaries stay as they are until the next review.",
]
HIKING = [
    "We started the hike at the trailhead at six in the morning.",
    "The trail climbed through the forest to a ridge.",
    "We camped by the glacier lake that night.",
    "At the lake we saw mountain goats and a black bear.",
    "The next day we walked down in the rain.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def library(tmp_path_factory, call_transcript):
    """A real library of three transcripts: a budget meeting, a hiking trip, the real call."""
    data = tmp_path_factory.mktemp("ask-data")
    lib = Library(data / "library.sqlite3")
    ids = {}
    for title, t in (("Budget meeting", made(BUDGET)), ("Hiking trip", made(HIKING)),
                     ("Phone call", call_transcript)):  # fmt: skip
        ids[title] = lib.add_file(data / f"{title}.wav", {})
        lib.save_transcript(ids[title], t)
        lib.update(ids[title], status="done")
    lib.add_file(data / "Lake walk.wav", {})  # matches by title, has no transcript yet
    yield lib, ids, data
    lib.close()


def test_an_answer_about_the_call_cites_lines_that_exist_at_their_times(llm, call_transcript):
    pieces: list[str] = []
    done: list[tuple[int, int]] = []
    answer = ask_transcripts([(None, "call.json", call_transcript)],
                             "Where is Sheila originally from?", llm, context=4096,
                             on_text=pieces.append,
                             progress=lambda d, t: done.append((d, t)))  # fmt: skip
    print(answer.to_dict())
    assert json.loads("".join(pieces))["answer"].split() == answer.text.split()  # what streamed
    assert answer.text and answer.model == llm.model and done[-1] == (1, 1)
    assert answer.unsupported == (not answer.citations)
    segs = call_transcript.segments
    for c in answer.citations:
        assert c.item_id is None and c.title == "call.json"
        assert 0 <= c.line < len(segs)
        assert c.start == segs[c.line].start
        assert c.text == " ".join(segs[c.line].text.split())
    assert json.loads(json.dumps(answer.to_dict()))["citations"] == [
        c.to_dict() for c in answer.citations
    ]


def test_invented_citations_are_dropped_and_an_answer_with_none_is_unsupported() -> None:
    shown = [Citation(7, 3, 12.5, "Budget meeting", "a"), Citation(9, 0, 0.0, "Hike", "b")]
    good = check_answer({"answer": " Ten  percent. ", "lines": [1, 2, -1, 1, "0", True, 0.5]},
                        shown, "m")  # fmt: skip
    assert good.text == "Ten percent." and not good.unsupported
    assert [(c.item_id, c.line, c.start) for c in good.citations] == [(9, 0, 0.0)]
    assert good.dropped == 6  # 2 and -1 not shown, the repeat, and three that are not numbers
    assert render(good) == 'Ten percent.\n\nHike  00:00:00  "b"\n'
    assert "the model's guess" in render(check_answer({"answer": "Paris."}, shown))
    for raw in ({"answer": "Paris.", "lines": [5, 99]}, {"answer": "Paris."},
                {"answer": "Paris.", "lines": "0"}, {"answer": "", "lines": [0]}):  # fmt: skip
        assert check_answer(raw, shown).unsupported, raw
    assert check_answer({"answer": "Paris.", "lines": [5, 99]}, shown).citations == []


def test_retrieval_shows_the_lines_that_match_with_their_neighbours() -> None:
    budget, hiking = made(BUDGET), made(HIKING)
    sources = [(1, "Budget", budget), (2, "Hiking", hiking)]
    shown = retrieve(sources, "Which animals did they see at the lake?", 10_000)
    assert shown == [(1, 1), (1, 2), (1, 3), (1, 4)]  # the two lake lines, one either side
    assert len(retrieve(sources, "Welche Tiere?", 10_000)) == 10  # nothing matched: all
    assert len(retrieve(sources, "Welche Tiere?", 300)) < 10  # within the budget
    assert len(retrieve([sources[0]], "travel budget", 10_000)) == 5  # one: filled up
    assert keywords("Hiking, CAMPED; the Café!") == ["hik", "camp", "cafe"]


def test_a_question_too_long_or_empty_is_refused_before_any_model_starts(tmp_path) -> None:
    t, nowhere = made(HIKING), LLMOptions(gguf=tmp_path / "none.gguf")
    with pytest.raises(LLMError, match=f"at most {MAX_QUESTION}"):
        ask_sources([(None, "x", t)], "why " * 200, llm=nowhere)
    with pytest.raises(LLMError, match="question is empty"):
        ask_sources([(None, "x", t)], "  \n ", llm=nowhere)
    with pytest.raises(NothingToAsk, match="transcribe them first"):
        ask_transcripts([(None, "x", Transcript([]))], "why?", None)  # type: ignore[arg-type]


def test_across_the_library_the_hiking_trip_answers_about_the_animals(llm, library) -> None:
    lib, ids, _ = library
    question = "Which animals did they see at the glacier lake?"
    assert lib.rank(" ".join(keywords(question)), 5)[0] == ids["Hiking trip"]
    sources = library_sources(lib, question)
    assert [s[0] for s in sources] == [ids["Hiking trip"]]  # the title-only match is skipped
    answer = ask_library(lib, question, llm=LLMOptions(llm, context=4096))
    print(answer.to_dict())
    assert answer.sources[0] == (ids["Hiking trip"], "Hiking trip")
    # SmolLM2-135M often cites nothing; such an answer must then be marked unsupported.
    assert answer.unsupported == (not answer.citations)
    hiking = lib.load_transcript(ids["Hiking trip"]).segments
    for c in answer.citations:
        assert c.item_id == ids["Hiking trip"] and c.title == "Hiking trip"
        assert c.start == hiking[c.line].start
    with pytest.raises(NothingToAsk, match="matches the question"):
        library_sources(lib, "Wie teuer war die Reise?")


def test_rank_without_fts5_counts_the_words_found(library) -> None:
    lib, ids, _ = library
    plain = Library(lib.path)
    plain._is_fts = False  # the LIKE path of a SQLite built without FTS5
    try:
        assert plain.rank("budget spreadsheet travel", 5)[0] == ids["Budget meeting"]
        assert plain.rank("???", 5) == [] and plain.rank("", 5) == []
    finally:
        plain.close()
    assert lib.rank('lake" OR x', 5)  # quotes stay inside the query's strings
    assert lib.rank(" ".join(["zzz"] * 500) + " budget", 5) == []  # only 32 words count


def test_cancel_stops_the_answer_within_a_second(llm) -> None:
    cancel = threading.Event()
    pieces: list[str] = []
    set_at: list[float] = []

    def on_text(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            set_at.append(time.monotonic())
            cancel.set()

    with pytest.raises(LLMCancelled):
        ask_transcripts([(None, "hike", made(HIKING))], "What happened on the trail?", llm,
                        context=4096, cancel=cancel, on_text=on_text)  # fmt: skip
    assert set_at and time.monotonic() - set_at[0] < 1.0
    assert len(pieces) == 3
    with pytest.raises(LLMCancelled):  # set before: no request at all
        ask_transcripts([(None, "hike", made(HIKING))], "Who?", llm, cancel=cancel)


def test_the_cli_answers_with_citations_and_says_what_went_wrong(
    llm_gguf, call_transcript, library, tmp_path
) -> None:
    saved = tmp_path / "call.json"
    saved.write_text(call_transcript.to_json(), "utf-8")
    env = {"DESKSCRIBE_DATA_DIR": str(tmp_path / "data")}
    model = ["--llm", str(llm_gguf), "--threads", "2", "--context", "2048"]
    done = run_cli(["ask", "Where is Diane now?", str(saved), *model], tmp_path, **env)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].strip()
    cited = [x for x in lines if x.startswith("call.json  ")]
    assert all(re.fullmatch(r'call\.json  \d\d:\d\d:\d\d  ".*"', x) for x in cited)
    data = library[2]
    none = run_cli(["ask", "Where is Diane now?"], tmp_path, **env)
    assert none.returncode == 2 and "--library" in none.stderr
    assert none.stderr.startswith("deskscribe ask: give the transcripts to ask about")
    long = run_cli(["ask", "why " * 200, str(saved)], tmp_path, **env)
    assert long.returncode == 2 and f"at most {MAX_QUESTION}" in long.stderr
    url = f"http://127.0.0.1:{free_port()}/v1"
    down = run_cli(["ask", "Where?", str(saved), "--llm", url, "--model", "m"], tmp_path, **env)
    assert down.returncode == 1
    assert down.stderr.startswith(f"deskscribe ask: no language model answers at {url}")
    # Nothing in the library matches: said before any model starts.
    empty = run_cli(["ask", "Wie teuer war die Reise?", "--library", *model], tmp_path,
                    DESKSCRIBE_DATA_DIR=str(data))  # fmt: skip
    assert empty.returncode == 1 and "no transcript in the library matches" in empty.stderr
    both = run_cli(["ask", "Where?", str(saved), "--library"], tmp_path, **env)
    assert both.returncode == 2 and "not both" in both.stderr
    missing = run_cli(["ask", "Where?", str(tmp_path / "nope.json")], tmp_path, **env)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
