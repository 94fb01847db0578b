/* amnet.coll._shm: the flags of a team's node area (docs/collectives.md, "The node area"; the
 * collectives on it are amnet/coll/_node.py).
 *
 * Every member of a team whose members all share memory (one node, PSHM on; or the
 * rank-threads of one process) owns one slot of the node area: a header of int64 words and
 * a data area. Only the owner writes its slot; every member reads every slot. An Area is
 * one member's view of its team's slots (the buffers of every member's slot, in member
 * order); Python copies data in and out of the data areas, this file publishes and reads
 * the words, with the memory ordering of the protocol:
 *
 *   PVER   a sequence lock over the three words below: odd while the owner writes them
 *   PSTEP  the last step the owner has entered (published), > 0
 *   PDIG   the digest of the call that step belongs to
 *   DSTEP  the step whose data is in the owner's data area
 *   DDIG   the digest of the call that data belongs to
 *   DONE   the last step the owner has finished reading (on a cache line of its own: the
 *          writers of data wait on it)
 *   WANT   1 while the owner may sleep waiting for the others' DONE (a DONE wakes the
 *          members only then)
 *   CALLS  a ring of the owner's last RING calls: (sequence number + 1, digest) each, written
 *          as it enters a call (the first word zeroed while the second changes); a member
 *          that completes a call compares the others' entries for it with its own, so a
 *          mismatch that changes nothing anybody reads (two members both a broadcast's
 *          root) is still found
 *
 * A step is ((call's sequence number on the team) << ROUND_BITS | round) + 1: every member
 * numbers them alike when the members agree. An owner writes its data area only once every
 * other member's DONE has reached its DSTEP (nobody still reads the old data), then
 * publishes: PVER odd, PDIG, PSTEP, DSTEP and DDIG, PVER even (release: the data and the words are
 * seen before the even version). A reader loads PVER (acquire), the words, PVER again, and
 * takes them only when both versions are the same and even.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../_c/pyext.h"  /* what amnet's extensions share: type shapes, discard */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define W_PVER 0
#define W_PSTEP 1
#define W_PDIG 2
#define W_DSTEP 3
#define W_DDIG 4
#define W_DONE 8
#define W_WANT 9
#define W_CALLS 16
#define RING 16
#define HDR_BYTES ((W_CALLS + 2 * RING) * 8)  /* the header's words end here */
#if W_DDIG >= W_DONE
#error "the published words must stay on the first cache line"
#endif
#define ROUND_BITS 20

/* Before the engine's wait (which serves AMs, and blocks on the doorbell where the job's
 * wait policy says so), a waiter looks at the flags without the interpreter lock: SPIN
 * times back to back, then giving the core away (sched_yield) between looks for up to
 * YIELD_S seconds -- where ranks outnumber cores, the member it waits for may need that
 * core to get there, and a yield costs far less than a sleep and a doorbell. There (the
 * engine blocks at once: wait_mode "block") the back-to-back looks are left out (an Area
 * made with spin=False): a PAUSE takes tens of cycles, and SPIN of them are microseconds of
 * a core that the member waited for could have had. */
#define SPIN 256
#define YIELD_S 50e-6

#define ld_acq(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define st_rel(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

typedef struct {
    PyObject_HEAD
    int P, me;
    Py_buffer *bufs;
    int64_t **w;           /* each member's header words */
    PyObject *waker;       /* wakes every other member that sleeps (None: nobody can) */
    PyObject **wakers;     /* wakers[j] wakes member j only (NULL: none given) */
    int64_t last;          /* the step whose data my data area holds (owner only) */
    int64_t end;           /* the end of my last call on the area: its DONE (owner only) */
    Py_ssize_t data_at;    /* where a slot's data area starts */
    int spin;              /* looks before a waiter gives its core away (SPIN, or 0) */
} AreaObject;

static PyTypeObject Area_Type, Cond_Type;

static void
Area_dealloc(AreaObject *a)
{
    release_buffers(a->bufs, a->P);
    PyMem_Free(a->w);
    Py_XDECREF(a->waker);
    if (a->wakers != NULL) {
        for (int i = 0; i < a->P; i++) {
            Py_XDECREF(a->wakers[i]);
        }
        PyMem_Free(a->wakers);
    }
    Py_TYPE(a)->tp_free((PyObject *)a);
}

/* Area(slots, me, waker, data_at, wakers=None, spin=True): slots: a sequence of writable
 * buffers, member i's slot at i (64-byte aligned); data_at: where a slot's data area starts
 * (at least HDR); me: my index; waker: a callable run after every publication and DONE (it
 * wakes members that sleep), or None; wakers: one such callable per member (None at mine);
 * spin: a waiter looks SPIN times before it gives its core away (False: it yields at once,
 * for ranks that outnumber their cores, where those looks are a core's time the member
 * waited for could have had). */
