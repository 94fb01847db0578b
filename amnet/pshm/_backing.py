"""Shared objects behind the shared-memory network: POSIX shm, SysV shm or a plain file.

``create`` reserves the whole size up front (``posix_fallocate`` for posix and file; the
size checked against the kernel limits and ``MemAvailable`` for sysv), so a full /dev/shm
or a too-small limit is a :class:`PshmSpaceError` at start naming the size and the space,
never a SIGBUS in the middle of a run. ``attach`` maps an object another process created,
by the ``ident`` that process published.

A sysv object is IPC_RMID'd as soon as its creator attached it (Linux keeps a removed id
attachable while it is attached somewhere), so it cannot outlive its processes. posix and
file objects are removed by ``SharedObject.unlink`` once every peer has mapped them, and
``cleanup`` removes what a crash between create and unlink left behind.
"""

from __future__ import annotations

import errno
import mmap
import os
import tempfile

from .._errors import PshmAttachError, PshmSpaceError
from . import _native

KINDS = ("posix", "sysv", "file")
SHM_DIR = "/dev/shm"
MIB = 1 << 20

KNOBS = ("lower AMNET_SEGMENT_SIZE (--segment-size), AMNET_PSHM_NETWORK_DEPTH or "
         "AMNET_MAX_MEDIUM, choose another backing with AMNET_PSHM_BACKING=posix|sysv|file, or "
         "send node-local traffic through the conduit with --no-pshm (AMNET_PSHM=0)")


class SharedObject:
    """One mapped shared object.

    ``kind`` is the backing, ``ident`` what peers pass to :func:`attach` (the posix name,
    ``str(shmid)`` or the file path), ``size`` its length in bytes and ``buf`` a writable
    buffer over all of it (an ``mmap`` or a ``SysvMapping``).
    """

    __slots__ = ("buf", "ident", "kind", "name", "size")

    def __init__(self, kind: str, name: str, ident: str, size: int,
                 buf: mmap.mmap | _native.SysvMapping) -> None:
        self.kind = kind
        self.name = name
        self.ident = ident
        self.size = size
        self.buf = buf

    def unlink(self) -> None:
        """Remove the name so no new process can attach; mappings stay valid. Idempotent.

        Raises:
            OSError: removal failed for another reason than the name being gone already.
        """
        try:
            if self.kind == "sysv":
                _native.sysv_remove(int(self.ident))
            elif self.kind == "posix":
                os.unlink(os.path.join(SHM_DIR, self.ident))
            else:
                os.unlink(self.ident)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EINVAL, errno.EIDRM):
                raise

    def close(self) -> None:
        """Unmap the object from this process.

        Raises:
            BufferError: views of ``buf`` (memoryviews, numpy arrays, ``Words``) are alive.
        """
        self.buf.close()

    def __repr__(self) -> str:
        return f"SharedObject({self.kind}, {self.ident!r}, {self.size} bytes)"


def file_dir() -> str:
    """The directory the file backing puts its objects in: ``tempfile.gettempdir()``."""
    return tempfile.gettempdir()


def _check(kind: str, name: str, size: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown pshm backing {kind!r}; backings are: {', '.join(KINDS)}")
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad shared object name {name!r}: a non-empty name without '/'")
    if size <= 0:
        raise ValueError(f"shared object size must be positive, got {size}")


def _sizes(n: int) -> str:
    return f"{n} bytes ({n / MIB:.1f} MiB)"


def _space_error(kind: str, name: str, size: int, where: str) -> PshmSpaceError:
    return PshmSpaceError(
        f"PSHM could not reserve {_sizes(size)} for shared object {name!r} "
        f"({kind} backing): {where}. To fit, {KNOBS}.")


def create(kind: str, name: str, size: int) -> SharedObject:
    """Create, reserve and map a new shared object of ``size`` bytes, zero-filled.

    ``name`` is the posix name or file name (it must be new); sysv ignores it but for
    messages. Raises:
        PshmSpaceError: not enough space on the file system / under the SysV limits or
            MemAvailable; nothing is left behind.
        FileExistsError: a posix or file object of that name exists.
        ValueError: unknown ``kind``, a name with '/', a size that is not positive.
        OSError: any other failure of the system calls.
    """
    _check(kind, name, size)
    if kind == "sysv":
        return _create_sysv(name, size)
    directory = SHM_DIR if kind == "posix" else file_dir()
    free = _free(directory)
    if size > free:  # fail before allocating: a doomed fallocate would fill the disk first
        raise _space_error(kind, name, size, _where(directory, free))
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
        buf = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException as e:
        os.close(fd)
        _unlink_quietly(path)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM,
                                                  errno.EDQUOT):
            raise _space_error(kind, name, size,
                               f"{_where(directory, _free(directory))} ({e.strerror})") from None
        raise
    os.close(fd)
    return SharedObject(kind, name, name if kind == "posix" else path, size, buf)


def _where(directory: str, free: int) -> str:
    where = f"{directory} has only {_sizes(free)} free"
    if directory == SHM_DIR:
        where += " (a container may enlarge it, e.g. docker run --shm-size)"
    return where


