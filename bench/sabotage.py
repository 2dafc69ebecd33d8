"""The sabotage run we keep: one-line breaks of the product, and whether the tests catch them.

Each sabotage below replaces one precise snippet of ``src/`` (``old``, which must occur
exactly ``count`` times in its file) with a broken version (``new``), then runs the tests that
claim the behaviour it breaks, and puts the file back. A sabotage counts as caught only when
pytest says a test failed (exit code 1); a run whose tests pass (0) is NOT caught; anything
else (an interrupted run or a collection error: 2, a usage error such as an unknown test: 4,
no tests: 5, the timeout) is an error, shown apart with the last lines of its output, never
as a catch.

The copy: ``git archive HEAD`` unpacked into ``--tree`` (``/work/sabotage-tree`` by default:
beside ``shared/``, where ``tests/conftest.py`` finds the real recordings), made afresh at the
start of every run. Only the committed tree is sabotaged: uncommitted changes (to the product
or to the tests) are not in it. The tests run with this repository's ``.venv`` Python, the
copy's ``src`` first on ``PYTHONPATH`` (so the sabotaged package wins over the editable
install), ``CI=true`` (a skip off the allow-list fails: ``--baseline`` tells such a failure
from a catch), Qt offscreen, and this repository's ``.test-cache`` (built test models are keyed
by the builder's source, so a sabotage of model-building code builds its own, as it should).

Takes long: every sabotage runs real tests (models, servers, live sessions), from seconds to
several minutes each. Not part of CI. Usage, from the repository root::

    .venv/bin/python bench/sabotage.py --check      # the snippets and tests exist (cheap)
    .venv/bin/python bench/sabotage.py --list
    .venv/bin/python bench/sabotage.py [--only a,b] [--baseline] [--timeout 900] [--json OUT]

``--baseline`` first runs each sabotage's tests on the clean copy: a sabotage says something
only when its tests pass there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, machine_line, markdown_table

DEFAULT_TREE = ROOT.parent / "sabotage-tree"  # beside shared/ (tests/conftest.py's EVAL)
DEFAULT_TIMEOUT = 900.0
TAIL_LINES = 15


@dataclass(frozen=True)
class Sabotage:
    """``old`` (exactly ``count`` times in ``file``, relative to the tree's root) becomes
    ``new``; ``tests`` are pytest node ids (``path``, ``path::test``, ``path::test[param]``)
    run in that order with ``-x``, so put the fastest that should catch it first."""

    name: str
    what: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    count: int = 1


@dataclass
class Run:
    result: str  # "caught", "NOT caught", "error"
    code: int | None  # pytest's exit code; None when it timed out
    seconds: float
    failed: list[str] = field(default_factory=list)  # pytest's FAILED/ERROR summary lines
    tail: list[str] = field(default_factory=list)  # the last lines of its output


# --------------------------------------------------------------------------- the sabotages

PROMPT_TESTS = (
    "tests/test_vocabulary.py::test_vocabulary_is_parsed_and_fitted_to_the_prompt_budget",
    "tests/test_vocabulary.py::test_vocabulary_is_parsed_and_fitted_to_the_prompt_budget",
    "tests/test_batched.py::test_later_windows_are_conditioned_on_the_newest_earlier_text",
)
SPEAKER_TESTS = (
    "tests/test_speaker_names.py::test_assign_speakers_splits_segments_at_speaker_changes",
)
ROUTE_KEY_TESTS = ("tests/test_server_hostile.py::test_every_route_needs_the_key",)
BROWSER_TESTS = (
    "tests/test_server_hostile.py::"
    "test_dns_rebinding_and_cross_site_pages_cannot_drive_a_loopback_server",
    "tests/test_server_hostile.py::test_a_websocket_from_another_site_gets_no_session",
)
NOTES_CHECK_TESTS = (
    "tests/test_notes.py::test_what_the_model_invents_is_taken_out_before_anyone_sees_it",
)
KEY_CHECK = "        if config.key_hashes and path not in PUBLIC and not preflight:"

SABOTAGES: tuple[Sabotage, ...] = (
    Sabotage(
        "int8-8-bit",
        "int8 weights quantized to 8 bits instead of the 7-bit range",
        "src/deskscribe/whisper/graph.py",
        "INT8_WEIGHT_LEVELS = 63",
        "INT8_WEIGHT_LEVELS = 127",
        (
            "tests/test_int8.py::test_no_int8_weight_pair_can_saturate_a_16_bit_sum",
            "tests/test_int8.py::test_real_speech_activations_do_not_saturate_a_non_vnni_kernel",
            "tests/test_int8.py::test_int8_matmuls_on_an_emulated_avx2_cpu_give_the_exact_sums",
        ),
    ),
    Sabotage(
        "cpu-sessions-spin",
        "the CPU sessions' threads spin after their runs (beam search's candidate session too)",
        "src/deskscribe/whisper/runtime.py",
        "        if threads != 1:\n            sleep_between_runs(opts)\n",
        "        if threads != 1:\n            pass\n",
        ("tests/test_runtime.py::test_cpu_sessions_do_not_keep_a_core_busy_after_their_run",),
    ),
    Sabotage(
        "segmentation-spins",
        "speaker segmentation's sessions spin after their runs",
        "src/deskscribe/speakers/segmentation.py",
        "        opts = sleep_between_runs(ort.SessionOptions())\n",
        "        opts = ort.SessionOptions()\n",
        ("tests/test_segmentation_store.py::test_segmentation_sessions_do_not_keep_a_core_busy",),
    ),
    Sabotage(
        "candidates-unnormalised",
        "beam search's candidates carry raw logits instead of log-probabilities",
        "src/deskscribe/whisper/decoding.py",
        '        helper.make_node("TopK", ["all_logprobs", "k"], ["logprobs", "indices"], axis=1),\n',
        '        helper.make_node("TopK", ["logits", "k"], ["logprobs", "indices"], axis=1),\n',
        (
            "tests/test_engine.py::"
            "test_beam_candidates_are_the_best_tokens_with_their_log_probabilities",
        ),
    ),
    Sabotage(
        "repetition-guard-offset",
        "the repetition guard's pre-filter compares the last token with the wrong positions",
        "src/deskscribe/whisper/decoding.py",
        "    back = sampled[:, -1 - reach : -1][:, ::-1]",
        "    back = sampled[:, -reach:][:, ::-1]",
        ("tests/test_transcribe.py::test_repetition_guard_finds_every_loop_a_full_scan_finds",),
    ),
    Sabotage(
        "int8-windows-share-batches",
        "int8 on the CPU decodes the windows of a batch together again (one scale for all)",
        "src/deskscribe/whisper/model.py",
        '        return self.variant == "int8"\n',
        "        return False\n",
        (
            "tests/test_int8.py::test_an_int8_batch_decodes_each_window_as_alone",
            "tests/test_int8.py::test_int8_batched_words_do_not_depend_on_the_cores_or_the_batch",
        ),
    ),
    Sabotage(
        "int8-batch-decoded-together",
        "decode_batch decodes an int8 batch's windows together again (language detection apart)",
        "src/deskscribe/whisper/decoding.py",
        "        if n_audio > 1 and self.model.batches_share_scales:\n",
        "        if False:\n",
        ("tests/test_int8.py::test_an_int8_batch_decodes_each_window_as_alone",),
    ),
    Sabotage(
        "reorder-overwrites-first",
        "the cache reorder copies rows in any order, overwriting rows other copies still read",
        "src/deskscribe/whisper/model.py",
        "        ready = [b for b in pending if b not in read]\n",
        "        ready = list(pending)\n",
        (
            "tests/test_engine.py::test_a_reordered_cache_gives_each_row_its_own_history",
            "tests/test_engine.py::test_beam_search_matches_ctranslate2",
        ),
    ),
    Sabotage(
        "merged-projections-one-scale",
        "the decoder's merged q, k, v projections lose the query's softmax scale",
        "src/deskscribe/whisper/graph.py",
        '            w = self.ck.float(f"{pre}.w") * sc\n',
        '            w = self.ck.float(f"{pre}.w")\n',
        ("tests/test_int8.py::test_merged_projections_give_the_separate_ones_numbers",),
    ),
    Sabotage(
        "language-locked",
        "the sequential path keeps the first window's language for the whole file",
        "src/deskscribe/whisper/seek_loop.py",
        "            if not self.forced:\n",
        "            if not self.forced and self.language is None:\n",
        ("tests/test_languages.py::test_each_part_in_its_own_language[sequential-fp32]",),
    ),
    Sabotage(
        "vocabulary-dropped",
        "the vocabulary is left out of every prompt",
        "src/deskscribe/whisper/prompt.py",
        "        return self.vocabulary + (previous[-room:] if room > 0 and previous else [])",
        "        return previous[-room:] if room > 0 and previous else []",
        (PROMPT_TESTS[0],),
    ),
    Sabotage(
        "prompt-oldest-tokens",
        "windows are conditioned on the oldest earlier tokens instead of the newest",
        "src/deskscribe/whisper/prompt.py",
        "(previous[-room:] if room > 0",
        "(previous[:room] if room > 0",
        PROMPT_TESTS,
    ),
    Sabotage(
        "prompt-last-8",
        "windows are conditioned on the last 8 earlier tokens only",
        "src/deskscribe/whisper/prompt.py",
        "(previous[-room:] if room > 0",
        "(previous[-8:] if room > 0",
        PROMPT_TESTS,
    ),
    Sabotage(
        "conditioning-initial-plus-8",
        "the seek loop conditions on the initial prompt plus the last 8 tokens only",
        "src/deskscribe/whisper/seek_loop.py",
        "prompt = self.plan.prompt(self.all_tokens[self.prompt_reset :])",
        "prompt = self.plan.prompt(self.plan.initial + self.all_tokens[self.prompt_reset :][-8:])",
        PROMPT_TESTS[1:],
    ),
    Sabotage(
        "crosstalk-kept",
        "channels as speakers keep each channel's crosstalk (words written twice)",
        "src/deskscribe/speakers/channels.py",
        "    kept = drop_crosstalk(per_channel, levels.energy[channels])",
        "    kept = per_channel",
        ("tests/test_channels.py::test_each_channel_is_a_speaker_and_crosstalk_is_not_doubled",),
    ),
    Sabotage(
        "one-speaker",
        "every word goes to the first turn's speaker",
        "src/deskscribe/speakers/assign.py",
        "speaker=_speaker_for(w.start, w.end, turn_list)",
        "speaker=_speaker_for(w.start, w.end, turn_list[:1])",
        SPEAKER_TESTS,
    ),
    Sabotage(
        "speaker-per-segment",
        "speakers are assigned per segment instead of per word",
        "src/deskscribe/speakers/assign.py",
        "speaker=_speaker_for(w.start, w.end, turn_list)",
        "speaker=_speaker_for(seg.start, seg.end, turn_list)",
        SPEAKER_TESTS,
    ),
    Sabotage(
        "no-stop-signals",
        "`deskscribe live` has no SIGTERM/SIGHUP handlers (only Ctrl-C stops it cleanly)",
        "src/deskscribe/cli_live.py",
        "    stop_signals = [signal.SIGINT, signal.SIGTERM]\n"
        '    if hasattr(signal, "SIGHUP"):  # not on Windows\n'
        "        stop_signals.append(signal.SIGHUP)\n",
        "    stop_signals = [signal.SIGINT]\n",
        ("tests/test_live_signals.py::test_live_stops_cleanly_on_sigterm_and_sighup",),
    ),
    Sabotage(
        "files-0644",
        "private files (recordings, transcripts, settings) get the umask's mode, not 0600",
        "src/deskscribe/fsutil.py",
        "        if not private:\n            _public_mode(",
        "        if True:\n            _public_mode(",
        ("tests/test_privacy.py::test_new_data_folder_sessions_and_library_are_private",),
    ),
    Sabotage(
        "exports-named-by-id",
        "the file queue's automatic exports are named by library id, not by the source file",
        "src/deskscribe/service/queue.py",
        "export_all(transcript, source, export_options)",
        "export_all(transcript, source.with_name(str(item_id)), export_options)",
        (
            "tests/test_subtitles.py::"
            "test_file_queue_exports_by_the_settings_or_a_folders_own_rules",
            "tests/test_gui_files.py::test_export_automatically_into_a_folder_never_overwrites",
        ),
    ),
    Sabotage(
        "hub-path-unchecked",
        "a hub file name that leads out of the model folder is not refused",
        "src/deskscribe/models/download.py",
        "            inside(dest, name)\n",
        "            pass\n",
        ("tests/test_download.py::test_a_file_name_leading_out_of_the_folder_is_refused",),
    ),
    Sabotage(
        "only-interrupted-offered",
        "recovery offers interrupted sessions only, not stopped ones the library never got",
        "src/deskscribe/audio/sessions.py",
        "        if info.interrupted or (\n"
        "            info.state not in LIVE_STATES and info.folder.resolve() not in listed\n"
        "        ):\n",
        "        if info.interrupted:\n",
        (
            "tests/test_data_safety.py::"
            "test_a_stopped_session_the_library_never_got_is_offered_at_start",
        ),
    ),
    Sabotage(
        "drain-gate-off",
        "a draining server still takes new requests (no 503 draining)",
        "src/deskscribe/server/guard.py",
        "        if state.draining and path not in UNMETERED:",
        "        if False and state.draining and path not in UNMETERED:",
        (
            "tests/test_server_jobs.py::"
            "test_sigterm_finishes_the_request_in_flight_and_keeps_queued_jobs",
        ),
    ),
    Sabotage(
        "degrade-not-applied",
        "a live session that falls behind reports fewer interim passes without taking them",
        "src/deskscribe/service/live/pacing.py",
        "        t.sparse = self.degrader.active(FEWER_INTERIM)",
        "        t.sparse = False",
        (
            "tests/test_live_health.py::"
            "test_after_a_stall_a_long_real_utterance_keeps_up_and_steps_back_up",
            "tests/test_live_health.py::"
            "test_behind_it_steps_down_says_so_loses_nothing_and_steps_back_up",
        ),
    ),
    Sabotage(
        "translations-no-key",
        "/v1/audio/translations answers without an API key",
        "src/deskscribe/server/guard.py",
        KEY_CHECK,
        KEY_CHECK[:-1] + ' and not path.startswith("/v1/audio/translations"):',
        ROUTE_KEY_TESTS,
    ),
    Sabotage(
        "jobs-no-key",
        "GET /v1/jobs, GET /v1/jobs/{id}/result and DELETE /v1/jobs/{id} need no API key",
        "src/deskscribe/server/guard.py",
        KEY_CHECK,
        KEY_CHECK[:-1]
        + ' and not (path.startswith("/v1/jobs") and scope["method"] in ("GET", "DELETE")):',
        ROUTE_KEY_TESTS,
    ),
    Sabotage(
        "queue-off-by-one",
        "the server's work pool takes one request more than workers + max queue",
        "src/deskscribe/server/state.py",
        "if self.waiting + self.running >= self.workers + self.max_queue:",
        "if self.waiting + self.running > self.workers + self.max_queue:",
        (
            "tests/test_server_api.py::"
            "test_the_work_pool_takes_workers_plus_max_queue_and_refuses_the_next",
            "tests/test_server_api.py::test_keys_limits_and_a_full_queue",
        ),
    ),
    Sabotage(
        "cpu-share-zero",
        "the live health's CPU share is always 0",
        "src/deskscribe/service/live/health.py",
        "        share = 100.0 * (cpu - self._last[1]) / wall / (os.cpu_count() or 1)"
        " if wall > 0 else 0.0",
        "        share = 0.0",
        ("tests/test_live_health.py::test_the_cpu_share_moves_with_work_done",),
    ),
    Sabotage(
        "labels-not-adopted",
        "label revisions no longer hand their voices back to the live labeller",
        "src/deskscribe/service/live/relabel.py",
        "    labeller.adopt(centroids, renamed, weight)\n",
        "    # labeller.adopt(centroids, renamed, weight)\n",
        (
            "tests/test_live_speakers.py::"
            "test_revisions_lift_the_real_calls_live_labels_in_every_commit_batching",
        ),
    ),
    Sabotage(
        "bridges-kept",
        "windows straddling a change without a heard pause may form a speaker of their own",
        "src/deskscribe/speakers/diarize.py",
        "    fold_bridges: bool = True\n",
        "    fold_bridges: bool = False\n",
        ("tests/test_diarize.py::test_changes_without_a_heard_pause_make_no_voice_of_their_own",),
    ),
    Sabotage(
        "notes-cite-anything",
        "meeting notes keep citations of lines the transcript does not have",
        "src/deskscribe/llm/notes.py",
        "if _int(n) and first <= n < end})",
        "if _int(n)})",
        ("tests/test_notes.py::test_what_the_model_invents_is_taken_out_before_anyone_sees_it",),
    ),
    Sabotage(
        "subtitle-width-off",
        "subtitle lines are not held to max_line_chars (one line per cue, any length)",
        "src/deskscribe/transcript/subtitles.py",
        "    width, text = rules.max_line_chars, _join(tokens)",
        "    width, text = None, _join(tokens)",
        (
            "tests/test_subtitles.py::test_lines_are_balanced_and_break_after_punctuation",
            "tests/test_subtitles.py::test_real_speech_keeps_every_rule_and_every_word[call]",
        ),
    ),
    Sabotage(
        "undo-noop",
        "undo takes the step off the history without reverting it",
        "src/deskscribe/transcript/edits.py",
        "        edit.revert(self.transcript)\n        self._undone.append(edit)",
        "        self._undone.append(edit)",
        (
            "tests/test_edits.py::test_history_undoes_and_redoes_in_order_with_labels",
            "tests/test_edits.py::"
            "test_an_editing_session_undoes_back_to_the_transcript_and_redoes_to_the_end",
        ),
    ),
    Sabotage(
        "watch-twice",
        "a watched folder forgets what it handed over (a file is transcribed again)",
        "src/deskscribe/service/watch.py",
        "        if st is None or self._done.get(str(path)) == [st[0], st[1]]:",
        "        if st is None:",
        ("tests/test_watch.py::test_a_slow_copy_is_transcribed_once_after_it_ends",),
    ),
    Sabotage(
        "hls-allowed",
        "the HLS playlist demuxer is allowed for untrusted files",
        "src/deskscribe/audio/untrusted.py",
        '"rm", "xwma",\n',
        '"rm", "xwma", "hls",\n',
        (
            "tests/test_decode.py::"
            "test_a_playlist_cannot_make_the_untrusted_decoder_read_another_file",
            "tests/test_server_hostile.py::test_a_playlist_upload_reads_no_file_on_the_server",
        ),
    ),
    Sabotage(
        "host-check-off",
        "any Host is answered (DNS rebinding reaches a loopback server)",
        "src/deskscribe/server/guard.py",
        "    if host is None:  # HTTP/1.0 without Host: not a browser\n",
        "    if True:\n",
        BROWSER_TESTS,
    ),
    Sabotage(
        "origin-check-off",
        "any Origin is taken (a web page can drive the server)",
        "src/deskscribe/server/guard.py",
        '    if origin in config.cors_origins or "*" in config.cors_origins:\n',
        "    if True:\n",
        BROWSER_TESTS,
    ),
    Sabotage(
        "jobs-of-other-keys",
        "a job is visible to every key, not only to the key that made it",
        "src/deskscribe/server/jobs.py",
        '        if row is None or (owner is not None and row["owner"] != owner):',
        "        if row is None:",
        ("tests/test_server_hostile.py::test_a_job_belongs_to_the_key_that_made_it",),
    ),
    Sabotage(
        "sentences-ignored",
        "speaker changes inside a sentence stay where the diarization put them",
        "src/deskscribe/speakers/sentence_turns.py",
        "    if scores is None or len(out) < 2:\n        return out",
        "    if True:\n        return out",
        (
            "tests/test_sentence_turns.py::"
            "test_a_weak_change_inside_a_sentence_moves_to_the_sentence_end",
            "tests/test_sentence_turns.py::test_assign_speakers_cuts_segments_at_the_moved_change",
        ),
    ),
    Sabotage(
        "select-toggles",
        "a row selected from code toggles (with Ctrl held a second select deselects it)",
        "src/deskscribe/gui/widgets.py",
        "selection.select(picks, flags.ClearAndSelect | flags.Rows)",
        "selection.select(picks, flags.Toggle | flags.Rows)",
        ("tests/test_gui_transcript.py::test_library_search_open_rename_and_delete",),
    ),
    Sabotage(
        "queue-never-finished",
        "the file queue never says it finished",
        "src/deskscribe/service/file_queue.py",
        "finished=done))",
        "finished=False))",
        (
            "tests/test_file_queue.py::test_files_wait_for_a_model_and_start_when_one_is_installed",
            "tests/test_file_queue.py::test_cancel_retry_and_remove_through_the_service_api",
        ),
    ),
    Sabotage(
        "notes-repeats-kept",
        "a point the model says twice is listed twice (repeats no longer merged)",
        "src/deskscribe/llm/notes.py",
        '    once, with the citations of both."""\n',
        '    once, with the citations of both."""\n    return\n',
        NOTES_CHECK_TESTS,
    ),
    Sabotage(
        "notes-uncited-as-fact",
        "a point that cites no line of the transcript is shown as fact, not as unsupported",
        "src/deskscribe/llm/notes.py",
        "            if good:\n",
        "            if True:\n",
        NOTES_CHECK_TESTS,
    ),
    Sabotage(
        "translation-outlives-edit",
        "a line retyped keeps its translation (an export in that language shows the old words)",
        "src/deskscribe/transcript/edits.py",
        "    translations = dict(seg.translations) if same else {}",
        "    translations = dict(seg.translations)",
        (
            "tests/test_translate.py::"
            "test_an_edit_of_a_line_drops_its_translation_and_undo_brings_it_back",
        ),
    ),
    Sabotage(
        "llm-cancel-waits",
        "a cancel waits for the model's next token instead of returning and closing the client",
        "src/deskscribe/llm/endpoint.py",
        '            threading.Thread(target=client.close, name="llm-close", daemon=True).start()\n',
        "            finished.wait()  # the reader stops at the next token\n",
        (
            "tests/test_notes.py::"
            "test_cancel_returns_at_once_while_the_server_stalls_before_the_next_token",
        ),
    ),
)