static PyObject *
Area_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"slots", "me", "waker", "data_at", "wakers", "spin", NULL};
    PyObject *slots, *waker, *wakers = Py_None;
    int me, spin = 1;
    Py_ssize_t data_at;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiOn|Op", kwlist, &slots, &me, &waker,
                                     &data_at, &wakers, &spin)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(slots, "Area: slots must be a sequence of buffers");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t P = PySequence_Fast_GET_SIZE(seq);
    if (P < 1 || P > 1 << 20 || me < 0 || me >= P) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "Area: member %d of %zd", me, P);
        return NULL;
    }
    AreaObject *a = (AreaObject *)type->tp_alloc(type, 0);
    if (a == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    a->P = (int)P;
    a->me = me;
    a->data_at = data_at;
    a->spin = spin ? SPIN : 0;
    a->bufs = PyMem_Calloc(P, sizeof(Py_buffer));
    a->w = PyMem_Calloc(P, sizeof(int64_t *));
    a->waker = Py_NewRef(waker);
    if (a->bufs == NULL || a->w == NULL) {
        Py_DECREF(seq);
        Py_DECREF(a);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < P; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &a->bufs[i],
                               PyBUF_WRITABLE) < 0) {
            Py_DECREF(seq);
            Py_DECREF(a);
            return NULL;
        }
        if (a->bufs[i].len <= data_at || data_at < HDR_BYTES
                || (uintptr_t)a->bufs[i].buf % 64) {
            Py_DECREF(seq);
            Py_DECREF(a);
            PyErr_Format(PyExc_ValueError, "Area: slot %zd is not a 64-byte aligned buffer "
                         "of more than %zd bytes, or the data area starts in the header (%d "
                         "bytes)", i, data_at, HDR_BYTES);
            return NULL;
        }
        a->w[i] = (int64_t *)a->bufs[i].buf;
    }
    Py_DECREF(seq);
    if (wakers != Py_None) {
        if (!PyTuple_Check(wakers) || PyTuple_GET_SIZE(wakers) != P) {
            Py_DECREF(a);
            PyErr_SetString(PyExc_ValueError, "Area: wakers must be a tuple, one per member");
            return NULL;
        }
        a->wakers = PyMem_Calloc(P, sizeof(PyObject *));
        if (a->wakers == NULL) {
            Py_DECREF(a);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < P; i++) {
            a->wakers[i] = Py_NewRef(PyTuple_GET_ITEM(wakers, i));
        }
    }
    return (PyObject *)a;
}

static int
call_waker(PyObject *w)
{
    if (w == NULL || w == Py_None) {
        return 0;
    }
    return discard(PyObject_CallNoArgs(w));
}

static int
wake(AreaObject *a)
{
    return call_waker(a->waker);
}

enum { WAKE_ALL = -1, WAKE_NONE = -2 };

/* Wake who may wait for my publication: WAKE_ALL, WAKE_NONE, or member j (every other
 * member when no per-member wakers were given). */
static int
wake_who(AreaObject *a, int who)
{
    if (who == WAKE_NONE) {
        return 0;
    }
    if (who >= 0 && who < a->P && a->wakers != NULL) {
        return call_waker(a->wakers[who]);
    }
    return wake(a);
}

static int
as_i64(PyObject *o, int64_t *out)
{
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int
publish(AreaObject *a, int64_t step, int64_t dig, int data, int who)
{
    int64_t *w = a->w[a->me];
    int64_t ver = w[W_PVER];
    __atomic_store_n(&w[W_PVER], ver + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);  /* odd before the words change */
    __atomic_store_n(&w[W_PDIG], dig, __ATOMIC_RELAXED);
    __atomic_store_n(&w[W_PSTEP], step, __ATOMIC_RELAXED);
    if (data) {
        __atomic_store_n(&w[W_DSTEP], step, __ATOMIC_RELAXED);
        __atomic_store_n(&w[W_DDIG], dig, __ATOMIC_RELAXED);
    }
    st_rel(&w[W_PVER], ver + 2);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  /* before the waker looks who sleeps */
    return wake_who(a, who);
}

/* publish(step, digest, data, wake=-1): enter ``step`` of the call with ``digest``;
 * ``data``: my data area holds the step's data (written before this call). ``wake``: who
 * may wait for it: -1 every other member, -2 nobody, j member j. */
static PyObject *
Area_publish(AreaObject *a, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t step, dig;
    long who = WAKE_ALL;
    if ((nargs != 3 && nargs != 4) || as_i64(args[0], &step) < 0
            || as_i64(args[1], &dig) < 0
            || (nargs == 4 && (who = PyLong_AsLong(args[3])) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "publish(step, digest, data, wake=-1)");
        }
        return NULL;
    }
    int data = PyObject_IsTrue(args[2]);
    if (data < 0 || publish(a, step, dig, data, (int)who) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static void
enter(AreaObject *a, int64_t seq, int64_t dig)
{
    int64_t *e = a->w[a->me] + W_CALLS + 2 * (seq % RING);
    __atomic_store_n(&e[0], 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&e[1], dig, __ATOMIC_RELAXED);
    st_rel(&e[0], seq + 1);
}

/* A method's count of arguments checked: 0, or -1 with TypeError(usage). */
static inline int
takes(Py_ssize_t nargs, Py_ssize_t n, const char *usage)
{
    if (nargs != n) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    return 0;
}

/* The arguments (seq, digest) of enter and agree: 0, or -1 with an error set (TypeError
 * usage when they are not two ints). */
static int
seq_digest(PyObject *const *args, Py_ssize_t nargs, const char *usage, int64_t *seq,
           int64_t *dig)
{
    if (nargs != 2 || as_i64(args[0], seq) < 0 || as_i64(args[1], dig) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, usage);
        }
        return -1;
    }
    return 0;
}

