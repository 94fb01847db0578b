"""amnet.pshm._native (fence, Words, the atomic table, SysV shm) and amnet.pshm._backing."""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from amnet.core import _atomics
from amnet.pshm import _backing, _native

PREFIX = f"amnet-test-native-{os.getpid()}-"
OP = _atomics.OP_INDEX
DT = _atomics.DTYPE_INDEX


def _children() -> list[int]:
    kids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                kids += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return kids


def _sysv_ids() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        next(f)
        return {int(line.split()[1]) for line in f if line.strip()}


@pytest.fixture(autouse=True)
def _leaves_nothing() -> Iterator[None]:
    yield
    left = [n for n in os.listdir("/dev/shm") if n.startswith(PREFIX)]
    left += [n for n in os.listdir(_backing.file_dir()) if n.startswith(PREFIX)]
    _backing.cleanup("posix", PREFIX)
    _backing.cleanup("file", PREFIX)
    assert left == []
    assert _children() == []


def _forked(body: Callable[[], None], n: int = 1) -> None:
    """Run ``body`` in ``n`` forked children; fail if any of them fails."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                body()
                code = 0
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
    assert codes == [0] * n


# --- Words --------------------------------------------------------------------------------

def test_fence() -> None:
    assert _native.fence() is None


def test_words_load_store_fetch_add() -> None:
    m = mmap.mmap(-1, 64)
    w = _native.Words(m)
    assert w.nwords == 8
    assert [w.load(i) for i in range(8)] == [0] * 8
    w.store(3, -5)
    assert w.load(3) == -5
    assert struct.unpack_from("<q", m, 24)[0] == -5
    assert w.fetch_add(3, 7) == -5
    assert w.load(3) == 2
    w.store(0, 2**63 - 1)
    assert w.fetch_add(0, 1) == 2**63 - 1  # wraps
    assert w.load(0) == -(2**63)
    w.store(1, 2**64 - 1)  # an unsigned pattern is accepted
    assert w.load(1) == -1
    with pytest.raises(OverflowError):
        w.store(1, 2**64)
    with pytest.raises(OverflowError):
        w.fetch_add(1, -(2**63) - 1)
    w.release()
    m.close()


def test_words_on_numpy_and_odd_length() -> None:
    a = np.zeros(8 * 5 + 3, dtype=np.uint8)
    assert a.ctypes.data % 8 == 0
    w = _native.Words(a)
    assert w.nwords == 5
    w.store(4, 0x0102030405060708)
    assert a[32:40].tolist() == [8, 7, 6, 5, 4, 3, 2, 1]


def test_words_bounds() -> None:
    w = _native.Words(bytearray(8 * 4))
    for bad in (-1, 4, 2**40, 2**80):
        with pytest.raises(IndexError):
            w.load(bad)
        with pytest.raises(IndexError):
            w.store(bad, 1)
        with pytest.raises(IndexError):
            w.fetch_add(bad, 1)
    with pytest.raises(TypeError):
        w.load(1.0)
    with pytest.raises(TypeError):
        w.store(0)
    for off, di in ((-8, DT["i8"]), (32, DT["i8"]), (28, DT["i8"]), (32, DT["i4"]),
                    (-4, DT["f4"])):
        with pytest.raises(IndexError):
            w.atomic(off, OP["get"], di, 0, 0)


def test_words_alignment_and_writability() -> None:
    m = mmap.mmap(-1, 64)
    for start in (1, 4, 7):
        view = memoryview(m)[start:start + 16]
        with pytest.raises(ValueError, match="aligned"):
            _native.Words(view)
        view.release()
    with pytest.raises((TypeError, BufferError)):
        _native.Words(b"\0" * 16)
    w = _native.Words(m)
    for off, di in ((4, DT["i8"]), (2, DT["i4"]), (12, DT["f8"]), (1, DT["u4"])):
        with pytest.raises(ValueError, match="aligned"):
            w.atomic(off, OP["fadd"], di, 1, 0)
    for opi, di in ((11, 0), (-1, 0), (0, 6), (0, -1)):
        with pytest.raises(ValueError):
            w.atomic(0, opi, di, 0, 0)
    for op in ("fand", "for", "fxor"):
        with pytest.raises(ValueError, match="float"):
            w.atomic(0, OP[op], DT["f8"], 0, 0)
    with pytest.raises(OverflowError):
        w.atomic(0, OP["set"], DT["i4"], 2**31, 0)
    with pytest.raises(OverflowError):
        w.atomic(0, OP["cas"], DT["u8"], 0, 2**63)
    w.release()
    m.close()


def test_words_release() -> None:
    m = mmap.mmap(-1, 16)
    w = _native.Words(m)
    with pytest.raises(BufferError):
        m.close()  # the export is alive
    w.release()
    assert w.released and w.nwords == 0
    w.release()  # idempotent
    for call in (lambda: w.load(0), lambda: w.store(0, 1), lambda: w.fetch_add(0, 1),
                 lambda: w.atomic(0, 0, 1, 0, 0)):
        with pytest.raises(ValueError, match="released"):
            call()
    m.close()  # no export left


def test_import_from_any_cwd(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-c", "import amnet.pshm._native as n; n.fence()"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# --- the atomic table against amnet.core._atomics.apply -------------------------------------

def _f4(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def _f8(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


INF, NAN = float("inf"), float("nan")
VALUES = {  # as bits, the way they travel
    "i4": [0, 1, -1, 7, -7, 2**31 - 1, -(2**31), 0x5A5A5A5A],
    "u4": [0, 1, 7, -1, 2**31 - 1, -(2**31), 0x5A5A5A5A],  # -1 is 2**32-1 as bits
    "i8": [0, 1, -1, 7, -7, 2**63 - 1, -(2**63), 0x5A5A5A5A5A5A5A5A],
    "u8": [0, 1, 7, -1, 2**63 - 1, -(2**63), 0x5A5A5A5A5A5A5A5A],
    "f4": [_f4(x) for x in (0.0, -0.0, 1.5, -2.25, 3.4e38, 1e-45, INF, -INF, NAN, -NAN)]
          + [0x7FC00123, 0x7F800001],  # a payload NaN, a signaling NaN
    "f8": [_f8(x) for x in (0.0, -0.0, 1.5, -2.25, 1.7e308, 5e-324, INF, -INF, NAN, -NAN)]
          + [0x7FF8000000000123, 0x7FF0000000000001],
}


@pytest.mark.parametrize("dtype", _atomics.DTYPES)
def test_atomic_matches_apply(dtype: str) -> None:
    di = DT[dtype]
    size = _atomics.NP_DTYPES[di].itemsize
    bits = _atomics.BITS[di]
    m = mmap.mmap(-1, 32)
    seg = np.frombuffer(m, dtype=np.uint8)
    ref = np.empty(32, dtype=np.uint8)
    w = _native.Words(m)
    pattern = np.arange(32, dtype=np.uint8) + 0xA0  # neighbours must stay untouched
    ops = [op for op in _atomics.OPS if not (dtype[0] == "f" and op in _atomics.BITWISE)]
    vals = VALUES[dtype]
    checked = 0
    for op, offset in itertools.product(ops, (8, 16 + size)):
        for old, b1 in itertools.product(vals, vals):
            for b2 in ((vals[2], old) if op == "cas" else (0,)):
                ref[:] = pattern
                ref[offset:offset + size].view(bits)[0] = old
                seg[:] = ref
                want = _atomics.apply(ref, offset, OP[op], di, b1, b2)
                got = w.atomic(offset, OP[op], di, b1, b2)
                assert (got, seg.tobytes()) == (want, ref.tobytes()), (op, old, b1, b2)
                checked += 1
    assert checked > 500
    del seg
    w.release()
    m.close()


def test_atomic_returns_sign_extended_bits() -> None:
    w = _native.Words(bytearray(16))
    assert w.atomic(0, OP["set"], DT["u4"], -1, 0) == 0
    assert w.atomic(0, OP["get"], DT["u4"], 0, 0) == -1  # 0xFFFFFFFF as i4 bits
    assert w.atomic(4, OP["get"], DT["u4"], 0, 0) == 0  # the neighbour is untouched
    assert w.atomic(0, OP["fmax"], DT["u4"], 5, 0) == -1  # unsigned: 2**32-1 > 5
    assert w.atomic(0, OP["fmin"], DT["i4"], 5, 0) == -1  # signed: -1 < 5
    assert w.load(0) == 0xFFFFFFFF


# --- contention across processes ------------------------------------------------------------

N_PROCS, N_ITERS = 4, 20000


def test_contended_fetch_add_and_atomics() -> None:
    m = mmap.mmap(-1, 64)  # MAP_SHARED | MAP_ANONYMOUS: shared with forked children
    w = _native.Words(m)
    fadd, get, cas = OP["fadd"], OP["get"], OP["cas"]
    i4, f8 = DT["i4"], DT["f8"]

    def body() -> None:
        for _ in range(N_ITERS):
            w.fetch_add(0, 1)
            w.atomic(12, fadd, i4, 1, 0)
            while True:  # a CAS-increment loop on an f8
                old = w.atomic(16, get, f8, 0, 0)
                new = _f8(struct.unpack("<d", struct.pack("<q", old))[0] + 1.0)
                if w.atomic(16, cas, f8, old, new) == old:
                    break

    _forked(body, N_PROCS)
    total = N_PROCS * N_ITERS
    assert w.load(0) == total
    assert struct.unpack_from("<iid", m, 8) == (0, total, float(total))
    w.release()
    m.close()


# --- SysV -----------------------------------------------------------------------------------

def test_sysv_mapping() -> None:
    shmid = _native.sysv_create(10000)
    try:
        sm = _native.sysv_attach(shmid)
    finally:
        _native.sysv_remove(shmid)
    assert sm.size == len(sm) == 10000 and sm.shmid == shmid and not sm.closed
    w = _native.Words(sm)
    w.store(1, 42)
    again = _native.sysv_attach(shmid)  # removed, but attachable while attached (Linux)
    assert np.frombuffer(again, dtype="<i8")[1] == 42
    with pytest.raises(BufferError):
        sm.close()
    w.release()
    sm.close()
    sm.close()
    assert sm.closed
    with pytest.raises(ValueError):
        memoryview(sm)
    assert shmid in _sysv_ids()  # still attached by `again`
    del again  # dealloc detaches
    assert shmid not in _sysv_ids()
    with pytest.raises(OSError) as e:
        _native.sysv_attach(shmid)
    assert e.value.errno in (errno.EINVAL, errno.EIDRM)
    with pytest.raises(OSError):
        _native.sysv_remove(shmid)
    with pytest.raises(ValueError):
        _native.sysv_create(0)
    with pytest.raises(TypeError):
        _native.SysvMapping()


# --- backings -------------------------------------------------------------------------------

def _exists(obj: _backing.SharedObject) -> bool:
    if obj.kind == "posix":
        return obj.ident in os.listdir("/dev/shm")
    if obj.kind == "file":
        return os.path.exists(obj.ident)
    return int(obj.ident) in _sysv_ids()


@pytest.mark.parametrize("kind", _backing.KINDS)
def test_backing_shared_with_a_forked_child(kind: str) -> None:
    size = 3 * mmap.PAGESIZE + 8
    obj = _backing.create(kind, PREFIX + kind, size)
    assert obj.kind == kind and obj.size == size and len(obj.buf) >= size
    mv = memoryview(obj.buf)
    mv[:5] = b"hello"
    mv[size - 3:size] = b"end"
    mv.release()

    def child() -> None:
        peer = _backing.attach(kind, obj.ident, size)
        view = memoryview(peer.buf)
        assert bytes(view[:5]) == b"hello" and bytes(view[size - 3:size]) == b"end"
        view[5:10] = b"world"
        view.release()
        peer.close()

    _forked(child)
    assert bytes(memoryview(obj.buf)[:10]) == b"helloworld"
    if kind != "sysv":
        assert _exists(obj)
    obj.unlink()
    obj.unlink()  # idempotent
    if kind != "sysv":
        assert not _exists(obj)
        with pytest.raises(_backing.PshmAttachError, match=kind):
            _backing.attach(kind, obj.ident, size)
    else:
        peer = _backing.attach(kind, obj.ident, size)  # attachable while attached
        peer.close()
    obj.close()
    assert not _exists(obj)
    with pytest.raises(FileNotFoundError):
        _backing.attach(kind, obj.ident, size)


@pytest.mark.parametrize("kind", _backing.KINDS)
def test_backing_cleanup(kind: str) -> None:
    objs = [_backing.create(kind, f"{PREFIX}left-{i}", 4096) for i in range(3)]
    keep = _backing.create(kind, "amnet-test-other-" + str(os.getpid()), 4096)
    removed = _backing.cleanup(kind, PREFIX + "left-")
    if kind == "sysv":
        assert removed == []
    else:
        assert removed == [o.name for o in objs]
        assert [_exists(o) for o in objs] == [False] * 3
        assert _exists(keep)
    for o in [*objs, keep]:
        o.unlink()
        o.close()
    with pytest.raises(ValueError):
        _backing.cleanup(kind, "")


def _free_dev_shm() -> int:
    st = os.statvfs("/dev/shm")
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("kind", _backing.KINDS)
def test_backing_too_big(kind: str) -> None:
    free = {"posix": _free_dev_shm(), "file": _backing._free(_backing.file_dir()),
            "sysv": max(_free_dev_shm(), _backing._sysv_limits().get("MemAvailable", 0))}
    size = 10 * free[kind] + 4096
    before = _sysv_ids()
    with pytest.raises(_backing.PshmSpaceError) as e:
        _backing.create(kind, PREFIX + "big", size)
    msg = str(e.value)
    assert str(size) in msg and f"{size / 2**20:.1f} MiB" in msg and kind in msg
    for knob in ("AMNET_SEGMENT_SIZE", "--segment-size", "AMNET_PSHM_NETWORK_DEPTH",
                 "AMNET_MAX_MEDIUM", "AMNET_PSHM_BACKING", "--no-pshm"):
        assert knob in msg
    if kind != "sysv":
        assert "free" in msg
    assert _sysv_ids() <= before


@pytest.mark.parametrize("kind", ["posix", "file"])
def test_backing_enospc_at_fallocate(kind: str, monkeypatch) -> None:
    """A reservation that fails after the free-space check: clear error, nothing left."""
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(_backing.PshmSpaceError, match="4096 bytes"):
        _backing.create(kind, PREFIX + "full", 4096)


def test_backing_sysv_shmget_fails(monkeypatch) -> None:
    def refuse(size: int) -> int:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(_native, "sysv_create", refuse)
    with pytest.raises(_backing.PshmSpaceError, match=r"shmget failed.*kernel\.shmmax"):
        _backing.create("sysv", PREFIX + "x", 4096)


def test_backing_bad_arguments() -> None:
    with pytest.raises(ValueError):
        _backing.create("tmpfs", PREFIX + "x", 10)
    with pytest.raises(ValueError):
        _backing.create("posix", "a/b", 10)
    with pytest.raises(ValueError):
        _backing.create("posix", PREFIX + "x", 0)
    with pytest.raises(_backing.PshmAttachError):
        _backing.attach("sysv", "2147483647", 10)
    obj = _backing.create("posix", PREFIX + "small", 4096)
    with pytest.raises(FileExistsError):
        _backing.create("posix", PREFIX + "small", 4096)
    with pytest.raises(_backing.PshmAttachError, match="only 4096 bytes"):
        _backing.attach("posix", obj.ident, 8192)
    obj.unlink()
    obj.close()
