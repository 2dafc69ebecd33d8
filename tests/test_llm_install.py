"""Notes models from the hub into the model store, as a user gets one: the catalog, the choice
of file in a repo, the download (resumed, verified, refused offline), the GGUF check, the
recommendation by free memory, and the setting that picks the built-in model. Against a real
local hub serving the real SmolLM2 GGUF (and decoys), run by the real llama.cpp server."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_cli
from deskscribe.fsutil import sha256_file
from deskscribe.llm.catalog import LLM_CATALOG, STARTER_ID, find_llm_entry, gguf_file
from deskscribe.llm.hardware import Memory, memory, recommend_llm, unused_gpu_hint
from deskscribe.llm.store import NotAGGUFError, install_llm, installed_llms, llm_source
from deskscribe.models.download import DownloadCancelled
from hub_server import HubServer, load_repo
from test_download import range_starts

REPO = "someone/SmolLM2-135M-Instruct-GGUF"
BAD = "someone/not-a-model-GGUF"
REAL = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def hub_repos(llm_gguf: Path, tmp_path_factory) -> list:
    """A repo as GGUF repos on the hub are: the real file beside a split quant, a vision
    projector and a README; and a repo whose "GGUF" is a text file."""
    root = tmp_path_factory.mktemp("llm-hub")
    good = root / "good"
    good.mkdir()
    os.link(llm_gguf, good / REAL)
    (good / "SmolLM2-135M-Instruct.Q8_0-00001-of-00002.gguf").write_bytes(b"GGUF" + b"\3\0\0\0")
    (good / "SmolLM2-135M-Instruct.Q8_0-00002-of-00002.gguf").write_bytes(b"GGUF" + b"\3\0\0\0")
    (good / "mmproj-SmolLM2-f16.gguf").write_bytes(b"GGUF" + b"\3\0\0\0" + b"\0" * 64)
    (good / "README.md").write_text("SmolLM2 in GGUF\n")
    bad = root / "bad"
    bad.mkdir()
    (bad / "model-Q4_K_M.gguf").write_text("<html>not a model</html>\n" * 100)
    return [load_repo(REPO, good, lfs=("*.gguf",)), load_repo(BAD, bad, lfs=("*.gguf",))]


@pytest.fixture
def hub(hub_repos) -> Iterator[HubServer]:
    with HubServer(hub_repos) as server:
        yield server


def test_the_file_chosen_in_a_repo() -> None:
    files = [
        "README.md",
        "Model-Q4_K_M.gguf",
        "Model-Q5_K_M.gguf",
        "Model-Q8_0-00001-of-00002.gguf",
        "Model-Q8_0-00002-of-00002.gguf",
        "mmproj-Model-f16.gguf",
        "sub/Model-Q4_K_M.gguf",
    ]
    assert gguf_file(files) == "Model-Q4_K_M.gguf"  # the default quantization
    assert gguf_file(files, quant="q5_k_m") == "Model-Q5_K_M.gguf"  # any case
    assert gguf_file(files, quant="Q8_0") is None  # only split parts: never chosen
    assert gguf_file(files, preferred="Model-Q5_K_M.gguf") == "Model-Q5_K_M.gguf"
    assert gguf_file(["a-Q4_K_M.gguf", "b-Q4_K_M.gguf"]) is None  # two candidates: ask
    assert gguf_file(["only.gguf", "mmproj-x.gguf"]) == "only.gguf"
    assert gguf_file(["Model-Q4_K_M_L.gguf"]) == "Model-Q4_K_M_L.gguf"  # the only one
    assert gguf_file(["Model-Q4_K_M_L.gguf", "Model-Q4_K_S.gguf"]) is None  # no exact tag


def test_the_catalog_says_size_memory_licence_and_why() -> None:
    assert len({e.id for e in LLM_CATALOG}) == len(LLM_CATALOG) >= 3
    for entry in LLM_CATALOG:
        assert find_llm_entry(entry.id) is find_llm_entry(entry.repo_id) is entry
        assert gguf_file([entry.file, "x-Q8_0.gguf"], entry.file) == entry.file
        assert entry.size_mb / 1000 < entry.memory_gb and entry.licence and entry.good_for


def test_download_from_the_hub_lists_and_runs(hub: HubServer, llm_gguf: Path, tmp_path: Path):
    store = tmp_path / "store"
    res = run_cli(["models", "download", f"{REPO}:Q4_1", "--llm"], store, HF_ENDPOINT=hub.url)
    assert res.returncode == 0, res.stderr
    path = store / "llm" / REAL
    assert res.stdout.strip() == str(path)
    assert sha256_file(path) == sha256_file(llm_gguf)
    assert llm_source(path) == f"hf:{REPO}/{REAL}"
    assert json.loads(path.with_suffix(".json").read_text())["size"] == llm_gguf.stat().st_size
    assert not (store / ".downloads").exists() or not any((store / ".downloads").iterdir())
    assert sorted(p.name for p in (store / "llm").iterdir()) == [REAL, REAL[:-5] + ".json"]
    listed = run_cli(["models", "list"], store)
    assert "SmolLM2-135M-Instruct.Q4_1" in listed.stdout and "notes" in listed.stdout
    # The installed file runs in the built-in server, and only a client with its key gets in.
    from openai import OpenAI

    from deskscribe.llm.embedded import EmbeddedLLM

    with EmbeddedLLM(path, threads=2, context=512) as endpoint:
        client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
        reply = client.chat.completions.create(
            model=endpoint.model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
        )
        assert reply.choices[0].message.content is not None
    # Without a quantization tag the only single-file GGUF is chosen (not the split, not the
    # projector); installed again it is refused unless --overwrite.
    again = run_cli(["models", "download", REPO, "--llm"], store, HF_ENDPOINT=hub.url)
    assert again.returncode == 2 and "already exists" in again.stderr
    again = run_cli(
        ["models", "download", REPO, "--llm", "--overwrite"], store, HF_ENDPOINT=hub.url
    )
    assert again.returncode == 0, again.stderr
    removed = run_cli(["models", "remove", "SmolLM2-135M-Instruct.Q4_1", "--yes"], store)
    assert removed.returncode == 0, removed.stderr
    assert installed_llms(store) == [] and not path.with_suffix(".json").exists()


def test_cancel_leaves_nothing_installed_and_the_next_try_resumes(hub: HubServer, tmp_path: Path):
    store = tmp_path / "store"
    cancel = threading.Event()

    def progress(done: float, total: float, stage: str = "") -> None:
        if stage == "download" and done > 20_000_000:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        install_llm(REPO, root=store, endpoint=hub.url, progress=progress, cancel=cancel)
    assert installed_llms(store) == []
    path = install_llm(REPO, root=store, endpoint=hub.url)
    assert installed_llms(store) == [path]
    assert range_starts(hub) and range_starts(hub)[-1] >= 20_000_000  # resumed, not restarted


def test_a_file_that_is_not_gguf_is_refused(hub: HubServer, tmp_path: Path) -> None:
    store = tmp_path / "store"
    res = run_cli(["models", "download", BAD, "--llm"], store, HF_ENDPOINT=hub.url)
    assert (
        res.returncode == 2 and "not a GGUF model" in res.stderr and "Traceback" not in res.stderr
    )
    assert installed_llms(store) == []
    with pytest.raises(NotAGGUFError):
        install_llm(str(hub.repos[BAD].files["model-Q4_K_M.gguf"].disk), root=store)
    assert installed_llms(store) == []


def test_a_repo_without_the_quantization_says_how_to_name_one(hub: HubServer, tmp_path: Path):
    res = run_cli(
        ["models", "download", f"{REPO}:Q6_K", "--llm"], tmp_path / "store", HF_ENDPOINT=hub.url
    )
    assert res.returncode == 2 and f"{REPO}:QUANT" in res.stderr
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in res.stderr  # what there is


def test_offline_says_what_to_do(hub: HubServer, tmp_path: Path) -> None:
    hub.refuse_connections()
    res = run_cli(["models", "download", "qwen3-4b-instruct"], tmp_path / "s", HF_ENDPOINT=hub.url)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "install-starter --which llm" in res.stderr and ".gguf" in res.stderr
    assert "models build" not in res.stderr  # the Whisper advice is not given for notes


def test_a_local_gguf_is_copied_in_and_the_setting_picks_it(
    llm_gguf: Path, tmp_path: Path, monkeypatch
) -> None:
    store = tmp_path / "store"
    small = tmp_path / "my-notes-model.gguf"
    shutil.copyfile(llm_gguf, small)
    with open(small, "ab") as fh:  # the larger of the two files: the default pick
        fh.write(b"\0" * 1024)
    install_llm(str(small), root=store)
    starter = install_llm(str(llm_gguf), root=store)
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(store))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    from deskscribe import settings
    from deskscribe.service.language_model import chosen

    assert chosen().gguf == store / "llm" / "my-notes-model.gguf"  # the largest
    settings.set_value("notes_gguf", starter.name)
    assert chosen().gguf == starter and "built in (on this computer)" in chosen().label
    settings.set_value("notes_gguf", "gone-since")  # removed since: the largest again
    assert chosen().gguf == store / "llm" / "my-notes-model.gguf"


def test_the_recommendation_follows_free_memory_and_gpu() -> None:
    big, mid = recommend_llm(Memory(32.0, (), True, 8)), recommend_llm(Memory(6.5, (), True, 8))
    small, tiny = recommend_llm(Memory(3.0, (), True, 8)), recommend_llm(Memory(1.0, (), True))
    assert big.id == "qwen2.5-7b-instruct" and "32 GB" in big.reason
    few_cores = recommend_llm(Memory(32.0, (), True, 2))  # the memory, not the cores
    assert few_cores.id == "qwen3-4b-instruct" and "32 GB" in few_cores.reason
    sizes = {e.id: e.memory_gb for e in LLM_CATALOG}
    assert sizes[big.id] > sizes[mid.id] > sizes[small.id]
    assert tiny.id == STARTER_ID and tiny.entry is None and "poor" in tiny.reason
    gpu = recommend_llm(Memory(4.0, (("RTX 4060", 7.5),), True))
    assert gpu.id == "qwen2.5-7b-instruct" and "RTX 4060" in gpu.reason
    # A GPU that Whisper uses but this llama.cpp build cannot: say how to get one that can.
    hint = unused_gpu_hint(Memory(8.0, (), True), "RTX 4060")
    assert "RTX 4060" in hint and "--index-url" in hint and "cu128" in hint
    assert unused_gpu_hint(Memory(8.0, (("RTX 4060", 7.5),), True), "RTX 4060") == ""
    assert unused_gpu_hint(Memory(8.0, (), True), None) == ""
    # This computer, as llama.cpp sees it: free memory known, and a recommendation for it.
    here = memory()
    assert here.binding and here.free_ram_gb and here.free_ram_gb > 0.5
    res = run_cli(["models", "recommend"], Path("/nonexistent-store"))
    assert res.returncode == 0 and f"notes: {recommend_llm(here).id}:" in res.stdout