/* enter(seq, digest): I enter call ``seq`` of the team with ``digest`` (the ring). */
static PyObject *
Area_enter(AreaObject *a, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t seq, dig;
    if (seq_digest(args, nargs, "enter(seq, digest)", &seq, &dig) < 0) {
        return NULL;
    }
    enter(a, seq, dig);
    Py_RETURN_NONE;
}

static int
agree(AreaObject *a, int64_t seq, int64_t dig)
{
    for (int j = 0; j < a->P; j++) {
        if (j == a->me) {
            continue;
        }
        const int64_t *e = a->w[j] + W_CALLS + 2 * (seq % RING);
        int64_t s1 = ld_acq(&e[0]);
        if (s1 != seq + 1) {
            continue;
        }
        int64_t d = __atomic_load_n(&e[1], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&e[0], __ATOMIC_RELAXED) == s1 && d != dig) {
            return j;
        }
    }
    return -1;
}

/* agree(seq, digest) -> int: a member whose ring says it entered call ``seq`` with another
 * digest, or -1 (those that have not entered it, or whose entry is gone, say nothing). */
static PyObject *
Area_agree(AreaObject *a, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t seq, dig;
    return seq_digest(args, nargs, "agree(seq, digest)", &seq, &dig) < 0
        ? NULL : PyLong_FromLong(agree(a, seq, dig));
}

static int
finish(AreaObject *a, int64_t step)
{
    int64_t *p = &a->w[a->me][W_DONE];
    if (step <= __atomic_load_n(p, __ATOMIC_RELAXED)) {
        return 0;
    }
    st_rel(p, step);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  /* DONE, then the look at who wants it */
    for (int j = 0; j < a->P; j++) {
        if (j != a->me && ld_acq(&a->w[j][W_WANT])) {
            return wake(a);
        }
    }
    return 0;
}

/* finish(step): I have read what I needed of ``step`` (and of every step before it). */
static PyObject *
Area_finish(AreaObject *a, PyObject *arg)
{
    int64_t step;
    if (as_i64(arg, &step) < 0) {
        return NULL;
    }
    if (finish(a, step) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Member j's published words, consistent: 1, or 0 while it writes them. */
static int
snapshot(const int64_t *w, int64_t *pstep, int64_t *pdig, int64_t *dstep, int64_t *ddig)
{
    for (int k = 0; k < 4; k++) {
        int64_t v1 = ld_acq(&w[W_PVER]);
        if (v1 & 1) {
            continue;
        }
        *pstep = __atomic_load_n(&w[W_PSTEP], __ATOMIC_RELAXED);
        *pdig = __atomic_load_n(&w[W_PDIG], __ATOMIC_RELAXED);
        *dstep = __atomic_load_n(&w[W_DSTEP], __ATOMIC_RELAXED);
        *ddig = __atomic_load_n(&w[W_DDIG], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&w[W_PVER], __ATOMIC_RELAXED) == v1) {
            return 1;
        }
    }
    return 0;
}

enum { K_ARRIVED = 0, K_DATA = 1, K_DRAINED = 2 };

/* What member j's words say about my wait for ``step`` of the call with ``dig``:
 * 1 ready, 0 not yet, -1 j is in another call. */
static int
look(AreaObject *a, int j, int kind, int64_t step, int64_t dig)
{
    const int64_t *w = a->w[j];
    if (kind == K_DRAINED) {
        return ld_acq(&w[W_DONE]) >= step;
    }
    int64_t ps, pd, ds, dd;
    if (!snapshot(w, &ps, &pd, &ds, &dd)) {
        return 0;
    }
    if (kind == K_ARRIVED) {
        if (ps < step) {
            return 0;
        }
        return ps > step || pd == dig ? 1 : -1;  /* past it: it saw mine and went on */
    }
    if (ds == step) {
        return dd == dig ? 1 : -1;
    }
    if (ds > step) {
        return -1;  /* new data while I have not finished reading: not my call */
    }
    return ps >= step ? -1 : 0;  /* it entered my step without data for it */
}

static int ready_all(AreaObject *a, int kind, int64_t step, int64_t dig, const int *who, int n,
                     int *bad);

/* -- Cond: a wait's condition ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    AreaObject *area;
    int kind, n, bad;
    int64_t step, dig;
    int *who;
} CondObject;

static void
Cond_dealloc(CondObject *c)
{
    Py_XDECREF(c->area);
    PyMem_Free(c->who);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* Calling it: True once every member waited for is ready, or one is in another call
 * (``bad`` is then its index); False before. Pure: reads shared memory only. */
static PyObject *
Cond_call(CondObject *c, PyObject *args, PyObject *kw)
{
    if (c->bad >= 0) {
        Py_RETURN_TRUE;
    }
    if (c->kind == K_DRAINED) {
        /* (a wait that may sleep calls it: say so, then look; a DONE after the look sees
         * WANT and wakes us) */
        int64_t *want = &c->area->w[c->area->me][W_WANT];
        int ready = ready_all(c->area, K_DRAINED, c->step, 0, c->who, c->n, &c->bad);
        if (!ready) {
            __atomic_store_n(want, 1, __ATOMIC_SEQ_CST);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);  /* WANT, then DONE (finish's mirror) */
            ready = ready_all(c->area, K_DRAINED, c->step, 0, c->who, c->n, &c->bad);
        }
        if (ready) {
            __atomic_store_n(want, 0, __ATOMIC_RELAXED);
        }
        return PyBool_FromLong(ready);
    }
    for (int i = 0; i < c->n; i++) {
        int j = c->who[i];
        int r = look(c->area, j, c->kind, c->step, c->dig);
        if (r < 0) {
            c->bad = j;
            Py_RETURN_TRUE;
        }
        if (r == 0) {
            if (i) {  /* the next call starts at the one that held it up */
                c->who[i] = c->who[0];
                c->who[0] = j;
            }
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyObject *
Cond_get_bad(CondObject *c, void *closure)
{
    return PyLong_FromLong(c->bad);
}

static PyGetSetDef Cond_getset[] = {
    {"bad", (getter)Cond_get_bad, NULL,
     "the index of a member found in another call, -1 for none", NULL},
    {NULL},
};

/* cond(kind, step, digest, members) -> Cond: kind 0, every member in ``members`` has
 * entered ``step`` (a barrier's arrival); 1, their data of ``step`` is in; 2, they have
 * finished ``step`` (my data area may be written again; digest unused). */
static PyObject *
Area_cond(AreaObject *a, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t step, dig;
    if (nargs != 4 || !PyLong_Check(args[0]) || as_i64(args[1], &step) < 0
            || as_i64(args[2], &dig) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "cond(kind, step, digest, members)");
        }
        return NULL;
    }
    long kind = PyLong_AsLong(args[0]);
    if (kind < K_ARRIVED || kind > K_DRAINED) {
        PyErr_Format(PyExc_ValueError, "cond: kind %ld not 0, 1 or 2", kind);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[3], "cond: members must be a sequence of ints");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    CondObject *c = PyObject_New(CondObject, &Cond_Type);
    if (c == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    c->area = (AreaObject *)Py_NewRef(a);
    c->kind = (int)kind;
    c->step = step;
    c->dig = dig;
    c->bad = -1;
    c->n = (int)n;
    c->who = PyMem_Malloc((n ? n : 1) * sizeof(int));
    if (c->who == NULL) {
        Py_DECREF(seq);
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long j = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (j < 0 || j >= a->P) {
            Py_DECREF(seq);
            Py_DECREF(c);
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "cond: member %ld of %d", j, a->P);
            }
            return NULL;
        }
        c->who[i] = (int)j;
    }
    Py_DECREF(seq);
    return (PyObject *)c;
}

