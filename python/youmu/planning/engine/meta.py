"""The metadata every rank all-gathers each step: a few integers per sample (id,
source, document lengths, loss tokens, image patches), held as flat arrays so the
exchange is one variable-length all-gather and the plan a pure function of it
(MegaScale-Data's orchestration: metadata moves, payloads stay where they are).

Example:
    >>> from youmu.planning.engine.meta import SampleMeta
    >>> SampleMeta.build(ids=range(3), lengths=[5, 7, 9]).sizes.tolist()
    [5, 7, 9]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from youmu._internal.args import int_array
from youmu.distributed.gather import all_gather_varlen
from youmu.errors import ArgumentTypeError, InvalidArgumentError
from youmu.planning.engine.cost import as_csr, segment_sums

__all__ = ["SampleMeta", "gather_metadata"]


def _i64(x: Any, what: str) -> np.ndarray:
    return int_array(x, what)


@dataclass(frozen=True)
class SampleMeta:
    """Columnar metadata of candidate samples (the planner never sees payloads).

    Attributes:
        ids: int64 sample identifiers (unique among the rows).
        sources: int64 source number of each sample (index into the schedule's names).
        doc_lengths, doc_offsets: the documents of each sample in CSR form (a lone
            sample has one document; a packed sequence or a formed micro-batch has
            several): sample ``i`` is ``doc_lengths[doc_offsets[i]:doc_offsets[i+1]]``.
        tokens: loss tokens per sample (for loss scaling).
        origin: the rank holding each sample (``-1`` if unknown/local).
        image_patches, image_offsets: the encoder patches of each sample's images in
            CSR form (vision-language samples; ``None`` when no sample has images):
            sample ``i``'s images are ``image_patches[image_offsets[i]:image_offsets[i+1]]``.

    >>> m = SampleMeta.build(ids=[10, 11], docs=[[30, 70], [50, 50]])
    >>> m.sizes.tolist(), len(m)
    ([100, 100], 2)
    >>> v = SampleMeta.build(ids=[1, 2], lengths=[90, 40], images=[[256, 64], []])
    >>> SampleMeta.decode(v.encode()).image_lists()
    [[256, 64], []]
    """

    ids: np.ndarray
    sources: np.ndarray
    doc_lengths: np.ndarray
    doc_offsets: np.ndarray
    tokens: np.ndarray
    origin: np.ndarray
    image_patches: np.ndarray | None = field(default=None, repr=False, compare=False)
    image_offsets: np.ndarray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        ids: Sequence[int] | np.ndarray | range,
        *,
        lengths: Sequence[int] | np.ndarray | None = None,
        docs: Sequence[Sequence[int]] | None = None,
        sources: Sequence[int] | np.ndarray | None = None,
        tokens: Sequence[int] | np.ndarray | None = None,
        origin: Sequence[int] | np.ndarray | int | None = None,
        images: Sequence[Sequence[int]] | None = None,
    ) -> SampleMeta:
        """From per-sample ``lengths`` (one document each) or ``docs`` (lists of
        document lengths). ``tokens`` defaults to the total length; ``images``: the
        encoder patches of each sample's images (one list per sample)."""
        idv = _i64(ids, "ids")
        n = idv.size
        if (lengths is None) == (docs is None):
            raise InvalidArgumentError(
                "pass exactly one of lengths= (one document per sample) or docs= (document lists)"
            )
        if lengths is not None:
            dl = _i64(lengths, "lengths")
            if dl.size != n:
                raise InvalidArgumentError(f"{dl.size} lengths for {n} ids")
            off = np.arange(n + 1, dtype=np.int64)
        else:
            dl, off = as_csr(docs)
            if off.size - 1 != n:
                raise InvalidArgumentError(f"{off.size - 1} document lists for {n} ids")
        if dl.size and dl.min() < 0:
            raise InvalidArgumentError("lengths must be >= 0")
        sizes = segment_sums(dl, off)
        src = np.zeros(n, dtype=np.int64) if sources is None else _i64(sources, "sources")
        tok = sizes.copy() if tokens is None else _i64(tokens, "tokens")
        if origin is None:
            org = np.full(n, -1, dtype=np.int64)
        elif isinstance(origin, (int, np.integer)):
            org = np.full(n, int(origin), dtype=np.int64)
        else:
            org = _i64(origin, "origin")
        for name, v in (("sources", src), ("tokens", tok), ("origin", org)):
            if v.size != n:
                raise InvalidArgumentError(f"{name} has {v.size} entries for {n} ids")
        if (src < 0).any() or (tok < 0).any():
            raise InvalidArgumentError("sources and tokens must be >= 0")
        if np.unique(idv).size != n:
            raise InvalidArgumentError("sample ids must be unique")
        ip: np.ndarray | None = None
        io: np.ndarray | None = None
        if images is not None:
            ip, io = as_csr(images)
            if io.size - 1 != n:
                raise InvalidArgumentError(f"{io.size - 1} image lists for {n} ids")
        return cls(idv, src, dl, off, tok, org, ip, io)

    @classmethod
    def empty(cls) -> SampleMeta:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, np.zeros(1, dtype=np.int64), z, z)

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def sizes(self) -> np.ndarray:
        """Total tokens of each sample (sum of its documents)."""
        return segment_sums(self.doc_lengths, self.doc_offsets)

    @property
    def has_images(self) -> bool:
        return self.image_patches is not None

    def image_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(image_patches, image_offsets)``; no images per sample when there are none."""
        if self.image_patches is None or self.image_offsets is None:
            return np.zeros(0, dtype=np.int64), np.zeros(len(self) + 1, dtype=np.int64)
        return self.image_patches, self.image_offsets

    def image_lists(self) -> list[list[int]]:
        """Each sample's image patch counts."""
        p, o = self.image_csr()
        return [p[o[i]:o[i + 1]].tolist() for i in range(len(self))]

    def docs(self, i: int) -> list[int]:
        return self.doc_lengths[self.doc_offsets[i]:self.doc_offsets[i + 1]].tolist()

    def seqs(self) -> list[list[int]]:
        """The document lists, for cost functions that take ``list[list[int]]``."""
        return [self.docs(i) for i in range(len(self))]

    def take(self, rows: Sequence[int] | np.ndarray) -> SampleMeta:
        """The metadata of ``rows``, in that order."""
        r = np.asarray(rows, dtype=np.int64).reshape(-1)
        dl, off = _ragged_take(self.doc_lengths, self.doc_offsets, r)
        ip = io = None
        if self.image_patches is not None and self.image_offsets is not None:
            ip, io = _ragged_take(self.image_patches, self.image_offsets, r)
        return SampleMeta(self.ids[r], self.sources[r], dl, off, self.tokens[r], self.origin[r], ip, io)

    @staticmethod
    def concat(parts: Iterable[SampleMeta]) -> SampleMeta:
        parts = list(parts)
        if not parts:
            return SampleMeta.empty()
        offs = [parts[0].doc_offsets]
        base = int(parts[0].doc_offsets[-1])
        for p in parts[1:]:
            offs.append(p.doc_offsets[1:] + base)
            base += int(p.doc_offsets[-1])
        ip = io = None
        if any(p.has_images for p in parts):
            csr = [p.image_csr() for p in parts]
            ip = np.concatenate([c[0] for c in csr])
            io = np.concatenate([[0]] + [c[1][1:] + int(sum(int(q[0].size) for q in csr[:k]))
                                         for k, c in enumerate(csr)]).astype(np.int64)
        return SampleMeta(
            np.concatenate([p.ids for p in parts]),
            np.concatenate([p.sources for p in parts]),
            np.concatenate([p.doc_lengths for p in parts]),
            np.concatenate(offs),
            np.concatenate([p.tokens for p in parts]),
            np.concatenate([p.origin for p in parts]),
            ip, io,
        )

    # wire format: [n, d, ids(n), sources(n), tokens(n), counts(n), doc_lengths(d)]
    # and, with images, [ni, image counts(n), image_patches(ni)] after it
    def encode(self) -> np.ndarray:
        """Flat int64 encoding for :class:`~youmu.distributed.GlooChannel`."""
        n, d = len(self), int(self.doc_lengths.size)
        parts: list[np.ndarray] = [np.array([n, d]), self.ids, self.sources, self.tokens, np.diff(self.doc_offsets),
                                   self.doc_lengths]
        if self.has_images:
            p, o = self.image_csr()
            parts += [np.array([p.size]), np.diff(o), p]
        return np.concatenate(parts).astype(np.int64)

    @classmethod
    def decode(cls, vec: Sequence[int] | np.ndarray, origin: int = -1) -> SampleMeta:
        v = np.asarray(vec, dtype=np.int64).reshape(-1)
        n, d = (int(v[0]), int(v[1])) if v.size >= 2 else (-1, -1)
        if n < 0 or d < 0 or v.size < 2 + 4 * n + d:
            raise InvalidArgumentError(f"truncated metadata vector ({v.size} values; it claims {n} samples with "
                                       f"{d} documents)")
        ids, src, tok, cnt = (v[2 + k * n: 2 + (k + 1) * n] for k in range(4))
        dl = v[2 + 4 * n: 2 + 4 * n + d]
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(cnt, out=off[1:])
        if off[-1] != d or (cnt < 0).any():
            raise InvalidArgumentError(f"malformed metadata vector: its document counts sum to {int(off[-1])}, "
                                       f"not {d}")
        ip = io = None
        rest = v[2 + 4 * n + d:]
        if rest.size:
            ni = int(rest[0])
            if ni < 0 or rest.size != 1 + n + ni:
                raise InvalidArgumentError(f"malformed metadata vector: {rest.size} image entries for {n} samples")
            io = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(rest[1:1 + n], out=io[1:])
            ip = rest[1 + n:].copy()
            if io[-1] != ni or (rest[1:1 + n] < 0).any() or (ip < 0).any():
                raise InvalidArgumentError("malformed metadata vector: bad image counts")
        return cls(ids.copy(), src.copy(), dl.copy(), off, tok.copy(), np.full(n, origin, dtype=np.int64), ip, io)


