"""Settings as a typed object: read once, text parsed into types, unknown keys kept, saved
atomically and privately, and a change made by another process seen."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deskscribe import settings


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "cfg" / "settings.json"
    monkeypatch.setenv(settings.ENV_FILE, str(target))
    return target


def test_every_known_setting_is_a_typed_field() -> None:
    names = [f.name for f in dataclasses.fields(settings.Settings)]
    assert names == [*settings.KNOWN, "extra"]


def test_text_from_the_command_line_reads_as_types(path: Path) -> None:
    settings.set_value("export_automatically", "true")
    settings.set_value("batched_files", "off")
    settings.set_value("languages", "en, de")
    settings.set_value("output_formats", "txt, srt")
    now = settings.current()
    assert now.export_automatically is True and now.batched_files is False
    assert now.languages == ["en", "de"] and now.output_formats == ["txt", "srt"]
    # Stored as the app has always written them, so older versions read the file.
    saved = json.loads(path.read_text())
    assert saved == {
        "export_automatically": True,
        "batched_files": False,
        "languages": ["en", "de"],
        "output_formats": "txt,srt",
    }
    assert settings.get("output_formats") == "txt,srt" and settings.get("languages") == ["en", "de"]
    assert settings.flag("batched_files", True) is False
    assert settings.text("languages") == "en,de" and settings.text("batched_files") == "false"
    with pytest.raises(ValueError, match="true or false"):
        settings.set_value("export_automatically", "maybe")
    assert settings.current().export_automatically is True  # nothing changed


def test_unset_means_the_default_and_removing_a_setting_drops_it(path: Path) -> None:
    assert settings.current() == settings.Settings()
    assert settings.get("device", "auto") == "auto" and settings.flag("batched_files", True)
    settings.set_value("device", "cpu")
    settings.set_value("device", None)
    assert settings.get("device", "auto") == "auto"
    assert json.loads(path.read_text()) == {}


def test_unknown_keys_are_kept_across_a_save(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"language": "de", "theme_from_a_newer_version": {"dark": True}}))
    assert settings.current().extra == {"theme_from_a_newer_version": {"dark": True}}
    settings.set_value("device", "cpu")
    assert json.loads(path.read_text()) == {
        "language": "de",
        "device": "cpu",
        "theme_from_a_newer_version": {"dark": True},
    }


def test_saved_atomically_and_privately(path: Path) -> None:
    settings.set_value("vocabulary", "ComfyUI, Kubernetes")
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]  # no temp file
    if os.name == "posix":
        assert path.stat().st_mode & 0o777 == 0o600
    typed = settings.current()
    typed.default_model = "tiny.en"
    assert settings.get("default_model") is None  # current() is a copy until saved
    settings.save(typed)
    assert settings.get("default_model") == "tiny.en"
    assert settings.get("vocabulary") == "ComfyUI, Kubernetes"


def test_a_change_made_by_another_process_is_seen(path: Path) -> None:
    settings.set_value("language", "en")
    assert settings.get("language") == "en"  # read, and kept until the file changes
    env = {**os.environ, settings.ENV_FILE: str(path)}
    res = subprocess.run(
        [sys.executable, "-m", "deskscribe", "config", "language", "fr"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert settings.get("language") == "fr"
    bad = subprocess.run(
        [sys.executable, "-m", "deskscribe", "config", "batched_files", "maybe"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "true or false" in bad.stderr and "Traceback" not in bad.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "deskscribe", "config"], capture_output=True, text=True, env=env
    )
    assert "language = fr" in shown.stdout and "batched_files = true" in shown.stdout


def test_a_file_that_is_not_json_is_set_aside_once(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert settings.current() == settings.Settings()
    assert path.with_name("settings.json.broken").read_text() == "{not json"
    settings.set_value("language", "de")
    assert json.loads(path.read_text()) == {"language": "de"}
    assert path.with_name("settings.json.broken").read_text() == "{not json"


def test_subtitle_rules_round_trip_and_refuse_what_no_subtitle_can_be(path: Path) -> None:
    from deskscribe.transcript import SubtitleRules

    assert settings.subtitle_rules() == SubtitleRules()  # nothing set: the defaults
    settings.set_value("subtitle_max_line_chars", "32")  # as `deskscribe config` gives it
    settings.set_value("subtitle_max_lines", 1)
    settings.set_value("subtitle_max_cue_seconds", "5.5")
    settings.set_value("subtitle_min_cue_gap", 0)
    settings.set_value("subtitle_speaker_names", "off")
    wanted = SubtitleRules(max_line_chars=32, max_lines=1, max_cue_seconds=5.5, min_cue_gap=0,
                           speaker_names=False)  # fmt: skip
    assert settings.subtitle_rules() == wanted
    assert json.loads(path.read_text()) == {
        "subtitle_max_line_chars": 32,
        "subtitle_max_lines": 1,
        "subtitle_max_cue_seconds": 5.5,
        "subtitle_min_cue_gap": 0.0,
        "subtitle_speaker_names": False,
    }
    assert settings.text("subtitle_max_cue_seconds") == "5.5"
    from_file = settings.Settings.from_json(json.loads(path.read_text()))  # the next start
    assert settings.subtitle_rules(from_file) == wanted
    for key, bad, says in [
        ("subtitle_max_lines", "0", "subtitle_max_lines must be a whole number from 1 to 10"),
        ("subtitle_max_line_chars", "12.5", "whole number"),
        ("subtitle_max_line_chars", "wide", "whole number"),
        ("subtitle_max_cue_seconds", "nan", "number of seconds"),
        ("subtitle_min_cue_gap", "-0.1", "from 0 to 1"),
    ]:
        with pytest.raises(ValueError, match=says):
            settings.set_value(key, bad)
    assert settings.subtitle_rules() == wanted  # nothing changed
    # A value written by hand that no subtitle can have counts as not set.
    path.write_text(json.dumps({"subtitle_max_lines": 0, "subtitle_max_line_chars": 20}))
    assert settings.subtitle_rules() == SubtitleRules(max_line_chars=20)