# --------------------------------------------------------------------------- validation


def _test_name(node: str) -> tuple[str, str | None]:
    """(file, function) of a node id; function is None for a whole file."""
    path, _, rest = node.partition("::")
    function = rest.split("::")[-1].split("[")[0]
    return path, function or None


def problems(s: Sabotage, read) -> list[str]:
    """What is wrong with ``s`` in a tree whose files ``read(relative path)`` returns (None
    when missing): its snippet not there exactly ``count`` times, a test that is not there."""
    found = []
    text = read(s.file)
    if text is None:
        found.append(f"{s.file}: no such file")
    elif (n := text.count(s.old)) != s.count:
        found.append(f"{s.file}: the snippet occurs {n} times, not {s.count}: {s.old!r}")
    for node in s.tests:
        if node.startswith("-"):
            continue  # a pytest option, passed as it is
        path, function = _test_name(node)
        source = read(path)
        if source is None:
            found.append(f"test file missing: {path}")
        elif function and not re.search(
            rf"^\s*(async\s+)?def {re.escape(function)}\(", source, re.M
        ):
            found.append(f"test missing: {node}")
    return found


def tree_reader(root: Path):
    def read(relative: str) -> str | None:
        path = root / relative
        return path.read_text(encoding="utf-8") if path.is_file() else None

    return read


