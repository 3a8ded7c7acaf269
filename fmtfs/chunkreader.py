"""The bytes of indexed views, piece by piece (a piece: one chunk's
rendered lines of one view), for the mount's reads, `fmtfs cat`, the
Parquet twins and Spark.

Threading: the StreamEntry a reader holds is an immutable snapshot
(fmtfs.entries), used without a lock.  Rendered pieces are keyed by the
chunk's file, start and end, so a piece rendered from an older snapshot is
still right for a newer one.  The rendered-piece LRU owns its lock
(fmtfs.chunkcache); a chunk missed by several concurrent readers (the
kernel's readahead sends several requests for one region at once) is
decoded once: the first reader decodes, the others wait for it (single
flight).  With a DecodePool (the mount gives one: `use_pool`), a missed
chunk and the few after it are decoded by worker processes at once, so a
sequential reader finds the next chunks rendered and every core decodes;
a reader of a rendered chunk sends the next ones, so the workers never wait
for it.  Workers render the reader's view only (a Beats chunk also feeds
its hour buckets: rendering, sending and caching those made a `cat` of the
segments pay for twice its bytes); they append what they render to the
mount's spill file (fmtfs.spill) and say where, and readers slice it from
there (or, without a spill file, the bytes land in the LRU, bounded in
bytes).  Until the workers are up, a reader decodes in process.
A piece the index's scan kept (fmtfs.keptpieces) is read back from the
store instead of decoded."""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from fmtfs.chunkcache import DecodedChunks, RenderedChunks
from fmtfs.decoders import DecodePool
from fmtfs.entries import ChunkMeta, StreamEntry
from fmtfs.formats.base import Chunk, State
from fmtfs.keptpieces import KeptPieces
from fmtfs.render import render_chunk
from fmtfs.spill import Spilled, SpilledPieces

log = logging.getLogger("fmtfs")

Produced = TypeVar("Produced")


