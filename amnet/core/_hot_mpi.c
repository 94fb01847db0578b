/* amnet.core._hot: MPIRing, the mpi conduit's envelopes in C (amnet/core/_mpiconduit.py).
 *
 * The conduit's every message starts as one envelope (16 bytes: kind, header length, payload
 * length; then the AM header, and the payload when it travels in line), received by one of
 * ``depth`` receives kept posted on the conduit's tag from any source. What a Short or small
 * Medium AM round trip touches runs here, calling the MPI library directly: the envelope's
 * send (a copy into a buffer of its own, MPI_Isend, the request kept until a later look finds
 * it complete), and the receive (MPI_Test of the oldest posted receive, the envelope read,
 * the receive posted again). Everything else calls back into the conduit's Python: a payload
 * sent as a bulk message (``post_slow``), and any envelope but a header alone or a small
 * in-line payload (``take_slow``: bulk payloads, large in-line ones, malformed ones), with the
 * same lock held and the ring's state reachable through the methods below.
 *
 * The MPI library is the one mpi4py loaded (its extension module's dependency, found with
 * dlopen(RTLD_NOLOAD) and dlsym), so nothing about MPI is needed to build amnet. Handles
 * (communicator, datatype, request) are ints in MPICH's ABI and pointers in Open MPI's; the
 * conduit says which (``MPI._sizeof``) and passes the handles' values (``MPI._handleof``),
 * the size of MPI_Status and where its MPI_SOURCE field lies (found by writing one with
 * mpi4py), so the calls below are made with the library's own types. (Where pointers are 4
 * bytes, Open MPI's handles take the int path: those ABIs pass both alike.) The symbols are
 * looked up in mpi4py's module's own scope, so a profiling library preloaded into the global
 * scope (PMPI) sees mpi4py's calls but not these.
 *
 * Every MPI call is made under the conduit's MPI_LOCK (a threading.Lock of the process: MPI is
 * used serialized; mpi4py's calls elsewhere take the same lock), acquired through its Python
 * methods, which release the interpreter lock while they wait. */

#include "_hot.h"

#include <dlfcn.h>

#define ENVELOPE MPI_ENVELOPE
#define REAP_AT 16
enum { K_HEADER = 0, K_INLINE = 1, K_BULK = 2 };

typedef int (*isend4_t)(const void *, int, int, int, int, int, void *);
typedef int (*isend8_t)(const void *, int, void *, int, int, void *, void *);
typedef int (*irecv4_t)(void *, int, int, int, int, int, void *);
typedef int (*irecv8_t)(void *, int, void *, int, int, void *, void *);
typedef int (*test_t)(void *, int *, void *);
typedef int (*getst4_t)(int, int *, void *);
typedef int (*getst8_t)(void *, int *, void *);
typedef int (*count4_t)(const void *, int, int *);
typedef int (*count8_t)(const void *, void *, int *);
typedef int (*cancel_t)(void *);
typedef int (*wait_t)(void *, void *);

typedef struct {
    int64_t req;                     /* the request (4 or 8 bytes of it) */
    char *buf;                       /* the envelope, freed once the send completed */
} Send;

typedef struct {
    PyObject_HEAD
    void *isend, *irecv, *test, *getst, *count, *cancel, *wait;
    int h8;                          /* handles are pointers (8 bytes), else ints */
    intptr_t comm, byte;
    int any, tag, depth, head, closed, st_size, src_off, procs;
    int stopped;                     /* stop(): sends refused, nothing received */
    Py_ssize_t bufsize, inline_max, direct_max, copy_out, max_header;
    PyObject **bufs;                 /* bytearrays, one per posted receive */
    char *done;                      /* receive i completed and not yet posted again */
    Py_buffer *views;                /* their buffers, held: never resized, never moved */
    int64_t *reqs;
    char *st, *st2;                  /* MPI_Status storage: the receive's, a scratch one */
    Send *sends;                     /* envelopes in flight, oldest at s_head */
    Py_ssize_t s_head, s_tail, s_cap;
    int *drank, *dtag;               /* each process's rank and envelope tag (set_dests) */
    int64_t *sent, *sent_bytes;
    int64_t received, received_bytes, dropped;
    PyObject *acquire, *release, *post_slow, *take_slow;
} MPIRingObject;