def head_reader(repo: Path):
    """Files as committed (``git show HEAD:path``): what a run sabotages."""

    def read(relative: str) -> str | None:
        out = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{relative}"],
                             capture_output=True, text=True)  # fmt: skip
        return out.stdout if out.returncode == 0 else None

    return read


def check(sabotages, read) -> int:
    """Print OK or the problems of each sabotage; how many have problems."""
    bad = 0
    for s in sabotages:
        found = problems(s, read)
        bad += bool(found)
        print(f"{'OK     ' if not found else 'MISSING'} {s.name}")
        for p in found:
            print(f"        {p}")
    return bad


# --------------------------------------------------------------------------- the copy


def fresh_tree(repo: Path, tree: Path) -> None:
    """``tree`` emptied and filled with the committed tree (``git archive HEAD``)."""
    tree, repo = tree.resolve(), repo.resolve()
    if tree == repo or tree in repo.parents or repo in tree.parents:
        raise SystemExit(f"--tree {tree} overlaps the repository {repo}")
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "HEAD"], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise SystemExit("git archive HEAD failed")


def tests_env(repo: Path, tree: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(tree / "src"),  # the copy's package, not the editable install
        "PYTHONDONTWRITEBYTECODE": "1",  # no .pyc of a sabotaged file outlives its run
        "CI": "true",
        "QT_QPA_PLATFORM": "offscreen",
        "DESKSCRIBE_TEST_CACHE": str(repo / ".test-cache"),
    }


