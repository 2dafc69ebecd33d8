"""The job API (``/v1/jobs``) and the SIGTERM drain, against a real ``deskscribe serve`` with the
real tiny.en model, over plain HTTP as the desktop client speaks it (the openai SDK has no job
API) and the official openai SDK for the synchronous request that a drain must let finish.

What a user would notice: a long file submitted as a job finishes with the right text in every
format; cancelling it frees the server; a server killed mid-job finishes that job after its
restart (or says why it cannot); a server stopped with SIGTERM finishes the request in flight,
turns new ones away with 503, exits 0 and keeps the queued jobs for its next start.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx2 as httpx
import numpy as np
import openai
import pytest
import soundfile

from conftest import EVAL, espeak, load, wer
from deskscribe.transcript import Transcript
from server_support import Served, make_store, restart, serve, transcribing

JFK = EVAL / "jfk.flac"
SPOKEN = (
    "The quarterly report is due on Friday. Please send your comments to the finance team "
    "before noon, and remember that the budget meeting moves to the large room next week."
)
FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json", "deskscribe")


@pytest.fixture(scope="module")
def audio(tmp_path_factory) -> dict:
    """jfk.flac, and a longer file of real speech: jfk, an espeak-ng paragraph, jfk again."""
    folder = tmp_path_factory.mktemp("audio")
    jfk_text = (EVAL / "jfk.txt").read_text().strip()
    jfk = load(JFK)
    voice = load(espeak(SPOKEN, folder / "spoken.wav", speed=160))
    gap = np.zeros(8000, np.float32)
    long = folder / "long.wav"
    soundfile.write(long, np.concatenate([jfk, gap, voice, gap, jfk]), 16000)
    return {"jfk": JFK, "jfk_text": jfk_text, "long": long,
            "long_text": f"{jfk_text} {SPOKEN} {jfk_text}"}  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory, tiny_fp32: Path) -> Path:
    return make_store(tmp_path_factory.mktemp("store"), {"tiny.en-fp32": tiny_fp32})


@pytest.fixture(scope="module")
def server(store: Path, tmp_path_factory):
    served = serve(store, tmp_path_factory.mktemp("data"), "--model", "tiny.en-fp32")
    yield served
    served.stop()


def submit(served: Served, path: Path, **fields) -> dict:
    with open(path, "rb") as fh:
        r = httpx.post(served.base_url + "/jobs", files={"file": (path.name, fh)},
                       data=fields, timeout=60)  # fmt: skip
    assert r.status_code == 202, r.text
    return r.json()


def get(served: Served, job_id: str) -> dict:
    r = httpx.get(f"{served.base_url}/jobs/{job_id}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(served: Served, job_id: str, *statuses: str, timeout: float = 120.0) -> list[dict]:
    """Every state of the job seen until its status is one of ``statuses`` (polled)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.append(get(served, job_id))
        if seen[-1]["status"] in statuses:
            return seen
        assert served.proc.poll() is None, served.output()
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {seen[-1]['status']} after {timeout:.0f} s")


def job_folder(served: Served, job_id: str) -> Path:
    return served.data / "server" / "jobs" / job_id


