"""deskscribe.models.download against a real local hub serving tiny.en in Hugging Face layout."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from checkpoints import write_hf
from conftest import CACHE
from deskscribe.models.download import (
    ChecksumError,
    DownloadCancelled,
    DownloadError,
    NotEnoughDiskError,
    OfflineError,
    RepoNotFoundError,
    download_files,
    list_repo_files,
)
from hub_server import HubRepo, HubServer, load_repo

REPO = "openai/whisper-tiny.en"
MODEL = "model.safetensors"
FILES = ["config.json", "generation_config.json", "tokenizer.json", MODEL]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def hf_tiny_fp16(tiny_ct2: Path) -> Path:
    """tiny.en in HF layout with float16 tensors (~75 MB, half of write_hf's fp32)."""
    folder = CACHE / "hub-tiny.en-hf-fp16"
    if not (folder / "complete").exists():
        write_hf(tiny_ct2, folder / "repo")
        tensors = load_file(str(folder / "repo" / MODEL))
        fp16 = {k: v.astype(np.float16) for k, v in tensors.items()}
        save_file(fp16, str(folder / "repo" / MODEL))
        (folder / "complete").touch()
    return folder / "repo"


@pytest.fixture(scope="session")
def repo(hf_tiny_fp16: Path) -> HubRepo:
    return load_repo(REPO, hf_tiny_fp16)


@pytest.fixture
def hub(repo: HubRepo) -> Iterator[HubServer]:
    with HubServer([repo]) as server:
        yield server


def assert_identical(dest: Path, repo: HubRepo) -> None:
    for name, f in repo.files.items():
        assert (dest / name).read_bytes() == f.disk.read_bytes(), name


def range_starts(hub: HubServer) -> list[int]:
    return [
        int(h["range"].split("=")[1].rstrip("-")) for h in hub.seen("GET", "/lfs/") if "range" in h
    ]


def test_list_repo_files(hub: HubServer, repo: HubRepo) -> None:
    files = {f.path: f for f in list_repo_files(REPO, endpoint=hub.url)}
    assert sorted(files) == sorted(FILES)
    for name, f in files.items():
        disk = repo.files[name].disk
        assert f.size == disk.stat().st_size
    assert files[MODEL].sha256 == hashlib.sha256(repo.files[MODEL].disk.read_bytes()).hexdigest()
    assert files["config.json"].sha256 is None


def test_full_download_with_progress(hub: HubServer, repo: HubRepo, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    dest = download_files(
        REPO, FILES, tmp_path / "dl", endpoint=hub.url, progress=lambda d, t: seen.append((d, t))
    )
    assert_identical(dest, repo)
    total = sum(f.size for f in repo.files.values())
    assert seen[-1] == (total, total)
    assert all(t == total for _, t in seen)
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
    assert len(seen) > 3  # byte progress inside the big file, not only per file
    assert not list((dest / ".partial").rglob("*.incomplete"))

    # A second call finds everything done: metadata requests only, no file bytes.
    gets = len(hub.seen("GET", "/lfs/"))
    download_files(REPO, FILES, dest, endpoint=hub.url)
    assert len(hub.seen("GET", "/lfs/")) == gets


def test_dropped_connection_resumes_with_range(
    hub: HubServer, repo: HubRepo, tmp_path: Path
) -> None:
    hub.drop_after[MODEL] = 25_000_000
    dest = download_files(REPO, [MODEL], tmp_path / "dl", endpoint=hub.url)
    assert_identical_file(dest, repo, MODEL)
    starts = range_starts(hub)
    assert starts and 0 < starts[0] <= 25_000_000


def assert_identical_file(dest: Path, repo: HubRepo, name: str) -> None:
    assert (dest / name).read_bytes() == repo.files[name].disk.read_bytes()


def test_crash_mid_file_then_resume(hub: HubServer, repo: HubRepo, tmp_path: Path) -> None:
    dest = tmp_path / "dl"
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from deskscribe.models.download import download_files\n"
        "def die(done, total):\n"
        "    if done > 20_000_000: os._exit(3)\n"
        f"download_files({REPO!r}, [{MODEL!r}], Path(sys.argv[1]), endpoint=sys.argv[2], "
        "progress=die)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(dest), hub.url], env=env, capture_output=True
    )
    assert proc.returncode == 3, proc.stderr.decode()
    (partial,) = (dest / ".partial").glob("*.incomplete")
    have = partial.stat().st_size
    assert 0 < have < repo.files[MODEL].size
    assert not (dest / MODEL).exists()

    download_files(REPO, [MODEL], dest, endpoint=hub.url)
    assert_identical_file(dest, repo, MODEL)
    assert range_starts(hub) == [have]


def test_corrupted_bytes_are_refetched(hub: HubServer, repo: HubRepo, tmp_path: Path) -> None:
    hub.corrupt[MODEL] = 1
    dest = download_files(REPO, [MODEL], tmp_path / "dl", endpoint=hub.url)
    assert_identical_file(dest, repo, MODEL)
    assert len(hub.seen("GET", "/lfs/")) == 2


def test_corrupted_twice_raises(hub: HubServer, tmp_path: Path) -> None:
    hub.corrupt[MODEL] = 2
    dest = tmp_path / "dl"
    with pytest.raises(ChecksumError, match="sha256"):
        download_files(REPO, [MODEL], dest, endpoint=hub.url)
    assert not (dest / MODEL).exists()
    assert not list((dest / ".partial").rglob("*.incomplete"))


def test_cancel_mid_file_then_resume(hub: HubServer, repo: HubRepo, tmp_path: Path) -> None:
    dest = tmp_path / "dl"
    cancel = threading.Event()

    def progress(done: int, total: int) -> None:
        if done > 30_000_000:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        download_files(REPO, FILES, dest, endpoint=hub.url, progress=progress, cancel=cancel)
    assert not (dest / MODEL).exists()
    assert MODEL not in (dest / ".done.json").read_text()
    (partial,) = (dest / ".partial").glob("*.incomplete")
    have = partial.stat().st_size
    assert 0 < have < repo.files[MODEL].size

    download_files(REPO, FILES, dest, endpoint=hub.url)
    assert_identical(dest, repo)
    assert range_starts(hub) == [have]


def test_not_enough_disk(
    hub: HubServer, repo: HubRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1_000_000))
    with pytest.raises(NotEnoughDiskError) as info:
        download_files(REPO, FILES, tmp_path / "dl", endpoint=hub.url)
    total = sum(f.size for f in repo.files.values())
    assert (info.value.needed, info.value.free) == (total, 1_000_000)
    assert "1.0 MB" in str(info.value) and f"{total / 1e6:,.1f} MB" in str(info.value)
    assert not hub.seen("GET", "/lfs/")