/* -- the small calls in one go (amnet/coll/_node.py's ShmFast) ------------------------- */

/* the reductions the fast path folds in C, by name (Python maps amnet's ops onto them) */
static const char *const OP_NAMES[] = {"ADD", "MULT", "AND", "OR", "XOR", "MIN", "MAX"};
enum { R_ADD, R_MULT, R_AND, R_OR, R_XOR, R_MIN, R_MAX, N_ROPS };
/* and the dtypes (numpy's dtype.char) */
#define RTYPES "bhilqBHILQfd"

#define FOLD_INT(T) do { \
    T *o = (T *)out; const T *y = (const T *)acc, *x = (const T *)in; \
    switch (op) { \
    case R_ADD: for (Py_ssize_t i = 0; i < n; i++) o[i] = (T)(y[i] + x[i]); break; \
    case R_MULT: for (Py_ssize_t i = 0; i < n; i++) o[i] = (T)(y[i] * x[i]); break; \
    case R_AND: for (Py_ssize_t i = 0; i < n; i++) o[i] = (T)(y[i] & x[i]); break; \
    case R_OR: for (Py_ssize_t i = 0; i < n; i++) o[i] = (T)(y[i] | x[i]); break; \
    case R_XOR: for (Py_ssize_t i = 0; i < n; i++) o[i] = (T)(y[i] ^ x[i]); break; \
    case R_MIN: for (Py_ssize_t i = 0; i < n; i++) o[i] = x[i] < y[i] ? x[i] : y[i]; break; \
    default: for (Py_ssize_t i = 0; i < n; i++) o[i] = x[i] > y[i] ? x[i] : y[i]; break; \
    } } while (0)

/* numpy's minimum/maximum: a NaN wins (the first one) */
#define FOLD_FLOAT(T) do { \
    T *o = (T *)out; const T *y = (const T *)acc, *x = (const T *)in; \
    switch (op) { \
    case R_ADD: for (Py_ssize_t i = 0; i < n; i++) o[i] = y[i] + x[i]; break; \
    case R_MULT: for (Py_ssize_t i = 0; i < n; i++) o[i] = y[i] * x[i]; break; \
    case R_MIN: \
        for (Py_ssize_t i = 0; i < n; i++) { \
            o[i] = isnan(y[i]) ? y[i] : isnan(x[i]) ? x[i] : x[i] < y[i] ? x[i] : y[i]; \
        } \
        break; \
    default: \
        for (Py_ssize_t i = 0; i < n; i++) { \
            o[i] = isnan(y[i]) ? y[i] : isnan(x[i]) ? x[i] : x[i] > y[i] ? x[i] : y[i]; \
        } \
        break; \
    } } while (0)

