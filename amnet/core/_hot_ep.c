/* amnet.core._hot: EndpointBase, the C entry points of amnet.Endpoint: request_*, poll,
 * wait_until, put/get and their _nbi forms, the node-local atomics, the symmetric forms,
 * segment_offset, _bind. */

#include "_hot.h"

#include "../pshm/_atomic_table.h"

/* ------------------------------------------------------------------------------------ */
/* EndpointBase: the entry points of amnet.Endpoint that a round trip goes through        */

typedef struct {
    PyObject_HEAD
    HotObject *hot;
    PyObject *py;                    /* the Python methods' home: AMMixin/ExtendedMixin */
    int t;
    int local_ops;                   /* calls completed here until the next poll */
} EPObject;

/* the one reference it owns: its engine's Hot */
#define EP_REFS(X) X(hot)
AMNET_GC_FUNCS(EP, EPObject, EP_REFS)
AMNET_GC_DEALLOC(EP, EPObject)

static int
ep_live(EPObject *ep)
{
    HotObject *h = ep->hot;
    if (h == NULL || h->py_send == NULL) {
        PyErr_SetString(InitError, "this endpoint is not bound to a running engine");
        return -1;
    }
    if (h->slots[ep->t].finalized) {
        PyErr_Format(InitError, "rank %ld already called amnet.finalize(); the endpoint may "
                     "not be used after it", h->slots[ep->t].rank);
        return -1;
    }
    return 0;
}

static int
forbid(const char *what, int send)
{
    TokenObject *tok = PyThread_tss_get(&cur_token);
    if (tok == NULL) {
        return 0;
    }
    PyObject *nm = hot_token_name(tok);
    /* the engine's words (set_errors), as its forbid_*_in_handler say them */
    PyErr_Format(AMContextError, "%s inside %s handler %S%S", what,
                 tok->is_request ? "request" : "reply", nm,
                 !send ? RestrictedHint : tok->is_request ? ForwardHint : ReplyHint);
    Py_XDECREF(nm);
    return -1;
}

/* request_*(dest, handler, ...): `fixed` positional arguments of the call's own (dest and
 * the AM's: see send_am_args), then the AM's args */
static PyObject *
ep_request(EPObject *ep, int cat, const char *what, PyObject *const *args, Py_ssize_t nargs,
           Py_ssize_t fixed)
{
    if (ep_live(ep) < 0 || forbid(what, 1) < 0 || enough_args(what, nargs, fixed) < 0) {
        return NULL;
    }
    HotObject *h = ep->hot;
    if (send_am_args(h, ep->t, cat, args[0], args + 1, nargs - 1, fixed - 1) < 0
            || poll_once(h, Py_None) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

HOT_AM_METHOD(EP_, EPObject, "ep", request_short, ep_request, C_SHORT, 2)
HOT_AM_METHOD(EP_, EPObject, "ep", request_medium, ep_request, C_MEDIUM, 3)
HOT_AM_METHOD(EP_, EPObject, "ep", request_long, ep_request, C_LONG, 4)

static PyObject *
EP_poll(EPObject *ep, PyObject *Py_UNUSED(ignored))
{
    if (ep_live(ep) < 0 || forbid("ep.poll()", 0) < 0) {
        return NULL;
    }
    int n = poll_once(ep->hot, Py_None);
    return n < 0 ? NULL : PyLong_FromLong(n);
}

static PyObject *
EP_wait_until(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *pred = NULL, *timeout = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw < 1 || nargs + nkw > 2) {
        PyErr_SetString(PyExc_TypeError, "wait_until(pred, timeout=None)");
        return NULL;
    }
    if (nargs >= 1) pred = args[0];
    if (nargs >= 2) timeout = args[1];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "timeout") == 0 && nargs < 2) {
            timeout = args[nargs + i];
        } else if (PyUnicode_CompareWithASCIIString(k, "pred") == 0 && nargs < 1) {
            pred = args[nargs + i];
        } else {
            PyErr_Format(PyExc_TypeError, "wait_until() got an unexpected keyword argument %R",
                         k);
            return NULL;
        }
    }
    if (pred == NULL) {
        PyErr_SetString(PyExc_TypeError, "wait_until() missing its predicate");
        return NULL;
    }
    if (ep_live(ep) < 0 || forbid("ep.wait_until()", 0) < 0) {
        return NULL;
    }
    if (!PyCallable_Check(pred)) {
        PyErr_SetString(PyExc_TypeError, "wait_until needs a callable predicate");
        return NULL;
    }
    if (timeout != Py_None && !PyNumber_Check(timeout)) {
        PyErr_Format(PyExc_TypeError, "timeout must be a number or None, got %s",
                     Py_TYPE(timeout)->tp_name);
        return NULL;
    }
    return hot_wait_until(ep->hot, pred, timeout);
}