def _ragged_take(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR entries of ``rows``, in that order (vectorised ragged take)."""
    starts, ends = offsets[rows], offsets[rows + 1]
    counts = ends - starts
    off = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    if counts.sum():
        idx = np.repeat(starts - off[:-1], counts) + np.arange(int(off[-1]))
        return values[idx], off
    return np.zeros(0, dtype=np.int64), off


def gather_metadata(channel: Any, local: SampleMeta) -> SampleMeta:
    """All-gather every rank's candidate metadata (rank order; ``origin`` set).

    One :func:`youmu.distributed.all_gather_varlen` on a :class:`~youmu.distributed.GlooChannel`
    (the vector lengths, then the vectors). Every rank calls it.

    >>> from youmu.distributed import GlooChannel
    >>> meta = gather_metadata(GlooChannel.local(), SampleMeta.build(ids=[7, 8], lengths=[30, 70]))
    >>> meta.ids.tolist(), meta.origin.tolist()       # one process: rank 0 holds both
    ([7, 8], [0, 0])
    """
    if not isinstance(local, SampleMeta):
        raise ArgumentTypeError(f"local must be a SampleMeta (see SampleMeta.build), got {type(local).__name__}")
    rows = all_gather_varlen(channel, local.encode())
    return SampleMeta.concat(SampleMeta.decode(v, origin=k) for k, v in enumerate(rows))
