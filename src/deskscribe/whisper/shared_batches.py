"""Batches shared between transcriptions: chunks of several files decoded together.

The batched path (``batched.py``) decodes the chunks of one file in batches. A server running
several requests at once would otherwise decode each request's batches on their own, and a
short request (one chunk) would be a batch of one. ``SharedBatches`` merges the decode calls
of transcriptions that run at the same time on the same model with the same decoding
settings into one batch: the first call waits a moment (``linger_s``) for the others while
one of them is between batches (encoding, or reading its audio), decodes all of them as one
batch, and hands each caller its own results. Throughput grows with load; a lone
transcription, or one whose peers are all decoding already, does not wait at all.

Each transcription takes a :class:`Member` (``with shared.member() as m``) and passes it as
``transcribe_file(..., shared=)``; the calls of one member are never merged with each other (its
lanes run side by side on their own threads already).

On the CPU calls are merged only when asked for (``on_cpu``): there the batched path already
runs one lane per core on its own batches, and two requests' calls merged into one lane leave
a core idle; on the bench (2 cores, tiny.en int8, 4-8 streams) merging changed throughput by
-8 to +11 %, within the noise. A GPU is where one larger batch pays.

Rows of a batch are decoded independently (beam search per row), so with float weights a
merged call gives each caller the text it gets alone (the tests hold it to that). The int8
variant (CPU only) quantizes each matmul's input with one scale for the whole batch, so it
decodes each window of a batch on its own (``WhisperModel.batches_share_scales``): merged
calls keep each caller's words, and with int8, merging on the CPU saves nothing but waiting.
Cancelling one member stops only its own work: a merged batch stops early only
once every member in it was cancelled.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .model import AudioFeatures

LINGER_S = 0.1  # how long a batch waits at most for the calls of other transcriptions


class Member:
    """One transcription's handle on ``SharedBatches`` (its identity: its calls never merge
    with each other)."""

    def __init__(self, shared: SharedBatches) -> None:
        self.shared = shared

    def decode(self, model, features: AudioFeatures, key: object, halt, run: Callable) -> list:
        return self.shared.decode(self, model, features, key, halt, run)


@dataclass
class _Entry:
    member: Member
    features: AudioFeatures
    halt: object  # the caller's cancel check (``is_set``), counted per step for its progress
    done: threading.Event = field(default_factory=threading.Event)
    results: list | None = None
    error: BaseException | None = None


@dataclass
class _Group:
    entries: list[_Entry]
    rows: int
    full: threading.Event = field(default_factory=threading.Event)

    def owners(self) -> set[int]:
        return {id(e.member) for e in self.entries}


class _AllSet:
    """A merged batch's cancel check: every member's check is asked at each step (each
    counts its steps), and the batch stops only when all of them are set."""

    def __init__(self, entries: list[_Entry]) -> None:
        self.entries = entries

    def is_set(self) -> bool:
        flags = [e.halt.is_set() if e.halt is not None else False for e in self.entries]
        return all(flags)


class SharedBatches:
    """Decode calls of concurrent transcriptions merged into batches of up to ``max_rows``
    windows (see the module docstring)."""

    def __init__(
        self, max_rows: int = 16, linger_s: float = LINGER_S, on_cpu: bool = False
    ) -> None:
        self.max_rows = max(1, max_rows)
        self.linger_s = linger_s
        self.on_cpu = on_cpu
        self._lock = threading.Lock()
        self._open: dict[object, _Group] = {}
        self._members = 0
        self._decoding: dict[int, int] = {}  # member id -> its calls running now
        self.merged_calls = 0  # calls that ran inside another call's batch
        self.batches = 0  # batches run (merged or not)

    @contextlib.contextmanager
    def member(self) -> Iterator[Member]:
        m = Member(self)
        with self._lock:
            self._members += 1
        try:
            yield m
        finally:
            with self._lock:
                self._members -= 1

    def _idle_peers(self, group: _Group) -> int:
        """Members outside ``group`` that are not decoding now: they may call soon."""
        inside = group.owners()
        busy = sum(1 for m, n in self._decoding.items() if n > 0 and m not in inside)
        return self._members - len(inside) - busy

    def decode(self, member: Member, model, features: AudioFeatures, key, halt, run) -> list:
        """``run(model, features, halt)`` for ``features`` alone or merged with other members'
        calls of the same ``key`` (the model and every decoding setting); its results."""
        if not (self.on_cpu or model.sessions.on_gpu):
            return run(model, features, halt)
        entry = _Entry(member, features, halt)
        full_key = (id(model), key)
        with self._lock:
            group = self._open.get(full_key)
            joins = (
                group is not None
                and id(member) not in group.owners()
                and group.rows + features.batch <= self.max_rows
            )
            if joins:
                group.entries.append(entry)
                group.rows += features.batch
                self.merged_calls += 1
                if group.rows >= self.max_rows or self._idle_peers(group) <= 0:
                    del self._open[full_key]
                    group.full.set()
            else:
                group = _Group([entry], features.batch)
                # Worth waiting only for peers that may call soon (and never in place of a
                # batch that is open already: this call could not join it, so runs alone).
                opened = full_key in self._open
                if not opened and features.batch < self.max_rows and self._idle_peers(group) > 0:
                    self._open[full_key] = group
                else:
                    group.full.set()
        if joins:
            entry.done.wait()
            if entry.error is not None:
                raise entry.error
            return entry.results
        self._lead(full_key, group, model, run)
        if entry.error is not None:
            raise entry.error
        return entry.results

    def _lead(self, full_key, group: _Group, model, run) -> None:
        deadline = time.monotonic() + self.linger_s
        while not group.full.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or group.full.wait(left):
                break
        with self._lock:
            if self._open.get(full_key) is group:
                del self._open[full_key]
            entries = list(group.entries)  # closed: nobody joins any more
            self.batches += 1
            for e in entries:
                self._decoding[id(e.member)] = self._decoding.get(id(e.member), 0) + 1
        try:
            if len(entries) == 1:
                results = run(model, entries[0].features, entries[0].halt)
                parts = [results]
            else:
                merged = _concat([e.features for e in entries])
                results = run(model, merged, _AllSet(entries))
                parts, at = [], 0
                for e in entries:
                    parts.append(results[at : at + e.features.batch])
                    at += e.features.batch
            for e, part in zip(entries, parts, strict=True):
                e.results = part
        except BaseException as err:  # every caller of the batch gets the failure
            for e in entries:
                e.error = err
        finally:
            with self._lock:
                for e in entries:
                    left = self._decoding[id(e.member)] - 1
                    if left:
                        self._decoding[id(e.member)] = left
                    else:
                        del self._decoding[id(e.member)]
            for e in entries:
                e.done.set()


def _concat(parts: list[AudioFeatures]) -> AudioFeatures:
    hosts = [p.to_host() for p in parts]
    return AudioFeatures(
        [np.concatenate(layer) for layer in zip(*(h.cross_k for h in hosts), strict=True)],
        [np.concatenate(layer) for layer in zip(*(h.cross_v for h in hosts), strict=True)],
        sum(h.batch for h in hosts),
    )
