"""Catalog, hardware recommendation, and managing installed models (verify, remove)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from deskscribe.models.catalog import CATALOG, find_entry, wanted_files
from deskscribe.models.hardware import Hardware, recommend
from deskscribe.whisper.runtime import CPU, CUDA, DML


def cli(args: list[str], store: Path) -> subprocess.CompletedProcess:
    return run_cli(args, store)


def test_catalog_has_turbo_first_and_unique_names() -> None:
    assert CATALOG[0].repo_id == "openai/whisper-large-v3-turbo"
    assert len({e.id for e in CATALOG}) == len(CATALOG)
    assert find_entry("openai/whisper-base") is find_entry("base")
    assert find_entry("nonexistent") is None


def test_wanted_files_pick_weights_config_and_tokenizer_only() -> None:
    hf = [
        "README.md",
        ".gitattributes",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "flax_model.msgpack",
        "tokenizer.json",
        "vocab.json",
        "merges.txt",
    ]
    assert wanted_files(hf) == [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "model.safetensors",
    ]
    sharded = [
        "config.json",
        "tokenizer.json",
        "model.safetensors.index.json",
        "model-00002-of-00002.safetensors",
        "model-00001-of-00002.safetensors",
    ]
    assert wanted_files(sharded)[-2:] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    ct2 = ["README.md", "config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    assert wanted_files(ct2) == ["config.json", "tokenizer.json", "model.bin", "vocabulary.txt"]


@pytest.mark.parametrize(
    ("hw", "model", "variant", "device", "words"),
    [
        (
            Hardware((CUDA, CPU), "NVIDIA RTX 4070", 12.0, 16),
            "large-v3-turbo",
            "fp16",
            "cuda",
            "RTX 4070 (12 GB)",
        ),
        (
            Hardware((CUDA, CPU), "NVIDIA GT 1030", 2.0, 4),
            "small",
            "fp16",
            "cuda",
            "less than the 6 GB",
        ),
        (
            Hardware((DML, CPU), None, None, 8),
            "large-v3-turbo",
            "fp16",
            "directml",
            "switches to the CPU",
        ),
        (Hardware((CPU,), None, None, 4), "base", "int8", "cpu", "4 CPU cores"),
        (
            Hardware((CPU,), None, None, 16),
            "small",
            "int8",
            "cpu",
            "stays quick on your 16 CPU cores",
        ),
    ],
)
def test_recommendation_fits_the_hardware(
    hw: Hardware, model: str, variant: str, device: str, words: str
) -> None:
    rec = recommend(hw)
    assert (rec.model, rec.variant, rec.device) == (model, variant, device)
    assert words in rec.reason and rec.reason.endswith(".") and find_entry(rec.model) is not None


def test_this_machine_gets_a_recommendation() -> None:
    res = cli(["models", "recommend"], Path("/nonexistent-store"))
    assert res.returncode == 0 and ":" in res.stdout


def test_verify_finds_damage_and_remove_deletes(tiny_ct2: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert (
        cli(
            ["models", "build", str(tiny_ct2), "--name", "t", "--variant", "int8"], store
        ).returncode
        == 0
    )
    res = cli(["models", "verify", "t"], store)
    assert res.returncode == 0 and "all files match" in res.stdout
    data = store / "t" / "decoder.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    res = cli(["models", "verify", "t"], store)
    assert res.returncode == 1 and "decoder.onnx.data is damaged" in res.stderr
    res = cli(["models", "remove", "t", "--yes"], store)
    assert res.returncode == 0 and not (store / "t").exists()
    assert list(store.iterdir()) == []
    res = cli(["models", "remove", "t", "--yes"], store)
    assert res.returncode == 2 and "not installed" in res.stderr


def test_available_lists_the_catalog(tmp_path: Path) -> None:
    res = cli(["models", "list", "--available"], tmp_path)
    assert res.returncode == 0
    assert "large-v3-turbo" in res.stdout and "faster-whisper-base" in res.stdout


def test_models_dir_setting_moves_the_store(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DESKSCRIBE_MODELS_DIR"}
    env["DESKSCRIBE_SETTINGS"] = str(tmp_path / "cfg" / "settings.json")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "deskscribe", *args], capture_output=True, text=True, env=env
        )

    default = run("models", "path").stdout.strip()
    assert run("config", "models_dir", str(tmp_path / "elsewhere")).returncode == 0
    assert run("models", "path").stdout.strip() == str(tmp_path / "elsewhere")
    assert "models_dir = " in run("config").stdout
    env["DESKSCRIBE_MODELS_DIR"] = str(tmp_path / "env-wins")
    assert run("models", "path").stdout.strip() == str(tmp_path / "env-wins")
    del env["DESKSCRIBE_MODELS_DIR"]
    assert run("config", "models_dir", "").returncode == 0
    assert run("models", "path").stdout.strip() == default
    assert run("config", "colour", "red").returncode == 2


def test_reveal_command_points_at_the_model(tmp_path: Path) -> None:
    from deskscribe.models.store import reveal_command

    cmd = reveal_command(tmp_path)
    assert str(tmp_path) in " ".join(cmd)


def test_a_folder_with_a_stray_manifest_is_not_a_model(tmp_path: Path) -> None:
    """A folder of the user's that happens to hold a manifest.json (a web app's) in the store
    is never listed, chosen, replaced by a build, or deleted."""
    store = tmp_path / "store"
    mine = store / "my-notes"
    mine.mkdir(parents=True)
    (mine / "manifest.json").write_text('{"name": "my-notes", "start_url": "/"}')
    (mine / "notes.txt").write_text("do not lose me")
    res = cli(["models", "list"], store)
    assert "my-notes" not in res.stdout
    res = cli(["models", "remove", "my-notes", "--yes"], store)
    assert res.returncode == 2 and "not installed" in res.stderr
    res = cli(["transcribe", "x.wav", "--model", "my-notes"], store)
    assert res.returncode == 2 and "not installed" in res.stderr
    assert (mine / "notes.txt").read_text() == "do not lose me"
