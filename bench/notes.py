"""Meeting notes from a language model: recall of planted decisions and action items, share
of citations that check out, and model time per minute of audio, for each model given.

    python bench/notes.py [--llm GGUF|URL ...] [--model NAME ...] [--api-key-env VAR]
                          [--whisper tiny.en|base|FOLDER] [--context TOKENS] [--threads N]
                          [--work /tmp/deskscribe-notes-bench] [--json OUT]

Recordings:

- ``meeting``: a weekly planning meeting of four people (espeak-ng voices), about 12 minutes,
  with 5 decisions and 6 action items planted among filler discussion (``SCRIPT``; each
  planted line carries the keywords that identify it, and an action item its owner and due
  day). The WAV (16 kHz mono, short gaps between lines) and the line times are cached in
  ``--work``; so is each transcript.
- ``call``: the real phone call ``../shared/eval/two-speakers.wav`` (30 s, two people).
  Nothing is planted there: only the share of citations that check out and the time.

Both are transcribed with DeskScribe's engine (``transcribe_file``; default tiny.en fp32 from
the test cache). Speakers are then given from what is known, not diarized: a meeting segment
gets the speaker of the script line it overlaps most, a call segment the speaker of the
reference turns (``two-speakers.stm``) it overlaps most. Diarization is not what this bench
measures (``bench/speakers.py`` does); owners can only be right when speakers are named.

For each model (``--llm`` repeats: a GGUF file run by the built-in llama.cpp server, or an
OpenAI-compatible URL paired in order with ``--model``; default: the offline starter
SmolLM2-135M-Instruct, installed with ``install_llm_starter`` into a temporary store), notes
are written as ``make_notes`` writes them (``language_model`` + ``write_notes``, meeting
template, the transcript's language) and scored:

- a planted item is *mentioned* when a decision, action item or key point of the notes
  (unsupported ones included) contains all its keywords (case-insensitive; a keyword is a
  stem: a word that starts with it matches), and *cited right* when such a point is
  supported and cites a segment that overlaps a script line within one line of where the
  item was planted;
- owner (and due day) right: of the planted action items mentioned in an action item, the
  share whose owner is the planted one (due: contains the planted day);
- citations that check out: supported points / all points (supported + unsupported), and
  the citations the check dropped (lines that do not exist or lie outside the part);
- parts: requests of the map step (a transcript longer than the context is read in parts);
- model s / audio min: wall time of ``write_notes`` per minute of audio (the built-in
  server's start is given apart);
- peak RSS of this process while the notes were written (VmHWM, reset after
  transcription; with a URL the server's own memory is not counted).

The first line gives the CPU, its flags (avx2, avx512_vnni, amx) and the llama.cpp threads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DEFAULT_CACHE,
    ROOT,
    built_model,
    cpu_flags,
    ct2_checkpoint,
    machine_line,
    markdown_table,
    normalize,
    peak_rss_mb,
)

EVAL = ROOT.parent / "shared" / "eval"
SR = 16000
GAP_S = 0.45  # silence between lines of the same speaker
TURN_GAP_S = 0.8  # silence where the speaker changes
SPEED = 160

VOICES = {"Anna": "en-us+f3", "Mark": "en-gb", "Sarah": "en-gb-x-rp+f4", "David": "en-us"}


@dataclass(frozen=True)
class Fact:
    """A planted decision or action item: the keywords (stems) that identify it, and for an
    action item the owner named in the line and the due day."""

    kind: str  # "decision" or "action"
    keywords: tuple[str, ...]
    owner: str | None = None
    due: str | None = None

    @property
    def name(self) -> str:
        return " ".join(self.keywords)


def D(*keywords: str) -> Fact:  # short on purpose, for the script below
    return Fact("decision", keywords)


def A(owner: str, due: str, *keywords: str) -> Fact:
    return Fact("action", keywords, owner, due)


# (speaker, line, planted fact or None). Filler never holds all keywords of a fact.
SCRIPT: list[tuple[str, str, Fact | None]] = [
    ("Anna", "Good morning everyone, thanks for joining the weekly planning call. We have a "
     "long list today, so let us try to keep each topic short and focused.", None),
    ("Mark", "Morning Anna. Before we start, the demo for the regional partners went well "
     "yesterday, and they asked lots of good questions about the dashboard.", None),
    ("Sarah", "That is great to hear. I read some of the feedback in the shared channel, and "
     "most of it was about the reporting page and how slow the filters feel.", None),
    ("David", "Yes, the filters are slow because every click reloads the whole table. We know "
     "how to fix it, it just needs a couple of days of quiet work.", None),
    ("Anna", "Okay, let us come back to speed later. The first item is the timeline for the "
     "new version, because several other teams are waiting on our dates.", None),
    ("Mark", "The engineering side is mostly done. We have a few open bugs in the export "
     "feature, and the translation files still need a final check from the agency.", None),
    ("Sarah", "From the marketing side we need at least three weeks of notice before any "
     "public announcement, so the date matters a lot for my team.", None),
    ("David", "I would rather not rush it. Last time we shipped too early and spent a month "
     "fixing problems that customers found in the first week.", None),
    ("Anna", "So we have decided. We will move the product launch to the twelfth of March, "
     "which gives everyone enough time to finish properly.", D("launch", "march")),
    ("Mark", "That works for engineering. It also means we can include the new search "
     "feature, which was almost ready but not quite tested.", None),
    ("Sarah", "Good, I will tell my team today. They were worried about writing the "
     "announcement for a feature set that kept changing every week.", None),
    ("David", "While we are on dates, the office will be closed on the Monday after the "
     "holiday, so please plan your own work around that.", None),
    ("Anna", "Thanks David. Next topic is money. Finance asked us for updated numbers for the "
     "second half of the year, and they need them soon.", None),
    ("Mark", "Anna, could you please update the budget spreadsheet with the new numbers by "
     "Friday, so finance can check it before the board meets?",
     A("Anna", "Friday", "budget", "spreadsheet")),
    ("Anna", "Yes, I can do that. I will need the cost of the new servers from you, David, "
     "and the agency invoices from you, Sarah.", None),
    ("David", "I will send you the server costs this afternoon. They went up a little, mostly "
     "because of storage and the extra backups we added.", None),
    ("Sarah", "And I have the agency invoices in my inbox, I will forward them after this "
     "call. Most of them are smaller than we expected.", None),
    ("Mark", "Speaking of servers, we need to talk about where we run everything. Our current "
     "provider had two long outages this quarter.", None),
    ("David", "Right. Two customers in Germany also asked where their data is stored, and "
     "they were not happy with the answer we gave them.", None),
    ("Sarah", "Legal told me the same thing. A few large customers will only sign if their "
     "data stays inside Europe, and that is a real sales problem.", None),
    ("Anna", "What are the options, David? I remember you looked at three different "
     "providers last month and wrote a comparison.", None),
    ("David", "Yes. Two of them are fine on paper, but only one has good support in our time "
     "zone and a clear plan for moving data safely.", None),
    ("Mark", "The move itself will take about two weeks of engineering time. We can do it "
     "over a weekend with a short maintenance window.", None),
    ("David", "Then it is agreed. We move our cloud hosting to the data centre in Frankfurt, "
     "because it keeps customer data inside Europe.", D("host", "frankfurt")),
    ("Sarah", "Great, that will help a lot in the sales calls. I will ask legal to update "
     "the privacy page once the move is finished.", None),
    ("Anna", "Good. Now, the phone app. Mark, where are we with it? I heard the testers "
     "found quite a few crashes last week.", None),
    ("Mark", "Honestly, it is not going well. The testers found crashes on older phones, and "
     "we only have one engineer who knows that code.", None),
    ("David", "And every week we spend there is a week we do not spend on the web version, "
     "which is what most of our paying customers use.", None),
    ("Sarah", "From my side, very few customers ask for it. Most of them open the product on "
     "a laptop at work, not on their phones.", None),
    ("Mark", "Our decision is to drop the mobile beta for now and put all our effort into "
     "the web version.", D("mobile", "beta")),
    ("Anna", "Agreed. We can look at it again next year when the team is bigger. Let us make "
     "sure the testers get a friendly thank you message.", None),
    ("Sarah", "I will write that message. Some of them gave us really useful notes, and I "
     "would like to keep them for future tests.", None),
    ("Anna", "Next, the new version needs a written summary of what changed, for customers "
     "and for our own help desk.", None),
    ("David", "Mark will write the release notes for the new version by Wednesday, and send "
     "them round to all of us for comments.", A("Mark", "Wednesday", "release note")),
    ("Mark", "Fine with me. Please send me anything you think customers should know, even "
     "small things, and I will put it in the right order.", None),
    ("Sarah", "I will send you the list of changes that marketing wants to highlight, mostly "
     "the search feature and the faster exports.", None),
    ("Anna", "Now the trade fair in May. Sarah, how are the preparations going? Last year we "
     "had nothing printed on time, and it showed.", None),
    ("Sarah", "This year we are earlier. The stand is booked, the posters are designed, and "
     "the printed handouts are almost ready to order.", None),
    ("Anna", "Sarah, please call the printing company about the brochure order before "
     "Tuesday, otherwise they cannot deliver in time.",
     A("Sarah", "Tuesday", "brochure")),
    ("Sarah", "Will do. I also want to ask them about recycled paper, several visitors "
     "mentioned it last year and it costs almost the same.", None),
    ("David", "Do we need any technical people at the fair? Last year we had questions about "
     "the programming interface that nobody could answer.", None),
    ("Mark", "I can send one of the engineers for two days. Someone who knows the export "
     "feature well, since that is what visitors ask about most.", None),
    ("Anna", "Good. Let us talk about customers now. The help desk is getting more tickets "
     "every month, and people wait too long for an answer.", None),
    ("David", "The waiting time went from one day to almost three days since January. Two "
     "people cannot answer all those tickets on their own.", None),
    ("Sarah", "It shows in the reviews too. Three of the last five reviews mention slow "
     "answers, even when people liked the product itself.", None),
    ("Anna", "We agreed to hire two more support engineers this quarter, so that the waiting "
     "time for customers goes down.", D("hir", "support")),
    ("Mark", "I can help with the interviews. We should look for people who can read logs, "
     "because many tickets are about failed imports.", None),
    ("David", "Before we add people, I would also like to know what customers actually think "
     "of us, not only the ones who write reviews.", None),
    ("Sarah", "David will set up the customer survey by Thursday, with no more than ten "
     "questions so people actually finish it.", A("David", "Thursday", "survey")),
    ("David", "Sure. I will keep it short and send the draft to all of you first, so you can "
     "add one question each if you want.", None),
    ("Anna", "Now, the new colleagues who joined this month. They need a proper "
     "introduction to the product, not just a pile of documents.", None),
    ("Mark", "Anna, please book the big meeting room for the training day by Monday, because "
     "it fills up quickly in spring.", A("Anna", "Monday", "room", "train")),
    ("Anna", "I will. We should also order lunch for that day. Last time people left at noon "
     "and never came back for the afternoon session.", None),
    ("Sarah", "I can present the marketing part in the morning, and David could show how the "
     "help desk works in the afternoon.", None),
    ("David", "Happy to. I will bring some real tickets, with the customer names removed, so "
     "they see the kind of questions we get.", None),
    ("Anna", "Next, the plans and what we charge. Sales asked whether we should change "
     "anything before the launch, since competitors moved recently.", None),
    ("Mark", "One competitor went up by twenty percent. The other one added a free tier with "
     "very few features, mostly to collect email addresses.", None),
    ("David", "Our cheapest plan is already popular with small teams. If we make it more "
     "expensive, I think many of them would simply leave.", None),
    ("Sarah", "Final decision then, the price of the basic plan stays at nine dollars a "
     "month for this whole year.", D("pric", "basic")),
    ("Mark", "Makes sense. We can look at the bigger plans later, when we know how the new "
     "features are received by customers.", None),
    ("Anna", "One more thing on the partnership with the design agency. They sent their "
     "final offer, and we need it signed soon.", None),
    ("Anna", "Mark, you need to send the signed contract to the lawyers by the end of next "
     "week at the latest.", A("Mark", "next week", "contract", "lawyer")),
    ("Mark", "Understood. I still have two small questions about the payment terms, I will "
     "ask the agency about those tomorrow morning.", None),
    ("Sarah", "Could you copy me on that email, Mark? The agency also works on our fair "
     "posters, and I want to keep the timing aligned.", None),
    ("David", "Back to the slow filters for a minute. I would like two days next sprint to "
     "fix them, before the new colleagues start using the product.", None),
    ("Mark", "That is fine. I will move the export bugs a bit later, they only affect a few "
     "customers with very large files.", None),
    ("Sarah", "Please tell me when the filters are faster. I would like to record a short "
     "video showing the reporting page for the announcement.", None),
    ("David", "One question about the export bugs. Do we know which customers are affected, "
     "so the help desk can warn them before they run into it?", None),
    ("Mark", "We have a list of about fifteen accounts. Most of them export once a month, so "
     "a short email should be enough for now.", None),
    ("Sarah", "I can write that email together with the help desk. We should keep the tone "
     "calm and explain when the fix will arrive.", None),
    ("Anna", "Good idea. Please also add a short note on the status page, so that people who "
     "do not read email still see it.", None),
    ("David", "I will ask the help desk to track how many people reply. If it is more than a "
     "handful, we should look at the bugs sooner.", None),
    ("Anna", "Any other topics? We have a few minutes left, so if something is bothering you, "
     "now is a good time to mention it.", None),
    ("David", "Just a reminder that everyone should change their passwords this month. The "
     "security check found a few very old ones.", None),
    ("Sarah", "And please add your holidays to the shared calendar. Summer is coming and we "
     "need to know who is around for the fair.", None),
    ("Mark", "Nothing from me. It was a productive meeting, thanks everyone. I will go and "
     "start on the list of changes right away.", None),
    ("Anna", "Thank you all. I will share the notes this afternoon, and we will meet again "
     "at the same time next week.", None),
]  # fmt: skip


# --------------------------------------------------------------------------- recordings


@dataclass
class Recording:
    name: str
    wav: Path
    duration: float
    lines: list[tuple[float, float, str]]  # script line (or reference turn) times, speaker
    facts: list[tuple[int, Fact]]  # planted (line index, fact)


def _has(text: str, keywords: tuple[str, ...]) -> bool:
    words = normalize(text)
    return all(re.search(r"\b" + re.escape(k.lower()), words) for k in keywords)


def _write_wav(path: Path, samples: np.ndarray) -> None:
    pcm = np.clip(np.rint(samples * 32767.0), -32768, 32767).astype("<i2")
    tmp = path.with_suffix(".tmp")
    with wave.open(str(tmp), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes(pcm.tobytes())
    tmp.replace(path)


def meeting_recording(work: Path) -> Recording:
    """The meeting script spoken line by line (cached in ``work``)."""
    facts = [(i, f) for i, (_, _, f) in enumerate(SCRIPT) if f is not None]
    for i, (_, text, _f) in enumerate(SCRIPT):  # the script's own check: facts stay apart
        for j, g in facts:
            if i != j and _has(text, g.keywords):
                raise SystemExit(f"script line {i} holds the keywords of line {j}: {text}")
    key = hashlib.sha256(json.dumps([SCRIPT, VOICES, SPEED, GAP_S, TURN_GAP_S],
                                    default=str).encode()).hexdigest()[:10]  # fmt: skip
    wav = work / f"meeting-{key}.wav"
    times = wav.with_suffix(".json")
    if not (wav.exists() and times.exists()):
        from deskscribe.audio.decode import decode_audio

        work.mkdir(parents=True, exist_ok=True)
        pieces, lines, t, last = [np.zeros(SR // 2, np.float32)], [], 0.5, None
        with tempfile.TemporaryDirectory() as tmp:
            for i, (who, text, _) in enumerate(SCRIPT):
                path = Path(tmp) / f"{i}.wav"
                subprocess.run(["espeak-ng", "-v", VOICES[who], "-s", str(SPEED), "-w",
                                str(path), text], check=True, capture_output=True)  # fmt: skip
                speech = decode_audio(path)
                speech = speech * (0.6 / max(1e-6, float(np.max(np.abs(speech)))))
                if last is not None:
                    gap = np.zeros(int((GAP_S if who == last else TURN_GAP_S) * SR), np.float32)
                    pieces.append(gap)
                    t += gap.shape[0] / SR
                pieces.append(speech.astype(np.float32))
                lines.append((t, t + speech.shape[0] / SR, who))
                t += speech.shape[0] / SR
                last = who
        pieces.append(np.zeros(SR // 2, np.float32))
        _write_wav(wav, np.concatenate(pieces))
        times.write_text(json.dumps(lines), encoding="utf-8")
    lines = [tuple(x) for x in json.loads(times.read_text(encoding="utf-8"))]
    with wave.open(str(wav)) as w:
        duration = w.getnframes() / w.getframerate()
    return Recording("meeting", wav, duration, lines, facts)


def call_recording() -> Recording:
    """The real call, with its reference turns (``two-speakers.stm``: start, end, name)."""
    turns = []
    for line in (EVAL / "two-speakers.stm").read_text(encoding="utf-8").splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and not line.startswith(";;"):
            turns.append((float(parts[3]), float(parts[4]), parts[2]))
    wav = EVAL / "two-speakers.wav"
    with wave.open(str(wav)) as w:
        duration = w.getnframes() / w.getframerate()
    return Recording("call", wav, duration, turns, [])


def overlapping(seg, lines) -> list[int]:
    """The lines (indices) a segment overlaps, most overlap first."""
    over = [(min(seg.end, b) - max(seg.start, a), i) for i, (a, b, _) in enumerate(lines)]
    return [i for o, i in sorted(over, reverse=True) if o > 0.05]


def whisper_folder(spec: str) -> Path:
    """A built model folder: ``spec`` itself, else the newest build of that name in the test
    cache (``.test-cache``, what the tests built), else one built into ``bench/out``."""
    if Path(spec).expanduser().is_dir():
        return Path(spec).expanduser()
    from deskscribe.models.build import BUILDER_VERSION

    cache = Path(os.environ.get("DESKSCRIBE_TEST_CACHE", ROOT / ".test-cache"))
    found = sorted(cache.glob(f"{spec}-fp32-b{BUILDER_VERSION}-*/manifest.json"),
                   key=lambda p: p.stat().st_mtime)  # fmt: skip
    if found:
        return found[-1].parent
    source = ct2_checkpoint(spec, DEFAULT_CACHE)
    return built_model(source, DEFAULT_CACHE / "models" / f"{spec}-fp32", "fp32", spec)[0]


def transcript_of(rec: Recording, folder: Path, work: Path, fresh: bool):
    """``rec`` transcribed (cached in ``work`` per recording and model), its segments given
    the known speakers; (transcript, seconds the transcription took, whether it was cached)."""
    from deskscribe.transcript import Transcript

    digest = hashlib.sha256(f"{rec.wav.resolve()}:{rec.wav.stat().st_size}:"
                            f"{folder.resolve()}".encode()).hexdigest()[:10]  # fmt: skip
    cached = work / f"{rec.name}-{digest}.transcript.json"
    was_cached = cached.exists() and not fresh
    if was_cached:
        data = json.loads(cached.read_text(encoding="utf-8"))
        transcript, took = Transcript.from_dict(data["transcript"]), data["took"]
    else:
        from deskscribe.whisper.model import WhisperModel
        from deskscribe.whisper.options import TranscribeOptions
        from deskscribe.whisper.transcribe import transcribe_file

        began = time.perf_counter()
        model = WhisperModel(folder, device="cpu")
        transcript = transcribe_file(model, rec.wav, TranscribeOptions(language="en"))
        took = time.perf_counter() - began
        del model
        work.mkdir(parents=True, exist_ok=True)
        data = {"took": took, "transcript": transcript.to_dict()}
        cached.write_text(json.dumps(data), encoding="utf-8")
    # Speakers from the script / reference turns, not diarized (not what this bench measures).
    names = sorted({who for _, _, who in rec.lines})
    ids = {name: f"S{k + 1}" for k, name in enumerate(names)}
    for seg in transcript.segments:
        over = overlapping(seg, rec.lines)
        seg.speaker = ids[rec.lines[over[0]][2]] if over else None
    transcript.speakers = {sid: name for name, sid in ids.items()}
    transcript.language = transcript.language or "en"
    return transcript, took, was_cached


# --------------------------------------------------------------------------- scoring


def score(notes, transcript, rec: Recording) -> dict:
    seg_lines = [overlapping(s, rec.lines) for s in transcript.segments]
    points = [(k, p) for k in ("decisions", "action_items", "key_points")
              for p in getattr(notes, k)] + list(notes.unsupported)  # fmt: skip
    items = []
    for line, fact in rec.facts:
        hits = [(k, p) for k, p in points if _has(p.text, fact.keywords)]
        right = [(k, p) for k, p in hits if p.lines and any(
            abs(j - line) <= 1 for i in p.lines for j in seg_lines[i])]  # fmt: skip
        as_action = [p for k, p in hits if k == "action_items"]
        near = [s.text for s, ls in zip(transcript.segments, seg_lines, strict=True)
                if any(abs(j - line) <= 1 for j in ls)]  # fmt: skip
        items.append({
            "kind": fact.kind, "keywords": list(fact.keywords), "line": line,
            "heard": _has(" ".join(near), fact.keywords),
            "owner": fact.owner, "due": fact.due,
            "mentioned": bool(hits), "cited_right": bool(right),
            "found_as": sorted({k for k, _ in hits}),
            "owner_right": any(p.owner == fact.owner for p in as_action) if as_action else None,
            "due_right": any(fact.due.lower() in (p.due or "").lower() for p in as_action)
            if as_action else None,
        })  # fmt: skip
    supported = sum(len(getattr(notes, k)) for k in ("decisions", "action_items", "key_points"))
    out = {
        "points": supported + len(notes.unsupported),
        "supported": supported,
        "citations_ok": supported / (supported + len(notes.unsupported))
        if supported + len(notes.unsupported)
        else None,
        "dropped_citations": notes.dropped,
        "chapters": len(notes.chapters),
        "items": items,
    }
    for kind in ("decision", "action"):
        mine = [x for x in items if x["kind"] == kind]
        out[f"{kind}s_planted"] = len(mine)
        out[f"{kind}s_heard"] = sum(x["heard"] for x in mine)
        out[f"{kind}s_mentioned"] = sum(x["mentioned"] for x in mine)
        out[f"{kind}s_cited_right"] = sum(x["cited_right"] for x in mine)
    judged = [x for x in items if x["owner_right"] is not None]
    out["actions_as_action_items"] = len(judged)
    out["owner_right"] = sum(x["owner_right"] for x in judged)
    out["due_right"] = sum(bool(x["due_right"]) for x in judged)
    return out


def reset_peak_rss() -> bool:
    """Reset this process's VmHWM (Linux: ``/proc/self/clear_refs`` 5), so that the next
    peak is the notes' own, not transcription's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- main