def _free(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sysv_limits() -> dict[str, int]:
    """The limits a SysV segment must fit, in bytes (a missing file leaves its entry out)."""
    limits = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for key, scale in (("shmmax", 1), ("shmall", page)):
        try:
            with open(f"/proc/sys/kernel/{key}") as f:
                limits[f"kernel.{key}" + (" x page size" if scale > 1 else "")] = (
                    int(f.read()) * scale)
        except (OSError, ValueError):
            pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits["MemAvailable"] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return limits


def _create_sysv(name: str, size: int) -> SharedObject:
    limits = _sysv_limits()
    over = {k: v for k, v in limits.items() if size > v}
    if over:
        k, v = min(over.items(), key=lambda kv: kv[1])
        raise _space_error("sysv", name, size, f"{k} is {_sizes(v)}")
    try:
        shmid = _native.sysv_create(size)
    except OSError as e:
        if e.errno not in (errno.ENOMEM, errno.ENOSPC, errno.EINVAL):
            raise
        where = ", ".join(f"{k} {_sizes(v)}" for k, v in limits.items()) or "limits unknown"
        raise _space_error("sysv", name, size, f"shmget failed ({e.strerror}); {where}") \
            from None
    try:
        buf = _native.sysv_attach(shmid)
    finally:
        _native.sysv_remove(shmid)  # attached (or failed): nothing can outlive a kill -9
    return SharedObject("sysv", name, str(shmid), size, buf)


def attach(kind: str, ident: str, size: int) -> SharedObject:
    """Map the shared object another process created and published as ``ident``.

    Raises:
        PshmAttachError: no such object (or it is smaller than ``size``).
        ValueError: unknown ``kind``.
        OSError: any other failure (permissions, mmap).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown pshm backing {kind!r}; backings are: {', '.join(KINDS)}")
    if kind == "sysv":
        try:
            buf = _native.sysv_attach(int(ident))
        except (OSError, ValueError) as e:
            if isinstance(e, OSError) and e.errno not in (errno.EINVAL, errno.EIDRM):
                raise
            raise _missing(kind, ident, size) from None
        if buf.size < size:
            buf.close()
            raise _missing(kind, ident, size, f"it has only {buf.size} bytes")
        return SharedObject(kind, ident, ident, size, buf)
    if kind == "posix" and (not ident or "/" in ident):
        raise ValueError(f"bad posix shared object name {ident!r}: a non-empty name without '/'")
    path = os.path.join(SHM_DIR, ident) if kind == "posix" else ident
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise _missing(kind, ident, size) from None
    try:
        have = os.fstat(fd).st_size
        if have < size:
            raise _missing(kind, ident, size, f"it has only {have} bytes")
        buf = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return SharedObject(kind, os.path.basename(ident), ident, size, buf)


def _missing(kind: str, ident: str, size: int, why: str = "it does not exist (any more)"
             ) -> PshmAttachError:
    return PshmAttachError(errno.ENOENT, f"cannot attach the {kind} shared object {ident!r} "
                           f"of {size} bytes: {why}")


def cleanup(kind: str, prefix: str) -> list[str]:
    """Remove leftover posix or file objects whose name starts with ``prefix``.

    Returns the names removed (sysv objects never outlive their processes: nothing to do).
    Raises ValueError for an empty prefix or unknown kind; names that vanish meanwhile or
    cannot be removed are skipped.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown pshm backing {kind!r}; backings are: {', '.join(KINDS)}")
    if not prefix or "/" in prefix:
        raise ValueError(f"cleanup needs a non-empty prefix without '/', got {prefix!r}")
    if kind == "sysv":
        return []
    directory = SHM_DIR if kind == "posix" else file_dir()
    removed = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for n in sorted(names):
        if n.startswith(prefix):
            try:
                os.unlink(os.path.join(directory, n))
            except OSError:
                continue
            removed.append(n)
    return removed


def node_space_problem(kind: str, nprocs: int, size: int) -> str | None:
    """Why ``nprocs`` objects of ``size`` bytes each would not fit the backing together, or
    None. Checked once per node before any rank starts: each object alone may fit while
    all of them together would exhaust the memory (and bring the OOM killer)."""
    total = nprocs * size
    if kind == "sysv":
        avail = _sysv_limits().get("MemAvailable")
        if avail is None or total <= avail:
            return None
        where = f"MemAvailable is {_sizes(avail)}"
    else:
        directory = SHM_DIR if kind == "posix" else file_dir()
        try:
            free = _free(directory)
        except OSError:
            return None
        avail = _sysv_limits().get("MemAvailable") if kind == "posix" else None
        if total <= free and (avail is None or total <= avail):
            return None  # tmpfs pages are memory: /dev/shm may be larger than what is left
        where = (_where(directory, free) if total > free else
                 f"MemAvailable is {_sizes(avail)} (tmpfs pages are memory)")
    return (f"the {nprocs} processes of this node need {_sizes(total)} of {kind} shared "
            f"memory together ({nprocs} x {_sizes(size)}: queues, payload slots and "
            f"segments), but {where}; lower --segment-size (AMNET_SEGMENT_SIZE), "
            "AMNET_PSHM_NETWORK_DEPTH or AMNET_MAX_MEDIUM, pick another AMNET_PSHM_BACKING, "
            "or run with --no-pshm")