/* out = acc op in, element by element (n elements of type t; acc may be out) */
static void
fold_into(char *out, const char *acc, const char *in, Py_ssize_t nbytes, int op, char t)
{
    Py_ssize_t n;
    switch (t) {
    case 'b': n = nbytes; FOLD_INT(int8_t); break;
    case 'h': n = nbytes / 2; FOLD_INT(int16_t); break;
    case 'i': n = nbytes / 4; FOLD_INT(int32_t); break;
    case 'l': case 'q': n = nbytes / 8; FOLD_INT(int64_t); break;
    case 'B': n = nbytes; FOLD_INT(uint8_t); break;
    case 'H': n = nbytes / 2; FOLD_INT(uint16_t); break;
    case 'I': n = nbytes / 4; FOLD_INT(uint32_t); break;
    case 'L': case 'Q': n = nbytes / 8; FOLD_INT(uint64_t); break;
    case 'f': n = nbytes / 4; FOLD_FLOAT(float); break;
    default: n = nbytes / 8; FOLD_FLOAT(double); break;
    }
}

static int
ready_all(AreaObject *a, int kind, int64_t step, int64_t dig, const int *who, int n, int *bad)
{
    for (int i = 0; i < n; i++) {
        int r = look(a, who[i], kind, step, dig);
        if (r < 0) {
            *bad = who[i];
            return 1;
        }
        if (r == 0) {
            return 0;
        }
    }
    return 1;
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait until every member in who is ready for step (or one is in another call): 1 ready,
 * 0 not within timeout, -2 one is in another call, -1 error. */
static int
await_cond(AreaObject *a, int kind, int64_t step, int64_t dig, const int *who, int n,
           PyObject *wait, PyObject *timeout)
{
    int bad = -1, ok = ready_all(a, kind, step, dig, who, n, &bad);
    if (!ok) {
        Py_BEGIN_ALLOW_THREADS
        for (int k = 0; k < a->spin && !ok; k++) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            ok = ready_all(a, kind, step, dig, who, n, &bad);
        }
        if (!ok) {
            double until = now_s() + YIELD_S;
            do {
                sched_yield();
                ok = ready_all(a, kind, step, dig, who, n, &bad);
            } while (!ok && now_s() < until);
        }
        Py_END_ALLOW_THREADS
    }
    if (!ok) {
        CondObject *c = PyObject_New(CondObject, &Cond_Type);
        if (c == NULL) {
            return -1;
        }
        c->area = (AreaObject *)Py_NewRef(a);
        c->kind = kind;
        c->step = step;
        c->dig = dig;
        c->bad = -1;
        c->n = n;
        c->who = PyMem_Malloc((n ? n : 1) * sizeof(int));
        if (c->who == NULL) {
            Py_DECREF(c);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(c->who, who, n * sizeof(int));
        PyObject *stack[2] = {(PyObject *)c, timeout};
        PyObject *r = PyObject_Vectorcall(wait, stack, 2, NULL);
        Py_DECREF(c);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
        ok = ready_all(a, kind, step, dig, who, n, &bad);
    }
    return bad >= 0 ? -2 : ok;
}

/* Copy n bytes (the regions may overlap). Where the destination starts 1-63 bytes past the
 * source modulo 4 KiB, a forward copy (glibc's memcpy) stalls at every load on 4 KiB
 * aliasing: the load has the low address bits of a store just made. A 64 KiB copy took
 * 22-24 us instead of 1.5-2 on the development machine, and a user's buffer falls at such a
 * distance from a data area by chance of its allocation. Copying from the end avoids it. */
typedef char v16 __attribute__((vector_size(16), aligned(1), may_alias));

static void
copy_bytes(char *dst, const char *src, size_t n)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    size_t ahead = (size_t)((d - s) & 4095);
    if (n < 4096 || ahead == 0 || ahead >= 64 || (d < s + n && s < d + n)) {
        memmove(dst, src, n);
        return;
    }
    size_t i = n;
    while (i >= 64) {
        i -= 64;
        v16 w3 = *(const v16 *)(src + i + 48), w2 = *(const v16 *)(src + i + 32);
        v16 w1 = *(const v16 *)(src + i + 16), w0 = *(const v16 *)(src + i);
        *(v16 *)(dst + i + 48) = w3;
        *(v16 *)(dst + i + 32) = w2;
        *(v16 *)(dst + i + 16) = w1;
        *(v16 *)(dst + i) = w0;
    }
    memcpy(dst, src, i);
}

enum { F_BARRIER, F_BROADCAST, F_GATHER_ALL, F_REDUCE_ALL };

/* A small call's arguments, checked: the collective, root, reduction and buffers. */
typedef struct {
    int what, root, op;
    char t;
    Py_buffer src, dst;
} Small;

static void
small_release(Small *c)
{
    if (c->src.obj != NULL) {
        PyBuffer_Release(&c->src);
    }
    if (c->dst.obj != NULL) {
        PyBuffer_Release(&c->dst);
    }
}