def models_from(args) -> list[tuple[str, object, Path | None]]:
    """(label, endpoint or None, gguf or None) for each ``--llm``."""
    from deskscribe.llm.endpoint import Endpoint

    out = []
    names = list(args.model or [])
    key = os.environ.get(args.api_key_env, "") if args.api_key_env else ""
    for spec in args.llm or []:
        if spec.startswith(("http://", "https://")):
            if not names:
                raise SystemExit(f"--llm {spec} needs a --model NAME (in the order of the URLs)")
            model = names.pop(0)
            out.append((f"{model} @ {spec}", Endpoint(spec.rstrip("/"), model, api_key=key,
                                                      label=spec), None))  # fmt: skip
        else:
            gguf = Path(spec).expanduser()
            if not gguf.is_file():
                raise SystemExit(f"no GGUF file at {gguf}")
            out.append((gguf.stem, None, gguf))
    if not out:
        from deskscribe.llm.store import install_llm_starter

        store = Path(tempfile.mkdtemp(prefix="deskscribe-notes-store-"))
        gguf = install_llm_starter(store)
        out.append((f"{gguf.stem} (offline starter)", None, gguf))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llm", action="append", help="a GGUF file or an OpenAI-compatible URL "
                   "(repeat for several; default: the offline starter)")  # fmt: skip
    p.add_argument("--model", action="append", help="the model name at each URL, in order")
    p.add_argument("--api-key-env", help="environment variable holding the URLs' API key")
    p.add_argument("--whisper", default="base", help="tiny.en, base or a built model folder")
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help="tokens of context (default: 8192 built in, 16384 for a URL)",
    )
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (built in)")
    p.add_argument("--recordings", default="meeting,call")
    p.add_argument("--work", type=Path, default=Path("/tmp/deskscribe-notes-bench"))
    p.add_argument("--fresh", action="store_true", help="transcribe again (audio stays cached)")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)

    from deskscribe.llm.embedded import EmbeddedLLM
    from deskscribe.llm.notes import budget, numbered_lines, parts_of, write_notes
    from deskscribe.service.language_model import language_model

    threads = args.threads or EmbeddedLLM(Path("x")).threads
    print(f"# notes, {machine_line(threads)}")
    print(f"llama.cpp threads: {threads} (built-in server); Whisper: ONNX Runtime's choice")
    folder = whisper_folder(args.whisper)
    recs = []
    for name in args.recordings.split(","):
        rec = meeting_recording(args.work) if name == "meeting" else call_recording()
        transcript, took, was_cached = transcript_of(rec, folder, args.work, args.fresh)
        when = f"transcribed in {took:.0f} s" + (" (cached from an earlier run)" if was_cached
                                                  else "")  # fmt: skip
        print(f"{rec.name}: {rec.duration / 60:.1f} min, {len(rec.lines)} script lines / turns, "
              f"{len(transcript.segments)} segments, {len(rec.facts)} planted; "
              f"{folder.name}, {when}")  # fmt: skip
        recs.append((rec, transcript, took))

    results, rows = [], []
    for label, endpoint, gguf in models_from(args):
        began = time.perf_counter()
        with language_model(endpoint, gguf, threads=threads, context=args.context) as model:
            start_s = time.perf_counter() - began
            for rec, transcript, _ in recs:
                reset_peak_rss()  # the peak below: the notes' own (the model's memory included)
                chars, _ = budget(model.context)
                parts = len(parts_of(numbered_lines(transcript), chars))
                t0 = time.perf_counter()
                error = None
                try:
                    notes = write_notes(transcript, model.endpoint, template="meeting",
                                        language=transcript.language, context=model.context)  # fmt: skip
                except Exception as err:  # an LLMError is a result too: say it, go on
                    error, notes = f"{type(err).__name__}: {str(err)[:300]}", None
                took = time.perf_counter() - t0
                minutes = rec.duration / 60
                r = {"model": label, "recording": rec.name, "audio_min": minutes,
                     "context": model.context, "parts": parts, "notes_s": took,
                     "model_s_per_audio_min": took / minutes, "start_s": start_s,
                     "peak_rss_mib": peak_rss_mb(), "error": error}  # fmt: skip
                if notes is not None:
                    r.update(score(notes, transcript, rec))
                    r["summary"] = notes.summary
                    r["notes"] = notes.to_dict(transcript)
                results.append(r)
                rows.append(row(r))
                detail(r)
    print()
    print(markdown_table(
        ["model", "recording", "audio min", "parts", "planted heard",
         "decisions mentioned / cited right", "actions mentioned / cited right", "owner right", "due right", "citations ok",
         "dropped", "model s / audio min", "start s", "peak RSS MiB"], rows))  # fmt: skip
    print("\nplanted heard: planted items whose keywords Whisper wrote within one line of "
          "where they were planted (what the model could find at best). "
          "mentioned: a decision, action item or key point holds the planted keywords; cited "
          "right: a supported one cites a segment within one script line of the planted one. "
          "owner / due right: of the planted actions found as action items. citations ok: "
          "supported points / all points (unsupported ones included).")  # fmt: skip
    print("\nWith a 4B model (far better notes than the 135M starter):\n"
          "  python bench/notes.py --llm http://127.0.0.1:11434/v1 --model qwen3:4b   # Ollama\n"
          "  python bench/notes.py --llm ~/models/Qwen3-4B-Instruct-2507-Q4_K_M.gguf")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "machine": machine_line(threads), "cpu_flags": cpu_flags(), "threads": threads,
            "whisper": str(folder), "date": time.strftime("%Y-%m-%d"),
            "load_avg": os.getloadavg(), "results": results}, indent=1), encoding="utf-8")  # fmt: skip
        print(f"\nwrote {args.json}")
    return 0


