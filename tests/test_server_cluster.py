"""Scale-out on Ray: a real local Ray cluster (started here on 127.0.0.1, small: 2 CPUs, no
dashboard), ``deskscribe serve --ray ADDRESS --replicas 2`` as a real process, the official
``openai`` SDK against it with the real tiny.en model, and ``deskscribe transcribe --ray`` on a
batch with a broken file. Also: Ray is not imported unless asked for."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
import numpy as np
import openai
import pytest

from conftest import EVAL, load, run_cli, wer
from conversations import write_wav
from server_support import free_port, make_store, serve, transcribing

pytest.importorskip("ray.serve", reason="needs the cluster extra: pip install deskscribe[cluster]")

JFK = EVAL / "jfk.flac"
JFK_TEXT = (
    "And so my fellow Americans, ask not what your country can do for you, ask what you can "
    "do for your country."
)
RAY = Path(sys.executable).parent / "ray"
READY_TIMEOUT = 180.0  # Serve deploys two deployments on a 2-core machine


def _ray(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(RAY), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    """A one-node Ray cluster; its address. Its temp folder is short (Ray's socket paths must
    fit in 107 bytes) and it is stopped, whatever happened, at the end."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env = {k: v for k, v in env.items() if not k.startswith("DESKSCRIBE_")}  # must be forwarded
    started = _ray("start", "--head", "--num-cpus", "2", "--num-gpus", "0", "--port", str(port),
                   "--node-ip-address", "127.0.0.1", "--include-dashboard=false",
                   "--object-store-memory", str(200 * 1024 * 1024), "--temp-dir", str(temp),
                   "--disable-usage-stats", env=env)  # fmt: skip
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield f"127.0.0.1:{port}"
    finally:
        _ray("stop", "--force", env=env)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory, tiny_fp32) -> Path:
    return make_store(tmp_path_factory.mktemp("models"), {"tiny.en-fp32": tiny_fp32})