/* -- MPI calls with the library's handle types --------------------------------------- */

static int
mpi_error(const char *what, int rc)
{
    PyErr_Format(PyExc_RuntimeError, "%s failed in the mpi conduit (MPI error code %d)",
                 what, rc);
    return -1;
}

static int
m_isend(MPIRingObject *r, const void *buf, int n, int dest, int tag, void *req)
{
    int rc = r->h8 ? ((isend8_t)r->isend)(buf, n, (void *)r->byte, dest, tag, (void *)r->comm,
                                          req)
                   : ((isend4_t)r->isend)(buf, n, (int)r->byte, dest, tag, (int)r->comm, req);
    return rc ? mpi_error("MPI_Isend", rc) : 0;
}

static int
m_irecv(MPIRingObject *r, int i)
{
    r->done[i] = 0;
    void *buf = r->views[i].buf;
    int n = (int)r->bufsize;
    int rc = r->h8 ? ((irecv8_t)r->irecv)(buf, n, (void *)r->byte, r->any, r->tag,
                                          (void *)r->comm, &r->reqs[i])
                   : ((irecv4_t)r->irecv)(buf, n, (int)r->byte, r->any, r->tag, (int)r->comm,
                                          &r->reqs[i]);
    return rc ? mpi_error("MPI_Irecv", rc) : 0;
}

/* 1 complete, 0 not yet, -1 error */
static int
m_test(MPIRingObject *r, int64_t *req, char *st)
{
    int flag = 0;
    int rc = ((test_t)r->test)(req, &flag, st);
    return rc ? mpi_error("MPI_Test", rc) : flag != 0;
}

/* whether request ``req`` is complete, without completing it (MPI_Request_get_status) */
static int
m_getst(MPIRingObject *r, const int64_t *req, char *st)
{
    int flag = 0;
    int rc = r->h8 ? ((getst8_t)r->getst)(*(void *const *)req, &flag, st)
                   : ((getst4_t)r->getst)(*(const int *)req, &flag, st);
    return rc ? mpi_error("MPI_Request_get_status", rc) : flag != 0;
}

static int
m_count(MPIRingObject *r, const char *st, int *count)
{
    int rc = r->h8 ? ((count8_t)r->count)(st, (void *)r->byte, count)
                   : ((count4_t)r->count)(st, (int)r->byte, count);
    return rc ? mpi_error("MPI_Get_count", rc) : 0;
}

static int
lock_call(PyObject *fn)
{
    PyObject *x = PyObject_CallNoArgs(fn);
    if (x == NULL) {
        return -1;
    }
    Py_DECREF(x);
    return 0;
}

/* Release MPI_LOCK, keeping an exception that is already set. */
static void
unlock(MPIRingObject *r)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
    if (lock_call(r->release) < 0) {
        PyErr_WriteUnraisable((PyObject *)r);
    }
    if (exc != NULL) {
        PyErr_SetRaisedException(exc);
    }
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (lock_call(r->release) < 0) {
        PyErr_WriteUnraisable((PyObject *)r);
    }
    PyErr_Restore(t, v, tb);
#endif
}

/* Forget the envelopes whose sends completed, oldest first (MPI_LOCK held): 0, -1 error. */
static int
reap(MPIRingObject *r)
{
    while (r->s_head < r->s_tail) {
        Send *s = &r->sends[r->s_head];
        int k = m_test(r, &s->req, r->st2);
        if (k <= 0) {
            return k;
        }
        PyMem_Free(s->buf);
        s->buf = NULL;
        r->s_head++;
    }
    r->s_head = r->s_tail = 0;
    return 0;
}

/* -- the type ------------------------------------------------------------------------- */

