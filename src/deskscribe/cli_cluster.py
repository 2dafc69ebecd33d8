"""``deskscribe transcribe --ray ADDRESS FILES...``: the command's batch spread over a Ray
cluster (the ``cluster`` extra), with the same refusals, progress bars, per-file errors, exports
and exit codes as on this computer. The runner is ``service.cluster``; imported only when
``--ray`` is given."""

from __future__ import annotations

import sys
from pathlib import Path

# `deskscribe transcribe` options a file job does not carry (they are the CLI's own tuning).
LOCAL_ONLY = (
    ("task", "transcribe", "--task"),
    ("beam_size", 5, "--beam-size"),
    ("word_timestamps", False, "--word-timestamps"),
    ("initial_prompt", None, "--initial-prompt"),
    ("condition_on_previous_text", False, "--condition-on-previous-text"),
    ("batch_size", 0, "--batch-size"),
    ("speaker_model", None, "--speaker-model"),
)


def transcribe_on_ray(args, subtitles=None) -> int:
    """``deskscribe transcribe --ray ADDRESS FILES...``: the files run as file jobs (those of
    the app's queue) spread over the cluster, a progress bar each; a file that fails says why
    and the others go on; outputs are written here, as without --ray (``subtitles``: the
    rules of SRT and VTT). Exit codes as there."""
    from tqdm import tqdm

    from .cli_progress import bar_progress, file_bar
    from .errors import ExtraMissing
    from .library.rescue import rescue_note

    try:
        from .service.cluster import ClusterError, run_on_cluster
    except ExtraMissing as e:
        print(f"deskscribe: {e}", file=sys.stderr)
        return 2
    from .service.files import plan_outputs
    from .service.jobs import FileJob
    from .transcript.export import FORMATS, ExportExistsError, export

    def err(message: str) -> None:
        tqdm.write(f"deskscribe: {message}", file=sys.stderr)

    formats = list(dict.fromkeys(f.strip().lower() for f in args.format.split(",") if f.strip()))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        err(f"unknown format {', '.join(unknown)}; use any of: {','.join(FORMATS)}")
        return 2
    for attr, default, flag in LOCAL_ONLY:
        if getattr(args, attr, default) != default:
            err(f"{flag} is not available with --ray: the cluster runs the app's file jobs "
                "(--model, --language(s), --speakers, --channels, --batched, --vocabulary); "
                "leave it out or transcribe without --ray")  # fmt: skip
            return 2
    if args.channels == "split" and args.speakers is not None:
        err("--channels split labels speakers by channel; leave out --speakers")
        return 2
    speakers = "channels" if args.channels == "split" else (args.speakers or "off")
    languages = tuple(c.strip() for c in (args.languages or "").split(",") if c.strip())
    failed = 0
    work: list[tuple[FileJob, list[Path]]] = []
    # The same refusals, in the same words, as without --ray.
    for path, targets, skipped in plan_outputs(args.files, args.output_dir, formats,
                                               args.overwrite):  # fmt: skip
        if skipped is not None:
            err(skipped)
            failed += 1
            continue
        job = FileJob(source=path, model=args.model, device=args.device, language=args.language,
                      languages=languages, speakers=speakers, batched=args.batched,
                      vocabulary=args.vocabulary, exports=tuple(formats))  # fmt: skip
        work.append((job, targets))
    if not work:
        return 1 if failed else 0
    bars = [file_bar(job.source.name, args.quiet, i) for i, (job, _t) in enumerate(work)]
    moves = [bar_progress(bar) for bar in bars]

    def progress(index: int, done: float, total: float, stage: str = "") -> None:
        moves[index](done, total, stage)

    def finished(index: int, result) -> None:
        nonlocal failed
        job, targets = work[index]
        path, bar = job.source, bars[index]
        if result.status == "done" and result.duration:
            bar.total = result.duration
            bar.update(result.duration - bar.n)
        bar.close()
        for note in result.notes:
            err(note)
        if result.status != "done" or result.transcript is None:
            message = result.error or result.status
            err(f"{path}: {message}" if str(path) not in message else message)
            failed += 1
            return
        try:
            targets[0].parent.mkdir(parents=True, exist_ok=True)
            for fmt, target in zip(formats, targets, strict=True):
                export(result.transcript, target, fmt, overwrite=args.overwrite,
                       timestamps=args.timestamps, subtitles=subtitles)  # fmt: skip
                if not args.quiet:
                    tqdm.write(str(target), file=sys.stderr)
        except (ExportExistsError, OSError, ValueError) as e:  # keep the work, say where
            err(f"{path}: " + rescue_note(result.transcript, path, f"the export failed ({e})"))
            failed += 1

    try:
        run_on_cluster(args.ray, [job for job, _ in work], progress=progress, on_result=finished,
                       threads=args.threads or None)  # fmt: skip
    except ClusterError as e:
        for bar in bars:
            bar.close()
        err(str(e))
        return 2
    return 1 if failed else 0