/* Fill c from (what, root, src, dst, red): 0, or -1 with an error (c released). src is
 * taken on the members that write (every member of gather_all and reduce_all, a broadcast's
 * root), dst on all but a barrier's; the buffers must be C-contiguous (dst writable), the
 * block fit the data area, and dst hold the result. */
static int
small_args(AreaObject *a, Small *c, PyObject *what_o, PyObject *root_o, PyObject *src,
           PyObject *dst, PyObject *red)
{
    memset(c, 0, sizeof *c);
    long what = PyLong_AsLong(what_o), root = PyLong_AsLong(root_o);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (what < F_BARRIER || what > F_REDUCE_ALL || root < 0 || root >= a->P) {
        PyErr_Format(PyExc_ValueError, "collective %ld, root %ld of %d", what, root, a->P);
        return -1;
    }
    c->what = (int)what;
    c->root = (int)root;
    c->t = 'B';
    if (what == F_REDUCE_ALL) {
        long o;
        int tc;
        if (!PyArg_ParseTuple(red, "lC", &o, &tc)) {
            return -1;
        }
        if (o < 0 || o >= N_ROPS || tc == 0 || strchr(RTYPES, tc) == NULL
                || ((tc == 'f' || tc == 'd') && o >= R_AND && o <= R_XOR)) {
            PyErr_Format(PyExc_ValueError, "no C reduction %ld on %c", o, tc);
            return -1;
        }
        c->op = (int)o;
        c->t = (char)tc;
    }
    int me = a->me, P = a->P;
    int writer = what == F_GATHER_ALL || what == F_REDUCE_ALL
                 || (what == F_BROADCAST && me == root);
    if (writer && PyObject_GetBuffer(src, &c->src, PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    if (what != F_BARRIER
            && PyObject_GetBuffer(dst, &c->dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        small_release(c);
        return -1;
    }
    Py_ssize_t n = writer ? c->src.len : c->dst.len;
    Py_ssize_t room = a->bufs[me].len - a->data_at;
    if ((what != F_BARRIER && n < 1) || n > room
            || (what == F_GATHER_ALL ? c->dst.len != n * P
                : what != F_BARRIER && c->dst.len != n)) {
        PyErr_Format(PyExc_ValueError, "%zd bytes a block for %zd bytes of result "
                     "(%zd bytes of data area)", n, c->dst.len, room);
        small_release(c);
        return -1;
    }
    return 0;
}

/* The call seq (digest dig) of c on this member: 1, 2, 0, -2 as Area.run says, -1 error. */
static int
small_call(AreaObject *a, Small *c, int64_t seq, int64_t dig, PyObject *wait,
           PyObject *timeout)
{
    int me = a->me, P = a->P, nw = 0, what = c->what, root = c->root;
    int who_s[64], *who = P <= 64 ? who_s : PyMem_Malloc(P * sizeof(int));
    if (who == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int j = 0; j < P; j++) {
        if (j != me) {
            who[nw++] = j;
        }
    }
    int writer = c->src.obj != NULL;
    Py_ssize_t n = writer ? c->src.len : c->dst.len;
    const char *src = c->src.buf;
    char *dst = c->dst.buf;
    int64_t v = (seq << ROUND_BITS) + 1, end = (seq + 1) << ROUND_BITS;
    a->end = end;
    enter(a, seq, dig);
    int r = 1;
    if (writer && a->last != v) {
        if (a->last) {
            r = await_cond(a, K_DRAINED, a->last, 0, who, nw, wait, timeout);
        }
        if (r == 1) {
            copy_bytes((char *)a->bufs[me].buf + a->data_at, src, n);
            a->last = v;
        }
    }
    /* who reads it: a broadcast's root's data, every member's in the others; nobody waits
     * for a broadcast's other members (a mismatch is found by the check's timeout) */
    int who_wakes = what == F_BROADCAST && me != root ? WAKE_NONE : WAKE_ALL;
    if (r == 1 && publish(a, v, dig, writer, who_wakes) < 0) {
        r = -1;
    }
    if (r == 1) {
        if (what == F_BROADCAST) {
            if (me == root) {
                if (dst != src) {
                    copy_bytes(dst, src, n);
                }
            } else {
                r = await_cond(a, K_DATA, v, dig, &root, 1, wait, timeout);
                if (r == 1) {
                    copy_bytes(dst, (char *)a->bufs[root].buf + a->data_at, n);
                }
            }
        } else {
            r = await_cond(a, what == F_BARRIER ? K_ARRIVED : K_DATA, v, dig, who, nw, wait,
                           timeout);
            /* my own block from my data area's copy: dst may be src (in place) */
            if (r == 1 && what == F_GATHER_ALL) {
                for (int j = 0; j < P; j++) {
                    copy_bytes(dst + j * n, (const char *)a->bufs[j].buf + a->data_at, n);
                }
            } else if (r == 1 && what == F_REDUCE_ALL) {
                /* in member order, as every member does: the same bits everywhere; every
                 * operand from the data areas (mine too: dst may be src), the first fold
                 * reading both, not a copy first (a copy between two user buffers can be
                 * slowed tenfold by their addresses' 4 KiB aliasing) */
                if (P == 1 && dst != src) {
                    copy_bytes(dst, src, n);
                }
                for (int j = 1; j < P; j++) {
                    const char *part = (const char *)a->bufs[j].buf + a->data_at;
                    const char *acc = j > 1 ? dst : (const char *)a->bufs[0].buf + a->data_at;
                    fold_into(dst, acc, part, n, c->op, c->t);
                }
            }
        }
    }
    if (who != who_s) {
        PyMem_Free(who);
    }
    if (r == -1) {  /* an error in a wait (the job ends, a signal): I read no more of it */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (finish(a, end) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(et, ev, tb);
    }
    if (r != 1) {
        return r;
    }
    if (finish(a, end) < 0) {
        return -1;
    }
    return agree(a, seq, dig) >= 0 ? 2 : 1;
}

/* run(what, seq, digest, root, src, dst, red, wait, timeout) -> int: one small call of
 * the team (what: 0 barrier, 1 broadcast, 2 gather_all, 3 reduce_all; one round: the
 * blocks fit the data area) on this member, as amnet/coll/_node.py's shm() does it:
 * 1 complete; 2 complete, but another member entered it with another digest (ask for the
 * check); 0 not complete within ``timeout`` (a wait(cond, timeout) of the engine); -2 a
 * member is in another call. 0 and -2 may be called again: what is done is not redone.
 * src: my block (the root's for a broadcast; None elsewhere), dst: the result (writable;
 * the same bytes for every member; None for a barrier), red: (op name index, dtype char)
 * for reduce_all. The call's DONE is set when it completes. Raises ValueError or
 * BufferError for arguments it cannot take (nothing done). */
static PyObject *
Area_run(AreaObject *a, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t seq, dig;
    Small c;
    if (takes(nargs, 9, "run(what, seq, digest, root, src, dst, red, wait, timeout)") < 0
            || as_i64(args[1], &seq) < 0 || as_i64(args[2], &dig) < 0
            || small_args(a, &c, args[0], args[3], args[4], args[5], args[6]) < 0) {
        return NULL;
    }
    int r = small_call(a, &c, seq, dig, args[7], args[8]);
    small_release(&c);
    return r == -1 ? NULL : PyLong_FromLong(r);
}

/* call(what, name, start, key, root, src, dst, red, wait, timeout) -> 1 | int | tuple:
 * run's call whole: its arguments checked (-3 when they are not the common case: nothing
 * done), then the call entered with start(key, name, None, False, True) (the fast path's
 * bookkeeping, amnet.coll._cmail.Core.start: -3 when the general path is to take the call,
 * -4 when the key has no description yet, nothing done either way), then run. 1 when it
 * completed; otherwise (r, seq, digest) with run's r, for the caller's rare paths. */
static PyObject *
Area_call(AreaObject *a, PyObject *const *args, Py_ssize_t nargs)
{
    Small c;
    if (takes(nargs, 10, "call(what, name, start, key, root, src, dst, red, wait, timeout)")
            < 0) {
        return NULL;
    }
    if (small_args(a, &c, args[0], args[4], args[5], args[6], args[7]) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError)
                && !PyErr_ExceptionMatches(PyExc_BufferError)
                && !PyErr_ExceptionMatches(PyExc_TypeError)) {
            return NULL;
        }
        PyErr_Clear();
        return PyLong_FromLong(-3);
    }
    PyObject *stack[5] = {args[3], args[1], Py_None, Py_False, Py_True};
    PyObject *call = PyObject_Vectorcall(args[2], stack, 5, NULL);
    PyObject *res = NULL;
    if (call == NULL) {
        goto out;
    }
    if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != 4) {
        res = PyLong_FromLong(call == Py_False ? -4 : -3);
        goto out;
    }
    int64_t seq, dig;
    if (as_i64(PyTuple_GET_ITEM(call, 1), &seq) < 0
            || as_i64(PyTuple_GET_ITEM(call, 2), &dig) < 0) {
        goto out;
    }
    int r = small_call(a, &c, seq, dig, args[8], args[9]);
    if (r == 1) {
        res = PyLong_FromLong(1);
    } else if (r != -1) {
        res = Py_BuildValue("(iLL)", r, (long long)seq, (long long)dig);
    }
out:
    Py_XDECREF(call);
    small_release(&c);
    return res;
}

static PyObject *
Area_get_i64(AreaObject *a, void *which)
{
    return PyLong_FromLongLong(which ? a->end : a->last);
}

static int
Area_set_i64(AreaObject *a, PyObject *v, void *which)
{
    int64_t x;
    if (v == NULL || as_i64(v, &x) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "cannot delete it");
        }
        return -1;
    }
    *(which ? &a->end : &a->last) = x;
    return 0;
}