static void
free_state(MPIRingObject *r)
{
    if (r->views != NULL) {
        for (int i = 0; i < r->depth; i++) {
            /* a receive still posted (never shut down) keeps its buffer: leaked, not freed */
            if (r->closed) {
                if (r->views[i].obj != NULL) {
                    PyBuffer_Release(&r->views[i]);
                }
                Py_CLEAR(r->bufs[i]);
            }
        }
    }
    PyMem_Free(r->views);
    PyMem_Free(r->bufs);
    PyMem_Free(r->done);
    PyMem_Free(r->reqs);
    PyMem_Free(r->st);
    PyMem_Free(r->st2);
    /* envelopes still in flight are left to MPI (their memory is never freed) */
    PyMem_Free(r->sends);
    PyMem_Free(r->drank);
    PyMem_Free(r->dtag);
    PyMem_Free(r->sent);
    PyMem_Free(r->sent_bytes);
}

static int
MPIRing_traverse(MPIRingObject *r, visitproc visit, void *arg)
{
    Py_VISIT(r->acquire);
    Py_VISIT(r->release);
    Py_VISIT(r->post_slow);
    Py_VISIT(r->take_slow);
    return 0;
}

static int
MPIRing_clear(MPIRingObject *r)
{
    Py_CLEAR(r->acquire);
    Py_CLEAR(r->release);
    Py_CLEAR(r->post_slow);
    Py_CLEAR(r->take_slow);
    return 0;
}