def package_in_tree(python: Path, tree: Path, env: dict[str, str]) -> None:
    """Refuse to run when the tests would import deskscribe from anywhere but the copy."""
    out = subprocess.run([str(python), "-c", "import deskscribe; print(deskscribe.__file__)"],
                         cwd=tree, env=env, capture_output=True, text=True)  # fmt: skip
    where = Path(out.stdout.strip() or ".").resolve()
    if out.returncode != 0 or (tree / "src").resolve() not in where.parents:
        raise SystemExit(f"the tests would import deskscribe from {where}, not the copy: "
                         f"{out.stderr.strip()}")  # fmt: skip


@contextlib.contextmanager
def applied(tree: Path, s: Sabotage):
    """``s`` applied to the copy for the block; the original file back afterwards."""
    path = tree / s.file
    original = path.read_text(encoding="utf-8")
    if original.count(s.old) != s.count:
        raise SystemExit(f"{s.name}: the snippet is not in {s.file} {s.count} times")
    path.write_text(original.replace(s.old, s.new), encoding="utf-8")
    try:
        yield
    finally:
        path.write_text(original, encoding="utf-8")


# --------------------------------------------------------------------------- running


def run_tests(python: Path, tree: Path, tests, env, timeout: float) -> Run:
    """pytest on ``tests`` in the copy; its own process group, killed whole on a timeout (and
    whatever it left running is ended too)."""
    cmd = [str(python), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        code = None
    _kill_group(proc.pid)  # servers or players a failed test left behind
    seconds = time.perf_counter() - start
    lines = out.splitlines()
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    tail = lines[-TAIL_LINES:]
    if code is None:
        tail.append(f"(timed out after {timeout:.0f} s)")
    result = "caught" if code == 1 else "NOT caught" if code == 0 else "error"
    return Run(result, code, seconds, failed, tail)


def _kill_group(pid: int) -> None:
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def short(node: str) -> str:
    """``tests/test_x.py::test_y[p]`` as ``x::test_y[p]``."""
    path, _, rest = node.partition("::")
    stem = Path(path).stem.removeprefix("test_")
    return f"{stem}::{rest.split('::')[-1]}" if rest else stem


def tests_cell(tests) -> str:
    return short(tests[0]) + (f" (+{len(tests) - 1})" if len(tests) > 1 else "")


def run_all(args, sabotages) -> list[dict]:
    repo, tree = ROOT, Path(args.tree)
    python = repo / ".venv" / "bin" / "python"
    fresh_tree(repo, tree)
    bad = [(s.name, p) for s in sabotages for p in problems(s, tree_reader(tree))]
    if bad:
        for name, p in bad:
            print(f"{name}: {p}", file=sys.stderr)
        raise SystemExit("not run: fix the sabotages above (or commit the tests), or use --only")
    env = tests_env(repo, tree)
    package_in_tree(python, tree, env)
    baselines: dict[tuple[str, ...], Run] = {}
    results = []
    for i, s in enumerate(sabotages, 1):
        entry = {**asdict(s), "tests": list(s.tests)}
        if args.baseline:
            if s.tests not in baselines:
                baselines[s.tests] = run_tests(python, tree, s.tests, env, args.timeout)
            base = baselines[s.tests]
            entry["baseline"] = asdict(base)
            print(f"[{i}/{len(sabotages)}] {s.name}: clean tree "
                  f"{'passes' if base.code == 0 else 'FAILS'} ({base.seconds:.0f} s)")  # fmt: skip
        with applied(tree, s):
            run = run_tests(python, tree, s.tests, env, args.timeout)
        entry["run"] = asdict(run)
        results.append(entry)
        print(f"[{i}/{len(sabotages)}] {s.name}: {run.result} ({run.seconds:.0f} s)"
              + (f" {run.failed[0]}" if run.failed else ""), flush=True)  # fmt: skip
        if args.json:
            write_json(Path(args.json), results)
    return results


def write_json(path: Path, results: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine_line(os.cpu_count() or 1),
                                "results": results}, indent=1), encoding="utf-8")  # fmt: skip