class ChunkReader:
    """Reads the views of one source's index entries: its caches, its
    single flights and the decode pool the mount gives it."""

    def __init__(self, kept: KeptPieces | None) -> None:
        """`kept`: the index's store of kept pieces (None: none kept)."""
        self.kept = kept
        self.rendered = RenderedChunks()
        self.decoded = DecodedChunks()
        # chunks being decoded now -> set when their pieces are in `rendered`
        self._flights: dict[tuple, threading.Event] = {}
        self._flights_lock = threading.Lock()
        self._kept_flights: dict[tuple, threading.Event] = {}  # kept pieces being read (under _flights_lock)
        self.pool: DecodePool | None = None  # decode in worker processes (use_pool)
        self._pending: dict[tuple, Future] = {}  # chunks the pool is decoding (under _flights_lock)

    def use_pool(self, pool: DecodePool) -> None:
        """Decode missed chunks in `pool`'s workers from now on (the mount)."""
        self.pool = pool

    def spill_to(self, spill: SpilledPieces) -> None:
        """Pieces the LRU evicts go to `spill` from now on (the mount)."""
        self.rendered.spill = spill

    def close(self) -> None:
        if self.rendered.spill is not None:
            self.rendered.spill.close()

    def forget_stream(self, name: str) -> None:
        """Drop the stream's pieces (its file changed, or is gone)."""
        self.rendered.drop_stream(name)

    def read(self, entry: StreamEntry, view: str, offset: int, size: int) -> bytes:
        """Bytes [offset, offset+size) of `view`, rendering only the chunks hit."""
        data = self._read(entry, view, offset, size, self._slice)
        assert data is not None  # _slice always finds the bytes
        return data

    def read_in_memory(self, entry: StreamEntry, view: str, offset: int, size: int) -> bytes | None:
        """read()'s bytes if every piece they come from is in the LRU, or in
        the spill file with its pages cached, else None.  No decode, no wait
        for a disk: the FUSE loop answers with it itself, since handing a
        request to a thread cost more than slicing the bytes (py-spy of a
        re-read)."""
        return self._read(entry, view, offset, size, self._slice_in_memory)

    def _read(self, entry: StreamEntry, view: str, offset: int, size: int, fetch) -> bytes | None:
        pieces = entry.views.get(view)
        if pieces is None or offset >= pieces.size or size <= 0:
            return b""
        out = []
        i = bisect.bisect_right(pieces.ends, offset)
        end = min(offset + size, pieces.size)
        while offset < end and i < len(pieces.seqs):
            piece_start = pieces.ends[i - 1] if i else 0
            data = fetch(entry, view, pieces.seqs[i], offset - piece_start, end - piece_start)
            if data is None:
                return None
            out.append(data)
            offset = pieces.ends[i]
            i += 1
        return b"".join(out)

    def _slice(self, entry: StreamEntry, view: str, seq: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of a chunk's piece: from the LRU, else the
        spill file (only those bytes), else rendered."""
        data = self._slice_in_memory(entry, view, seq, start, end)
        spill = self.rendered.spill
        if data is None and spill is not None:
            data = spill.get((*self._chunk_key(entry, seq), view), start, end)
        if data is None:
            found = self._piece(entry, view, seq)
            if isinstance(found, bytes):
                data = found[start:end]
            else:  # a worker's, in the spill file: only the bytes asked for
                assert spill is not None
                data = spill.read(found, start, end)
        return data

    def _slice_in_memory(self, entry: StreamEntry, view: str, seq: int, start: int, end: int) -> bytes | None:
        key = (*self._chunk_key(entry, seq), view)
        data = self.rendered.in_memory(key)
        if data is not None:
            data = data[start:end]
        elif self.rendered.spill is not None:
            # in the spill file with its pages cached: the workers' pieces,
            # and those the LRU evicted (a hole in a view read again)
            data = self.rendered.spill.get_cached(key, start, end)
        if data is not None and self.pool is not None and self.pool.ready:
            # keep the workers busy: a reader going forward finds the next
            # chunks decoded, instead of waiting at every 2 x workers chunks
            # (nothing is sent for chunks rendered or kept already)
            self._decode_ahead(entry, seq + 1, view, wait=False)
        return data

    @staticmethod
    def _chunk_key(entry: StreamEntry, seq: int) -> tuple:
        # what a chunk renders to depends on its file and bounds only
        meta = entry.chunks[seq]
        return (entry.stream.name, entry.identity.inode, meta.start, meta.end)

    def piece(self, entry: StreamEntry, view: str, seq: int) -> bytes:
        """The chunk's rendered lines of `view`, all of them."""
        found = self._piece(entry, view, seq)
        if isinstance(found, bytes):
            return found
        assert self.rendered.spill is not None  # workers append only where there is one
        return self.rendered.spill.read(found)

    def _piece(self, entry: StreamEntry, view: str, seq: int) -> bytes | Spilled:
        """piece(), or where a worker appended it in the spill file."""
        meta = entry.chunks[seq]
        chunk_key = self._chunk_key(entry, seq)
        data = self.rendered.get((*chunk_key, view))
        if data is None:
            data = self._from_kept(entry, view, seq, chunk_key)
        if data is not None:
            return data
        if self.pool is not None:
            if self.pool.ready or (*chunk_key, view) in self._pending:
                future = self._decode_ahead(entry, seq, view)
                assert future is not None
                try:
                    return future.result().get(view, b"")
                except Exception:  # noqa: BLE001 - a worker that died: decode here, reporting as ever
                    log.warning(
                        "a decode worker failed on %s chunk %d; decoding in process", entry.stream.name, seq
                    )
            else:
                # workers not up (a second each: they start with the first
                # piece to decode) do not keep the first reader waiting: it
                # decodes this chunk here, and the workers take the next ones
                # as soon as they are up
                self.pool.start()
                if self._sequential(entry, seq, view):
                    self._decode_ahead(entry, seq + 1, view, wait=False, forward=True)
        return self._once(
            self._flights,
            chunk_key,
            lambda: self.rendered.get((*chunk_key, view)),
            lambda: self._render(entry, meta, chunk_key, view),
        )

    def _once(
        self,
        flights: dict[tuple, threading.Event],
        key: tuple,
        found: Callable[[], Produced | None],
        produce: Callable[[], Produced],
    ) -> Produced:
        """produce() in one thread at a time per key (single flight): the
        kernel's readahead asks for several parts of one piece at once.  A
        thread finding another producing `key` waits for it and takes
        found() (the LRU), or produces it itself when that finds nothing
        (evicted already, or the leader failed)."""
        with self._flights_lock:
            flight = flights.get(key)
            leading = flight is None
            if leading:
                flight = flights[key] = threading.Event()
        if not leading:
            flight.wait()
            data = found()
            return data if data is not None else produce()
        try:
            return produce()
        finally:
            with self._flights_lock:
                del flights[key]
            flight.set()

    def _from_kept(self, entry: StreamEntry, view: str, seq: int, chunk_key: tuple) -> bytes | None:
        """The piece from the store of kept pieces (into the LRU, not the
        spill file: a reader asks for the rest of it next), or None; read
        and decompressed once however many readers ask at a time."""
        kept = entry.kept.get((view, seq))
        store = self.kept
        if kept is None or store is None:
            return None
        key = (*chunk_key, view)

        def read() -> bytes | None:
            data = store.get(kept)
            if data is not None:
                self.rendered.put(key, data, spill=False)
            return data

        return self._once(self._kept_flights, key, lambda: self.rendered.get(key), read)

    def _decode_ahead(
        self, entry: StreamEntry, seq: int, view: str, wait: bool = True, forward: bool = False
    ) -> Future | None:
        """Send chunk `seq` and the next few of its stream to the pool (those
        neither rendered nor on their way); returns the future of `seq`.
        With wait=False (a reader of chunk seq-1 keeping the pool busy) `seq`
        is sent only if not rendered either, and nothing is returned.
        forward: the reader is known to go forward (else: seq-1 was read)."""
        assert self.pool is not None
        if seq >= len(entry.chunks):
            return None
        # ahead only for a reader going forward (the chunk before this one was
        # just read): the kernel drops a few pages of a kept view now and then,
        # and a warm re-read missing one of them must not decode 2×workers chunks
        ahead = 2 * self.pool.workers if forward or self._sequential(entry, seq, view) else int(wait)
        submitted: list[tuple[tuple, Future]] = []
        with self._flights_lock:
            wanted = None
            for s in range(seq, min(seq + ahead, len(entry.chunks))):
                meta = entry.chunks[s]
                # the workers render the reader's view only: pending per view
                key = (*self._chunk_key(entry, s), view)
                future = self._pending.get(key)
                needed = wait and s == seq
                # a kept piece is read back when asked for, never decoded ahead
                ahead_needed = key not in self.rendered and (view, s) not in entry.kept
                if future is None and (needed or ahead_needed):
                    if not needed and len(self._pending) >= 2 * ahead:
                        break  # enough decoded ahead already: memory stays bounded
                    future = self._pool_submit(key, meta.state)
                    self._pending[key] = future
                    submitted.append((key, future))
                if s == seq:
                    wanted = future
            assert wanted is not None or not wait
        # outside the lock: a future already done runs its callback right here,
        # and _landed takes the lock itself
        for key, future in submitted:
            future.add_done_callback(lambda f, key=key: self._landed(key, f))
        return wanted

    def _sequential(self, entry: StreamEntry, seq: int, view: str) -> bool:
        if seq == 0:
            return True
        key = (*self._chunk_key(entry, seq - 1), view)
        return key in self._pending or key in self.rendered

    def _pool_submit(self, key: tuple, state: State) -> Future:
        assert self.pool is not None
        name, _, start, end, view = key
        spill = self.rendered.spill
        return self.pool.submit(name, start, end, state, view, spill.for_workers if spill else None)

    def _landed(self, key: tuple, future: Future) -> None:
        """A worker's piece (key: chunk key + view) into the LRU, or where
        the worker appended it to the spill file."""
        if not future.cancelled() and future.exception() is None:
            for view, data in future.result().items():
                if isinstance(data, bytes):
                    self.rendered.put((*key[:4], view), data)
                else:
                    assert self.rendered.spill is not None
                    self.rendered.spill.record((*key[:4], view), data)
        with self._flights_lock:
            self._pending.pop(key, None)

    def _render(self, entry: StreamEntry, meta: ChunkMeta, chunk_key: tuple, view: str) -> bytes:
        data = None
        # in process (`fmtfs cat`, Spark, twins) keep every view of the decoded
        # chunk: buckets are read right after records; a mount renders only
        # the reader's view, as its workers do
        only = view if self.pool is not None else None
        for other, rendered in render_chunk(
            entry.stream, Chunk(meta.start, meta.end, meta.state, {}), only
        ).items():
            self.rendered.put((*chunk_key, other), rendered)
            if other == view:
                data = rendered
        return data if data is not None else b""

    def records(self, entry: StreamEntry, view: str):
        """Every record of `view` in order, one chunk at a time (for Parquet)."""
        pieces = entry.views.get(view)
        if pieces is None:
            return
        stream = entry.stream
        for seq in list(pieces.seqs):
            meta = entry.chunks[seq]
            key = (stream.name, entry.identity, seq, meta.start, meta.end)
            decoded = self.decoded.get(key, lambda m=meta: stream.decode(Chunk(m.start, m.end, m.state, {})))
            yield decoded.get(view, [])