static PyObject *
Area_get_spins(AreaObject *a, void *unused)
{
    return PyBool_FromLong(a->spin > 0);
}

static PyGetSetDef Area_getset[] = {
    {"spins", (getter)Area_get_spins, NULL,
     "whether a waiter looks SPIN times before it yields (False: ranks outnumber cores)",
     NULL},
    {"last", (getter)Area_get_i64, (setter)Area_set_i64,
     "the step whose data my data area holds (my next write waits until it is read)", NULL},
    {"end", (getter)Area_get_i64, (setter)Area_set_i64,
     "the end of my last call on the area (the next waits for my DONE to reach it)",
     (void *)1},
    {NULL},
};

/* reset(): my slot's header back to zeros, as for a new team (its team was destroyed: no
 * member reads it any more) */
static PyObject *
Area_reset(AreaObject *a, PyObject *Py_UNUSED(ignored))
{
    int64_t *w = a->w[a->me];
    for (int i = 0; i < HDR_BYTES / 8; i++) {
        __atomic_store_n(&w[i], 0, __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    a->last = a->end = 0;
    Py_RETURN_NONE;
}

/* words(j) -> (pstep, pdig, dstep, done): member j's words, for a diagnosis and tests. */
static PyObject *
Area_words(AreaObject *a, PyObject *arg)
{
    long j = PyLong_AsLong(arg);
    if (j < 0 || j >= a->P) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_IndexError, "words: member %ld of %d", j, a->P);
        }
        return NULL;
    }
    int64_t ps = 0, pd = 0, ds = 0, dd = 0;
    snapshot(a->w[j], &ps, &pd, &ds, &dd);
    return Py_BuildValue("(LLLL)", (long long)ps, (long long)pd, (long long)ds,
                         (long long)ld_acq(&a->w[j][W_DONE]));
}