def report(results: list[dict], baseline: bool) -> None:
    header = ["name", "what", "tests", "result", "seconds"]
    if baseline:
        header.insert(3, "clean tree")
    rows = []
    for r in results:
        row = [r["name"], r["what"], tests_cell(r["tests"]), r["run"]["result"],
               f"{r['run']['seconds']:.0f}"]  # fmt: skip
        if baseline:
            row.insert(3, "passes" if r["baseline"]["code"] == 0 else "FAILS")
        rows.append(row)
    print()
    print(markdown_table(header, rows))
    for r in results:
        if baseline and r["baseline"]["code"] != 0:
            _details(f"{r['name']} on the clean tree", r["baseline"])
        if r["run"]["result"] == "error":
            _details(r["name"], r["run"])
    caught = sum(r["run"]["result"] == "caught" for r in results)
    errors = sum(r["run"]["result"] == "error" for r in results)
    print(f"\n{caught} of {len(results)} caught"
          + (f" ({errors} errors, not counted as caught)" if errors else ""))  # fmt: skip
    if baseline:
        broken = [r["name"] for r in results if r["baseline"]["code"] != 0]
        if broken:
            print(
                f"tests failing on the clean tree (their result says nothing): {', '.join(broken)}"
            )


def _details(label: str, run: dict) -> None:
    print(f"\n{label}: " + ("timed out" if run["code"] is None else f"exit {run['code']}"))
    for line in run["tail"]:
        print(f"    {line}")