/* Calls that complete in the caller (node-local put, get and atomics, and their symmetric
 * forms) take in what has arrived once every LOCAL_POLL_EVERY of them, outside handlers: a
 * program may spin on them (an OpenSHMEM lock on compare-and-swap, a flag read with
 * atomic_fetch or g), and what ends its loop may be a message from another node, which only
 * a poll of this process takes in. An idle poll costs 80 ns within a node and 0.5 us with a
 * conduit to look at, so one in 64 adds 1-8 ns a call (docs/shmem.md, "Progress"). Returns
 * -1 with the poll's error set, else 0. */
#define LOCAL_POLL_EVERY 64

static inline int
local_progress(EPObject *ep)
{
    /* relaxed: handlers on other threads may count here too (an atomic on their own rank's
     * word); a lost count only moves a poll */
    if (__atomic_sub_fetch(&ep->local_ops, 1, __ATOMIC_RELAXED) > 0) {
        return 0;
    }
    __atomic_store_n(&ep->local_ops, LOCAL_POLL_EVERY, __ATOMIC_RELAXED);
    if (PyThread_tss_get(&cur_token) != NULL) {
        return 0;
    }
    return poll_once(ep->hot, Py_None) < 0 ? -1 : 0;
}

/* put(dest, offset, data): a node-local copy here, else the Python put (_put_slow). */
static PyObject *
slow_call(EPObject *ep, const char *name, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    PyObject *fn = PyObject_GetAttrString((PyObject *)ep, name);
    if (fn == NULL) return NULL;
    PyObject *r = PyObject_Vectorcall(fn, args, nargs, kwnames);
    Py_DECREF(fn);
    return r;
}

/* A node-local put of a plain buffer, done here: 1; anything else: 0 (nothing done, no
 * exception: the Python route judges and raises). */
static int
local_put(EPObject *ep, PyObject *dest_o, PyObject *off_o, PyObject *data)
{
    HotObject *h = ep->hot;
    if (h == NULL || h->segs == NULL || !PyLong_CheckExact(dest_o) || !PyLong_CheckExact(off_o)
            || h->slots[ep->t].finalized || PyThread_tss_get(&cur_token) != NULL) {
        return 0;
    }
    long dest = PyLong_AsLong(dest_o);
    long long off = PyLong_AsLongLong(off_o);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (dest < h->node_first || dest >= h->node_first + h->node_ranks
            || h->segs[dest - h->node_first] == NULL || off < 0) {
        return 0;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return 0;
    }
    int ok = b.len <= h->seg_size && off <= h->seg_size - b.len;
    if (ok) memcpy(h->segs[dest - h->node_first] + off, b.buf, b.len);
    PyBuffer_Release(&b);
    return ok;
}

/* A node-local get into ``out`` (None: a new bytearray) done here: a new reference;
 * anything else: NULL with no exception (the Python route judges and raises). */
static PyObject *
local_get(EPObject *ep, PyObject *src_o, PyObject *off_o, PyObject *nb_o, PyObject *out)
{
    HotObject *h = ep->hot;
    if (h == NULL || h->segs == NULL || !PyLong_CheckExact(src_o) || !PyLong_CheckExact(off_o)
            || !PyLong_CheckExact(nb_o) || h->slots[ep->t].finalized
            || PyThread_tss_get(&cur_token) != NULL) {
        return NULL;
    }
    long src = PyLong_AsLong(src_o);
    long long off = PyLong_AsLongLong(off_o);
    long long nb = PyLong_AsLongLong(nb_o);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (src < h->node_first || src >= h->node_first + h->node_ranks
            || h->segs[src - h->node_first] == NULL || off < 0 || nb < 0
            || nb > h->seg_size || off > h->seg_size - nb) {
        return NULL;
    }
    char *from = h->segs[src - h->node_first] + off;
    if (out == Py_None) {
        return PyByteArray_FromStringAndSize(from, nb);
    }
    Py_buffer b;
    if (PyObject_GetBuffer(out, &b, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        return NULL;
    }
    int ok = b.len >= nb;
    if (ok) memcpy(b.buf, from, nb);
    PyBuffer_Release(&b);
    return ok ? Py_NewRef(out) : NULL;
}

/* put(dest, offset, data): a node-local copy here, else the Python put (_put_slow). */
static PyObject *
EP_put(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 3 && kwnames == NULL && local_put(ep, args[0], args[1], args[2])) {
        if (local_progress(ep) < 0) return NULL;
        Py_RETURN_NONE;
    }
    return slow_call(ep, "_put_slow", args, nargs, kwnames);
}