def test_a_job_runs_to_done_and_gives_every_format(server, audio):
    job = submit(server, audio["jfk"], response_format="verbose_json",
                 **{"timestamp_granularities[]": "word"})  # fmt: skip
    assert job["id"].startswith("job_") and job["object"] == "transcription.job"
    assert job["status"] == "queued" and job["filename"] == "jfk.flac"
    assert job["model"] == "tiny.en-fp32" and job["progress"] == 0.0
    assert job["duration"] is None and job["error"] is None and job["finished_at"] is None
    assert abs(job["created_at"] - time.time()) < 60

    seen = wait_for(server, job["id"], "done", "failed")
    done = seen[-1]
    assert done["status"] == "done", done
    progress = [s["progress"] for s in seen]
    assert progress == sorted(progress) and all(0.0 <= p <= 1.0 for p in progress)
    assert done["progress"] == 1.0 and done["error"] is None
    assert done["duration"] == pytest.approx(11.0, abs=0.5)
    assert done["finished_at"] >= done["created_at"]

    listed = httpx.get(server.base_url + "/jobs", timeout=30).json()
    assert listed["object"] == "list" and listed["data"][0]["id"] == job["id"]

    url = f"{server.base_url}/jobs/{job['id']}/result"
    default = httpx.get(url, timeout=30).json()  # the job's own format: verbose_json, words
    assert wer(audio["jfk_text"], default["text"]) < 0.15
    assert default["words"] and default["duration"] == pytest.approx(11.0, abs=0.5)
    out = {}
    for fmt in FORMATS:
        r = httpx.get(url, params={"format": fmt}, timeout=30)
        assert r.status_code == 200, (fmt, r.text)
        out[fmt] = r.json() if fmt.endswith("json") or fmt == "deskscribe" else r.text
    assert wer(audio["jfk_text"], out["json"]["text"]) < 0.15
    assert out["text"].strip() == out["json"]["text"]
    assert "-->" in out["srt"] and out["srt"].lstrip().startswith("1")
    assert out["vtt"].startswith("WEBVTT")
    assert out["verbose_json"] == default  # words only, as the job asked
    assert " ".join(s["text"] for s in out["diarized_json"]["segments"]) == out["json"]["text"]
    transcript = Transcript.from_dict(out["deskscribe"])  # what the desktop client opens
    assert transcript.text == out["json"]["text"] and transcript.source == "jfk.flac"
    assert transcript.to_dict() == out["deskscribe"]

    bad = httpx.get(url, params={"format": "docx"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "format"

    folder = job_folder(server, job["id"])
    assert [p.name for p in folder.iterdir()] == ["transcript.json"]  # the upload is gone
    metrics = httpx.get(server.url + "/metrics", timeout=30).text
    assert 'deskscribe_jobs{status="done"} 1.0' in metrics

    r = httpx.delete(f"{server.base_url}/jobs/{job['id']}", timeout=30)
    assert r.json() == {"id": job["id"], "object": "transcription.job", "deleted": True}
    assert not folder.exists()
    for gone in (f"{server.base_url}/jobs/{job['id']}", url):
        r = httpx.get(gone, timeout=30)
        assert r.status_code == 404 and r.json()["error"]["code"] == "job_not_found"


def test_cancelling_a_running_job_frees_the_server_for_the_next(server, audio):
    long = submit(server, audio["long"])
    after = submit(server, audio["jfk"], response_format="text")
    listed = httpx.get(server.base_url + "/jobs", timeout=30).json()["data"]
    assert [j["id"] for j in listed[:2]] == [after["id"], long["id"]]  # newest first

    early = httpx.get(f"{server.base_url}/jobs/{long['id']}/result", timeout=30)
    assert early.status_code == 409
    error = early.json()["error"]
    assert "queued" in error["message"] or "running" in error["message"], error

    assert wait_for(server, long["id"], "running", "done")[-1]["status"] == "running"
    r = httpx.delete(f"{server.base_url}/jobs/{long['id']}", timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    assert not job_folder(server, long["id"]).exists()
    assert get(server, long["id"])["status"] == "cancelled"
    r = httpx.get(f"{server.base_url}/jobs/{long['id']}/result", timeout=30)
    assert r.status_code == 409 and "cancelled" in r.json()["error"]["message"]

    # The job behind it runs once the cancelled one has stopped.
    assert wait_for(server, after["id"], "done", "failed")[-1]["status"] == "done"
    text = httpx.get(f"{server.base_url}/jobs/{after['id']}/result", timeout=30).text
    assert wer(audio["jfk_text"], text) < 0.15
    assert f"job {long['id']} cancelled at" in server.output()  # it stopped, not finished
    health = httpx.get(server.url + "/health", timeout=30).json()
    assert health["running"] == 0 and health["queued"] == 0
    metrics = httpx.get(server.url + "/metrics", timeout=30).text
    assert 'deskscribe_jobs{status="cancelled"} 1.0' in metrics


def test_a_job_killed_mid_run_resumes_after_a_restart(store, audio, tmp_path):
    served = serve(store, tmp_path / "data", "--model", "tiny.en-fp32")
    try:
        running = submit(served, audio["long"], response_format="json")
        waiting = submit(served, audio["jfk"])
        assert wait_for(served, running["id"], "running", "done")[-1]["status"] == "running"
        served.proc.kill()  # kill -9: no clean-up of any kind
        served.wait(30)
        # The waiting job's upload disappears while the server is down (a disk clean-up).
        for f in job_folder(served, waiting["id"]).iterdir():
            f.unlink()

        served = restart(served)
        lost = get(served, waiting["id"])
        assert lost["status"] == "failed", lost
        assert "its upload is gone" in lost["error"]["message"]
        assert lost["error"]["code"] == "upload_lost"

        done = wait_for(served, running["id"], "done", "failed")[-1]
        assert done["status"] == "done", done
        result = httpx.get(f"{served.base_url}/jobs/{running['id']}/result", timeout=30).json()
        assert wer(audio["long_text"], result["text"]) < 0.2, result["text"]
        # It ran again in the new process: the whole file is counted there.
        metrics = httpx.get(served.url + "/metrics", timeout=30).text
        assert f'deskscribe_audio_seconds_total{{kind="job"}} {done["duration"]}' in metrics
        assert [p.name for p in job_folder(served, running["id"]).iterdir()] == ["transcript.json"]
    finally:
        served.stop()


def test_sigterm_finishes_the_request_in_flight_and_keeps_queued_jobs(store, audio, tmp_path):
    served = serve(store, tmp_path / "data", "--model", "tiny.en-fp32", "--drain-seconds", "90")
    client = openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0,
                           timeout=120)  # fmt: skip
    try:
        worker, answer = transcribing(client, audio["long"], served)
        queued = submit(served, audio["jfk"])
        served.signal(signal.SIGTERM)

        with pytest.raises(openai.APIStatusError) as refused, open(audio["jfk"], "rb") as fh:
            client.audio.transcriptions.create(model="whisper-1", file=fh)
        assert refused.value.status_code == 503 and refused.value.code == "draining"
        assert "shutting down" in refused.value.message

        worker.join(120)
        assert "error" not in answer, answer
        assert wer(audio["long_text"], answer["text"]) < 0.2, answer["text"]
        assert served.wait(60) == 0, served.output()

        # The job that waited is still queued, and runs at the next start.
        served = restart(served)
        done = wait_for(served, queued["id"], "done", "failed")[-1]
        assert done["status"] == "done", done
        result = httpx.get(f"{served.base_url}/jobs/{queued['id']}/result", timeout=30).json()
        assert wer(audio["jfk_text"], result["text"]) < 0.15
    finally:
        served.stop()


def test_job_requests_are_checked_before_they_are_stored(server, audio, tmp_path):
    def post(path: Path, **fields) -> httpx.Response:
        with open(path, "rb") as fh:
            return httpx.post(server.base_url + "/jobs", files={"file": (path.name, fh)},
                              data=fields, timeout=30)  # fmt: skip

    notes = tmp_path / "notes.txt"
    notes.write_text("not audio at all\n")
    r = post(notes)
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"
    r = post(audio["jfk"], model="no-such-model")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = post(audio["jfk"], response_format="docx")
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    r = httpx.get(server.base_url + "/jobs/job_" + "0" * 32, timeout=30)
    assert r.status_code == 404 and json.loads(r.text)["error"]["code"] == "job_not_found"
