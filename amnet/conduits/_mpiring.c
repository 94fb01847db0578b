/* amnet.conduits._mpiring: MPIRing, the type (the mpi conduit's envelopes: see
 * _mpiring_mpi.c): its set-up (binding the MPI library mpi4py loaded), the methods the
 * conduit's Python calls with MPI_LOCK held, the statistics, the type object and the module.
 * The conduit reaches it only through Python callables (amnet/conduits/_mpi.py), the AM hot
 * path too (the conduit's send and recv), so it is an extension of its own. */

#include "_mpiring.h"

#include <dlfcn.h>

/* -- the type ------------------------------------------------------------------------- */

static void
free_state(MPIRingObject *r)
{
    if (r->views != NULL) {
        for (int i = 0; i < r->depth; i++) {
            /* a receive still posted (never shut down) keeps its buffer: leaked, not freed */
            if (r->closed || r->probe || r->done[i]) {
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
    PyMem_Free(r->sts);
    PyMem_Free(r->st2);
    /* envelopes still in flight are left to MPI (their memory is never freed) */
    PyMem_Free(r->sends);
    PyMem_Free(r->drank);
    PyMem_Free(r->dtag);
    PyMem_Free(r->sent);
    PyMem_Free(r->sent_bytes);
}

#define MPIRING_REFS(X) X(acquire) X(release) X(post_slow) X(take_slow)
AMNET_GC_FUNCS(MPIRing, MPIRingObject, MPIRING_REFS)

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
 *         copy_out, max_header, status_size, source_offset, procs, lock, post_slow, take_slow,
 *         probe)
 * lib: a file whose dependencies include the MPI library (mpi4py.MPI's); probe: envelopes
 * by matched probes, else by posted receives (start() posts them). */
static PyObject *
MPIRing_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    const char *lib;
    int h8, any, tag, depth, st_size, src_off, procs, probe;
    unsigned long long comm, byte;  /* handle values as mpi4py gives them (maybe unsigned) */
    Py_ssize_t bufsize, inline_max, direct_max, copy_out, max_header;
    PyObject *lock, *post_slow, *take_slow;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "MPIRing takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "siKKiiinnnnniiiOOOp", &lib, &h8, &comm, &byte, &any, &tag,
                          &depth, &bufsize, &inline_max, &direct_max, &copy_out, &max_header,
                          &st_size, &src_off, &procs, &lock, &post_slow, &take_slow,
                          &probe)) {
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
    r->closed = 1;  /* until start(): nothing is received */
    void *h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
    if ((r->isend = sym(h, "MPI_Isend")) == NULL
            || (r->improbe = sym(h, "MPI_Improbe")) == NULL
            || (r->mrecv = sym(h, "MPI_Mrecv")) == NULL
            || (r->irecv = sym(h, "MPI_Irecv")) == NULL
            || (r->test = sym(h, "MPI_Test")) == NULL
            || (r->count = sym(h, "MPI_Get_count")) == NULL
            || (r->cancel = sym(h, "MPI_Cancel")) == NULL
            || (r->wait = sym(h, "MPI_Wait")) == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    r->h8 = h8 != 0;
    r->probe = probe != 0;
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
    r->sts = PyMem_Calloc(depth, st_size);
    r->st2 = PyMem_Calloc(1, st_size);
    r->sends = PyMem_Calloc(r->s_cap, sizeof(Send));
    r->drank = PyMem_Calloc(procs, sizeof(int));
    r->dtag = PyMem_Calloc(procs, sizeof(int));
    r->sent = PyMem_Calloc(procs, sizeof(int64_t));
    r->sent_bytes = PyMem_Calloc(procs, sizeof(int64_t));
    if (!r->bufs || !r->done || !r->views || !r->reqs || !r->sts || !r->st2 || !r->sends
            || !r->drank
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

/* start(): from now on envelopes are taken (the receives posted, unless by probes) */
static PyObject *
MPIRing_start(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    if (!r->closed || r->head != 0) {
        PyErr_SetString(PyExc_RuntimeError, "MPIRing.start: already started");
        return NULL;
    }
    for (int i = 0; !r->probe && i < r->depth; i++) {
        if (m_irecv(r, i) < 0) {
            return NULL;  /* the posted ones stay posted: the ring is never shut down */
        }
        r->closed = 0;
    }
    r->closed = 0;
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

/* swap(i) -> the bytearray of slot i, which a fresh one replaces (the caller keeps the
 * payload in it; the slot's next envelope lands in the new one: its receive is posted
 * into it) */
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

/* peek(k) -> (count, source) of the envelope in slot k, else None. Slots fill in order: the
 * first free one after the filled ones (and only it) takes the next envelope if one came. */
static PyObject *
MPIRing_peek(MPIRingObject *r, PyObject *arg)
{
    long k = slot_of(r, arg);
    if (k < 0) {
        return NULL;
    }
    if (!r->done[k]) {
        int next = (r->head + r->filled) % r->depth;
        int got = r->closed || r->stopped || k != next || r->filled == r->depth ? 0
                  : m_fill(r, (int)k);
        if (got <= 0) {
            return got < 0 ? NULL : Py_NewRef(Py_None);
        }
    }
    const char *st = r->sts + (Py_ssize_t)k * r->st_size;
    int count;
    if (m_count(r, st, &count) < 0) {
        return NULL;
    }
    int src;
    memcpy(&src, st + r->src_off, sizeof src);
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

/* shutdown(): nothing more is taken (the receives still posted cancelled and waited for);
 * envelopes still in flight are left to MPI, their memory never freed */
static PyObject *
MPIRing_shutdown(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    if (r->closed) {
        Py_RETURN_NONE;
    }
    r->closed = 1;
    for (int i = 0; !r->probe && i < r->depth; i++) {
        if (!r->done[i]) {
            ((cancel_t)r->cancel)(&r->reqs[i]);
            ((wait_t)r->wait)(&r->reqs[i], r->st2);
        }
    }
    r->s_head = r->s_tail = 0;
    Py_RETURN_NONE;
}

/* stop(): from now on sends raise and recv finds nothing */
static PyObject *
MPIRing_stop(MPIRingObject *r, PyObject *Py_UNUSED(ignored))
{
    r->stopped = 1;
    Py_RETURN_NONE;
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

PyTypeObject MPIRing_Type = AMNET_GC_TYPE(
    MPIRing, MPIRingObject, "amnet.conduits._mpiring.MPIRing", Py_TPFLAGS_DEFAULT,
    .tp_doc = "The mpi conduit's envelopes in C (see amnet/conduits/_mpiring_mpi.c).",
    .tp_methods = MPIRing_methods, .tp_getset = MPIRing_getset, .tp_new = MPIRing_new);

static struct PyModuleDef mpiring_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "amnet.conduits._mpiring",
    .m_doc = "The mpi conduit's envelopes in C (see the C source's header).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__mpiring(void)
{
    if (PyType_Ready(&MPIRing_Type) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&mpiring_module);
    if (m == NULL) {
        return NULL;
    }
#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030D0000
    PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);  /* MPI calls under the conduit's lock */
#endif
    if (PyModule_AddObjectRef(m, "MPIRing", (PyObject *)&MPIRing_Type) < 0
            || PyModule_AddIntConstant(m, "ENVELOPE", ENVELOPE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