# --------------------------------------------------------------------------- main


def pick(only: str | None) -> tuple[Sabotage, ...]:
    if not only:
        return SABOTAGES
    names = [n.strip() for n in only.split(",") if n.strip()]
    known = {s.name: s for s in SABOTAGES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown sabotage(s): {', '.join(unknown)}; see --list")
    return tuple(known[n] for n in names)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--list", action="store_true", help="print the sabotages and exit")
    p.add_argument("--only", help="comma-separated names (see --list)")
    p.add_argument("--check", action="store_true",
                   help="only check that each snippet and test exists (working tree)")  # fmt: skip
    p.add_argument("--head", action="store_true",
                   help="with --check: check the committed tree (what a run uses)")  # fmt: skip
    p.add_argument("--baseline", action="store_true",
                   help="first run each test set on the clean copy")  # fmt: skip
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds per test run (default %(default)g); a timeout is an error")  # fmt: skip
    p.add_argument("--tree", default=str(DEFAULT_TREE),
                   help="where the copy is made, afresh (default %(default)s)")  # fmt: skip
    p.add_argument("--json", help="write the results here (after every sabotage)")
    args = p.parse_args(argv)
    sabotages = pick(args.only)
    if args.list:
        for s in sabotages:
            print(f"{s.name:26} {s.what}\n{'':26} {s.file}; {', '.join(map(short, s.tests))}")
        return 0
    if args.check:
        read = head_reader(ROOT) if args.head else tree_reader(ROOT)
        bad = check(sabotages, read)
        print(f"\n{len(sabotages) - bad} of {len(sabotages)} OK"
              f" ({'committed tree' if args.head else 'working tree'})")  # fmt: skip
        return 1 if bad else 0
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "src", "tests"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(machine_line(os.cpu_count() or 1))
    print(f"commit {commit}; copy in {args.tree}; timeout {args.timeout:g} s per run")
    if dirty:
        print("note: uncommitted changes in src/ or tests/ are not in the copy")
    if not (Path(args.tree).resolve().parent / "shared" / "eval").is_dir():
        print(f"warning: no shared/eval beside {args.tree}: tests needing real recordings fail")
    results = run_all(args, sabotages)
    report(results, args.baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