/* No keyword, or only ``bulk`` as a bool: what the node-local put_nbi/put_nb copy accepts
 * (``bulk`` changes nothing within the node); anything else takes the Python route. */
static int
plain_bulk(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return kwnames == NULL
        || (PyTuple_GET_SIZE(kwnames) == 1
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "bulk") == 0
            && (args[nargs] == Py_True || args[nargs] == Py_False));
}

/* put_nbi(dest, offset, data, *, bulk=False): within the node complete at once (a copy,
 * as the Python route does there), else the Python put_nbi (_put_nbi_slow). */
static PyObject *
EP_put_nbi(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 3 && plain_bulk(args, nargs, kwnames)
            && local_put(ep, args[0], args[1], args[2])) {
        if (local_progress(ep) < 0) return NULL;
        Py_RETURN_NONE;
    }
    return slow_call(ep, "_put_nbi_slow", args, nargs, kwnames);
}

static PyObject *
EP_get(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if ((nargs == 3 || nargs == 4) && kwnames == NULL) {
        PyObject *r = local_get(ep, args[0], args[1], args[2], nargs == 4 ? args[3] : Py_None);
        if (r != NULL) {
            if (local_progress(ep) < 0) Py_CLEAR(r);
            return r;
        }
        if (PyErr_Occurred()) return NULL;
    }
    return slow_call(ep, "_get_slow", args, nargs, kwnames);
}

/* get_nbi(src, offset, nbytes, out): within the node complete at once, else _get_nbi_slow */
static PyObject *
EP_get_nbi(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 4 && kwnames == NULL && args[3] != Py_None) {
        PyObject *r = local_get(ep, args[0], args[1], args[2], args[3]);
        if (r != NULL) {
            Py_DECREF(r);
            if (local_progress(ep) < 0) return NULL;
            Py_RETURN_NONE;
        }
        if (PyErr_Occurred()) return NULL;
    }
    return slow_call(ep, "_get_nbi_slow", args, nargs, kwnames);
}

/* A new instance of a class with __slots__, its object slots at ``offs`` set to ``vals``
 * (new references; stolen), as its __init__ would (which is not run: these are amnet's own
 * plain classes, _ops.Handle and _ops.Done) */
static PyObject *
slotted(PyObject *cls, const Py_ssize_t *offs, PyObject **vals, int n)
{
    PyTypeObject *t = (PyTypeObject *)cls;
    PyObject *o = t->tp_alloc(t, 0);
    for (int i = 0; i < n; i++) {
        if (o != NULL) {
            *(PyObject **)((char *)o + offs[i]) = vals[i];
        } else {
            Py_DECREF(vals[i]);
        }
    }
    return o;
}

/* A handle of an operation complete at once: Handle(ep._eng, op, kind) (steals op), after
 * one poll (every nonblocking start polls, as the Python route does). */
static PyObject *
done_handle(EPObject *ep, PyObject *op, PyObject *kind)
{
    if (op == NULL) return NULL;
    PyObject *vals[3] = {Py_NewRef(ep->hot->eng), op, Py_NewRef(kind)};
    PyObject *h = slotted(HandleClass, HandleSlots, vals, 3);
    if (h != NULL && poll_once(ep->hot, Py_None) < 0) {
        Py_CLEAR(h);
    }
    return h;
}

/* get_nb(src, offset, nbytes, out=None): within the node a copy here, its handle complete;
 * else the Python get_nb (_get_nb_slow) */
static PyObject *
EP_get_nb(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *out = nargs == 4 ? args[3] : Py_None;
    int plain = kwnames == NULL && (nargs == 3 || nargs == 4);
    if (!plain && nargs == 3 && kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 1
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out") == 0) {
        plain = 1;
        out = args[3];
    }
    if (plain && HandleClass != NULL) {
        PyObject *r = local_get(ep, args[0], args[1], args[2], out);
        if (r != NULL) {
            return done_handle(ep, slotted(DoneClass, &DoneSlot, &r, 1), KindGet);
        }
        if (PyErr_Occurred()) return NULL;
    }
    return slow_call(ep, "_get_nb_slow", args, nargs, kwnames);
}

/* put_nb(dest, offset, data, *, bulk=False): within the node a copy here, its handle
 * complete; else the Python put_nb (_put_nb_slow) */
static PyObject *
EP_put_nb(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 3 && plain_bulk(args, nargs, kwnames) && HandleClass != NULL
            && local_put(ep, args[0], args[1], args[2])) {
        return done_handle(ep, Py_NewRef(DoneObj), KindPut);
    }
    return slow_call(ep, "_put_nb_slow", args, nargs, kwnames);
}

/* atomic(dest, offset, op, value=None, value2=None, dtype="i8"): a node-local hardware
 * atomic here when every argument is plainly valid; anything else (another node, a check
 * that fails, numpy scalars, a call inside a handler) goes to the Python atomic, which
 * raises the errors. */