def row(r: dict) -> list[str]:
    def pct(x) -> str:
        return "–" if x is None else f"{x:.0%}"

    if r.get("error"):
        blank = ["–"] * 7
    elif r["decisions_planted"] + r["actions_planted"] == 0:
        cited = pct(r["citations_ok"]) + f" ({r['supported']}/{r['points']})"
        blank = ["–", "–", "–", "–", "–", cited, str(r["dropped_citations"])]
    else:
        heard = r["decisions_heard"] + r["actions_heard"]
        blank = [
            f"{heard} of {r['decisions_planted'] + r['actions_planted']}",
            f"{r['decisions_mentioned']} / {r['decisions_cited_right']} of {r['decisions_planted']}",
            f"{r['actions_mentioned']} / {r['actions_cited_right']} of {r['actions_planted']}",
            f"{r['owner_right']} of {r['actions_as_action_items']}",
            f"{r['due_right']} of {r['actions_as_action_items']}",
            pct(r["citations_ok"]) + f" ({r['supported']}/{r['points']})",
            str(r["dropped_citations"]),
        ]
    return [r["model"], r["recording"], f"{r['audio_min']:.1f}", str(r["parts"]), *blank,
            f"{r['model_s_per_audio_min']:.1f}", f"{r['start_s']:.1f}",
            f"{r['peak_rss_mib']:.0f}"]  # fmt: skip


def detail(r: dict) -> None:
    print(f"\n{r['model']} on {r['recording']}: {r['notes_s']:.0f} s of notes, {r['parts']} "
          f"part(s), context {r['context']}")  # fmt: skip
    if r.get("error"):
        print(f"  failed: {r['error']}")
        return
    print(f"  summary: {r['summary'][:240]!r}")
    for x in r["items"]:
        state = ("cited right" if x["cited_right"] else "mentioned, not cited right"
                 if x["mentioned"] else "missed")  # fmt: skip
        extra = ""
        if x["owner_right"] is not None:
            extra = f"; owner {'right' if x['owner_right'] else 'wrong'}, due " + (
                "right" if x["due_right"] else "wrong"
            )
        found = f" ({', '.join(x['found_as'])})" if x["found_as"] else ""
        found += "" if x["heard"] else " [not in the transcript]"
        print(
            f"  {x['kind']:8} line {x['line']:2} {' '.join(x['keywords']):24} {state}{found}{extra}"
        )


if __name__ == "__main__":
    sys.exit(main())
