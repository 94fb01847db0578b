"""``ep.vis``: GASNet-EX VIS put/get (vector, indexed, strided), each blocking, ``_nb``
(returning an :class:`amnet.Handle`) and ``_nbi`` (completed by ``ep.wait_nbi`` or the
enclosing access region). docs/design.md §9.
"""

from __future__ import annotations

from typing import Any

from .. import Handle
from ..core._ops import DONE
from . import _check as C
from . import _remote
from ._layout import Pieces, Views, copy_stream

BLOCK, NB, NBI = 0, 1, 2
_SUFFIX = ("", "_nb", "_nbi")


class VIS:
    """Vector, indexed and strided transfers between my memory and one peer's segment.

    The remote side is described by byte offsets into the peer's segment, the local side by
    buffers (bytes-like objects or numpy arrays of any strides). The bytes of the source
    pieces, taken in order, go to the destination pieces, taken in order; the two sides may
    cut them differently but must hold the same total. Zero-length pieces and zero counts
    are allowed (a transfer of nothing completes at once).

    Within a node every transfer is a direct copy (numpy, no per-piece messages); between
    nodes it is packed into system AMs of at most ``ep.max_medium`` bytes, unpacked at the
    target, ``AMNET_VIS_PIPELINE`` chunks in flight; one call per destination whatever the
    piece count.

    Every argument is checked before a byte moves. Raised by every method:

    - ``RankError``: the peer is not a rank of the job.
    - ``SegmentBoundsError``: a remote piece or strided region leaves the peer's segment.
    - ``ValueError``: a negative length or count, sides of different total size, a
      destination whose pieces overlap (sources may overlap), a local region outside its
      buffer, a numpy array whose size or dtype does not match the described region.
    - ``TypeError``: a non-int offset, length, stride or count; a buffer that is not
      bytes-like; a read-only destination.
    - ``AMContextError``: called inside a handler.

    Buffers: a put's source may be reused as soon as the call returns (also ``_nb`` and
    ``_nbi``); a get's destination holds the data once the call (or its handle, or
    ``wait_nbi``) completed, and must not be touched before.
    """

    __slots__ = ("_ep", "_port")

    def __init__(self, port: Any) -> None:
        self._port = port  # amnet.Port: VIS is an extension like any other
        self._ep = port.endpoint

    def __repr__(self) -> str:
        return f"<amnet.vis.VIS of rank {self._ep.rank}>"

    # -- the one path every method takes ------------------------------------------------
    def _run(self, mode: int, name: str, is_get: bool, peer: Any, build: Any,
             *args: Any) -> Handle | None:
        ep = self._ep
        port = self._port
        what = f"ep.vis.{name}{_SUFFIX[mode]}()"
        if mode == BLOCK:
            port.forbid_in_handler(what)
        else:
            port.forbid_send_in_handler(what)
        peer = port.check_rank(peer)
        seg = port.segment_of(peer)
        remote, local = build(what, peer, seg, *args)
        dst, src = (local, remote) if is_get else (remote, local)
        C.same_total(dst.total, src.total, what)
        if isinstance(dst, Pieces):
            C.pieces_overlap(dst, what)
        elif is_get:  # local buffers
            if not dst.checked:
                C.views_overlap(dst.views, f"{what}: destination buffer")
        elif C.region_overlaps(dst):  # a strided remote region, mapped or not
            raise ValueError(f"{what}: the destination region overlaps itself (two "
                             "elements share a byte)")
        if seg is not None or not dst.total:
            copy_stream(dst, src)
            op: Any = DONE
        else:
            op = _remote.start(port, peer, is_get, remote, local, mode == NBI,
                               ep.config.vis_pipeline)
        kind = "vis get" if is_get else "vis put"
        if mode == BLOCK:
            port.handle(op, kind).wait()
            return None
        if op is not DONE:
            port.poll()
        return port.handle(op, kind) if mode == NB else None

    @staticmethod
    def _vector(what: str, peer: int, seg: Any, eng_size: int, remote_list: Any,
                bufs: Any, writable: bool, side: str, bside: str) -> tuple[Any, Views]:
        offs, lens = C.vector_list(remote_list, f"{what}: {side}")
        remote = C.remote_pieces(seg, eng_size, peer, offs, lens, f"{what}: {side}")
        return remote, Views(C.buffer_list(bufs, writable, f"{what}: {bside}"))

    @staticmethod
    def _indexed(what: str, peer: int, seg: Any, eng_size: int, offsets: Any, rlen: Any,
                 bufs: Any, blen: Any, writable: bool, side: str,
                 bside: str) -> tuple[Any, Views]:
        rlen = C.as_int(rlen, f"{what}: {side[:3]}_len")
        blen = C.as_int(blen, f"{what}: {bside[:3]}_len")
        for n, nm in ((rlen, side[:3]), (blen, bside[:3])):
            if n < 0:
                raise ValueError(f"{what}: {nm}_len must be >= 0, got {n}")
            if n > C.INT64_MAX:
                raise ValueError(f"{what}: {nm}_len = {n} does not fit in int64")
        offs = C.int_array(offsets, f"{what}: {side}", "[offset, ...]")
        if offs.ndim != 1:
            raise ValueError(f"{what}: {side} must be a flat list of offsets")
        lens = offs * 0 + rlen
        remote = C.remote_pieces(seg, eng_size, peer, offs, lens, f"{what}: {side}")
        return remote, Views(C.buffer_list(bufs, writable, f"{what}: {bside}", blen))

    def _strided(self, what: str, peer: int, seg: Any, remote_offset: Any,
                 remote_strides: Any, buf: Any, local_offset: Any, local_strides: Any,
                 elemsz: Any, count: Any, writable: bool, rside: str,
                 lside: str) -> tuple[Any, Views]:
        elemsz, counts = C.counts_of(elemsz, count, what)
        seg_size = self._port.segment_size
        r = C.strided(remote_offset, remote_strides, elemsz, counts, rside, seg_size, what,
                      peer)
        local = C.local_strided(buf, local_offset, local_strides, elemsz, counts, lside,
                                writable, what)
        remote = Views([r.view(seg)]) if seg is not None else r
        return remote, Views([local], checked=writable)

    # -- builders: (what, peer, seg, *user args) -> (remote side, local side) -------------
    def _put_vector(self, what, peer, seg, dst_list, src_list):
        return self._vector(what, peer, seg, self._port.segment_size, dst_list, src_list,
                            False, "dst_list", "src_list")

    def _get_vector(self, what, peer, seg, dst_list, src_list):
        return self._vector(what, peer, seg, self._port.segment_size, src_list, dst_list,
                            True, "src_list", "dst_list")

    def _put_indexed(self, what, peer, seg, dst_offsets, dst_len, src_bufs, src_len):
        return self._indexed(what, peer, seg, self._port.segment_size, dst_offsets, dst_len,
                             src_bufs, src_len, False, "dst_offsets", "src_bufs")

    def _get_indexed(self, what, peer, seg, dst_bufs, dst_len, src_offsets, src_len):
        return self._indexed(what, peer, seg, self._port.segment_size, src_offsets, src_len,
                             dst_bufs, dst_len, True, "src_offsets", "dst_bufs")

    def _put_strided(self, what, peer, seg, dst_offset, dst_strides, src, src_offset,
                     src_strides, elemsz, count):
        return self._strided(what, peer, seg, dst_offset, dst_strides, src, src_offset,
                             src_strides, elemsz, count, False, "dst", "src")

    def _get_strided(self, what, peer, seg, dst, dst_offset, dst_strides, src_offset,
                     src_strides, elemsz, count):
        return self._strided(what, peer, seg, src_offset, src_strides, dst, dst_offset,
                             dst_strides, elemsz, count, True, "src", "dst")

    # -- vector ---------------------------------------------------------------------------
    def put_vector(self, dest: int, dst_list: Any, src_list: Any) -> None:
        """Put the bytes of the local buffers ``src_list``, in order, into the pieces
        ``dst_list = [(offset, nbytes), ...]`` of ``dest``'s segment; return when done."""
        self._run(BLOCK, "put_vector", False, dest, self._put_vector, dst_list, src_list)

    def put_vector_nb(self, dest: int, dst_list: Any, src_list: Any) -> Handle:
        """:meth:`put_vector`, returning a handle at once."""
        return self._run(NB, "put_vector", False, dest, self._put_vector, dst_list, src_list)

    def put_vector_nbi(self, dest: int, dst_list: Any, src_list: Any) -> None:
        """:meth:`put_vector` with an implicit handle (``ep.wait_nbi`` completes it)."""
        self._run(NBI, "put_vector", False, dest, self._put_vector, dst_list, src_list)

    def get_vector(self, src: int, dst_list: Any, src_list: Any) -> None:
        """Get the pieces ``src_list = [(offset, nbytes), ...]`` of ``src``'s segment, in
        order, into the local buffers ``dst_list`` (writable); return when they hold it."""
        self._run(BLOCK, "get_vector", True, src, self._get_vector, dst_list, src_list)

    def get_vector_nb(self, src: int, dst_list: Any, src_list: Any) -> Handle:
        """:meth:`get_vector`, returning a handle at once."""
        return self._run(NB, "get_vector", True, src, self._get_vector, dst_list, src_list)

    def get_vector_nbi(self, src: int, dst_list: Any, src_list: Any) -> None:
        """:meth:`get_vector` with an implicit handle."""
        self._run(NBI, "get_vector", True, src, self._get_vector, dst_list, src_list)

    # -- indexed --------------------------------------------------------------------------
    def put_indexed(self, dest: int, dst_offsets: Any, dst_len: int, src_bufs: Any,
                    src_len: int) -> None:
        """Put local buffers of ``src_len`` bytes each into pieces of ``dst_len`` bytes at
        ``dst_offsets`` of ``dest``'s segment (same total)."""
        self._run(BLOCK, "put_indexed", False, dest, self._put_indexed, dst_offsets, dst_len,
                  src_bufs, src_len)

    def put_indexed_nb(self, dest: int, dst_offsets: Any, dst_len: int, src_bufs: Any,
                       src_len: int) -> Handle:
        """:meth:`put_indexed`, returning a handle at once."""
        return self._run(NB, "put_indexed", False, dest, self._put_indexed, dst_offsets,
                         dst_len, src_bufs, src_len)

    def put_indexed_nbi(self, dest: int, dst_offsets: Any, dst_len: int, src_bufs: Any,
                        src_len: int) -> None:
        """:meth:`put_indexed` with an implicit handle."""
        self._run(NBI, "put_indexed", False, dest, self._put_indexed, dst_offsets, dst_len,
                  src_bufs, src_len)

    def get_indexed(self, src: int, dst_bufs: Any, dst_len: int, src_offsets: Any,
                    src_len: int) -> None:
        """Get pieces of ``src_len`` bytes at ``src_offsets`` of ``src``'s segment into local
        buffers of ``dst_len`` bytes each (writable; same total)."""
        self._run(BLOCK, "get_indexed", True, src, self._get_indexed, dst_bufs, dst_len,
                  src_offsets, src_len)

    def get_indexed_nb(self, src: int, dst_bufs: Any, dst_len: int, src_offsets: Any,
                       src_len: int) -> Handle:
        """:meth:`get_indexed`, returning a handle at once."""
        return self._run(NB, "get_indexed", True, src, self._get_indexed, dst_bufs, dst_len,
                         src_offsets, src_len)

    def get_indexed_nbi(self, src: int, dst_bufs: Any, dst_len: int, src_offsets: Any,
                        src_len: int) -> None:
        """:meth:`get_indexed` with an implicit handle."""
        self._run(NBI, "get_indexed", True, src, self._get_indexed, dst_bufs, dst_len,
                  src_offsets, src_len)

    # -- strided --------------------------------------------------------------------------
    def put_strided(self, dest: int, dst_offset: int, dst_strides: Any, src: Any,
                    src_offset: int | None, src_strides: Any, elemsz: int,
                    count: Any) -> None:
        """Strided put (gex_VIS_StridedPut): ``count[i]`` elements of ``elemsz`` bytes
        along level ``i`` (0 innermost), ``dst_strides[i]`` / ``src_strides[i]`` bytes apart
        (negative allowed) from byte ``dst_offset`` of ``dest``'s segment / ``src_offset``
        of the contiguous buffer ``src``. ``src`` may instead be a numpy array of any strides
        with ``src_offset=None, src_strides=None``: its elements, in C order, are the
        source."""
        self._run(BLOCK, "put_strided", False, dest, self._put_strided, dst_offset,
                  dst_strides, src, src_offset, src_strides, elemsz, count)

    def put_strided_nb(self, dest: int, dst_offset: int, dst_strides: Any, src: Any,
                       src_offset: int | None, src_strides: Any, elemsz: int,
                       count: Any) -> Handle:
        """:meth:`put_strided`, returning a handle at once."""
        return self._run(NB, "put_strided", False, dest, self._put_strided, dst_offset,
                         dst_strides, src, src_offset, src_strides, elemsz, count)

    def put_strided_nbi(self, dest: int, dst_offset: int, dst_strides: Any, src: Any,
                        src_offset: int | None, src_strides: Any, elemsz: int,
                        count: Any) -> None:
        """:meth:`put_strided` with an implicit handle."""
        self._run(NBI, "put_strided", False, dest, self._put_strided, dst_offset,
                  dst_strides, src, src_offset, src_strides, elemsz, count)

    def get_strided(self, src: int, dst: Any, dst_offset: int | None, dst_strides: Any,
                    src_offset: int, src_strides: Any, elemsz: int, count: Any) -> None:
        """Strided get (gex_VIS_StridedGet) from ``src``'s segment into the writable local
        buffer ``dst``; the mirror of :meth:`put_strided` (``dst`` may be a numpy array of
        any strides with ``dst_offset=None, dst_strides=None``)."""
        self._run(BLOCK, "get_strided", True, src, self._get_strided, dst, dst_offset,
                  dst_strides, src_offset, src_strides, elemsz, count)

    def get_strided_nb(self, src: int, dst: Any, dst_offset: int | None, dst_strides: Any,
                       src_offset: int, src_strides: Any, elemsz: int, count: Any) -> Handle:
        """:meth:`get_strided`, returning a handle at once."""
        return self._run(NB, "get_strided", True, src, self._get_strided, dst, dst_offset,
                         dst_strides, src_offset, src_strides, elemsz, count)

    def get_strided_nbi(self, src: int, dst: Any, dst_offset: int | None, dst_strides: Any,
                        src_offset: int, src_strides: Any, elemsz: int, count: Any) -> None:
        """:meth:`get_strided` with an implicit handle."""
        self._run(NBI, "get_strided", True, src, self._get_strided, dst, dst_offset,
                  dst_strides, src_offset, src_strides, elemsz, count)