static void
MPIRing_dealloc(MPIRingObject *r)
{
    PyObject_GC_UnTrack(r);
    MPIRing_clear(r);
    free_state(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

/* ``name`` in the scope of ``lib`` (mpi4py's module and the MPI library it depends on); not
 * the global scope, which may hold another MPI */
static void *
sym(void *lib, const char *name)
{
    void *f = lib != NULL ? dlsym(lib, name) : NULL;
    if (f == NULL) {
        PyErr_Format(PyExc_RuntimeError, "cannot find %s in the MPI library of mpi4py's "
                     "module (%s)", name, lib != NULL ? "not there" : "module not loaded");
    }
    return f;
}

/* MPIRing(lib, h8, comm, byte, any_source, tag, depth, bufsize, inline_max, direct_max,
 *         copy_out, max_header, status_size, source_offset, procs, lock, post_slow, take_slow)
 * lib: a file whose dependencies include the MPI library (mpi4py.MPI's); the receives are
 * posted by start(). */
static PyObject *
MPIRing_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    const char *lib;
    int h8, any, tag, depth, st_size, src_off, procs;
    unsigned long long comm, byte;  /* handle values as mpi4py gives them (maybe unsigned) */
    Py_ssize_t bufsize, inline_max, direct_max, copy_out, max_header;
    PyObject *lock, *post_slow, *take_slow;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "MPIRing takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "siKKiiinnnnniiiOOO", &lib, &h8, &comm, &byte, &any, &tag,
                          &depth, &bufsize, &inline_max, &direct_max, &copy_out, &max_header,
                          &st_size, &src_off, &procs, &lock, &post_slow, &take_slow)) {
        return NULL;
    }
    if (depth < 1 || bufsize < ENVELOPE || bufsize > INT32_MAX || st_size < 4 || src_off < 0
            || src_off + 4 > st_size || procs < 1 || !PyCallable_Check(post_slow)
            || !PyCallable_Check(take_slow)) {
        PyErr_SetString(PyExc_ValueError, "bad MPIRing arguments");
        return NULL;
    }
    MPIRingObject *r = (MPIRingObject *)type->tp_alloc(type, 0);
    if (r == NULL) {
        return NULL;
    }
    r->closed = 1;  /* until start(): nothing is posted */
    void *h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
    if ((r->isend = sym(h, "MPI_Isend")) == NULL || (r->irecv = sym(h, "MPI_Irecv")) == NULL
            || (r->test = sym(h, "MPI_Test")) == NULL
            || (r->getst = sym(h, "MPI_Request_get_status")) == NULL
            || (r->count = sym(h, "MPI_Get_count")) == NULL
            || (r->cancel = sym(h, "MPI_Cancel")) == NULL
            || (r->wait = sym(h, "MPI_Wait")) == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    r->h8 = h8 != 0;
    r->comm = (intptr_t)(uintptr_t)comm;
    r->byte = (intptr_t)(uintptr_t)byte;
    r->any = any;
    r->tag = tag;
    r->depth = depth;
    r->bufsize = bufsize;
    r->inline_max = inline_max;
    r->direct_max = direct_max;
    r->copy_out = copy_out;
    r->max_header = max_header;
    r->st_size = st_size;
    r->src_off = src_off;
    r->procs = procs;
    r->s_cap = 64;
    r->bufs = PyMem_Calloc(depth, sizeof(PyObject *));
    r->done = PyMem_Calloc(depth, 1);
    r->views = PyMem_Calloc(depth, sizeof(Py_buffer));
    r->reqs = PyMem_Calloc(depth, sizeof(int64_t));
    r->st = PyMem_Calloc(1, st_size);
    r->st2 = PyMem_Calloc(1, st_size);
    r->sends = PyMem_Calloc(r->s_cap, sizeof(Send));
    r->drank = PyMem_Calloc(procs, sizeof(int));
    r->dtag = PyMem_Calloc(procs, sizeof(int));
    r->sent = PyMem_Calloc(procs, sizeof(int64_t));
    r->sent_bytes = PyMem_Calloc(procs, sizeof(int64_t));
    if (!r->bufs || !r->done || !r->views || !r->reqs || !r->st || !r->st2 || !r->sends || !r->drank
            || !r->dtag || !r->sent || !r->sent_bytes) {
        Py_DECREF(r);
        return PyErr_NoMemory();
    }
    for (int i = 0; i < depth; i++) {
        r->bufs[i] = PyByteArray_FromStringAndSize(NULL, bufsize);
        if (r->bufs[i] == NULL || PyObject_GetBuffer(r->bufs[i], &r->views[i],
                                                     PyBUF_WRITABLE) < 0) {
            Py_DECREF(r);
            return NULL;
        }
    }
    if ((r->acquire = PyObject_GetAttrString(lock, "acquire")) == NULL
            || (r->release = PyObject_GetAttrString(lock, "release")) == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    r->post_slow = Py_NewRef(post_slow);
    r->take_slow = Py_NewRef(take_slow);
    for (int p = 0; p < procs; p++) {
        r->drank[p] = -1;
    }
    return (PyObject *)r;
}

/* -- called with MPI_LOCK held (by the conduit's Python, or in take_slow) ------------- */

/* the receive index ``arg`` names: 0..depth-1, or -1 with an exception set */
static long
slot_of(MPIRingObject *r, PyObject *arg)
{
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (i < 0 || i >= r->depth) {
        PyErr_Format(PyExc_IndexError, "no receive %ld (the ring has %d)", i, r->depth);
        return -1;
    }
    return i;
}

/* start(): post the receives */
static PyObject *
MPIRing_start(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    if (!r->closed || r->head != 0) {
        PyErr_SetString(PyExc_RuntimeError, "MPIRing.start: already started");
        return NULL;
    }
    for (int i = 0; i < r->depth; i++) {
        if (m_irecv(r, i) < 0) {
            return NULL;  /* the posted ones stay posted: the ring is never shut down */
        }
        r->closed = 0;
    }
    Py_RETURN_NONE;
}

/* view(i) -> memoryview of receive buffer i */
static PyObject *
MPIRing_view(MPIRingObject *r, PyObject *arg)
{
    long i = slot_of(r, arg);
    if (i < 0) {
        return NULL;
    }
    return PyMemoryView_FromObject(r->bufs[i]);
}

/* swap(i) -> the bytearray of receive buffer i, which a fresh one replaces (the caller keeps
 * the payload in it; the receive is posted into the new one) */
static PyObject *
MPIRing_swap(MPIRingObject *r, PyObject *arg)
{
    long i = slot_of(r, arg);
    if (i < 0) {
        return NULL;
    }
    if (!r->done[i]) {
        PyErr_SetString(PyExc_RuntimeError, "MPIRing.swap: that receive has not completed");
        return NULL;
    }
    PyObject *fresh = PyByteArray_FromStringAndSize(NULL, r->bufsize);
    Py_buffer v;
    if (fresh == NULL || PyObject_GetBuffer(fresh, &v, PyBUF_WRITABLE) < 0) {
        Py_XDECREF(fresh);
        return NULL;
    }
    PyObject *old = r->bufs[i];
    PyBuffer_Release(&r->views[i]);
    r->bufs[i] = fresh;
    r->views[i] = v;
    return old;
}

/* peek(k) -> (count, source) of receive k if it completed (not completing it), else None */
static PyObject *
MPIRing_peek(MPIRingObject *r, PyObject *arg)
{
    long k = slot_of(r, arg);
    if (k < 0) {
        return NULL;
    }
    int done = m_getst(r, &r->reqs[k], r->st2);
    if (done <= 0) {
        return done < 0 ? NULL : Py_NewRef(Py_None);
    }
    int count;
    if (m_count(r, r->st2, &count) < 0) {
        return NULL;
    }
    int src;
    memcpy(&src, r->st2 + r->src_off, sizeof src);
    return Py_BuildValue("(ii)", count, src);
}

/* reap() -> how many envelopes are still in flight, after forgetting the completed ones */
static PyObject *
MPIRing_reap(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    if (reap(r) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(r->s_tail - r->s_head);
}

/* note_sent(proc, nbytes): count a message the conduit's Python sent */
static PyObject *
MPIRing_note_sent(MPIRingObject *r, PyObject *args)
{
    int p;
    long long n;
    if (!PyArg_ParseTuple(args, "iL", &p, &n)) {
        return NULL;
    }
    if (p < 0 || p >= r->procs) {
        PyErr_SetString(PyExc_IndexError, "no such process");
        return NULL;
    }
    r->sent[p]++;
    r->sent_bytes[p] += n;
    Py_RETURN_NONE;
}

/* shutdown(): cancel the posted receives and wait for them; envelopes still in flight are
 * left to MPI, their memory never freed */
static PyObject *
MPIRing_shutdown(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    if (r->closed) {
        Py_RETURN_NONE;
    }
    r->closed = 1;
    for (int i = 0; i < r->depth; i++) {
        ((cancel_t)r->cancel)(&r->reqs[i]);
        ((wait_t)r->wait)(&r->reqs[i], r->st2);
    }
    r->s_head = r->s_tail = 0;
    Py_RETURN_NONE;
}

/* stop(): from now on sends raise and recv finds nothing (the receives stay posted until
 * shutdown) */
static PyObject *
MPIRing_stop(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    r->stopped = 1;
    Py_RETURN_NONE;
}

/* -- taking MPI_LOCK themselves ------------------------------------------------------- */

/* Fall back to the conduit's Python send with the same arguments. */
static PyObject *
send_slow(MPIRingObject *r, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
          Py_buffer *pb)
{
    if (pb != NULL && pb->obj != NULL) {
        PyBuffer_Release(pb);
    }
    return PyObject_Vectorcall(r->post_slow, args, nargs, kwnames);
}

/* send(proc, header, payload=None, copy=True): the conduit's send. A header alone, or with a
 * contiguous payload of at most inline_max bytes (direct_max with copy=False), goes as one
 * envelope from here; anything else through post_slow. The buffers may be reused at once. */
static PyObject *
MPIRing_send(MPIRingObject *r, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* proc, header, payload, copy: positional, or payload and copy by keyword */
    PyObject *a[4] = {NULL, NULL, Py_None, Py_True};
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    int plain = nargs >= 2 && nargs <= 4;
    for (Py_ssize_t i = 0; plain && i < nargs; i++) {
        a[i] = args[i];
    }
    for (Py_ssize_t k = 0; plain && k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int at = !PyUnicode_Check(name) ? -1
                 : PyUnicode_CompareWithASCIIString(name, "payload") == 0 ? 2
                 : PyUnicode_CompareWithASCIIString(name, "copy") == 0 ? 3 : -1;
        if (at < 0 || at < nargs) {
            plain = 0;
        } else {
            a[at] = args[nargs + k];
        }
    }
    if (!plain || !PyBytes_CheckExact(a[1]) || !PyLong_CheckExact(a[0])) {
        return send_slow(r, args, nargs, kwnames, NULL);
    }
    long p = PyLong_AsLong(a[0]);
    if (p < 0 || p >= r->procs || r->drank[p] < 0) {
        PyErr_Clear();
        return send_slow(r, args, nargs, kwnames, NULL);
    }
    int copy = PyObject_IsTrue(a[3]);
    if (copy < 0) {
        return NULL;
    }
    PyObject *payload = a[2];
    Py_buffer pb = {0};
    int kind = K_HEADER;
    if (payload != Py_None) {
        if (PyObject_GetBuffer(payload, &pb, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            return send_slow(r, args, nargs, kwnames, NULL);
        }
        if (pb.len > (copy ? r->inline_max : r->direct_max)) {
            return send_slow(r, args, nargs, kwnames, &pb);
        }
        kind = K_INLINE;
    }
    Py_ssize_t hl = PyBytes_GET_SIZE(a[1]);
    if (hl > 0xffff) {
        return send_slow(r, args, nargs, kwnames, &pb);
    }
    Py_ssize_t n = pb.obj != NULL ? pb.len : 0, len = ENVELOPE + hl + n;
    char *buf = PyMem_Malloc(len > 0 ? len : 1);
    if (buf == NULL) {
        if (pb.obj != NULL) {
            PyBuffer_Release(&pb);
        }
        return PyErr_NoMemory();
    }
    memset(buf, 0, ENVELOPE);
    buf[0] = (char)kind;
    put_le((unsigned char *)buf + 2, (uint64_t)hl, 2);
    put_le((unsigned char *)buf + 8, (uint64_t)n, 8);
    memcpy(buf + ENVELOPE, PyBytes_AS_STRING(a[1]), hl);
    if (n) {
        memcpy(buf + ENVELOPE + hl, pb.buf, n);
    }
    if (pb.obj != NULL) {
        PyBuffer_Release(&pb);
    }
    if (lock_call(r->acquire) < 0) {
        PyMem_Free(buf);
        return NULL;
    }
    if (r->closed || r->stopped) {
        PyErr_SetString(PyExc_RuntimeError, "send on a closed mpi conduit");
        goto fail;
    }
    if (r->s_tail == r->s_cap) {
        if (r->s_head > 0) {
            memmove(r->sends, r->sends + r->s_head, (r->s_tail - r->s_head) * sizeof(Send));
            r->s_tail -= r->s_head;
            r->s_head = 0;
        } else {
            Send *s = PyMem_Realloc(r->sends, 2 * r->s_cap * sizeof(Send));
            if (s == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            r->sends = s;
            r->s_cap *= 2;
        }
    }
    Send *s = &r->sends[r->s_tail];
    if (m_isend(r, buf, (int)len, r->drank[p], r->dtag[p], &s->req) < 0) {
        goto fail;
    }
    s->buf = buf;
    r->s_tail++;
    r->sent[p]++;
    r->sent_bytes[p] += n;
    if (r->s_tail - r->s_head > 4 * REAP_AT && reap(r) < 0) {
        unlock(r);
        return NULL;
    }
    unlock(r);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_RETURN_NONE;
fail:
    PyMem_Free(buf);
    unlock(r);
    return NULL;
}

/* The message in completed receive i whose status is in r->st: a new (header, payload)
 * tuple; Py_None to hand it to take_slow; NULL error. */
static PyObject *
take_fast(MPIRingObject *r, int i, int count)
{
    const unsigned char *b = (const unsigned char *)r->views[i].buf;
    if (count < ENVELOPE) {
        return Py_None;
    }
    int kind = b[0];
    Py_ssize_t hl = (Py_ssize_t)get_le(b + 2, 2);
    uint64_t n = get_le(b + 8, 8);
    Py_ssize_t body = ENVELOPE + hl;
    if (hl > r->max_header) {
        return Py_None;
    }
    PyObject *pl;
    if (kind == K_HEADER && count == body) {
        pl = Py_NewRef(Py_None);
    } else if (kind == K_INLINE && n <= (uint64_t)r->copy_out && count == body + (Py_ssize_t)n) {
        PyObject *bytes = PyBytes_FromStringAndSize((const char *)b + body, (Py_ssize_t)n);
        if (bytes == NULL) {
            return NULL;
        }
        pl = PyMemoryView_FromObject(bytes);
        Py_DECREF(bytes);
        if (pl == NULL) {
            return NULL;
        }
    } else {
        return Py_None;
    }
    PyObject *hdr = PyBytes_FromStringAndSize((const char *)b + ENVELOPE, hl);
    if (hdr == NULL) {
        Py_DECREF(pl);
        return NULL;
    }
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(hdr);
        Py_DECREF(pl);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, hdr);
    PyTuple_SET_ITEM(t, 1, pl);
    r->received++;
    if (kind == K_INLINE) {
        r->received_bytes += (int64_t)n;
    }
    return t;
}

/* recv(ready=False) -> (header, payload) | None: the next message, in the order the receives
 * were posted (see the conduit's recv) */
static PyObject *
MPIRing_recv(MPIRingObject *r, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* ready (a hint, never a promise) changes nothing here */
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw > 1 || (nkw == 1 && !PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)))
            || (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                                             "ready") != 0)) {
        PyErr_SetString(PyExc_TypeError, "recv(ready=False)");
        return NULL;
    }
    if (lock_call(r->acquire) < 0) {
        return NULL;
    }
    PyObject *msg = NULL;
    if (r->closed || r->stopped) {
        msg = Py_NewRef(Py_None);
        goto out;
    }
    if (r->s_tail - r->s_head > REAP_AT && reap(r) < 0) {
        goto out;
    }
    for (;;) {
        int i = r->head;
        int k = m_test(r, &r->reqs[i], r->st);
        if (k <= 0) {
            msg = k < 0 ? NULL : Py_NewRef(Py_None);
            goto out;
        }
        r->done[i] = 1;
        int count, src;
        if (m_count(r, r->st, &count) < 0) {
            goto out;
        }
        memcpy(&src, r->st + r->src_off, sizeof src);
        msg = take_fast(r, i, count);
        if (msg == Py_None) {
            /* everything else: the conduit's Python, which counts what it took */
            PyObject *a[] = {NULL, NULL, NULL, NULL};
            if ((a[1] = PyLong_FromLong(i)) == NULL || (a[2] = PyLong_FromLong(count)) == NULL
                    || (a[3] = PyLong_FromLong(src)) == NULL) {
                msg = NULL;
            } else {
                msg = PyObject_Vectorcall(r->take_slow, a + 1,
                                          3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            }
            Py_XDECREF(a[1]);
            Py_XDECREF(a[2]);
            Py_XDECREF(a[3]);
            if (msg == Py_None) {
                Py_DECREF(msg);
                msg = NULL;
                r->dropped++;
                if (m_irecv(r, i) < 0) {
                    goto out;
                }
                r->head = (i + 1) % r->depth;
                continue;
            }
        }
        if (msg == NULL) {
            goto out;
        }
        if (m_irecv(r, i) < 0) {
            Py_CLEAR(msg);
            goto out;
        }
        r->head = (i + 1) % r->depth;
        goto out;
    }
out:
    unlock(r);
    if (msg != NULL && PyErr_Occurred()) {
        Py_DECREF(msg);
        return NULL;
    }
    return msg;
}