def test_server_down_is_offline_error(hub: HubServer, tmp_path: Path) -> None:
    hub.refuse_connections()
    with pytest.raises(OfflineError, match=REPO) as info:
        download_files(REPO, FILES, tmp_path / "dl", endpoint=hub.url)
    assert "install-starter" in str(info.value)
    with pytest.raises(OfflineError):
        list_repo_files(REPO, endpoint=hub.url)


def test_hf_hub_offline_is_offline_error(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="HF_HUB_OFFLINE"):
        download_files(REPO, FILES, tmp_path / "dl", endpoint=hub.url)
    with pytest.raises(OfflineError):
        list_repo_files(REPO, endpoint=hub.url)
    assert not hub.requests


def test_unknown_repo_and_file(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(RepoNotFoundError, match="nobody/nothing"):
        download_files("nobody/nothing", FILES, tmp_path / "a", endpoint=hub.url)
    with pytest.raises(RepoNotFoundError):
        download_files(REPO, ["no-such-file.bin"], tmp_path / "b", endpoint=hub.url)
    assert issubclass(RepoNotFoundError, DownloadError)


def test_two_downloads_into_one_folder(hub: HubServer, repo: HubRepo, tmp_path: Path) -> None:
    dest = tmp_path / "dl"
    errors: list[BaseException] = []

    def run() -> None:
        try:
            download_files(REPO, FILES, dest, endpoint=hub.url)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert_identical(dest, repo)
    assert len(hub.seen("GET", "/lfs/")) == 1  # the second waited, then found it done


def test_two_processes_into_one_folder(hub: HubServer, repo: HubRepo, tmp_path: Path) -> None:
    dest = tmp_path / "dl"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from deskscribe.models.download import download_files\n"
        f"download_files({REPO!r}, {FILES!r}, Path(sys.argv[1]), endpoint=sys.argv[2])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(dest), hub.url], env=env)
        for _ in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert_identical(dest, repo)
    assert len(hub.seen("GET", "/lfs/")) == 1


def test_token_goes_to_the_hub_but_not_to_the_cdn(hub: HubServer, tmp_path: Path) -> None:
    download_files(REPO, ["config.json", MODEL], tmp_path / "dl", endpoint=hub.url, token="hf_abc")
    assert hub.seen("HEAD", "/resolve/")[0]["authorization"] == "Bearer hf_abc"
    assert hub.seen("GET", "/resolve/")[0]["authorization"] == "Bearer hf_abc"  # config.json
    (cdn,) = hub.seen("GET", "/lfs/")
    assert "authorization" not in cdn


def test_a_file_name_leading_out_of_the_folder_is_refused(
    hub: HubServer, repo: HubRepo, tmp_path: Path
) -> None:
    """A hostile hub or mirror listing ``model.bin.part1/../../x`` writes nothing anywhere."""
    from deskscribe.fsutil import UnsafePathError, inside
    from deskscribe.models.download import UnsafeFileNameError

    dest = tmp_path / "store" / "model"
    for bad in ("model.bin.part1/../../../evil.txt", "../evil.txt", "/tmp/evil.txt", "a\\..\\b"):
        with pytest.raises(UnsafeFileNameError, match="leads out of the model folder"):
            download_files(REPO, ["config.json", bad], dest, endpoint=hub.url)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "store" / "evil.txt").exists()
    assert not list(dest.glob("*.json"))  # not even the good file: refused before any request
    assert not hub.seen("GET", "/resolve/")
    # A link inside the folder that points out of it is refused as well.
    (tmp_path / "outside").mkdir()
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "sub").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafePathError):
        inside(dest, "sub/model.bin")
    assert inside(dest, "onnx/model.onnx") == dest / "onnx" / "model.onnx"