static const char *const ATOMIC_OPS[N_OPS] = {"get", "set", "swap", "cas", "fadd", "fsub",
                                              "fand", "for", "fxor", "fmin", "fmax"};
static const char *const ATOMIC_DTYPES[N_DTYPES] = {"i4", "i8", "u4", "u8", "f4", "f8"};

static int
name_index(PyObject *s, const char *const *tab, int n)
{
    if (!PyUnicode_CheckExact(s)) return -1;
    const char *u = PyUnicode_AsUTF8(s);
    if (u == NULL) {
        PyErr_Clear();
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (strcmp(u, tab[i]) == 0) return i;
    }
    return -1;
}

/* a value's bits for dtype di, or -1 (no exception set) when the Python path must judge */
static int
atomic_bits(PyObject *v, int di, uint64_t *out)
{
    if (di == DT_F4 || di == DT_F8) {
        double d;
        if (PyFloat_CheckExact(v)) {
            d = PyFloat_AS_DOUBLE(v);
        } else if (PyLong_CheckExact(v)) {
            d = PyLong_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                return -1;
            }
        } else {
            return -1;
        }
        if (di == DT_F8) {
            *out = bits_of_f8(d);
        } else {
            float f = (float)d;
            if (isinf(f) && !isinf(d)) return -1;
            *out = bits_of_f4(f);
        }
        return 0;
    }
    if (!PyLong_CheckExact(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    switch (di) {
    case DT_I8:
        if (overflow) return -1;
        *out = (uint64_t)x;
        return 0;
    case DT_U8:
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return -1;
            }
            *out = (uint64_t)u;
            return 0;
        }
        if (overflow || x < 0) return -1;
        *out = (uint64_t)x;
        return 0;
    case DT_I4:
        if (overflow || x < INT32_MIN || x > INT32_MAX) return -1;
        *out = (uint32_t)(int32_t)x;
        return 0;
    default: /* DT_U4 */
        if (overflow || x < 0 || x > (long long)UINT32_MAX) return -1;
        *out = (uint32_t)x;
        return 0;
    }
}

/* The atomic ``op`` on the word at ``p`` with the values' bits for dtype ``di``: the old
 * value, or NULL (no exception set) when an argument is not plain (the Python path judges). */
static PyObject *
word_atomic(char *p, int op, int di, PyObject *v, PyObject *v2)
{
    int isfloat = di == DT_F4 || di == DT_F8;
    if (isfloat && (op == OP_FAND || op == OP_FOR || op == OP_FXOR)) return NULL;
    if ((op == OP_CAS) != (v2 != Py_None)) return NULL;
    uint64_t b1 = 0, b2 = 0;
    if (op == OP_GET) {
        if (v != Py_None) return NULL;
    } else if (v == Py_None || atomic_bits(v, di, &b1) < 0) {
        return NULL;
    }
    if (op == OP_CAS && atomic_bits(v2, di, &b2) < 0) return NULL;
    if (di == DT_I4 || di == DT_U4 || di == DT_F4) {
        uint32_t old = atomic32((uint32_t *)p, op, di, (uint32_t)b1, (uint32_t)b2);
        switch (di) {
        case DT_I4: return PyLong_FromLong((long)(int32_t)old);
        case DT_U4: return PyLong_FromUnsignedLong((unsigned long)old);
        default: return PyFloat_FromDouble((double)f4_of(old));
        }
    }
    uint64_t old = atomic64((uint64_t *)p, op, di, b1, b2);
    switch (di) {
    case DT_I8: return PyLong_FromLongLong((long long)(int64_t)old);
    case DT_U8: return PyLong_FromUnsignedLongLong((unsigned long long)old);
    default: return PyFloat_FromDouble(f8_of(old));
    }
}