static PyMethodDef Area_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))Area_publish, METH_FASTCALL,
     "publish(step, digest, data): enter step (data: my data area holds its data)."},
    {"enter", (PyCFunction)(void (*)(void))Area_enter, METH_FASTCALL,
     "enter(seq, digest): I enter call seq with digest (the ring of calls)."},
    {"agree", (PyCFunction)(void (*)(void))Area_agree, METH_FASTCALL,
     "agree(seq, digest) -> int: a member that entered call seq with another digest, or -1."},
    {"finish", (PyCFunction)Area_finish, METH_O,
     "finish(step): I have read what I needed of step and every step before it."},
    {"cond", (PyCFunction)(void (*)(void))Area_cond, METH_FASTCALL,
     "cond(kind, step, digest, members) -> Cond (0 arrived, 1 data in, 2 finished)."},
    {"run", (PyCFunction)(void (*)(void))Area_run, METH_FASTCALL,
     "run(what, seq, digest, root, src, dst, red, wait, timeout) -> int: a small call."},
    {"call", (PyCFunction)(void (*)(void))Area_call, METH_FASTCALL,
     "call(what, name, start, key, root, src, dst, red, wait, timeout): a small call, "
     "entered too."},
    {"reset", (PyCFunction)Area_reset, METH_NOARGS,
     "reset(): my slot's header back to zeros (its team was destroyed)."},
    {"words", (PyCFunction)Area_words, METH_O,
     "words(j) -> (pstep, pdig, dstep, done) of member j."},
    {NULL},
};

static PyTypeObject Area_Type = AMNET_TYPE(
    Area, AreaObject, "amnet.coll._shm.Area", Py_TPFLAGS_DEFAULT,
    .tp_doc = "One member's view of its team's node area (see the module).",
    .tp_methods = Area_methods, .tp_getset = Area_getset, .tp_new = Area_new);

static PyTypeObject Cond_Type = AMNET_TYPE(
    Cond, CondObject, "amnet.coll._shm.Cond", Py_TPFLAGS_DEFAULT,
    .tp_doc = "A wait's condition on the node area's words (Area.cond).",
    .tp_call = (ternaryfunc)Cond_call, .tp_getset = Cond_getset);

static int
shm_exec(PyObject *m)
{
    if (PyType_Ready(&Area_Type) < 0 || PyType_Ready(&Cond_Type) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "Area", (PyObject *)&Area_Type) < 0
            || PyModule_AddObjectRef(m, "Cond", (PyObject *)&Cond_Type) < 0
            || PyModule_AddIntConstant(m, "HDR", HDR_BYTES) < 0
            || PyModule_AddIntConstant(m, "ROUND_BITS", ROUND_BITS) < 0
            || PyModule_AddStringConstant(m, "RTYPES", RTYPES) < 0) {
        return -1;
    }
    PyObject *ops = PyTuple_New(N_ROPS);
    if (ops == NULL) {
        return -1;
    }
    for (int i = 0; i < N_ROPS; i++) {
        PyObject *o = PyUnicode_FromString(OP_NAMES[i]);
        if (o == NULL) {
            Py_DECREF(ops);
            return -1;
        }
        PyTuple_SET_ITEM(ops, i, o);
    }
    int rc = PyModule_AddObjectRef(m, "ROPS", ops);
    Py_DECREF(ops);
    if (rc < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot shm_slots[] = {
    {Py_mod_exec, shm_exec},
#ifdef Py_GIL_DISABLED
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef shm_module = {
    PyModuleDef_HEAD_INIT, "amnet.coll._shm",
    "The flags of a team's node area (see docs/collectives.md).", 0, NULL, shm_slots,
};

PyMODINIT_FUNC
PyInit__shm(void)
{
    return PyModuleDef_Init(&shm_module);
}
