"""From nothing to a transcribing model through the hub API (local server), as a user does it."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import espeak, run_cli, wer
from deskscribe.models.download import DownloadCancelled
from deskscribe.models.install import install_model
from deskscribe.models.store import list_models
from test_download import REPO, hf_tiny_fp16, hub, range_starts, repo  # noqa: F401 (fixtures)


def cli(args: list[str], store: Path, endpoint: str) -> subprocess.CompletedProcess:
    return run_cli(args, store, HF_ENDPOINT=endpoint)


def test_download_build_and_transcribe(hub, tmp_path: Path) -> None:  # noqa: F811
    store = tmp_path / "store"
    res = cli(["models", "download", REPO, "--variant", "int8", "--name", "tiny"], store, hub.url)
    assert res.returncode == 0, res.stderr
    assert (store / "tiny" / "manifest.json").exists()
    assert not (store / ".downloads" / REPO.replace("/", "--")).exists()  # checkpoint dropped
    assert cli(["models", "verify", "tiny"], store, hub.url).returncode == 0
    wav = espeak("Remember to water the plants on Sunday.", tmp_path / "plants.wav", voice="en")
    res = cli(["transcribe", str(wav), "--model", "tiny", "--quiet"], store, "http://127.0.0.1:9")
    assert res.returncode == 0, res.stderr  # no network needed once installed
    assert (
        wer("Remember to water the plants on Sunday.", (tmp_path / "plants.txt").read_text()) <= 0.2
    )


def test_cancel_leaves_no_half_installed_model_and_resumes(hub, tmp_path: Path) -> None:  # noqa: F811
    store = tmp_path / "store"
    cancel = threading.Event()

    def progress(done: float, total: float, stage: str = "") -> None:
        if stage == "download" and 0 < done < total:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        install_model(REPO, "fp32", root=store, endpoint=hub.url, progress=progress, cancel=cancel)
    assert list_models(store) == []
    path = install_model(REPO, "fp32", root=store, endpoint=hub.url)
    assert [m.path for m in list_models(store)] == [path]


def test_offline_says_what_to_do(hub, tmp_path: Path) -> None:  # noqa: F811
    hub.refuse_connections()
    res = cli(["models", "download", REPO], tmp_path / "store", hub.url)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "install-starter" in res.stderr


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 300 MB file system (tmpfs), so that the disk can really fill up."""
    mount = tmp_path / "small"
    mount.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=300m", "tmpfs", str(mount)], capture_output=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()}); needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("when", ["download", "build"])
def test_disk_filling_up_is_reported_and_resumable(hub, small_disk: Path, when: str) -> None:  # noqa: F811
    from deskscribe.models.download import DiskFullError

    store = small_disk / "store"
    filler = small_disk / "someone-elses-big-file"

    def fill_the_disk(done: float, total: float, stage: str = "") -> None:
        # After the free-space check passed, another program takes all the space that is left.
        started = 15e6 < done < total if when == "download" else stage.startswith("build")
        if stage.startswith(when) and started and not filler.exists():
            with open(filler, "wb") as fh, contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * (1 << 20))

    with pytest.raises(DiskFullError, match="free some"):
        install_model(REPO, "int8", root=store, endpoint=hub.url, progress=fill_the_disk)
    assert list_models(store) == []
    filler.unlink()
    path = install_model(REPO, "int8", root=store, endpoint=hub.url)
    assert [m.path for m in list_models(store)] == [path]
    if when == "download":  # the second run continued the file instead of starting over
        assert range_starts(hub) and range_starts(hub)[-1] > 0