/* ready() -> whether the next envelope has come (the request stays for recv to complete) */
static PyObject *
MPIRing_ready(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    if (lock_call(r->acquire) < 0) {
        return NULL;
    }
    int k = r->closed || r->stopped ? 0 : m_getst(r, &r->reqs[r->head], r->st2);
    unlock(r);
    if (k < 0 || PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(k);
}

/* -- statistics ----------------------------------------------------------------------- */

/* counts() -> (sent by process, bytes sent, received, bytes received, dropped) */
static PyObject *
MPIRing_counts(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    PyObject *sent = PyList_New(r->procs);
    if (sent == NULL) {
        return NULL;
    }
    long long bytes = 0;
    for (int p = 0; p < r->procs; p++) {
        PyObject *v = PyLong_FromLongLong(r->sent[p]);
        if (v == NULL) {
            Py_DECREF(sent);
            return NULL;
        }
        PyList_SET_ITEM(sent, p, v);
        bytes += r->sent_bytes[p];
    }
    return Py_BuildValue("(NLLLL)", sent, bytes, (long long)r->received,
                         (long long)r->received_bytes, (long long)r->dropped);
}

/* note_received(nbytes): count a message take_slow returned */
static PyObject *
MPIRing_note_received(MPIRingObject *r, PyObject *arg)
{
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    r->received++;
    r->received_bytes += n;
    Py_RETURN_NONE;
}

/* set_dests([(rank, tag), ...]): where each process's envelopes go */
static PyObject *
MPIRing_set_dests(MPIRingObject *r, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "set_dests needs a sequence of (rank, tag)");
    if (seq == NULL) {
        return NULL;
    }
    if (PySequence_Fast_GET_SIZE(seq) != r->procs) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "set_dests needs %d pairs", r->procs);
        return NULL;
    }
    int *rank = PyMem_Calloc(r->procs, sizeof(int)), *tag = PyMem_Calloc(r->procs, sizeof(int));
    int ok = rank != NULL && tag != NULL;
    if (!ok) {
        PyErr_NoMemory();
    }
    for (int p = 0; ok && p < r->procs; p++) {
        ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, p), "ii", &rank[p], &tag[p]);
        if (ok && (rank[p] < 0 || tag[p] < 0)) {
            PyErr_SetString(PyExc_ValueError, "set_dests: a negative rank or tag");
            ok = 0;
        }
    }
    Py_DECREF(seq);
    if (ok) {  /* all or nothing */
        memcpy(r->drank, rank, r->procs * sizeof(int));
        memcpy(r->dtag, tag, r->procs * sizeof(int));
    }
    PyMem_Free(rank);
    PyMem_Free(tag);
    if (!ok) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* received: messages taken so far (the conduit's naps start short again when it grew) */
static PyObject *
MPIRing_get_received(MPIRingObject *r, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong((long long)r->received);
}

static PyGetSetDef MPIRing_getset[] = {
    {"received", (getter)MPIRing_get_received, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef MPIRing_methods[] = {
    {"send", (PyCFunction)(void (*)(void))MPIRing_send, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"recv", (PyCFunction)(void (*)(void))MPIRing_recv, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"ready", (PyCFunction)MPIRing_ready, METH_NOARGS, NULL},
    {"start", (PyCFunction)MPIRing_start, METH_NOARGS, NULL},
    {"view", (PyCFunction)MPIRing_view, METH_O, NULL},
    {"swap", (PyCFunction)MPIRing_swap, METH_O, NULL},
    {"peek", (PyCFunction)MPIRing_peek, METH_O, NULL},
    {"reap", (PyCFunction)MPIRing_reap, METH_NOARGS, NULL},
    {"note_sent", (PyCFunction)MPIRing_note_sent, METH_VARARGS, NULL},
    {"note_received", (PyCFunction)MPIRing_note_received, METH_O, NULL},
    {"shutdown", (PyCFunction)MPIRing_shutdown, METH_NOARGS, NULL},
    {"stop", (PyCFunction)MPIRing_stop, METH_NOARGS, NULL},
    {"counts", (PyCFunction)MPIRing_counts, METH_NOARGS, NULL},
    {"set_dests", (PyCFunction)MPIRing_set_dests, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject MPIRing_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amnet.core._hot.MPIRing",
    .tp_basicsize = sizeof(MPIRingObject),
    .tp_dealloc = (destructor)MPIRing_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The mpi conduit's envelopes in C (see amnet/core/_hot_mpi.c).",
    .tp_traverse = (traverseproc)MPIRing_traverse,
    .tp_clear = (inquiry)MPIRing_clear,
    .tp_methods = MPIRing_methods,
    .tp_getset = MPIRing_getset,
    .tp_new = MPIRing_new,
};