static PyObject *
EP_atomic(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    HotObject *h = ep->hot;
    PyObject *a[6] = {NULL, NULL, NULL, Py_None, Py_None, NULL};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    /* an atomic on the rank's own word neither sends nor waits: a handler may run one (it
     * touches its own memory); the slow path refuses every other atomic there */
    int in_handler = PyThread_tss_get(&cur_token) != NULL;
    if (nargs < 3 || nargs > 6 || h == NULL || h->segs == NULL
            || h->slots[ep->t].finalized) {
        goto slow;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) a[i] = args[i];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        int j = -1;
        if (PyUnicode_CompareWithASCIIString(k, "value") == 0) j = 3;
        else if (PyUnicode_CompareWithASCIIString(k, "value2") == 0) j = 4;
        else if (PyUnicode_CompareWithASCIIString(k, "dtype") == 0) j = 5;
        if (j < nargs) goto slow; /* unknown or given twice: the Python call says so */
        a[j] = args[nargs + i];
    }
    if (!PyLong_CheckExact(a[0]) || !PyLong_CheckExact(a[1])) goto slow;
    int op = name_index(a[2], ATOMIC_OPS, N_OPS);
    int di = a[5] == NULL ? DT_I8 : name_index(a[5], ATOMIC_DTYPES, N_DTYPES);
    if (op < 0 || di < 0) goto slow;
    long dest = PyLong_AsLong(a[0]);
    long long off = PyLong_AsLongLong(a[1]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        goto slow;
    }
    int size = (di == DT_I8 || di == DT_U8 || di == DT_F8) ? 8 : 4;
    if (dest < h->node_first || dest >= h->node_first + h->node_ranks
            || h->segs[dest - h->node_first] == NULL || off < 0 || off % size != 0
            || off > h->seg_size - size || (in_handler && dest != h->first + ep->t)) {
        goto slow;
    }
    PyObject *r = word_atomic(h->segs[dest - h->node_first] + off, op, di, a[3], a[4]);
    if (r != NULL) {
        if (local_progress(ep) < 0) Py_CLEAR(r);
        return r;
    }
slow:
    return slow_call(ep, "_atomic_slow", args, nargs, kwnames);
}


/* put_symmetric(dest, local, data) / get_symmetric(src, local, out): the symmetric
 * addressing of OpenSHMEM-like runtimes. ``local`` is a C-contiguous buffer in my segment;
 * the same offset of the peer's segment is written from ``data`` (at most local's length)
 * or read into ``out`` (local's length, ``out`` at least that long). Done here when the
 * peer is on my node and every buffer is plain: True. Otherwise nothing is done and the
 * result is False (the caller takes its general route, which also raises the errors). */
