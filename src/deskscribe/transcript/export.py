"""Export a :class:`Transcript` to TXT, SRT, VTT, JSON, Markdown, CSV, DOCX or RTTM.

``render`` builds the file contents in memory (``str``, or ``bytes`` for DOCX); ``export``
writes them atomically (temp file in the same folder, fsync, rename) and never replaces an
existing file unless asked to.

Speaker labels are shown by display name (``Transcript.speaker_name``). Conventions:

- TXT without timestamps: one line per speaker turn (consecutive segments of the same speaker
  joined), ``Name: text``; segments without a speaker get a line each, without a prefix.
  With ``timestamps=True``: one line per segment, ``[HH:MM:SS.mmm] Name: text``.
- Markdown and DOCX: one paragraph per segment, ``[MM:SS] Name: text`` (the name in bold).
- SRT/VTT: cues laid out by subtitle rules (``subtitles.SubtitleRules``: lines of at most 42
  characters, at most two lines, at most 7 s, a gap between cues; see ``subtitles.py``). The
  name is written before the first line at each segment's start and speaker change (SRT
  ``Name: text``), and VTT tags every cue with its voice (``<v Name>``). Rules turned off
  (``SubtitleRules(max_line_chars=None, max_lines=None, max_cue_seconds=None,
  min_cue_gap=0, min_cue_seconds=0)``) give one single-line cue per segment.
- CSV: one row per segment. Segments with empty text are left out of SRT/VTT (an empty cue
  breaks players), kept elsewhere.
- RTTM (NIST's who-spoke-when format, what diarization scorers read): one ``SPEAKER`` line
  per diarization turn (``Transcript.turns``; without turns, per run of same-speaker
  segments), the file id from the source's name, speakers by display name with whitespace
  as ``_``. A transcript without speakers gives an empty file.
- Times are rounded to the millisecond first, then split into fields, so 59.9996 s is
  ``00:01:00.000``, never a 60-second field. Negative times are clamped to 0.
"""

from __future__ import annotations

import csv
import errno
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import DeskScribeError
from ..fsutil import write_atomic
from .model import Segment, Transcript
from .subtitles import OVERLAP_MARK, Cue, SubtitleRules, cues

FORMATS = ("txt", "srt", "vtt", "json", "md", "csv", "docx", "rttm")
SUBTITLE_FORMATS = frozenset({"srt", "vtt"})  # laid out by ``SubtitleRules``, cut by word times
_ALIASES = {"markdown": "md", "text": "txt", "webvtt": "vtt"}
# Characters XML 1.0 (and so DOCX) cannot hold: C0 controls other than tab/newline/CR.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>~|])")
_MD_HEADING = re.compile(r"^([ \t]*)#", re.MULTILINE)  # '#' opens a heading only at a line's start


class ExportExistsError(DeskScribeError, FileExistsError):
    """The export target exists and ``overwrite`` was not given."""

    def __init__(self, path: Path) -> None:
        self.message = (
            f"{path} already exists; pass overwrite=True to replace it, or choose another file name"
        )
        super().__init__(errno.EEXIST, self.message, str(path))

    def __str__(self) -> str:
        return self.message