@pytest.fixture(scope="module")
def served(cluster, store, tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    server = serve(store, data, "--ray", cluster, "--replicas", "2", "--model", "tiny.en-fp32",
                   env={"RAY_USAGE_STATS_ENABLED": "0"}, wait=False)  # fmt: skip
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:  # Serve's proxy answers (404/503) before the app is up: wait for ours
            assert server.proc.poll() is None, f"the server exited:\n{server.output()}"
            assert time.monotonic() < deadline, f"not ready in time:\n{server.output()}"
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(server.url + "/health", timeout=5)
                if r.status_code == 200 and r.json().get("status") == "ok":
                    break
            time.sleep(0.5)
        yield server
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.output()


@pytest.fixture(scope="module")
def client(served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=300)


def test_ray_is_not_imported_unless_asked_for(tmp_path) -> None:
    for args in (["serve", "--help"], ["transcribe", "--help"]):
        out = subprocess.run([sys.executable, "-X", "importtime", "-m", "deskscribe", *args],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                    if line.startswith("import time:")}  # fmt: skip
        assert "deskscribe.cli_server" in imported
        assert not {m for m in imported if m == "ray" or m.startswith("ray.")}, args


def test_replicas_are_laid_out_on_what_the_cluster_has() -> None:
    from deskscribe.server.cluster import ClusterError, plan

    two = plan("2", {"CPU": 2.0})  # this test's cluster: a CPU and a thread each
    assert two.options == {"num_replicas": 2, "ray_actor_options": {"num_cpus": 1.0}}
    assert two.threads == 1 and two.capacity == 2
    auto = plan("auto", {"CPU": 16.0})  # autoscaled on ongoing requests, 4 threads each
    scaling = auto.options["autoscaling_config"]
    assert (scaling["min_replicas"], scaling["max_replicas"]) == (1, 4)
    assert scaling["target_ongoing_requests"] == 1 and auto.threads == 4
    gpus = plan("auto", {"CPU": 16.0, "GPU": 2.0})
    assert gpus.options["ray_actor_options"]["num_gpus"] == 1
    assert gpus.options["autoscaling_config"]["max_replicas"] == 2
    assert plan("4", {"CPU": 16.0, "GPU": 2.0}).options["ray_actor_options"]["num_gpus"] == 0.5
    assert "num_gpus" not in plan("2", {"CPU": 8.0, "GPU": 2.0}, "cpu").options["ray_actor_options"]
    with pytest.raises(ClusterError, match="--replicas"):
        plan("many", {"CPU": 2.0})


def test_transcribe_a_batch_on_the_cluster(cluster, store, tmp_path) -> None:
    """Three files, one broken: that one fails with the message it gets without --ray, the
    others are written. (Before the Serve tests: the Serve app's replicas hold the
    cluster's two CPUs while it is up.)"""
    files = tmp_path / "in"
    files.mkdir()
    first, second = files / "first.flac", files / "second.flac"
    shutil.copyfile(JFK, first)
    shutil.copyfile(JFK, second)
    broken = files / "broken.mp3"
    broken.write_bytes(b"ID3" + os.urandom(4000))
    out = tmp_path / "out"
    t0 = time.monotonic()
    done = run_cli(["transcribe", "--ray", cluster, "--model", "tiny.en-fp32",
                    "--output-dir", str(out), "--format", "txt,json",
                    str(first), str(broken), str(second)], store,
                   RAY_USAGE_STATS_ENABLED="0")  # fmt: skip
    seconds = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    for name in ("first", "second"):
        assert wer(JFK_TEXT, (out / f"{name}.txt").read_text()) <= 0.1
        assert (out / f"{name}.json").exists()
    assert not (out / "broken.txt").exists()
    remote = [line[line.index("deskscribe:") :]  # after the bars' cursor moves
              for line in done.stderr.splitlines() if str(broken) in line]  # fmt: skip
    assert len(remote) == 1, done.stderr
    assert "first.flac" in done.stderr and "second.flac" in done.stderr  # their progress bars
    local = run_cli(["transcribe", "--model", "tiny.en-fp32", "--quiet", "--output-dir",
                     str(tmp_path / "local"), str(broken)], store)  # fmt: skip
    assert local.returncode == 1
    assert remote[0].strip() in local.stderr.splitlines(), (remote, local.stderr)
    print(f"3 files through `transcribe --ray`: {seconds:.2f} s")


def test_the_words_said_through_the_cluster(client) -> None:
    t0 = time.monotonic()
    raw = client.audio.transcriptions.with_raw_response.create(file=JFK.open("rb"),
                                                               model="whisper-1")  # fmt: skip
    seconds = time.monotonic() - t0
    result = raw.parse()
    assert wer(JFK_TEXT, result.text) <= 0.1, result.text
    assert raw.headers.get("x-deskscribe-replica")
    print(f"jfk.flac through Ray: {seconds:.2f} s")


def test_verbose_json_with_word_timestamps(client) -> None:
    v = client.audio.transcriptions.create(
        file=JFK.open("rb"), model="tiny.en-fp32", response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )  # fmt: skip
    assert wer(JFK_TEXT, v.text) <= 0.1, v.text
    assert v.language == "english" and abs(v.duration - 11.0) < 0.1
    assert v.segments and v.words and len(v.words) >= 20
    assert all(0 <= w.start <= w.end <= 11.1 for w in v.words)
    assert [w.start for w in v.words] == sorted(w.start for w in v.words)


@pytest.fixture(scope="module")
def three_windows(tmp_path_factory) -> Path:
    """71 s of real speech: the call, JFK, an AMI clip (three 30 s windows)."""
    parts = [
        load(EVAL / "two-speakers.wav"),
        load(JFK),
        load(sorted((EVAL / "ami").glob("*.wav"))[0]),
    ]
    return write_wav(tmp_path_factory.mktemp("long") / "three-windows.wav", np.concatenate(parts))


def test_a_stream_gets_each_batch_as_the_replica_decodes_it(client, tmp_path) -> None:
    """``stream=true`` through the cluster: the deltas of a recording longer than one batch
    (eleven real meeting clips, 5.5 min: more than the 8 chunks a CPU replica decodes at
    once) come while the replica decodes, not all at the end, and add up to the final text."""
    clips = sorted((EVAL / "ami").glob("*.wav"))
    path = write_wav(tmp_path / "meetings.wav", np.concatenate([load(c) for c in clips]))
    t0, arrivals, events = time.monotonic(), [], []
    with path.open("rb") as fh:
        for event in client.audio.transcriptions.create(file=fh, model="whisper-1", stream=True):
            arrivals.append(time.monotonic() - t0)
            events.append(event)
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    assert events[-1].type == "transcript.text.done" and len(deltas) >= 20
    assert "".join(d.delta for d in deltas) == events[-1].text
    assert len(events[-1].text.split()) > 400, events[-1].text
    # The second batch takes seconds to decode; delivered at the end, all events come
    # within milliseconds of each other.
    first, done = arrivals[0], arrivals[-1]
    assert done - first >= 0.5, arrivals
    print(f"stream through Ray: first delta at {first:.2f} s, done at {done:.2f} s")


def test_errors_are_those_of_the_single_server(client, tmp_path) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.audio.transcriptions.create(file=JFK.open("rb"), model="large-v9")
    assert "large-v9" in str(missing.value) and "tiny.en-fp32" in str(missing.value)
    broken = tmp_path / "broken.mp3"
    broken.write_bytes(b"ID3" + os.urandom(4000))
    with pytest.raises(openai.BadRequestError) as bad:  # refused at the ingress, by decoding
        client.audio.transcriptions.create(file=broken.open("rb"), model="whisper-1")
    assert "could not be" in str(bad.value)


def test_concurrent_requests_are_spread_over_both_replicas(client, served) -> None:
    def one(_):
        raw = client.audio.transcriptions.with_raw_response.create(file=JFK.open("rb"),
                                                                   model="whisper-1")  # fmt: skip
        return raw.parse().text, raw.headers.get("x-deskscribe-replica")

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(one, range(4)))
    seconds = time.monotonic() - t0
    for text, _replica in answers:
        assert wer(JFK_TEXT, text) <= 0.1, text
    replicas = {replica for _text, replica in answers}
    assert None not in replicas and len(replicas) == 2, answers
    health = httpx.get(served.url + "/health", timeout=10).json()
    assert health["status"] == "ok"
    print(f"4 x jfk.flac at once through Ray: {seconds:.2f} s, replicas {sorted(replicas)}")


def test_sigterm_drains_as_the_single_server_does(client, served, three_windows) -> None:
    """SIGTERM: the request in flight (on a transcriber replica) finishes, a new one gets 503
    ``draining`` meanwhile, and the server exits 0 (checked by the fixture). Last in this file:
    it stops the module's server."""
    worker, answer = transcribing(client, three_windows, served, "inflight")
    try:
        served.signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while True:  # the drain starts once the signal has reached the ingress
            try:
                with JFK.open("rb") as fh:
                    client.audio.transcriptions.create(model="whisper-1", file=fh)
            except openai.APIStatusError as e:
                refused = e
                break
            assert time.monotonic() < deadline, "no 503 while draining"
        assert refused.status_code == 503 and refused.code == "draining", refused
        assert refused.response.headers.get("retry-after") == "5"
        assert "error" not in answer and worker.is_alive(), answer  # still in flight
        worker.join(120)
        assert "error" not in answer, answer
        assert "your country" in answer["text"].lower(), answer["text"]
        assert served.wait(120) == 0, served.output()
    finally:
        worker.join(5)
