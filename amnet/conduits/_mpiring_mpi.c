/* amnet.conduits._mpiring: MPIRing, the mpi conduit's envelopes in C (amnet/conduits/_mpi.py).
 *
 * The conduit's every message starts as one envelope (16 bytes: kind, header length, payload
 * length; then the AM header, and the payload when it travels in line), received from any
 * source on the conduit's tag into the next of ``depth`` slots of a ring, in the order MPI
 * matched them, one of two ways (the conduit picks: _mpi.matched_probes):
 *  - posted receives: every free slot keeps an MPI_Irecv from MPI_ANY_SOURCE posted, tested
 *    in order (MPI_Test of the oldest) and posted again once taken;
 *  - matched probes: MPI_Improbe from any source, then MPI_Mrecv into the slot. Receives
 *    posted from MPI_ANY_SOURCE lose messages over MPICH's ucx module (the mpich wheel's
 *    default: plain mpi4py shows it, docs/conduits.md), where probes lose none and are the
 *    faster way too; over libfabric (ofi) a probe costs a round trip 6-11 us more than a
 *    posted receive, so posted receives stay the way there.
 * What a Short or small Medium AM round trip touches runs here, calling the MPI library
 * directly: the envelope's send (a copy into a buffer of its own, MPI_Isend, the request
 * kept until a later look finds it complete), and the receive (the oldest slot taken, the
 * envelope read, the slot freed). Everything else calls back into the conduit's Python: a
 * payload sent as a bulk message (``post_slow``), and any envelope but a header alone or a
 * small in-line payload (``take_slow``: bulk payloads, large in-line ones, malformed ones),
 * with the same lock held and the ring's state reachable through the methods below.
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
 * methods, which release the interpreter lock while they wait.
 *
 * This file: the MPI calls and the message path (send, recv, ready); the type's set-up, the
 * methods the conduit's Python calls, the statistics and the module are in _mpiring.c, the
 * struct between them in _mpiring.h. */


#include "_mpiring.h"

/* -- MPI calls with the library's handle types --------------------------------------- */

int
mpi_error(const char *what, int rc)
{
    PyErr_Format(PyExc_RuntimeError, "%s failed in the mpi conduit (MPI error code %d)",
                 what, rc);
    return -1;
}

int
m_isend(MPIRingObject *r, const void *buf, int n, int dest, int tag, void *req)
{
    int rc = r->h8 ? ((isend8_t)r->isend)(buf, n, (void *)r->byte, dest, tag, (void *)r->comm,
                                          req)
                   : ((isend4_t)r->isend)(buf, n, (int)r->byte, dest, tag, (int)r->comm, req);
    return rc ? mpi_error("MPI_Isend", rc) : 0;
}

int
m_irecv(MPIRingObject *r, int i)
{
    void *buf = r->views[i].buf;
    int n = (int)r->bufsize;
    int rc = r->h8 ? ((irecv8_t)r->irecv)(buf, n, (void *)r->byte, r->any, r->tag,
                                          (void *)r->comm, &r->reqs[i])
                   : ((irecv4_t)r->irecv)(buf, n, (int)r->byte, r->any, r->tag, (int)r->comm,
                                          &r->reqs[i]);
    return rc ? mpi_error("MPI_Irecv", rc) : 0;
}

/* Take the next envelope from any source into slot i, the first free one after the filled
 * ones (its posted receive completed, or MPI_Improbe and MPI_Mrecv of what it matched):
 * 1 taken, 0 none has come, -1 error */
int
m_fill(MPIRingObject *r, int i)
{
    if (!r->probe) {
        int k = m_test(r, &r->reqs[i], r->sts + (Py_ssize_t)i * r->st_size);
        if (k > 0) {
            r->done[i] = 1;
            r->filled++;
        }
        return k;
    }
    int flag = 0;
    int64_t msg = 0;  /* MPI_Message: an int (MPICH) or a pointer (Open MPI) */
    char *st = r->sts + (Py_ssize_t)i * r->st_size;
    int rc = r->h8 ? ((improbe8_t)r->improbe)(r->any, r->tag, (void *)r->comm, &flag, &msg, st)
                   : ((improbe4_t)r->improbe)(r->any, r->tag, (int)r->comm, &flag, &msg, st);
    if (rc) {
        return mpi_error("MPI_Improbe", rc);
    }
    if (!flag) {
        return 0;
    }
    void *buf = r->views[i].buf;
    int n = (int)r->bufsize;
    rc = r->h8 ? ((mrecv8_t)r->mrecv)(buf, n, (void *)r->byte, &msg, st)
               : ((mrecv4_t)r->mrecv)(buf, n, (int)r->byte, &msg, st);
    if (rc) {
        return mpi_error("MPI_Mrecv", rc);
    }
    r->done[i] = 1;
    r->filled++;
    return 1;
}

/* Free slot i (the head, taken): the next envelope may land in it (its receive posted
 * again). 0, or -1 with an error set. */
int
m_free(MPIRingObject *r, int i)
{
    r->done[i] = 0;
    r->filled--;
    return r->probe ? 0 : m_irecv(r, i);
}

/* 1 complete, 0 not yet, -1 error */
int
m_test(MPIRingObject *r, int64_t *req, char *st)
{
    int flag = 0;
    int rc = ((test_t)r->test)(req, &flag, st);
    return rc ? mpi_error("MPI_Test", rc) : flag != 0;
}

int
m_count(MPIRingObject *r, const char *st, int *count)
{
    int rc = r->h8 ? ((count8_t)r->count)(st, (void *)r->byte, count)
                   : ((count4_t)r->count)(st, (int)r->byte, count);
    return rc ? mpi_error("MPI_Get_count", rc) : 0;
}

int
lock_call(PyObject *fn)
{
    return discard(PyObject_CallNoArgs(fn));
}

/* Release MPI_LOCK, keeping an exception that is already set. */
void
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
int
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
PyObject *
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

/* The envelope in slot i (``count`` bytes): a new (header, payload) tuple; Py_None to hand
 * it to take_slow; NULL error. */
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

/* recv(ready=False) -> (header, payload) | None: the next message, in the order MPI matched
 * the envelopes (see the conduit's recv) */
PyObject *
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
        int k = r->done[i] ? 1 : m_fill(r, i);
        if (k <= 0) {
            msg = k < 0 ? NULL : Py_NewRef(Py_None);
            goto out;
        }
        const char *st = r->sts + (Py_ssize_t)i * r->st_size;
        int count, src;
        if (m_count(r, st, &count) < 0) {
            goto out;
        }
        memcpy(&src, st + r->src_off, sizeof src);
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
                r->head = (i + 1) % r->depth;
                if (m_free(r, i) < 0) {
                    goto out;
                }
                continue;
            }
        }
        if (msg == NULL) {
            goto out;
        }
        r->head = (i + 1) % r->depth;
        if (m_free(r, i) < 0) {
            Py_CLEAR(msg);
        }
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

/* ready() -> whether the next envelope has come (taken into its slot for recv) */
PyObject *
MPIRing_ready(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    if (lock_call(r->acquire) < 0) {
        return NULL;
    }
    int k = r->closed || r->stopped ? 0 : r->done[r->head] ? 1 : m_fill(r, r->head);
    unlock(r);
    if (k < 0 || PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(k);
}