static int
symmetric_base(EPObject *ep, PyObject *peer, char **mine, char **theirs)
{
    HotObject *h = ep->hot;
    if (h == NULL || h->segs == NULL || h->slots[ep->t].finalized
            || !PyLong_CheckExact(peer)) {
        return 0;
    }
    long r = PyLong_AsLong(peer);
    if (r == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    int me = h->first + ep->t - h->node_first;
    if (r < h->node_first || r >= h->node_first + h->node_ranks || me < 0
            || me >= h->node_ranks || h->segs[r - h->node_first] == NULL
            || h->segs[me] == NULL) {
        return 0;
    }
    *mine = h->segs[me];
    *theirs = h->segs[r - h->node_first];
    return 1;
}

/* put_symmetric and get_symmetric, one owner (inline: the put's and the get's branches
 * fold away in each): `put`, data (args[2]) into the peer's segment at local's offset, at
 * most local's length; else that many bytes of the peer's there into out (args[2]). */
static inline PyObject *
symmetric_copy(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, int put,
               const char *usage)
{
    char *mine, *theirs;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s takes 3 arguments", usage);
        return NULL;
    }
    if (!symmetric_base(ep, args[0], &mine, &theirs)) Py_RETURN_FALSE;
    Py_buffer lb, xb;                /* local's; data's (put) or out's (get) */
    if (PyObject_GetBuffer(args[1], &lb, put ? PyBUF_SIMPLE | PyBUF_WRITABLE : PyBUF_SIMPLE)
            < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (PyObject_GetBuffer(args[2], &xb, put ? PyBUF_SIMPLE : PyBUF_SIMPLE | PyBUF_WRITABLE)
            < 0) {
        PyBuffer_Release(&lb);
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int64_t size = ep->hot->seg_size;
    char *at = lb.buf;
    int ok = at >= mine && lb.len <= size && at - mine <= size - lb.len
        && (put ? xb.len <= lb.len : xb.len >= lb.len);
    if (ok && put) {
        memcpy(theirs + (at - mine), xb.buf, xb.len);
    } else if (ok) {
        memcpy(xb.buf, theirs + (at - mine), lb.len);
    }
    PyBuffer_Release(&xb);
    PyBuffer_Release(&lb);
    if (ok && local_progress(ep) < 0) return NULL;
    return PyBool_FromLong(ok);
}

static PyObject *
EP_put_symmetric(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    return symmetric_copy(ep, args, nargs, 1, "put_symmetric(dest, local, data)");
}

static PyObject *
EP_get_symmetric(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    return symmetric_copy(ep, args, nargs, 0, "get_symmetric(src, local, out)");
}

/* atomic_symmetric(dest, local, op, value=None, value2=None): ep.atomic on the word at
 * ``local``'s offset of dest's segment, ``local`` being one element (i4 i8 u4 u8 f4 f8, by
 * its buffer format) in my segment. Done here for a node-local dest and plain arguments;
 * otherwise NotImplemented (nothing done: the caller takes its general route, which also
 * raises the errors). */
static int
format_dtype(const char *f, Py_ssize_t itemsize)
{
    if (f == NULL) return -1;
    if (*f == '@' || *f == '=' || *f == '<') f++; /* native, little-endian builds only */
    if (f[0] == 0 || f[1] != 0) return -1;
    switch (f[0]) {
    case 'i': case 'l': case 'q':
        return itemsize == 4 ? DT_I4 : itemsize == 8 ? DT_I8 : -1;
    case 'I': case 'L': case 'Q':
        return itemsize == 4 ? DT_U4 : itemsize == 8 ? DT_U8 : -1;
    case 'f': return itemsize == 4 ? DT_F4 : -1;
    case 'd': return itemsize == 8 ? DT_F8 : -1;
    default: return -1;
    }
}

static PyObject *
EP_atomic_symmetric(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    char *mine, *theirs;
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "atomic_symmetric(dest, local, op, value=None, value2=None) takes 3 "
                        "to 5 arguments");
        return NULL;
    }
#if PY_BIG_ENDIAN
    Py_RETURN_NOTIMPLEMENTED;
#endif
    if (!symmetric_base(ep, args[0], &mine, &theirs)) Py_RETURN_NOTIMPLEMENTED;
    HotObject *h = ep->hot;
    if (PyThread_tss_get(&cur_token) != NULL
            && PyLong_AsLong(args[0]) != h->first + ep->t) {
        Py_RETURN_NOTIMPLEMENTED; /* a handler: only its own rank's word (as ep.atomic) */
    }
    int op = name_index(args[2], ATOMIC_OPS, N_OPS);
    if (op < 0) Py_RETURN_NOTIMPLEMENTED;
    Py_buffer b;
    if (PyObject_GetBuffer(args[1], &b, PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    int di = format_dtype(b.format, b.itemsize);
    char *at = b.buf;
    int ok = di >= 0 && b.len == b.itemsize && at >= mine && at - mine <= h->seg_size - b.len
             && (at - mine) % b.len == 0;
    Py_ssize_t off = at - mine;
    PyBuffer_Release(&b);
    if (!ok) Py_RETURN_NOTIMPLEMENTED;
    PyObject *r = word_atomic(theirs + off, op, di, nargs > 3 ? args[3] : Py_None,
                              nargs > 4 ? args[4] : Py_None);
    if (r == NULL) Py_RETURN_NOTIMPLEMENTED;
    if (local_progress(ep) < 0) Py_CLEAR(r);
    return r;
}

/* segment_offset(buf): where ``buf``'s memory starts in this rank's segment, or -1 when
 * any of it lies outside (a buffer of any strides; its whole extent is checked). */
static PyObject *
EP_segment_offset(EPObject *ep, PyObject *obj)
{
    HotObject *h = ep->hot;
    if (h == NULL || h->segs == NULL || h->slots[ep->t].finalized) {
        return PyObject_CallMethod((PyObject *)ep, "_segment_offset_slow", "O", obj);
    }
    int me = h->first + ep->t - h->node_first;
    if (me < 0 || me >= h->node_ranks || h->segs[me] == NULL) {
        return PyObject_CallMethod((PyObject *)ep, "_segment_offset_slow", "O", obj);
    }
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_STRIDES) < 0) return NULL;
    char *lo = b.buf, *hi = b.buf;
    int empty = 0;
    if (b.strides != NULL) {
        for (int i = 0; i < b.ndim; i++) {
            if (b.shape[i] == 0) empty = 1;
            Py_ssize_t ext = (b.shape[i] - 1) * b.strides[i];
            if (ext > 0) hi += ext; else lo += ext;
        }
        hi += b.itemsize;
    } else {
        hi += b.len;
    }
    if (empty) hi = lo = b.buf;
    char *base = h->segs[me];
    long long r = (lo >= base && hi <= base + h->seg_size) ? (long long)((char *)b.buf - base)
                                                          : -1;
    PyBuffer_Release(&b);
    return PyLong_FromLongLong(r);
}

static PyObject *
EP_bind(EPObject *ep, PyObject *args)
{
    HotObject *h;
    int t;
    if (!PyArg_ParseTuple(args, "O!i", &Hot_Type, &h, &t)) {
        return NULL;
    }
    if (t < 0 || t >= h->T) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread");
        return NULL;
    }
    Py_XSETREF(ep->hot, (HotObject *)Py_NewRef(h));
    ep->t = t;
    Py_RETURN_NONE;
}