def test_a_hostile_etag_cannot_place_a_partial_file_outside_the_store(
    hub: HubServer, repo: HubRepo, tmp_path: Path
) -> None:
    """The ETag is hub metadata too: a partial file named from ``a/../../../x`` would sit
    outside the store (the partial of a dropped download is kept to resume)."""
    dest = tmp_path / "store" / "model"
    hub.etags[MODEL] = hub.etags["config.json"] = "a/../../../../escaped"
    hub.drop_after[MODEL] = 25_000_000
    outside: set[Path] = set()

    def look(_done: int, _total: int) -> None:  # while the partial files exist
        outside.update(p for p in tmp_path.rglob("*") if p.is_file() and dest not in p.parents)

    download_files(REPO, [MODEL, "config.json"], dest, endpoint=hub.url, progress=look)
    assert_identical_file(dest, repo, MODEL)
    assert_identical_file(dest, repo, "config.json")
    assert not outside, outside
    assert range_starts(hub), "the dropped download resumed from its partial file"


def test_a_safetensors_index_pointing_elsewhere_is_a_checkpoint_error(
    hf_tiny_fp16: Path, tmp_path: Path
) -> None:
    import json as _json

    from deskscribe.whisper.weights import CheckpointError, load_checkpoint

    folder = tmp_path / "ckpt"
    folder.mkdir()
    for f in hf_tiny_fp16.iterdir():
        (folder / f.name).symlink_to(f)
    index = {"weight_map": {"model.decoder.embed_tokens.weight": "../../etc/passwd"}}
    (folder / "model.safetensors.index.json").write_text(_json.dumps(index))
    with pytest.raises(CheckpointError, match="outside its folder"):
        load_checkpoint(folder)


def test_the_saved_token_never_goes_to_a_custom_endpoint(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HF_TOKEN (or `hf auth login`) is for huggingface.co: a mirror set in HF_ENDPOINT does
    not get it. A token given explicitly for that endpoint still goes (test above)."""
    monkeypatch.setenv("HF_TOKEN", "hf_saved_secret")
    download_files(REPO, ["config.json"], tmp_path / "dl", endpoint=hub.url)
    assert list_repo_files(REPO, endpoint=hub.url)
    seen = [h for m in ("HEAD", "GET") for h in hub.seen(m, "/")]
    assert seen and all("authorization" not in h for h in seen), seen