# --- time formatting -------------------------------------------------------------------------


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def format_timestamp(seconds: float, sep: str = ".") -> str:
    """``HH:MM:SS.mmm`` (``sep=","`` gives SRT's ``HH:MM:SS,mmm``); hours grow past 99."""
    h, rest = divmod(_ms(seconds), 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _seconds(seconds: float) -> str:
    """Seconds with exactly three decimals, rounded like the timestamps (CSV)."""
    whole, ms = divmod(_ms(seconds), 1000)
    return f"{whole}.{ms:03d}"


def format_clock(seconds: float) -> str:
    """Short reading clock: ``MM:SS``, or ``H:MM:SS`` from one hour on (whole seconds, floored)."""
    h, rest = divmod(_ms(seconds) // 1000, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


# --- helpers ---------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    """Collapse all whitespace (including newlines) so text fits a line-based format."""
    return " ".join(text.split())


def _label(transcript: Transcript, segment: Segment) -> str | None:
    return None if segment.speaker is None else transcript.speaker_name(segment.speaker)


def _said(segment: Segment) -> str:
    """The segment's text on one line, ``[overlapping]`` before it when a word of it was
    said while another speaker spoke."""
    text = _one_line(segment.text)
    return f"{OVERLAP_MARK} {text}" if text and any(w.overlap for w in segment.words) else text


def _title(transcript: Transcript) -> str:
    if transcript.source:
        name = Path(transcript.source.replace("\\", "/")).name
        if name:
            return name
    return "Transcript"


def _turns(transcript: Transcript) -> Iterator[tuple[str | None, list[Segment]]]:
    """Consecutive segments of the same (non-None) speaker; speaker-less segments stand alone."""
    current: list[Segment] = []
    for seg in transcript.segments:
        if current and seg.speaker is not None and seg.speaker == current[-1].speaker:
            current.append(seg)
            continue
        if current:
            yield current[0].speaker, current
        current = [seg]
    if current:
        yield current[0].speaker, current


# --- renderers -------------------------------------------------------------------------------


def _render_txt(transcript: Transcript, timestamps: bool) -> str:
    lines: list[str] = []
    if timestamps:
        for seg in transcript.segments:
            label = _label(transcript, seg)
            prefix = f"[{format_timestamp(seg.start)}] " + (f"{label}: " if label else "")
            lines.append((prefix + _said(seg)).rstrip())
    else:
        for speaker, segs in _turns(transcript):
            text = " ".join(t for t in (_said(s) for s in segs) if t)
            if speaker is not None:
                lines.append(f"{transcript.speaker_name(speaker)}: {text}".rstrip())
            else:
                lines.append(text)
    return "\n".join(lines) + "\n" if lines else ""


def _render_srt(transcript: Transcript, rules: SubtitleRules) -> str:
    blocks: list[str] = []
    for number, cue in enumerate(cues(transcript, rules), start=1):
        lines = [cue.first_line, *cue.lines[1:]]
        text = "\n".join(lines).replace("-->", "->")
        blocks.append(
            f"{number}\n"
            f"{format_timestamp(cue.start, ',')} --> {format_timestamp(cue.end, ',')}\n"
            f"{text}\n"
        )
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _vtt_text(transcript: Transcript, cue: Cue, rules: SubtitleRules) -> str:
    text = "\n".join(_vtt_escape(line) for line in cue.lines)
    if cue.language and transcript.language and cue.language != transcript.language:
        text = f"<lang {cue.language}>{text}</lang>"  # a part in another language
    if cue.overlap:
        text = f"{OVERLAP_MARK} {text}"
    if cue.speaker and rules.speaker_names:
        text = f"<v {_vtt_escape(cue.speaker)}>{text}"
    return text


def _render_vtt(transcript: Transcript, rules: SubtitleRules) -> str:
    parts = ["WEBVTT\n"]
    for cue in cues(transcript, rules):
        times = f"{format_timestamp(cue.start)} --> {format_timestamp(cue.end)}"
        parts.append(f"{times}\n{_vtt_text(transcript, cue, rules)}\n")
    return "\n".join(parts)


def md_escape(text: str) -> str:
    """``text`` shown literally in Markdown (CommonMark, GitHub's, Qt's): inline marks are
    escaped, and a '#' at the start of a line, where it would open a heading (the text may
    start a line or a list item); a '#' inside a line is plain text and is left as it is."""
    return _MD_HEADING.sub(r"\1\\#", _MD_SPECIAL.sub(r"\\\1", text))


NotesLine = tuple[str, list[float]]  # a point's text, and the times of the lines it cites


def notes_sections(notes: dict) -> tuple[str, list[tuple[str, list[NotesLine]]]]:
    """Stored notes (``Transcript.notes``) as (summary, [(heading, [(text, times)])]), what
    cited nothing under "Not found in the transcript". Defensive: the stored notes may have
    been edited by hand."""

    def text(v) -> str:
        return _one_line(str(v or ""))

    def times(ts) -> list[float]:
        ts = ts if isinstance(ts, list) else []
        return [float(t) for t in ts if isinstance(t, (int, float)) and not isinstance(t, bool)]

    def listed(key) -> list:
        value = notes.get(key)
        return value if isinstance(value, list) else []

    cited = notes.get("cited") if isinstance(notes.get("cited"), dict) else {}
    sections: list[tuple[str, list[NotesLine]]] = []
    for key, heading in (("key_points", "Key points"), ("decisions", "Decisions")):
        cites = cited.get(key) if isinstance(cited.get(key), list) else []
        sections.append((heading, [(text(p), times(cites[i] if i < len(cites) else []))
                                   for i, p in enumerate(listed(key))]))  # fmt: skip
    actions = []
    for a in listed("action_items"):
        if isinstance(a, dict):
            who = f"{text(a.get('owner'))}: " if a.get("owner") else ""
            due = f" (due {text(a.get('due'))})" if a.get("due") else ""
            actions.append((f"{who}{text(a.get('text'))}{due}", times([a.get("start")])))
    sections.append(("Action items", actions))
    sections.append(("Chapters", [(text(c.get("title")), times([c.get("start")]))
                                  for c in listed("chapters") if isinstance(c, dict)]))  # fmt: skip
    unsupported = [(text(u.get("text")), []) for u in listed("unsupported") if isinstance(u, dict)]
    if unsupported:
        sections.append(("Not found in the transcript (check before use)", unsupported))
    return text(notes.get("summary")), sections


def notes_credit(notes: dict) -> str:
    model = _one_line(str(notes.get("model") or "a language model"))
    return f"Notes written by {model}; check them against the transcript."


def _cited(line: NotesLine) -> str:
    text, times = line
    return text + (f" ({', '.join(format_clock(t) for t in times)})" if times else "")


def notes_markdown(notes: dict, level: int = 1) -> str:
    """Stored notes as Markdown (``level``: the heading level of "Notes"); the user's own
    edit of them (``notes["edited"]``) when there is one."""
    h = "#" * level
    edited = notes.get("edited")
    if isinstance(edited, str) and edited.strip():
        return f"{h} Notes\n\n{edited.strip()}\n"
    summary, sections = notes_sections(notes)
    out = [f"{h} Notes", "", md_escape(summary) or "_(no summary)_", ""]
    for heading, lines in sections:
        out += [f"{h}# {heading}", ""]
        out += [f"- {md_escape(_cited(x))}" for x in lines] or ["_none_"]
        out.append("")
    out += [f"_{md_escape(notes_credit(notes))}_", ""]
    return "\n".join(out)


def _render_md(transcript: Transcript) -> str:
    out = [f"# {md_escape(_title(transcript))}", ""]
    if transcript.notes:
        out += [notes_markdown(transcript.notes, level=2), "## Transcript", ""]
    for seg in transcript.segments:
        label = _label(transcript, seg)
        who = f" **{md_escape(_one_line(label))}:**" if label else ""
        line = f"[{format_clock(seg.start)}]{who} {md_escape(_said(seg))}"
        out += [line.rstrip(), ""]
    return "\n".join(out)


def _csv_cell(text: str) -> str:
    """Text that a spreadsheet would run as a formula ("=HYPERLINK(…)", "+1", "@SUM") gets a
    leading apostrophe, which spreadsheets show as plain text (OWASP's CSV-injection rule)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _render_csv(transcript: Transcript) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)  # excel dialect: quotes fields with , " or newlines; CRLF rows
    writer.writerow(["start", "end", "speaker", "text", "language"])
    for seg in transcript.segments:
        writer.writerow(
            [
                _seconds(seg.start),
                _seconds(seg.end),
                _csv_cell(_label(transcript, seg) or ""),
                _csv_cell(seg.text.strip()),
                _csv_cell(seg.language or transcript.language or ""),
            ]
        )
    return buf.getvalue()


def _rttm_field(text: str, default: str) -> str:
    return re.sub(r"\s+", "_", text.strip()) or default


def _render_rttm(transcript: Transcript) -> str:
    file_id = _rttm_field(Path(transcript.source).stem if transcript.source else "", "audio")
    if transcript.turns:
        spans = [(t.start, t.end, t.speaker) for t in transcript.turns]
    else:
        spans = []
        for seg in transcript.segments:
            if seg.speaker is None or seg.end <= seg.start:
                continue
            if spans and spans[-1][2] == seg.speaker:
                spans[-1] = (spans[-1][0], max(spans[-1][1], seg.end), seg.speaker)
            else:
                spans.append((seg.start, seg.end, seg.speaker))
    lines = []
    for start, end, who in spans:
        a, b = _ms(start), _ms(end)
        if b <= a:
            continue
        name = _rttm_field(transcript.speaker_name(who), "speaker")
        lines.append(
            f"SPEAKER {file_id} 1 {a / 1000:.3f} {(b - a) / 1000:.3f} <NA> <NA> {name} <NA> <NA>\n"
        )
    return "".join(lines)


def _render_docx(transcript: Transcript) -> bytes:
    import docx  # python-docx; imported here so the model stays light to import
    from docx.shared import RGBColor

    def clean(text: str) -> str:
        return _XML_INVALID.sub("", text)

    document = docx.Document()
    title = clean(_title(transcript))
    document.core_properties.title = title
    document.add_heading(title, level=1)
    if transcript.notes:
        summary, sections = notes_sections(transcript.notes)
        document.add_heading("Notes", level=2)
        edited = transcript.notes.get("edited")
        if isinstance(edited, str) and edited.strip():  # the user's own words, as written
            for para in edited.strip().split("\n\n"):
                document.add_paragraph(clean(para))
        else:
            document.add_paragraph(clean(summary))
            for heading, lines in sections:
                if lines:
                    document.add_heading(clean(heading), level=3)
                for line in lines:
                    document.add_paragraph(clean(_cited(line)), style="List Bullet")
        document.add_paragraph(clean(notes_credit(transcript.notes))).runs[0].italic = True
        document.add_heading("Transcript", level=2)
    for seg in transcript.segments:
        para = document.add_paragraph()
        stamp = para.add_run(f"[{format_clock(seg.start)}] ")
        stamp.font.color.rgb = RGBColor(0x70, 0x70, 0x70)
        label = _label(transcript, seg)
        if label:
            para.add_run(clean(_one_line(label)) + ":").bold = True
            para.add_run(" ")
        if any(w.overlap for w in seg.words) and seg.text.strip():
            para.add_run(OVERLAP_MARK + " ").italic = True
        para.add_run(clean(seg.text.strip()))
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


# --- public API ------------------------------------------------------------------------------


def _normalize_format(fmt: str) -> str:
    key = fmt.strip().lower().lstrip(".")
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; supported formats: {', '.join(FORMATS)}")
    return key


def render(
    transcript: Transcript,
    fmt: str,
    *,
    timestamps: bool = False,
    subtitles: SubtitleRules | None = None,
) -> str | bytes:
    """The contents of ``transcript`` in ``fmt`` (one of :data:`FORMATS`).

    Returns ``bytes`` for DOCX, ``str`` otherwise. ``timestamps`` only changes TXT (the other
    formats always carry times); ``subtitles`` only SRT and VTT (None: ``SubtitleRules()``).
    Unknown formats raise ``ValueError``.
    """
    key = _normalize_format(fmt)
    if key == "txt":
        return _render_txt(transcript, timestamps)
    if key == "srt":
        return _render_srt(transcript, subtitles or SubtitleRules())
    if key == "vtt":
        return _render_vtt(transcript, subtitles or SubtitleRules())
    if key == "json":
        return transcript.to_json()
    if key == "md":
        return _render_md(transcript)
    if key == "csv":
        return _render_csv(transcript)
    if key == "rttm":
        return _render_rttm(transcript)
    return _render_docx(transcript)


def export(
    transcript: Transcript,
    path: str | os.PathLike[str],
    fmt: str | None = None,
    *,
    overwrite: bool = False,
    timestamps: bool = False,
    private: bool = False,
    subtitles: SubtitleRules | None = None,
) -> Path:
    """Write ``transcript`` to ``path`` atomically and return the path (``private``: readable
    by this user only, as the library's own copies are; ``subtitles``: SRT/VTT's rules).

    ``fmt`` defaults to the file's suffix. Text formats are UTF-8 (CSV with a byte-order mark so
    spreadsheet apps detect it). An existing file raises :class:`ExportExistsError` unless
    ``overwrite=True``; either way a reader never sees a half-written file, and no temp file is
    left behind on failure.
    """
    target = Path(path)
    if fmt is None:
        if not target.suffix:
            raise ValueError(
                f"cannot tell the export format of {target}: give fmt or a file suffix "
                f"(supported formats: {', '.join(FORMATS)})"
            )
        fmt = target.suffix
    key = _normalize_format(fmt)
    if not overwrite and os.path.lexists(target):
        raise ExportExistsError(target)

    content = render(transcript, key, timestamps=timestamps, subtitles=subtitles)
    if isinstance(content, str):
        content = content.encode("utf-8-sig" if key == "csv" else "utf-8")
    try:
        write_atomic(target, content, private=private, replace=overwrite)
    except FileExistsError:  # created since the check above: still never replaced
        raise ExportExistsError(target) from None
    return target