static PyMethodDef EP_methods[] = {
    {"request_short", (PyCFunction)(void (*)(void))EP_request_short, METH_FASTCALL,
     "request_short($self, dest, handler, /, *args)\n--\n\n"
     "Send a Short AM: ``handler(token, *args)`` runs on rank ``dest``.\n\n"
     "``handler`` is a registered function (or its ``module.qualname``); ``args`` are at most "
     "``amnet.MAX_ARGS`` (16) ints that fit int64. The call polls once after sending.\n\n"
     "Raises:\n    RankError, HandlerNotRegistered, HandlerCategoryError, AMArgumentError: bad "
     "input (nothing is sent).\n    AMContextError: called inside a handler (reply with the "
     "token instead).\n    InitError: after amnet.finalize()."},
    {"request_medium", (PyCFunction)(void (*)(void))EP_request_medium, METH_FASTCALL,
     "request_medium($self, dest, handler, payload, /, *args)\n--\n\n"
     "Send a Medium AM: ``handler(token, payload_view, *args)`` runs on ``dest``.\n\n"
     "``payload`` is bytes-like, at most ``ep.max_medium`` bytes; it may be reused as soon as "
     "the call returns. The handler's view is valid only during its call.\n\n"
     "Raises: as :meth:`request_short`, plus PayloadTooLarge."},
    {"request_long", (PyCFunction)(void (*)(void))EP_request_long, METH_FASTCALL,
     "request_long($self, dest, handler, payload, dest_offset, /, *args)\n--\n\n"
     "Send a Long AM: ``payload`` is written at ``dest_offset`` in ``dest``'s segment, then "
     "``handler(token, view_of_those_bytes, *args)`` runs there.\n\n"
     "The payload may be reused as soon as the call returns.\n\n"
     "Raises: as :meth:`request_short`, plus SegmentBoundsError."},
    {"poll", (PyCFunction)EP_poll, METH_NOARGS,
     "poll($self, /)\n--\n\n"
     "Run the handlers of the AMs that have arrived; return how many ran.\n\n"
     "Raises:\n    AMContextError: called inside a handler."},
    {"wait_until", (PyCFunction)(void (*)(void))EP_wait_until,
     METH_FASTCALL | METH_KEYWORDS,
     "wait_until($self, pred, timeout=None)\n--\n\n"
     "Make progress until ``pred()`` is true; return False if ``timeout`` seconds passed "
     "first.\n\n"
     "Raises:\n    AMContextError: called inside a handler.\n    JobAborted: the job is being "
     "torn down."},
    {"put", (PyCFunction)(void (*)(void))EP_put, METH_FASTCALL | METH_KEYWORDS,
     "put($self, dest, offset, data)\n--\n\n"
     "Write ``data`` (bytes-like) at ``offset`` of ``dest``'s segment and return once it is "
     "there. ``data`` may be reused at once. Within the node it is a direct copy.\n\n"
     "Raises:\n    RankError, SegmentBoundsError, TypeError: bad input (nothing is sent).\n"
     "    AMContextError: inside a handler.\n    JobAborted: the job is being torn down."},
    {"put_nbi", (PyCFunction)(void (*)(void))EP_put_nbi, METH_FASTCALL | METH_KEYWORDS,
     "put_nbi($self, dest, offset, data, *, bulk=False)\n--\n\n"
     "Start a put completed by :meth:`wait_nbi` (or the enclosing access region). ``data`` "
     "may be reused at once (amnet copies what the transport still needs), or, with "
     "``bulk=True``, only once the put completed (nothing is copied: GASNet's "
     "``put_nbi_bulk``; on the ``mpi`` conduit a put of 16 KiB or more then goes from "
     "``data`` to ``MPI_Isend`` and into the target's segment, with no copy on either side). "
     "Within the node it is a direct copy, complete on return.\n\n"
     "Raises: as :meth:`put` (before anything is sent); TypeError: ``bulk`` is no bool."},
    {"get_nbi", (PyCFunction)(void (*)(void))EP_get_nbi, METH_FASTCALL | METH_KEYWORDS,
     "get_nbi($self, src, offset, nbytes, out)\n--\n\n"
     "Start a get into ``out``, completed by :meth:`wait_nbi` (or the access region). "
     "Within the node it is a direct copy, complete on return.\n\n"
     "Raises: as :meth:`get`; TypeError: ``out`` is None."},
    {"put_nb", (PyCFunction)(void (*)(void))EP_put_nb, METH_FASTCALL | METH_KEYWORDS,
     "put_nb($self, dest, offset, data, *, bulk=False)\n--\n\n"
     "Start a put and return its :class:`amnet.Handle`; ``data`` may be reused at once "
     "(amnet copies what the transport still needs), or, with ``bulk=True``, only once the "
     "handle completed (nothing is copied: GASNet's ``put_nb_bulk``, MPI_Isend's contract). "
     "Within the node it is a direct copy and the handle is complete on return.\n\n"
     "Raises: as :meth:`put` (before anything is sent); TypeError: ``bulk`` is no bool."},
    {"get_nb", (PyCFunction)(void (*)(void))EP_get_nb, METH_FASTCALL | METH_KEYWORDS,
     "get_nb($self, src, offset, nbytes, out=None)\n--\n\n"
     "Start a get and return its :class:`amnet.Handle`; ``handle.wait()`` (or ``await "
     "handle``) returns ``out`` (or a new bytearray) filled. ``out`` must not be touched "
     "until the handle completed. Within the node it is a direct copy and the handle is "
     "complete on return.\n\n"
     "Raises: as :meth:`get`."},
    {"get", (PyCFunction)(void (*)(void))EP_get, METH_FASTCALL | METH_KEYWORDS,
     "get($self, src, offset, nbytes, out=None)\n--\n\n"
     "Read ``nbytes`` at ``offset`` of ``src``'s segment into ``out`` (a writable buffer of "
     "at least ``nbytes``) or a new ``bytearray``; return it.\n\n"
     "Raises: as :meth:`put`."},
    {"atomic", (PyCFunction)(void (*)(void))EP_atomic, METH_FASTCALL | METH_KEYWORDS,
     "atomic($self, dest, offset, op, value=None, value2=None, dtype='i8')\n--\n\n"
     "Run an atomic on the ``dtype`` word at ``offset`` of ``dest``'s segment, at its owner; "
     "return the old value.\n\n"
     "``op``: get, set, swap, cas (``value`` expected, ``value2`` new), fadd, fsub, fand, "
     "for, fxor, fmin, fmax. ``dtype``: i4, i8, u4, u8, f4, f8 (bitwise ops: ints only). "
     "Within the node it is a hardware atomic on the word, run by the caller. A handler may "
     "run one on its own rank's word (plain int or float values): it touches only its own "
     "memory, neither sending nor waiting.\n\n"
     "Raises:\n    AtomicError: unknown op/dtype, misaligned offset, bad value (nothing is "
     "sent).\n    RankError, SegmentBoundsError: bad target.\n    AMContextError: inside a "
     "handler, for a word of another rank."},
    {"put_symmetric", (PyCFunction)(void (*)(void))EP_put_symmetric, METH_FASTCALL,
     "put_symmetric($self, dest, local, data, /)\n--\n\n"
     "Symmetric addressing, for runtimes whose objects sit at the same offset of every "
     "rank's segment (shmem_rt): write ``data`` into ``dest``'s segment at the offset where "
     "``local`` (a C-contiguous writable buffer in my segment, at least as long as ``data``) "
     "sits in mine. Returns True when done (a direct copy: ``dest`` is on my node and the "
     "buffers are plain); False when nothing was done, and the caller takes its general "
     "route (``ep.put``/``put_nbi`` with :meth:`segment_offset`)."},
    {"get_symmetric", (PyCFunction)(void (*)(void))EP_get_symmetric, METH_FASTCALL,
     "get_symmetric($self, src, local, out, /)\n--\n\n"
     "The reverse of :meth:`put_symmetric`: read ``len(local)`` bytes at ``local``'s offset "
     "of ``src``'s segment into ``out`` (writable, at least that long). True when done, "
     "False when nothing was done."},
    {"atomic_symmetric", (PyCFunction)(void (*)(void))EP_atomic_symmetric, METH_FASTCALL,
     "atomic_symmetric($self, dest, local, op, value=None, value2=None, /)\n--\n\n"
     ":meth:`atomic` on the word at ``local``'s offset of ``dest``'s segment, ``local`` "
     "being one element (int32, int64, uint32, uint64, float32 or float64, by its buffer "
     "format) in my segment. Done in one C call when ``dest`` is on my node and every "
     "argument is plain: the old value. Otherwise nothing is done and the result is "
     "NotImplemented: the caller takes its general route (:meth:`atomic` at "
     "``segment_offset(local)``), which also raises the errors."},
    {"segment_offset", (PyCFunction)EP_segment_offset, METH_O,
     "segment_offset($self, buf, /)\n--\n\n"
     "Where the memory of ``buf`` (any buffer, of any strides) starts in this rank's "
     "segment, as a byte offset; -1 when any of it lies outside the segment. A runtime "
     "with symmetric objects (shmem_rt) uses it to turn a local array into the offset that "
     "names the same object on every rank."},
    {"_bind", (PyCFunction)EP_bind, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject EndpointBase_Type = AMNET_GC_TYPE(
    EP, EPObject, "amnet.core._hot.EndpointBase", Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C entry points of amnet.Endpoint (the AM round trip and node-local "
              "put/get).",
    .tp_methods = EP_methods, .tp_new = PyType_GenericNew);
