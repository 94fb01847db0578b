/* amnet.core._hot: the AM engine's hot path in C.
 *
 * What a round trip inside a node touches runs here, without the interpreter's overhead of
 * Python frames: the checks and the send of a Short or Medium user AM (in-line to a rank of
 * this process, or into a node-local process's shared-memory queue), draining the queues
 * and running the handlers of user Short/Medium AMs, the Token handed to a handler, the
 * drain lock, and the endpoint's request/poll/wait_until/put/get entry points.
 *
 * An extension's system AMs between the node's processes take a hot path too: the drain
 * calls the handler registered for the destination rank (set_sys_handler: its port's, as the
 * engine would call it), and a SysSender (Port.sender) writes into the queue.
 *
 * Everything else (the core's system AMs, Long AMs, the conduit, malformed messages, bad
 * arguments and their errors) goes to the Python engine (amnet/core/_engine.py), which stays
 * the reference implementation: whenever a fast path meets anything it does not handle, it
 * calls the Python method with the same arguments, so errors are raised there, with the same
 * text.
 *
 * The queues follow docs/pshm.md: an entry (sequence word, payload length, flags and header
 * length, the wire header) and its payload are written before the entry's sequence word
 * that publishes them (message k of a queue stores k + 1 there: one aligned 8-byte
 * sequentially consistent store, which also orders the following load of the receiver's
 * sleeping flag). The receiver polls the sequence word of the entry at its tail with an
 * acquire load (a Short AM is one cache line: the word, the lengths and the header), runs
 * the entry in place and publishes its tail with a release store once the handler returned;
 * the sender reads that tail only when its own count says the queue may be full.
 *
 * Threads: a process's drain runs under the drain lock (a Lock of this module) unless the
 * engine is "lock-free" (one rank-thread, not thread-safe, no progress thread: only one
 * thread ever calls amnet). Request queues have a producer lock when the process is
 * thread-safe; reply queues have one producer, the thread that drains. Under free threading
 * (Py_GIL_DISABLED) the same locks protect the same state; the counters are statistics.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../pshm/_atomic_table.h"

enum { R_INLINE = 0, R_PSHM = 1, R_NET = 2 };
enum { C_SHORT = 0, C_MEDIUM = 1, C_LONG = 2, CAT_MASK = 3, F_REPLY = 4, F_SYSTEM = 8,
       F_KNOWN = 15 };
#define MAX_ARGS 16
#define FIXED 20
enum { Q_REQ = 0, Q_REP = 1 };
enum { E_MORE = 1, E_DEPOSITED = 2 };
#define ENTRY 256
#define HDR_AT 24
#define CTRL 4096
#define QHDR 128
#define W_SLEEP 8
#define BUDGET 256
#define YIELD_EVERY 256  /* a spinning rank gives its core away after this many empty polls */

/* ------------------------------------------------------------------------------------ */
/* module state: the amnet exceptions, the current token of each thread                  */

static PyObject *InitError, *AMContextError;
/* what a handler is told when it sends anything but its one reply (set_errors: the engine's
 * FORWARD_HINT and REPLY_HINT, so that C and Python say the same words) */
static PyObject *ForwardHint, *ReplyHint;
static Py_tss_t cur_token = Py_tss_NEEDS_INIT;

#if PY_VERSION_HEX < 0x030C0000
static PyObject *
PyErr_GetRaisedException(void)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v != NULL && tb != NULL) {
        PyException_SetTraceback(v, tb);
    }
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
}
#endif

static double
mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A cheaper clock for the spin loop and the conduit throttle: the x86-64 time-stamp counter
 * (constant rate on every CPU the kernel uses it as a clocksource on), scaled to seconds by
 * a 0.2 ms calibration against CLOCK_MONOTONIC; clock_gettime elsewhere. */
typedef struct {
    double scale;                    /* seconds per tick; 0: use mono() */
    double base;
    uint64_t t0;
} Clock;

static void
clock_init(Clock *c)
{
    c->scale = 0.0;
#if defined(__x86_64__)
    double m0 = mono();
    uint64_t t0 = __builtin_ia32_rdtsc();
    double m1;
    do {
        m1 = mono();
    } while (m1 - m0 < 2e-4);
    uint64_t t1 = __builtin_ia32_rdtsc();
    if (t1 > t0 + 1000) {
        c->scale = (m1 - m0) / (double)(t1 - t0);
        c->base = m1;
        c->t0 = t1;
    }
#endif
}

static inline double
clock_now(const Clock *c)
{
#if defined(__x86_64__)
    if (c->scale > 0.0) {
        return c->base + (double)(int64_t)(__builtin_ia32_rdtsc() - c->t0) * c->scale;
    }
#endif
    return mono();
}

static inline int64_t ld_acq(int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st_sc(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static inline void st_rel(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline void
put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static inline uint64_t
get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

/* ------------------------------------------------------------------------------------ */
/* Lock: a plain mutex usable from C without a method call; the GIL is let go while a
 * blocking acquire waits (the holder may need it to finish).                           */

typedef struct {
    PyObject_HEAD
    int held;                        /* taken with one compare-and-swap */
    int waiters;                     /* threads sleeping in lock_wait */
    pthread_mutex_t m;
    pthread_cond_t c;
} LockObject;

static PyTypeObject Lock_Type;

static inline int
lock_try(LockObject *l)
{
    int zero = 0;
    return __atomic_compare_exchange_n(&l->held, &zero, 1, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_RELAXED);
}

static void
lock_wait(LockObject *l)
{
    if (lock_try(l)) {
        return;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&l->m);
    __atomic_add_fetch(&l->waiters, 1, __ATOMIC_SEQ_CST);
    while (!lock_try(l)) {
        pthread_cond_wait(&l->c, &l->m);
    }
    __atomic_sub_fetch(&l->waiters, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&l->m);
    Py_END_ALLOW_THREADS
}

static inline void
lock_rel(LockObject *l)
{
    __atomic_store_n(&l->held, 0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&l->waiters, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&l->m);
        pthread_cond_signal(&l->c);
        pthread_mutex_unlock(&l->m);
    }
}

static PyObject *
Lock_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) || (kw != NULL && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    LockObject *l = (LockObject *)type->tp_alloc(type, 0);
    if (l == NULL) {
        return NULL;
    }
    pthread_mutex_init(&l->m, NULL);
    pthread_cond_init(&l->c, NULL);
    return (PyObject *)l;
}

static void
Lock_dealloc(LockObject *l)
{
    pthread_mutex_destroy(&l->m);
    pthread_cond_destroy(&l->c);
    Py_TYPE(l)->tp_free((PyObject *)l);
}

static PyObject *
Lock_acquire(LockObject *l, PyObject *const *args, Py_ssize_t nargs)
{
    int blocking = 1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "acquire(blocking=True)");
        return NULL;
    }
    if (nargs == 1 && (blocking = PyObject_IsTrue(args[0])) < 0) {
        return NULL;
    }
    if (!blocking) {
        return PyBool_FromLong(lock_try(l));
    }
    lock_wait(l);
    Py_RETURN_TRUE;
}

static PyObject *
Lock_release(LockObject *l, PyObject *Py_UNUSED(ignored))
{
    if (!__atomic_load_n(&l->held, __ATOMIC_SEQ_CST)) {
        PyErr_SetString(PyExc_RuntimeError, "release of an unlocked lock");
        return NULL;
    }
    lock_rel(l);
    Py_RETURN_NONE;
}

static PyObject *
Lock_locked(LockObject *l, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(__atomic_load_n(&l->held, __ATOMIC_SEQ_CST));
}

static PyObject *
Lock_enter(LockObject *l, PyObject *Py_UNUSED(ignored))
{
    lock_wait(l);
    Py_RETURN_TRUE;
}

static PyObject *
Lock_exit(LockObject *l, PyObject *args)
{
    if (__atomic_load_n(&l->held, __ATOMIC_SEQ_CST)) {
        lock_rel(l);
    }
    Py_RETURN_FALSE;
}

static PyMethodDef Lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))Lock_acquire, METH_FASTCALL,
     "acquire(blocking=True) -> bool: take the lock (waiting without the GIL)."},
    {"release", (PyCFunction)Lock_release, METH_NOARGS, "Let the lock go."},
    {"locked", (PyCFunction)Lock_locked, METH_NOARGS, "Whether some thread holds it."},
    {"__enter__", (PyCFunction)Lock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Lock_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject Lock_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amnet.core._hot.Lock",
    .tp_basicsize = sizeof(LockObject),
    .tp_dealloc = (destructor)Lock_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A mutex that C code takes without a method call (the engine's drain lock).",
    .tp_methods = Lock_methods,
    .tp_new = Lock_new,
};

/* ------------------------------------------------------------------------------------ */
/* Hot: one per engine                                                                    */

typedef struct {
    char *base;                      /* the receiver's object, mapped here */
    int64_t *tail_p, *sleep_p;
    Py_ssize_t ents, slots;
    int64_t head, tail;              /* my next entry; the receiver's tail as last read */
    int bell;                        /* the receiver's eventfd, -1 for none */
    LockObject *lock;                /* NULL: one producer at a time */
} OutQ;

typedef struct {
    int64_t *tail_p;
    Py_ssize_t ents, slots;
    int64_t tail;
    PyObject *frag;                  /* a fragmented payload being reassembled */
} InQ;

typedef struct {
    PyObject *rs;                    /* the RankState; NULL until add_rank */
    PyObject *fns, *cats, *nargs, *names, *by_fn;
    PyObject *sysfns;                /* fast system handlers by index (None: the engine's) */
    long rank;
    int finalized;
    Py_ssize_t recent[8];            /* handler indices sent lately, by the function's address */
} Slot;

/* The table index of handler function fn of slot s, -1 if it is not registered there. A
 * small direct-mapped cache in front of by_fn; an entry is trusted only if fns[idx] is fn. */
static Py_ssize_t
handler_index(Slot *s, PyObject *fn)
{
    Py_ssize_t *c = &s->recent[((uintptr_t)fn >> 4) & 7];
    Py_ssize_t idx = *c;
    if (idx >= 0 && idx < PyList_GET_SIZE(s->fns) && PyList_GET_ITEM(s->fns, idx) == fn) {
        return idx;
    }
    PyObject *io = PyDict_GetItemWithError(s->by_fn, fn);
    if (io == NULL) {
        PyErr_Clear();
        return -1;
    }
    idx = PyLong_AsSsize_t(io);
    if (idx < 0 || idx >= PyList_GET_SIZE(s->fns) || idx >= PyList_GET_SIZE(s->cats)
            || idx >= PyList_GET_SIZE(s->nargs)) {
        PyErr_Clear();
        return -1;
    }
    *c = idx;
    return idx;
}

typedef struct TokenObject TokenObject;

typedef struct {
    PyObject_HEAD
    PyObject *eng;
    PyObject *py_send, *py_dispatch, *py_queue_full, *py_failed, *py_net, *py_wait;
    PyObject *py_deferred, *py_wake, *deferred, *delayed, *py_refuse, *py_sys_failed;
    PyObject *net_send;              /* the conduit's send(proc, header, payload); NULL: none */
    Py_buffer idle_buf;              /* the conduit's "nothing until net_fd" flag */
    int net_fd;
    LockObject *drain_lock;
    int size, T, first, procs, lockfree, throttle;
    int64_t max_medium, seg_size;
    unsigned char *route;
    int *proc_li;                    /* global process -> index on the node, -1 elsewhere */
    /* the shared-memory network (n == 0: none) */
    int n, li, nins, nrep;
    int64_t depth, slot;
    Py_buffer *bufs;                 /* the node's objects, mine at li */
    OutQ *out[2];
    InQ *ins;                        /* replies first */
    /* node-local segments, by rank - node_first (NULL: not addressable) */
    int node_first, node_ranks;
    char **segs;
    Py_buffer *seg_bufs;
    double conduit_every, conduit_at, spin_s;
    Clock clock;
    unsigned long empty;
    int waiters;                     /* threads of the Python wait loop sleeping on the drainer */
    int sleeping;                    /* the drainer blocks in a receive (Engine._block) */
    int wake_fd;                     /* eventfd that ends its sleep (-1: none) */
    PyObject *sleep_pred;            /* its wait's condition when cheap and pure, else NULL */
    int sleep_slot;                  /* the rank-thread it waits for (-1: none of its own) */
    uint64_t sent, received, rings, full_waits, handled;
    Slot *slots;
    TokenObject *spare[4];           /* tokens to reuse (in-line AMs nest two deep) */
    int nspare;
} HotObject;

struct TokenObject {
    PyObject_HEAD
    HotObject *hot;
    PyObject *name;                  /* the handler's name; NULL: names[hidx] of the rank */
    long source;
    int t, hidx;
    char is_request, replied, live;
    unsigned long thread;
};

static PyTypeObject Hot_Type, Token_Type, EndpointBase_Type;
static int nudge(HotObject *h, int check, int dest_t);

/* -- tokens ------------------------------------------------------------------------- */

static PyObject *
token_name(TokenObject *tok)
{
    if (tok->name != NULL) {
        Py_INCREF(tok->name);
        return tok->name;
    }
    Slot *s = &tok->hot->slots[tok->t];
    if (s->names != NULL && tok->hidx >= 0 && tok->hidx < PyList_GET_SIZE(s->names)) {
        PyObject *n = PyList_GET_ITEM(s->names, tok->hidx);
        Py_INCREF(n);
        return n;
    }
    return PyUnicode_FromString("?");
}

static TokenObject *
token_new(HotObject *h, int t, int hidx, PyObject *name, long src, int is_request)
{
    TokenObject *tok = NULL;
#ifndef Py_GIL_DISABLED
    if (h->nspare > 0) {
        tok = h->spare[--h->nspare];
    }
#endif
    if (tok == NULL) {
        tok = PyObject_New(TokenObject, &Token_Type);
        if (tok == NULL) {
            return NULL;
        }
        Py_INCREF(h);
        tok->hot = h;
    }
    tok->name = name;
    Py_XINCREF(name);
    tok->source = src;
    tok->t = t;
    tok->hidx = hidx;
    tok->is_request = (char)is_request;
    tok->replied = 0;
    tok->live = 1;
    tok->thread = PyThread_get_thread_ident();
    return tok;
}

static void
token_done(HotObject *h, TokenObject *tok)
{
    tok->live = 0;
#ifndef Py_GIL_DISABLED
    if (Py_REFCNT(tok) == 1 && h->nspare < 4 && tok->hot == h) {
        Py_CLEAR(tok->name);
        h->spare[h->nspare++] = tok;
        return;
    }
#endif
    Py_DECREF(tok);
}

static void
Token_dealloc(TokenObject *tok)
{
    Py_XDECREF(tok->name);
    Py_XDECREF(tok->hot);
    PyObject_Free(tok);
}

/* Run fn(token, *args) on rank-thread t with the token current on this thread.
 * capture: let an exception propagate (the caller handles it) instead of reporting it
 * through the engine's handler_failed (which ends the job unless on_handler_error is set).
 * Returns a new reference to the result, or NULL with an exception set. */
static PyObject *
call_handler(HotObject *h, int t, PyObject *fn, int hidx, PyObject *name, long src,
             int is_request, PyObject *const *args, Py_ssize_t nargs, int capture)
{
    PyObject *stack[MAX_ARGS + 4];
    if (nargs > MAX_ARGS + 2) {
        PyErr_SetString(PyExc_ValueError, "too many handler arguments");
        return NULL;
    }
    TokenObject *tok = token_new(h, t, hidx, name, src, is_request);
    if (tok == NULL) {
        return NULL;
    }
    void *prev = PyThread_tss_get(&cur_token);
    if (PyThread_tss_set(&cur_token, tok) != 0) {
        Py_DECREF(tok);
        PyErr_SetString(PyExc_RuntimeError, "cannot set the current token");
        return NULL;
    }
    stack[1] = (PyObject *)tok;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        stack[2 + i] = args[i];
    }
    PyObject *r = PyObject_Vectorcall(fn, stack + 1, (1 + nargs) | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                      NULL);
    h->handled++;
    if (r == NULL && !capture) {
        /* on_handler_error runs in the handler's context (the token still current) */
        PyObject *exc = PyErr_GetRaisedException();
        PyObject *nm = token_name(tok);
        Slot *s = &h->slots[t];
        if (nm != NULL && s->rs != NULL) {
            PyObject *srco = PyLong_FromLong(src);
            if (srco != NULL) {
                r = PyObject_CallFunctionObjArgs(h->py_failed, s->rs, nm, srco, exc, NULL);
                Py_DECREF(srco);
            }
        }
        Py_XDECREF(nm);
        Py_DECREF(exc);
    }
    PyThread_tss_set(&cur_token, prev);
    token_done(h, tok);
    return r;
}

/* -- sending ------------------------------------------------------------------------ */

static void
ring(HotObject *h, OutQ *o)
{
    if (o->bell >= 0) {
        uint64_t one = 1;
        h->rings++;
        ssize_t w = write(o->bell, &one, sizeof one);
        (void)w;
    }
}

/* Write one entry into o; 0 if the queue is full (nothing written). The caller holds
 * o->lock. hdr/hl: the wire header; payload/plen (plen < 0: none). */
static int
push(HotObject *h, OutQ *o, const unsigned char *hdr, Py_ssize_t hl, const char *payload,
     int64_t plen, int64_t eflags)
{
    int64_t head = o->head;
    if (head - o->tail >= h->depth) {
        o->tail = ld_acq(o->tail_p);
        if (head - o->tail >= h->depth) {
            return 0;
        }
    }
    int64_t i = head % h->depth;
    char *e = o->base + o->ents + i * ENTRY;
    int64_t *w = (int64_t *)e;
    w[1] = plen;
    w[2] = ((int64_t)hl << 8) | eflags;
    memcpy(e + HDR_AT, hdr, hl);
    if (plen > 0 && !(eflags & E_DEPOSITED)) {
        memcpy(o->base + o->slots + i * h->slot, payload, plen);
    }
    o->head = head + 1;
    st_sc(&w[0], head + 1);         /* publish; seq_cst also orders the load below */
    if (ld_acq(o->sleep_p)) {
        ring(h, o);
    }
    h->sent++;
    return 1;
}

/* The queue is full: let the engine make progress (it may raise: the job is ending). */
static int
queue_full(HotObject *h, int reply)
{
    h->full_waits++;
    PyObject *r = PyObject_CallOneArg(h->py_queue_full, reply ? Py_True : Py_False);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Queue one message to node-local process index s, waiting (polling) while the queue is
 * full; a payload larger than a slot goes in fragments. */
static int
pshm_send(HotObject *h, int reply, int s, const unsigned char *hdr, Py_ssize_t hl,
          const char *payload, int64_t plen, int64_t eflags)
{
    OutQ *o = &h->out[reply ? Q_REP : Q_REQ][s];
    int rc = 0;
    if (o->lock != NULL) {
        lock_wait(o->lock);
    }
    if (plen > h->slot && !(eflags & E_DEPOSITED)) {
        int64_t last = (plen - 1) / h->slot * h->slot;
        for (int64_t at = 0; at < last; at += h->slot) {
            while (!push(h, o, hdr, 0, payload + at, h->slot, E_MORE)) {
                if (queue_full(h, reply) < 0) {
                    rc = -1;
                    goto out;
                }
            }
        }
        payload += last;
        plen -= last;
    }
    while (!push(h, o, hdr, hl, payload, plen, eflags)) {
        if (queue_full(h, reply) < 0) {
            rc = -1;
            goto out;
        }
    }
out:
    if (o->lock != NULL) {
        lock_rel(o->lock);
    }
    return rc;
}

static int
arg_i64(PyObject *o, int64_t *v)
{
    int overflow = 0;
    if (!PyLong_CheckExact(o)) {
        return 0;
    }
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *v = x;
    return 1;
}

static Py_ssize_t
pack_header(unsigned char *hb, int flags, Py_ssize_t nargs, Py_ssize_t hidx, long src,
            long dst, uint64_t offset, const int64_t *a)
{
    hb[0] = (unsigned char)flags;
    hb[1] = (unsigned char)nargs;
    put_le(hb + 2, (uint64_t)hidx, 2);
    put_le(hb + 4, (uint64_t)src, 4);
    put_le(hb + 8, (uint64_t)dst, 4);
    put_le(hb + 12, offset, 8);
    for (Py_ssize_t i = 0; i < nargs; i++) {
        put_le(hb + FIXED + 8 * i, (uint64_t)a[i], 8);
    }
    return FIXED + 8 * nargs;
}

/* Pack a header and queue it, with ``payload``'s bytes (NULL: none; bytes or any simple
 * buffer of at most ``max`` bytes), to node-local process ``proc``: 0 sent, -1 error, 1 not
 * handled here (a payload that is no buffer or is too large: the caller's slow path says
 * what is wrong). */
static int
queue_send(HotObject *h, int reply, int proc, int flags, Py_ssize_t nargs, Py_ssize_t hidx,
           long src, long dest, const int64_t *a, PyObject *payload, int64_t max)
{
    const char *p = NULL;
    int64_t plen = -1;
    Py_buffer pb;
    pb.obj = NULL;
    if (payload != NULL) {
        if (PyBytes_CheckExact(payload)) {
            p = PyBytes_AS_STRING(payload);
            plen = PyBytes_GET_SIZE(payload);
        } else {
            if (PyObject_GetBuffer(payload, &pb, PyBUF_SIMPLE) < 0) {
                PyErr_Clear();
                return 1;
            }
            p = pb.buf;
            plen = pb.len;
        }
        if (plen > max) {
            if (pb.obj != NULL) {
                PyBuffer_Release(&pb);
            }
            return 1;
        }
    }
    unsigned char hb[FIXED + 8 * MAX_ARGS];
    Py_ssize_t hl = pack_header(hb, flags, nargs, hidx, src, dest, 0, a);
    int rc = pshm_send(h, reply, h->proc_li[proc], hb, hl, p, plen, 0);
    if (pb.obj != NULL) {
        PyBuffer_Release(&pb);
    }
    return rc;
}

/* Pack a header and hand it, with ``payload`` (NULL: none; else bytes of at most
 * max_medium, the Medium payload), to the conduit's send for process ``proc``, as the engine's
 * send_user would: 0 sent, -1 error, 1 not handled here (a payload that is not bytes or is too
 * large: the caller's slow path takes it and says what is wrong). */
static int
net_send(HotObject *h, int proc, int flags, Py_ssize_t nargs, Py_ssize_t hidx, long src,
         long dest, const int64_t *a, PyObject *payload)
{
    if (payload != NULL) {
        if (!PyBytes_CheckExact(payload) || PyBytes_GET_SIZE(payload) > h->max_medium) {
            return 1;
        }
        if (PyBytes_GET_SIZE(payload) == 0) {
            payload = NULL;  /* as send_user: an empty Medium payload travels as none */
        }
    }
    PyObject *hdr = PyBytes_FromStringAndSize(NULL, FIXED + 8 * nargs);
    if (hdr == NULL) {
        return -1;
    }
    pack_header((unsigned char *)PyBytes_AS_STRING(hdr), flags, nargs, hidx, src, dest, 0, a);
    PyObject *po = PyLong_FromLong(proc);
    if (po == NULL) {
        Py_DECREF(hdr);
        return -1;
    }
    PyObject *stack[] = {po, hdr, payload != NULL ? payload : Py_None};
    PyObject *r = PyObject_Vectorcall(h->net_send, stack, 3, NULL);
    Py_DECREF(po);
    Py_DECREF(hdr);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Send one user AM from rank-thread t: 0 sent, -1 error, 1 not handled here (the caller
 * hands it to the Python engine, which checks everything and raises what is wrong). */
static int
fast_send(HotObject *h, int t, int flags, PyObject *dest_o, PyObject *handler,
          PyObject *payload, PyObject *const *args, Py_ssize_t nargs)
{
    int cat = flags & CAT_MASK;
    if (cat == C_LONG || nargs > MAX_ARGS || !PyLong_CheckExact(dest_o)
            || !PyFunction_Check(handler)) {
        return 1;
    }
    long dest = PyLong_AsLong(dest_o);
    if (dest < 0 || dest >= h->size) {
        PyErr_Clear();
        return 1;
    }
    int proc = (int)(dest / h->T);
    int route = h->route[proc];
    if (route == R_NET && h->net_send == NULL) {
        return 1;
    }
    Slot *s = &h->slots[t];
    if (s->by_fn == NULL) {
        return 1;
    }
    Py_ssize_t idx = handler_index(s, handler);
    if (idx < 0) {
        return 1;
    }
    PyObject *c = PyList_GET_ITEM(s->cats, idx);
    if (c != Py_None && PyLong_AsLong(c) != cat) {
        return 1;
    }
    PyObject *na = PyList_GET_ITEM(s->nargs, idx);
    if (na != Py_None && PyLong_AsSsize_t(na) != nargs) {
        return 1;
    }
    int64_t a[MAX_ARGS];
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!arg_i64(args[i], &a[i])) {
            return 1;
        }
    }
    if (route == R_INLINE) {
        Slot *d = &h->slots[dest - h->first];
        if (d->rs == NULL || idx >= PyList_GET_SIZE(d->fns)) {
            return 1;
        }
        PyObject *cargs[MAX_ARGS + 1];
        PyObject *mv = NULL;
        Py_ssize_t k = 0;
        if (cat == C_MEDIUM) {
            /* bytes only here (read-only, kept alive by the caller during the call) */
            if (!PyBytes_CheckExact(payload) || PyBytes_GET_SIZE(payload) > h->max_medium) {
                return 1;
            }
            mv = PyMemoryView_FromObject(payload);
            if (mv == NULL) {
                return -1;
            }
            cargs[k++] = mv;
        }
        for (Py_ssize_t i = 0; i < nargs; i++) {
            cargs[k++] = args[i];
        }
        PyObject *fn = PyList_GET_ITEM(d->fns, idx);
        Py_INCREF(fn);
        PyObject *r = call_handler(h, (int)(dest - h->first), fn, (int)idx, NULL, s->rank,
                                   !(flags & F_REPLY), cargs, k, 0);
        Py_DECREF(fn);
        Py_XDECREF(mv);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
        /* the handler may have completed a wait of the destination's thread */
        return nudge(h, 1, (int)(dest - h->first));
    }
    if (route == R_NET) {
        return net_send(h, proc, flags, nargs, idx, s->rank, dest, a,
                        cat == C_MEDIUM ? payload : NULL);
    }
    /* PSHM */
    return queue_send(h, flags & F_REPLY, proc, flags, nargs, idx, s->rank, dest, a,
                      cat == C_MEDIUM ? payload : NULL, h->max_medium);
}

/* fast_send, or the Python engine's send_user(rs, flags, dest, handler, payload, offset,
 * args) when the fast path does not apply. */
static int
send_user(HotObject *h, int t, int flags, PyObject *dest, PyObject *handler, PyObject *payload,
          PyObject *offset, PyObject *const *args, Py_ssize_t nargs)
{
    int rc = fast_send(h, t, flags, dest, handler, payload, args, nargs);
    if (rc <= 0) {
        return rc;
    }
    PyObject *tup = PyTuple_New(nargs);
    if (tup == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tup, i, args[i]);
    }
    PyObject *fl = PyLong_FromLong(flags);
    PyObject *r = NULL;
    if (fl != NULL) {
        PyObject *stack[] = {h->slots[t].rs, fl, dest, handler, payload, offset, tup};
        r = PyObject_Vectorcall(h->py_send, stack, 7, NULL);
        Py_DECREF(fl);
    }
    Py_DECREF(tup);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* -- receiving ---------------------------------------------------------------------- */

/* The handler index, source and destination slot of a wire header (FIXED bytes at least);
 * NULL when the source or the destination is out of range. */
static Slot *
header_slot(HotObject *h, const unsigned char *hdr, Py_ssize_t *hidx, uint64_t *src)
{
    *hidx = (Py_ssize_t)get_le(hdr + 2, 2);
    *src = get_le(hdr + 4, 4);
    int64_t t = (int64_t)get_le(hdr + 8, 4) - h->first;
    if (*src >= (uint64_t)h->size || t < 0 || t >= h->T) {
        return NULL;
    }
    return &h->slots[t];
}

/* Run a system AM whose handler was registered as fast (set_sys_handler) straight from its
 * entry: fn(src, args, payload, is_reply), as the engine's dispatch would call it through the
 * extension's port (a payload only with the LONG flag and offset 0; a handler's Exception is
 * a bug of the runtime: the engine's sys_handler_failed ends the job, unless the rank's
 * on_handler_error takes it). 1 not handled here (the Python dispatcher takes it), 0 ran, -1
 * error. */
static int
sys_dispatch(HotObject *h, const unsigned char *hdr, int64_t hl, char *payload, int64_t plen)
{
    int flags = hdr[0];
    int nargs = hdr[1];
    int cat = flags & CAT_MASK;
    if ((flags & ~F_KNOWN) || nargs > MAX_ARGS || hl != FIXED + 8 * nargs
            || (cat != C_SHORT && cat != C_LONG) || (cat == C_LONG ? plen < 0 : plen >= 0)
            || get_le(hdr + 12, 8) != 0) {
        return 1;
    }
    Py_ssize_t hidx;
    uint64_t src;
    Slot *s = header_slot(h, hdr, &hidx, &src);
    if (s == NULL || s->rs == NULL || s->sysfns == NULL || hidx >= PyList_GET_SIZE(s->sysfns)
            || PyList_GET_ITEM(s->sysfns, hidx) == Py_None) {
        return 1;
    }
    PyObject *args = PyTuple_New(nargs);
    if (args == NULL) {
        return -1;
    }
    for (int i = 0; i < nargs; i++) {
        PyObject *v = PyLong_FromLongLong((long long)get_le(hdr + FIXED + 8 * i, 8));
        if (v == NULL) {
            Py_DECREF(args);
            return -1;
        }
        PyTuple_SET_ITEM(args, i, v);
    }
    PyObject *pv = cat == C_LONG ? PyMemoryView_FromMemory(payload, plen, PyBUF_WRITE)
                                 : Py_NewRef(Py_None);
    PyObject *so = PyLong_FromUnsignedLongLong(src);
    int rc = -1;
    if (pv != NULL && so != NULL) {
        PyObject *fn = Py_NewRef(PyList_GET_ITEM(s->sysfns, hidx));
        PyObject *stack[] = {so, args, pv, (flags & F_REPLY) ? Py_True : Py_False};
        PyObject *r = PyObject_Vectorcall(fn, stack, 4, NULL);
        Py_DECREF(fn);
        if (r != NULL) {
            Py_DECREF(r);
            h->handled++;
            rc = 0;
        } else if (PyErr_ExceptionMatches(PyExc_Exception)) {
            /* a bug in the extension's handler (its checks refuse what a peer must not
             * send): the engine ends the job naming the extension and the handler, as an
             * exception from a user handler does (unless on_handler_error takes it) */
            PyObject *exc = PyErr_GetRaisedException();
            PyObject *to = PyLong_FromLong((long)(s - h->slots));
            PyObject *ho = PyLong_FromSsize_t(hidx);
            if (to != NULL && ho != NULL) {
                r = PyObject_CallFunctionObjArgs(h->py_sys_failed, to, ho, so, exc, NULL);
                if (r != NULL) {
                    Py_DECREF(r);
                    h->handled++;
                    rc = 0;
                }
            }
            Py_XDECREF(to);
            Py_XDECREF(ho);
            Py_DECREF(exc);
        }
    }
    Py_XDECREF(pv);
    Py_XDECREF(so);
    Py_DECREF(args);
    return rc;
}

/* Run a user Short/Medium AM straight from its entry: 1 not handled here (the Python
 * dispatcher checks it, refuses it or runs it), 0 ran, -1 error. */
static int
fast_dispatch(HotObject *h, const unsigned char *hdr, int64_t hl, char *payload, int64_t plen,
              PyObject *pobj)
{
    if (hl < FIXED) {
        return 1;
    }
    int flags = hdr[0];
    int nargs = hdr[1];
    int cat = flags & CAT_MASK;
    if (flags & F_SYSTEM) {
        return sys_dispatch(h, hdr, hl, payload, plen);
    }
    if ((flags & ~F_KNOWN) || cat > C_MEDIUM || nargs > MAX_ARGS
            || hl != FIXED + 8 * nargs) {
        return 1;
    }
    Py_ssize_t hidx;
    uint64_t src;
    Slot *s = header_slot(h, hdr, &hidx, &src);
    if (s == NULL || s->rs == NULL || hidx >= PyList_GET_SIZE(s->fns)) {
        return 1;
    }
    int64_t t = s - h->slots;
    PyObject *c = PyList_GET_ITEM(s->cats, hidx);
    PyObject *na = PyList_GET_ITEM(s->nargs, hidx);
    if ((c != Py_None && PyLong_AsLong(c) != cat)
            || (na != Py_None && PyLong_AsLong(na) != nargs)) {
        return 1;
    }
    if (cat == C_SHORT ? plen >= 0 : (plen < 0 || plen > h->max_medium)) {
        return 1;
    }
    PyObject *cargs[MAX_ARGS + 1];
    Py_ssize_t k = 0;
    int rc = -1;
    if (cat == C_MEDIUM) {
        /* the conduit's payload object itself, else a view of the queue's slot */
        cargs[k] = pobj != NULL ? Py_NewRef(pobj)
                                : PyMemoryView_FromMemory(payload, plen, PyBUF_WRITE);
        if (cargs[k] == NULL) {
            return -1;
        }
        k++;
    }
    for (int i = 0; i < nargs; i++) {
        cargs[k] = PyLong_FromLongLong((long long)get_le(hdr + FIXED + 8 * i, 8));
        if (cargs[k] == NULL) {
            goto done;
        }
        k++;
    }
    PyObject *fn = PyList_GET_ITEM(s->fns, hidx);
    Py_INCREF(fn);
    PyObject *r = call_handler(h, (int)t, fn, (int)hidx, NULL, (long)src, !(flags & F_REPLY),
                               cargs, k, 0);
    Py_DECREF(fn);
    if (r != NULL) {
        Py_DECREF(r);
        rc = 0;
    }
done:
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_DECREF(cargs[i]);
    }
    return rc;
}

/* The Python dispatcher: dispatch(header, payload, deposited). */
static int
slow_dispatch(HotObject *h, char *hdr, int64_t hl, PyObject *payload, int64_t dep)
{
    PyObject *hv = PyMemoryView_FromMemory(hdr, hl, PyBUF_READ);
    if (hv == NULL) {
        return -1;
    }
    PyObject *dv = PyLong_FromLongLong(dep);
    if (dv == NULL) {
        Py_DECREF(hv);
        return -1;
    }
    PyObject *stack[] = {hv, payload, dv};
    PyObject *r = PyObject_Vectorcall(h->py_dispatch, stack, 3, NULL);
    Py_DECREF(hv);
    Py_DECREF(dv);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

static int
frag_append(InQ *q, char *p, int64_t n)
{
    if (q->frag == NULL) {
        q->frag = PyByteArray_FromStringAndSize(NULL, 0);
        if (q->frag == NULL) {
            return -1;
        }
    }
    if (n <= 0) {
        return 0;
    }
    Py_ssize_t old = PyByteArray_GET_SIZE(q->frag);
    if (PyByteArray_Resize(q->frag, old + n) < 0) {
        return -1;
    }
    memcpy(PyByteArray_AS_STRING(q->frag) + old, p, n);
    return 0;
}

/* Run what has arrived in incoming queues [from, to); return how many ran, -1 on error. */
static int
drain_queues(HotObject *h, int from, int to, int budget)
{
    char *mine = h->bufs[h->li].buf;
    int n = 0;
    for (int qi = from; qi < to; qi++) {
        InQ *q = &h->ins[qi];
        while (n < budget) {
            int64_t i = q->tail % h->depth;
            char *e = mine + q->ents + i * ENTRY;
            int64_t *w = (int64_t *)e;
            int64_t tail = q->tail + 1;
            if (ld_acq(&w[0]) != tail) {
                break;  /* not published yet */
            }
            int64_t plen = w[1], ef = w[2] & 0xff, hl = w[2] >> 8;
            int bad = hl < 0 || hl > ENTRY - HDR_AT || (plen > h->slot && !(ef & E_DEPOSITED));
            char *p = (plen >= 0 && !(ef & E_DEPOSITED)) ? mine + q->slots + i * h->slot : NULL;
            if (bad) {
                hl = 0;
                p = NULL;
            }
            if (ef & E_MORE) {  /* a fragment: keep it, run nothing yet */
                int rc = frag_append(q, p, p == NULL ? 0 : plen);
                q->tail = tail;
                st_rel(q->tail_p, tail);
                if (rc < 0) {
                    return -1;
                }
                continue;
            }
            int rc;
            if (q->frag != NULL) {  /* the last fragment: the whole payload */
                if (p != NULL && frag_append(q, p, plen) < 0) {
                    q->tail = tail;
                    st_rel(q->tail_p, tail);
                    return -1;
                }
                PyObject *whole = q->frag;
                q->frag = NULL;
                PyObject *mv = PyMemoryView_FromObject(whole);
                Py_DECREF(whole);
                rc = mv == NULL ? -1 : slow_dispatch(h, e + HDR_AT, hl, mv, -1);
                Py_XDECREF(mv);
            } else {
                rc = bad ? 1 : fast_dispatch(h, (unsigned char *)e + HDR_AT, hl, p, p ? plen : -1, NULL);
                if (rc == 1) {
                    PyObject *pv = Py_None;
                    int64_t dep = -1;
                    if (ef & E_DEPOSITED) {
                        dep = plen;
                    } else if (p != NULL) {
                        pv = PyMemoryView_FromMemory(p, plen, PyBUF_WRITE);
                        if (pv == NULL) {
                            rc = -1;
                        }
                    }
                    if (pv != NULL) {
                        if (pv == Py_None) {
                            Py_INCREF(pv);
                        }
                        rc = slow_dispatch(h, e + HDR_AT, hl, pv, dep);
                        Py_DECREF(pv);
                    }
                }
            }
            q->tail = tail;  /* the slot is free once its handler returned */
            st_rel(q->tail_p, tail);
            if (rc < 0) {
                return -1;
            }
            n++;
        }
    }
    h->received += n;
    return n;
}

static int
has_pending(HotObject *h)
{
    char *mine = h->bufs[h->li].buf;
    for (int qi = 0; qi < h->nins; qi++) {
        InQ *q = &h->ins[qi];
        int64_t *w = (int64_t *)(mine + q->ents + (q->tail % h->depth) * ENTRY);
        if (ld_acq(w) == q->tail + 1) {
            return 1;
        }
    }
    return 0;
}

/* -- progress ----------------------------------------------------------------------- */

static int
run_deferred(HotObject *h)
{
    if (PyObject_Length(h->deferred) <= 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(h->py_deferred);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Drain the queues, and the conduit (with a throttle when faster paths exist); now: the
 * monotonic clock (0 to read it here). The caller holds the drain lock (or the engine is
 * lock-free). */
static int
drain_all(HotObject *h, PyObject *pred, double now)
{
    int n = 0;
    if (h->n > 0) {
        n = drain_queues(h, 0, h->nins, BUDGET);
        if (n < 0) {
            return -1;
        }
    }
    if (h->throttle && now == 0.0) {
        now = clock_now(&h->clock);
    }
    if (!h->throttle || now - h->conduit_at >= h->conduit_every) {
        if (h->net_fd >= 0 && ((volatile char *)h->idle_buf.buf)[0]
                && PyObject_Length(h->delayed) == 0) {
            /* the conduit said "nothing until the descriptor is readable" */
            struct pollfd pfd = {h->net_fd, POLLIN, 0};
            if (poll(&pfd, 1, 0) == 0) {
                h->conduit_at = now;
                return n;
            }
        }
        PyObject *r = PyObject_CallOneArg(h->py_net, pred);
        if (r == NULL) {
            return -1;
        }
        long k = PyLong_AsLong(r);
        Py_DECREF(r);
        if (k < 0) {
            return PyErr_Occurred() ? -1 : n;
        }
        h->conduit_at = k ? 0.0 : now;
        n += (int)k;
    }
    return n;
}

/* After a drain (not lock-free): wake the threads waiting on the drainer, if any. */
static int
wake_waiters(HotObject *h)
{
    if (__atomic_load_n(&h->waiters, __ATOMIC_RELAXED) <= 0) {
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(h->py_wake);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

static int
pred_true(PyObject *pred)
{
    PyObject *r = PyObject_CallNoArgs(pred);
    if (r == NULL) {
        return -1;
    }
    int v = PyObject_IsTrue(r);
    Py_DECREF(r);
    return v;
}

/* After this thread did something that may complete another thread's wait without a
 * message: wake the drainer if it sleeps in a receive, and the threads waiting on it.
 * check == 0: work was deferred, which the sleeper is to send: always.
 * check == 1: an in-line AM ran a handler of rank-thread dest_t (or deferred work of its
 * rank ran). Only a drainer asleep in a receive holds the others off for long, so only then
 * is anybody woken: the sleeper when its wait may now be satisfied -- the AM was for the rank
 * it waits for and, when it published its condition (an engine wait on plain attributes: a
 * handle's op.done, a barrier's done; never a caller's predicate, which might take a lock
 * this thread holds or read this thread's locals), that condition is true -- so that a
 * sibling asleep in a wait the AM does not concern (a barrier) is not woken by every in-line
 * AM of its process; and the threads waiting on it (their waits may be the AM's). A drainer
 * that is awake wakes them itself when it lets go of the lock. Costs an atomic load when
 * nobody sleeps. */
static int
nudge(HotObject *h, int check, int dest_t)
{
    if (!__atomic_load_n(&h->sleeping, __ATOMIC_SEQ_CST)) {
        return check ? 0 : wake_waiters(h);
    }
    int fd = __atomic_load_n(&h->wake_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        int wake = 1;
        if (check) {
            /* only an AM to its rank can complete a rank-thread's wait */
            wake = dest_t == __atomic_load_n(&h->sleep_slot, __ATOMIC_RELAXED);
#ifndef Py_GIL_DISABLED
            /* the GIL keeps sleep_pred alive while we call it (sleep_end clears it under it) */
            PyObject *p = h->sleep_pred;
            if (wake && p != NULL) {
                Py_INCREF(p);
                wake = pred_true(p);
                Py_DECREF(p);
                if (wake < 0) {
                    PyErr_Clear();  /* let the sleeper call it and see the error */
                    wake = 1;
                }
            }
#endif
        }
        if (wake) {
            uint64_t one = 1;
            ssize_t w = write(fd, &one, sizeof one);
            (void)w;
        }
    }
    return wake_waiters(h);
}

/* One look at everything: 1+ ran, 0 nothing, -1 error, -2 another thread drains. */
static int
poll_core(HotObject *h, PyObject *pred, double now)
{
    if (h->lockfree) {
        return drain_all(h, pred, now);
    }
    if (!lock_try(h->drain_lock)) {
        return -2;
    }
    int n = drain_all(h, pred, now);
    lock_rel(h->drain_lock);
    /* threads waiting on the drainer re-check whenever it lets go of the lock */
    if (n >= 0 && wake_waiters(h) < 0) {
        return -1;
    }
    return n;
}

/* One poll: what ep.poll() does. Returns how many ran, -1 on error. */
static int
poll_once(HotObject *h, PyObject *pred)
{
    int n = poll_core(h, pred, 0.0);
    if (n == -1 || run_deferred(h) < 0) {
        return -1;
    }
    return n < 0 ? 0 : n;
}

/* Raise the job's JobAborted once the bootstrap client has seen the job end. */
static int
check_aborted(HotObject *h)
{
    PyObject *boot = h->eng == NULL ? NULL : PyObject_GetAttrString(h->eng, "boot");
    if (boot == NULL) {
        return h->eng == NULL ? 0 : -1;
    }
    if (boot == Py_None) {
        Py_DECREF(boot);
        return 0;
    }
    PyObject *a = PyObject_GetAttrString(boot, "aborted");
    Py_DECREF(boot);
    if (a == NULL) {
        return -1;
    }
    if (a == Py_None) {
        Py_DECREF(a);
        return 0;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(a), a);
    Py_DECREF(a);
    return -1;
}

#define QUEUE_SPINS 16  /* looks at the queues alone between two calls of an idle pred */

/* The engine's wait_until with the spin phase here: poll until pred() holds. While nothing
 * arrives, the queues are looked at QUEUE_SPINS times between two calls of pred (a message
 * is seen sooner; pred, which may also watch memory that peers write, still runs every
 * ~0.1 us). Once nothing arrived for spin_s seconds (or in block mode, or when another
 * thread drains), the Python loop takes over: it blocks, or waits on the drainer. Returns
 * a new reference (True/False) or NULL. */
static PyObject *
wait_until(HotObject *h, PyObject *pred, PyObject *timeout)
{
    int v = pred_true(pred);
    if (v != 0) {
        /* what was deferred (a grant a handler of this rank queued) goes out now, not
         * behind the next wait's sleep */
        if (v < 0 || run_deferred(h) < 0) {
            return NULL;
        }
        return Py_NewRef(Py_True);
    }
    double deadline = -1.0;
    if (timeout != Py_None) {
        double tmo = PyFloat_AsDouble(timeout);
        if (tmo == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
        deadline = clock_now(&h->clock) + tmo;
    }
    double idle = -1.0;
    unsigned long it = 0;
    int spun = 0;
    if (h->spin_s > 0.0) {
        for (;;) {
            double now = clock_now(&h->clock);
            int n = poll_core(h, pred, now);
            if (n == -2) {
                break;  /* another thread drains: wait for it in Python */
            }
            if (n < 0 || run_deferred(h) < 0) {
                return NULL;
            }
            v = pred_true(pred);
            if (v != 0) {
                return v < 0 ? NULL : Py_NewRef(Py_True);
            }
            if (n) {
                idle = -1.0;
            } else {
                if (idle < 0.0) {
                    idle = now;
                } else if (now - idle > h->spin_s) {
                    spun = 1;
                    break;
                }
                if (!(++h->empty % YIELD_EVERY)) {
                    Py_BEGIN_ALLOW_THREADS
                    sched_yield();
                    Py_END_ALLOW_THREADS
                } else if (h->n > 0) {
                    for (int k = 0; k < QUEUE_SPINS && !has_pending(h); k++) {
                    }
                }
            }
            if (deadline >= 0.0 && now >= deadline) {
                return PyBool_FromLong(0);
            }
            if (!(++it & 63)) {  /* a signal came, or the job is ending */
                if (PyErr_CheckSignals() < 0 || check_aborted(h) < 0) {
                    return NULL;
                }
            }
        }
    }
    PyObject *rem = Py_None;
    Py_INCREF(rem);
    if (deadline >= 0.0) {
        Py_DECREF(rem);
        double left = deadline - clock_now(&h->clock);
        rem = PyFloat_FromDouble(left > 0.0 ? left : 0.0);
        if (rem == NULL) {
            return NULL;
        }
    }
    PyObject *sp = PyBool_FromLong(spun == 1);
    PyObject *stack[] = {pred, rem, sp};
    PyObject *r = PyObject_Vectorcall(h->py_wait, stack, 3, NULL);
    Py_DECREF(rem);
    Py_DECREF(sp);
    return r;
}

/* -- system senders ----------------------------------------------------------------- */

/* SysSender: Hot.sys_sender(t, hidx, fallback) makes one; calling it, (dest, args, payload=
 * None), sends a system AM of handler hidx from rank-thread t to dest: into the node-local
 * process's shared-memory queue here; anything else (another process's rank-threads in this
 * process, the conduit, args that are not a tuple of at most MAX_ARGS ints fitting int64, a
 * dest out of range) goes to fallback(dest, args, payload), the engine's own send, which
 * raises what is wrong. The wire header is the engine's: SYSTEM, plus LONG when a payload is
 * there, offset 0. */
typedef struct {
    PyObject_HEAD
    HotObject *hot;
    PyObject *fallback;
    int t, hidx;
    vectorcallfunc vectorcall;
} SysSenderObject;

static PyTypeObject SysSender_Type;

static PyObject *
SysSender_call(SysSenderObject *ss, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    HotObject *h = ss->hot;
    if (kwnames != NULL || nargs < 2 || nargs > 3 || !PyLong_CheckExact(args[0])
            || !PyTuple_CheckExact(args[1]) || PyTuple_GET_SIZE(args[1]) > MAX_ARGS
            || h->n == 0) {
        goto slow;
    }
    long dest = PyLong_AsLong(args[0]);
    if (dest < 0 || dest >= h->size) {
        PyErr_Clear();
        goto slow;
    }
    int proc = (int)(dest / h->T);
    if (h->route[proc] != R_PSHM || h->proc_li[proc] < 0 || h->proc_li[proc] == h->li) {
        goto slow;
    }
    Py_ssize_t na = PyTuple_GET_SIZE(args[1]);
    int64_t a[MAX_ARGS];
    for (Py_ssize_t i = 0; i < na; i++) {
        if (!arg_i64(PyTuple_GET_ITEM(args[1], i), &a[i])) {
            goto slow;
        }
    }
    PyObject *payload = nargs == 3 && args[2] != Py_None ? args[2] : NULL;
    int rc = queue_send(h, 0, proc, payload != NULL ? F_SYSTEM | C_LONG : F_SYSTEM, na,
                        ss->hidx, h->slots[ss->t].rank, dest, a, payload, INT64_MAX);
    if (rc == 1) {
        goto slow;
    }
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
slow:
    return PyObject_Vectorcall(ss->fallback, args, nargsf, kwnames);
}

static int
SysSender_traverse(SysSenderObject *ss, visitproc visit, void *arg)
{
    Py_VISIT(ss->hot);
    Py_VISIT(ss->fallback);
    return 0;
}

static int
SysSender_clear(SysSenderObject *ss)
{
    Py_CLEAR(ss->hot);
    Py_CLEAR(ss->fallback);
    return 0;
}

static void
SysSender_dealloc(SysSenderObject *ss)
{
    PyObject_GC_UnTrack(ss);
    SysSender_clear(ss);
    Py_TYPE(ss)->tp_free((PyObject *)ss);
}

static PyTypeObject SysSender_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amnet.core._hot.SysSender",
    .tp_basicsize = sizeof(SysSenderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "send(dest, args, payload=None): a system AM of one handler (Hot.sys_sender).",
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SysSenderObject, vectorcall),
    .tp_traverse = (traverseproc)SysSender_traverse,
    .tp_clear = (inquiry)SysSender_clear,
    .tp_dealloc = (destructor)SysSender_dealloc,
};

/* sys_sender(t, hidx, fallback) */
static PyObject *
Hot_sys_sender(HotObject *h, PyObject *args)
{
    int t, hidx;
    PyObject *fallback;
    if (!PyArg_ParseTuple(args, "iiO", &t, &hidx, &fallback)) {
        return NULL;
    }
    if (t < 0 || t >= h->T || hidx < 0 || hidx > 0xffff || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread, handler index or fallback");
        return NULL;
    }
    SysSenderObject *ss = PyObject_GC_New(SysSenderObject, &SysSender_Type);
    if (ss == NULL) {
        return NULL;
    }
    ss->hot = (HotObject *)Py_NewRef(h);
    ss->fallback = Py_NewRef(fallback);
    ss->t = t;
    ss->hidx = hidx;
    ss->vectorcall = (vectorcallfunc)SysSender_call;
    PyObject_GC_Track(ss);
    return (PyObject *)ss;
}

/* set_sys_handler(t, hidx, fn): messages of system handler hidx to rank-thread t that arrive
 * in the shared-memory queues run fn(src, args, payload, is_reply) from C (None: the engine's
 * dispatch again). */
static PyObject *
Hot_set_sys_handler(HotObject *h, PyObject *args)
{
    int t, hidx;
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "iiO", &t, &hidx, &fn)) {
        return NULL;
    }
    if (t < 0 || t >= h->T || hidx < 0 || hidx > 0xffff
            || (fn != Py_None && !PyCallable_Check(fn))) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread, handler index or handler");
        return NULL;
    }
    Slot *s = &h->slots[t];
    if (s->sysfns == NULL && (s->sysfns = PyList_New(0)) == NULL) {
        return NULL;
    }
    while (PyList_GET_SIZE(s->sysfns) <= hidx) {
        if (PyList_Append(s->sysfns, Py_None) < 0) {
            return NULL;
        }
    }
    Py_INCREF(fn);
    PyList_SetItem(s->sysfns, hidx, fn);
    Py_RETURN_NONE;
}

/* wait_until(pred, timeout=None): the C wait loop, for the extension interface (the caller
 * did its own checks). */
static PyObject *
Hot_wait_until(HotObject *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "wait_until(pred, timeout=None)");
        return NULL;
    }
    PyObject *timeout = nargs == 2 ? args[1] : Py_None;
    if (timeout != Py_None && !PyNumber_Check(timeout)) {
        PyErr_Format(PyExc_TypeError, "timeout must be a number or None, got %s",
                     Py_TYPE(timeout)->tp_name);
        return NULL;
    }
    return wait_until(h, args[0], timeout);
}

/* -- Hot methods -------------------------------------------------------------------- */

static void
Hot_release_all(HotObject *h)
{
    if (h->bufs != NULL) {
        for (int s = 0; s < h->n; s++) {
            if (h->bufs[s].obj != NULL) {
                PyBuffer_Release(&h->bufs[s]);
            }
        }
        PyMem_Free(h->bufs);
        h->bufs = NULL;
    }
    for (int k = 0; k < 2; k++) {
        if (h->out[k] != NULL) {
            for (int s = 0; s < h->n; s++) {
                Py_XDECREF(h->out[k][s].lock);
            }
            PyMem_Free(h->out[k]);
            h->out[k] = NULL;
        }
    }
    if (h->ins != NULL) {
        for (int i = 0; i < h->nins; i++) {
            Py_XDECREF(h->ins[i].frag);
        }
        PyMem_Free(h->ins);
        h->ins = NULL;
    }
    if (h->seg_bufs != NULL) {
        for (int r = 0; r < h->node_ranks; r++) {
            if (h->seg_bufs[r].obj != NULL) {
                PyBuffer_Release(&h->seg_bufs[r]);
            }
        }
        PyMem_Free(h->seg_bufs);
        h->seg_bufs = NULL;
    }
    PyMem_Free(h->segs);
    h->segs = NULL;
    h->n = 0;
}

static void
Hot_clear_refs(HotObject *h)
{
    Py_CLEAR(h->eng);
    Py_CLEAR(h->py_send);
    Py_CLEAR(h->py_dispatch);
    Py_CLEAR(h->py_queue_full);
    Py_CLEAR(h->py_failed);
    Py_CLEAR(h->py_net);
    Py_CLEAR(h->py_wait);
    Py_CLEAR(h->py_deferred);
    Py_CLEAR(h->py_wake);
    Py_CLEAR(h->py_refuse);
    Py_CLEAR(h->py_sys_failed);
    Py_CLEAR(h->sleep_pred);
    Py_CLEAR(h->net_send);
    Py_CLEAR(h->deferred);
    Py_CLEAR(h->delayed);
    if (h->slots != NULL) {
        for (int t = 0; t < h->T; t++) {
            Slot *s = &h->slots[t];
            Py_CLEAR(s->rs);
            Py_CLEAR(s->fns);
            Py_CLEAR(s->cats);
            Py_CLEAR(s->nargs);
            Py_CLEAR(s->names);
            Py_CLEAR(s->by_fn);
            Py_CLEAR(s->sysfns);
        }
    }
    while (h->nspare > 0) {
        TokenObject *sp = h->spare[--h->nspare];
        Py_DECREF(sp);
    }
}

static int
Hot_traverse(HotObject *h, visitproc visit, void *arg)
{
    Py_VISIT(h->eng);
    Py_VISIT(h->py_send);
    Py_VISIT(h->py_dispatch);
    Py_VISIT(h->py_queue_full);
    Py_VISIT(h->py_failed);
    Py_VISIT(h->py_net);
    Py_VISIT(h->py_wait);
    Py_VISIT(h->py_deferred);
    Py_VISIT(h->py_wake);
    Py_VISIT(h->py_refuse);
    Py_VISIT(h->py_sys_failed);
    Py_VISIT(h->sleep_pred);
    Py_VISIT(h->net_send);
    Py_VISIT(h->deferred);
    Py_VISIT(h->delayed);
    if (h->slots != NULL) {
        for (int t = 0; t < h->T; t++) {
            Py_VISIT(h->slots[t].rs);
            Py_VISIT(h->slots[t].sysfns);
        }
    }
    for (int i = 0; i < h->nspare; i++) {
        Py_VISIT(h->spare[i]);
    }
    return 0;
}

static int
Hot_clear(HotObject *h)
{
    Hot_clear_refs(h);
    return 0;
}

static void
Hot_dealloc(HotObject *h)
{
    PyObject_GC_UnTrack(h);
    Hot_clear_refs(h);
    Hot_release_all(h);
    if (h->idle_buf.obj != NULL) {
        PyBuffer_Release(&h->idle_buf);
    }
    Py_XDECREF(h->drain_lock);
    if (h->wake_fd >= 0) {
        close(h->wake_fd);
    }
    PyMem_Free(h->route);
    PyMem_Free(h->proc_li);
    PyMem_Free(h->slots);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* Hot(engine, route, lockfree, throttle_s): route is the list of each process's route. */
static PyObject *
Hot_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *eng, *route;
    int lockfree;
    double every;
    if (!PyArg_ParseTuple(args, "OOpd", &eng, &route, &lockfree, &every)) {
        return NULL;
    }
    HotObject *h = (HotObject *)type->tp_alloc(type, 0);
    if (h == NULL) {
        return NULL;
    }
    h->wake_fd = -1;  /* before anything can fail: dealloc closes it when >= 0 */
    h->sleep_slot = -1;
    h->eng = Py_NewRef(eng);
    PyObject *v;
#define INT_ATTR(field, name) \
    if ((v = PyObject_GetAttrString(eng, name)) == NULL) goto fail; \
    h->field = (int)PyLong_AsLong(v); Py_DECREF(v); if (PyErr_Occurred()) goto fail;
    INT_ATTR(size, "size")
    INT_ATTR(T, "T")
    INT_ATTR(first, "first")
#undef INT_ATTR
    if ((v = PyObject_GetAttrString(eng, "max_medium")) == NULL) goto fail;
    h->max_medium = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if ((v = PyObject_GetAttrString(eng, "seg_size")) == NULL) goto fail;
    h->seg_size = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (PyErr_Occurred()) goto fail;
    if ((h->py_send = PyObject_GetAttrString(eng, "send_user")) == NULL) goto fail;
    if ((h->py_dispatch = PyObject_GetAttrString(eng, "dispatch")) == NULL) goto fail;
    if ((h->py_queue_full = PyObject_GetAttrString(eng, "_queue_full")) == NULL) goto fail;
    if ((h->py_failed = PyObject_GetAttrString(eng, "handler_failed")) == NULL) goto fail;
    if ((h->py_net = PyObject_GetAttrString(eng, "drain_net")) == NULL) goto fail;
    if ((h->py_wait = PyObject_GetAttrString(eng, "wait_slow")) == NULL) goto fail;
    if ((h->py_deferred = PyObject_GetAttrString(eng, "run_deferred")) == NULL) goto fail;
    if ((h->py_wake = PyObject_GetAttrString(eng, "wake_waiters")) == NULL) goto fail;
    if ((h->py_refuse = PyObject_GetAttrString(eng, "_refuse")) == NULL) goto fail;
    if ((h->py_sys_failed = PyObject_GetAttrString(eng, "sys_handler_failed")) == NULL) goto fail;
    if ((h->deferred = PyObject_GetAttrString(eng, "deferred")) == NULL) goto fail;
    if ((h->delayed = PyObject_GetAttrString(eng, "delayed")) == NULL) goto fail;
    h->net_fd = -1;
    h->drain_lock = (LockObject *)PyObject_CallNoArgs((PyObject *)&Lock_Type);
    if (h->drain_lock == NULL) goto fail;
    h->lockfree = lockfree;
    clock_init(&h->clock);
    h->conduit_every = every;
    h->throttle = every > 0.0;
    if (h->T <= 0 || h->size <= 0) {
        PyErr_SetString(PyExc_ValueError, "bad engine shape");
        goto fail;
    }
    Py_ssize_t np = PySequence_Length(route);
    if (np < 0) goto fail;
    h->procs = (int)np;
    h->route = PyMem_Calloc(np, 1);
    h->proc_li = PyMem_Calloc(np, sizeof(int));
    h->slots = PyMem_Calloc(h->T, sizeof(Slot));
    if (h->route == NULL || h->proc_li == NULL || h->slots == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t p = 0; p < np; p++) {
        PyObject *it = PySequence_GetItem(route, p);
        if (it == NULL) goto fail;
        long r = PyLong_AsLong(it);
        Py_DECREF(it);
        if (r < 0 || r > 2) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad route");
            goto fail;
        }
        h->route[p] = (unsigned char)r;
        h->proc_li[p] = -1;
    }

    return (PyObject *)h;
fail:
    Py_DECREF(h);
    return NULL;
}

/* add_rank(t, rs, table, rank) */
static PyObject *
Hot_add_rank(HotObject *h, PyObject *args)
{
    int t;
    long rank;
    PyObject *rs, *table;
    if (!PyArg_ParseTuple(args, "iOOl", &t, &rs, &table, &rank)) {
        return NULL;
    }
    if (t < 0 || t >= h->T) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread");
        return NULL;
    }
    Slot *s = &h->slots[t];
    PyObject *fns = PyObject_GetAttrString(table, "fns"), *cats = PyObject_GetAttrString(table, "cats");
    PyObject *nargs = PyObject_GetAttrString(table, "nargs"), *names = PyObject_GetAttrString(table, "names");
    PyObject *by_fn = PyObject_GetAttrString(table, "by_fn");
    if (!fns || !cats || !nargs || !names || !by_fn || !PyList_CheckExact(fns)
            || !PyList_CheckExact(cats) || !PyList_CheckExact(nargs)
            || !PyList_CheckExact(names) || !PyDict_CheckExact(by_fn)) {
        Py_XDECREF(fns); Py_XDECREF(cats); Py_XDECREF(nargs); Py_XDECREF(names);
        Py_XDECREF(by_fn);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad handler table");
        return NULL;
    }
    Py_XSETREF(s->rs, Py_NewRef(rs));
    Py_XSETREF(s->fns, fns);
    Py_XSETREF(s->cats, cats);
    Py_XSETREF(s->nargs, nargs);
    Py_XSETREF(s->names, names);
    Py_XSETREF(s->by_fn, by_fn);
    Py_CLEAR(s->sysfns);  /* a new rank here: its extensions' ports register again */
    s->rank = rank;
    s->finalized = 0;
    for (int i = 0; i < 8; i++) {
        s->recent[i] = -1;
    }
    Py_RETURN_NONE;
}

static PyObject *
Hot_set_finalized(HotObject *h, PyObject *arg)
{
    long t = PyLong_AsLong(arg);
    if (t < 0 || t >= h->T) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad rank-thread");
        return NULL;
    }
    h->slots[t].finalized = 1;
    Py_RETURN_NONE;
}

/* pshm_init(procs, li, depth, slot, ent_off, slot_off, mine) */
static PyObject *
Hot_pshm_init(HotObject *h, PyObject *args)
{
    PyObject *procs, *mine;
    int li;
    long long depth, slot, ent_off, slot_off;
    if (!PyArg_ParseTuple(args, "OiLLLLO", &procs, &li, &depth, &slot, &ent_off, &slot_off,
                          &mine)) {
        return NULL;
    }
    if (h->n) {
        PyErr_SetString(PyExc_RuntimeError, "pshm_init called twice");
        return NULL;
    }
    Py_ssize_t n = PySequence_Length(procs);
    if (n < 0) return NULL;
    if (n < 2 || li < 0 || li >= n || depth < 2) {
        PyErr_SetString(PyExc_ValueError, "bad PSHM shape");
        return NULL;
    }
    h->bufs = PyMem_Calloc(n, sizeof(Py_buffer));
    h->out[0] = PyMem_Calloc(n, sizeof(OutQ));
    h->out[1] = PyMem_Calloc(n, sizeof(OutQ));
    h->ins = PyMem_Calloc(2 * (n - 1), sizeof(InQ));
    if (!h->bufs || !h->out[0] || !h->out[1] || !h->ins) {
        Hot_release_all(h);
        return PyErr_NoMemory();
    }
    h->n = (int)n;
    for (Py_ssize_t s = 0; s < n; s++) {
        PyObject *it = PySequence_GetItem(procs, s);
        if (it == NULL) goto fail;
        long p = PyLong_AsLong(it);
        Py_DECREF(it);
        if (p < 0 || p >= h->procs) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad process");
            goto fail;
        }
        h->proc_li[p] = (int)s;
    }
    if (PyObject_GetBuffer(mine, &h->bufs[li], PyBUF_WRITABLE) < 0) goto fail;
    h->li = li;
    h->depth = depth;
    h->slot = slot;
    char *base = h->bufs[li].buf;
    int k = 0;
    for (int kind = Q_REP; kind >= Q_REQ; kind--) {  /* replies first */
        for (int s = 0; s < n; s++) {
            if (s == li) continue;
            int qn = kind * (int)n + s;
            InQ *q = &h->ins[k++];
            q->tail_p = (int64_t *)(base + CTRL + qn * QHDR + 64);
            q->ents = ent_off + (Py_ssize_t)qn * depth * ENTRY;
            q->slots = slot_off + (Py_ssize_t)qn * depth * slot;
            q->tail = 0;
        }
        if (kind == Q_REP) h->nrep = k;
    }
    h->nins = k;
    /* the offsets of my queues in a peer's object are the same numbers: keep them */
    for (int kind = Q_REQ; kind <= Q_REP; kind++) {
        for (int s = 0; s < n; s++) {
            OutQ *o = &h->out[kind][s];
            int qn = kind * (int)n + li;
            o->ents = ent_off + (Py_ssize_t)qn * depth * ENTRY;
            o->slots = slot_off + (Py_ssize_t)qn * depth * slot;
            o->bell = -1;
            o->tail_p = (int64_t *)(intptr_t)(CTRL + qn * QHDR + 64);  /* an offset until mapped */
        }
    }
    Py_RETURN_NONE;
fail:
    Hot_release_all(h);
    return NULL;
}

/* pshm_peer(s, buffer, bell, locked) */
static PyObject *
Hot_pshm_peer(HotObject *h, PyObject *args)
{
    int s, bell, locked;
    PyObject *buf;
    if (!PyArg_ParseTuple(args, "iOip", &s, &buf, &bell, &locked)) {
        return NULL;
    }
    if (h->n == 0 || s < 0 || s >= h->n || s == h->li || h->bufs[s].obj != NULL) {
        PyErr_SetString(PyExc_ValueError, "bad PSHM peer");
        return NULL;
    }
    if (PyObject_GetBuffer(buf, &h->bufs[s], PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    char *base = h->bufs[s].buf;
    for (int kind = Q_REQ; kind <= Q_REP; kind++) {
        OutQ *o = &h->out[kind][s];
        o->base = base;
        o->tail_p = (int64_t *)(base + (intptr_t)o->tail_p);
        o->sleep_p = (int64_t *)base + W_SLEEP;
        o->bell = bell;
        if (kind == Q_REQ && locked) {
            o->lock = (LockObject *)PyObject_CallNoArgs((PyObject *)&Lock_Type);
            if (o->lock == NULL) return NULL;
        }
    }
    Py_RETURN_NONE;
}

/* set_segment(rank_on_node, buffer) */
static PyObject *
Hot_set_segment(HotObject *h, PyObject *args)
{
    int r, first, count;
    PyObject *buf;
    if (!PyArg_ParseTuple(args, "iiiO", &first, &count, &r, &buf)) {
        return NULL;
    }
    if (h->segs == NULL) {
        if (count <= 0) {
            PyErr_SetString(PyExc_ValueError, "bad node shape");
            return NULL;
        }
        h->segs = PyMem_Calloc(count, sizeof(char *));
        h->seg_bufs = PyMem_Calloc(count, sizeof(Py_buffer));
        if (h->segs == NULL || h->seg_bufs == NULL) return PyErr_NoMemory();
        h->node_first = first;
        h->node_ranks = count;
    }
    r -= h->node_first;
    if (r < 0 || r >= h->node_ranks || h->seg_bufs[r].obj != NULL) {
        PyErr_SetString(PyExc_ValueError, "bad segment rank");
        return NULL;
    }
    if (PyObject_GetBuffer(buf, &h->seg_bufs[r], PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    if (h->seg_bufs[r].len < h->seg_size) {
        PyBuffer_Release(&h->seg_bufs[r]);
        PyErr_SetString(PyExc_ValueError, "segment buffer too small");
        return NULL;
    }
    h->segs[r] = h->seg_bufs[r].buf;
    Py_RETURN_NONE;
}

/* pshm_send(proc, reply, header, payload, plen, eflags): the Python engine's sends. */
static PyObject *
Hot_pshm_send(HotObject *h, PyObject *args)
{
    int proc, reply;
    long long plen, eflags;
    Py_buffer hb, pb;
    PyObject *payload;
    if (!PyArg_ParseTuple(args, "ipy*OLL", &proc, &reply, &hb, &payload, &plen, &eflags)) {
        return NULL;
    }
    PyObject *res = NULL;
    pb.obj = NULL;
    pb.buf = NULL;
    if (proc < 0 || proc >= h->procs || h->proc_li[proc] < 0 || h->n == 0
            || h->proc_li[proc] == h->li || hb.len > ENTRY - HDR_AT) {
        PyErr_SetString(PyExc_ValueError, "bad PSHM destination or header");
        goto out;
    }
    if (payload != Py_None && !(eflags & E_DEPOSITED)) {
        if (PyObject_GetBuffer(payload, &pb, PyBUF_SIMPLE) < 0) goto out;
        if (plen > pb.len) {
            PyErr_SetString(PyExc_ValueError, "payload shorter than plen");
            goto out;
        }
    } else if (!(eflags & E_DEPOSITED)) {
        plen = -1;
    }
    if (pshm_send(h, reply, h->proc_li[proc], hb.buf, hb.len, pb.buf, plen, eflags) == 0) {
        res = Py_NewRef(Py_None);
    }
out:
    PyBuffer_Release(&hb);
    if (pb.obj != NULL) PyBuffer_Release(&pb);
    return res;
}

static PyObject *
Hot_drain(HotObject *h, PyObject *args)
{
    int reply_only = 0, budget = BUDGET;
    if (!PyArg_ParseTuple(args, "|pi", &reply_only, &budget)) {
        return NULL;
    }
    if (h->n == 0) {
        return PyLong_FromLong(0);
    }
    int n = drain_queues(h, 0, reply_only ? h->nrep : h->nins, budget);
    return n < 0 ? NULL : PyLong_FromLong(n);
}

static PyObject *
Hot_pending(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(h->n > 0 && has_pending(h));
}

static PyObject *
Hot_counts(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("KKKKK", (unsigned long long)h->sent, (unsigned long long)h->received,
                         (unsigned long long)h->full_waits, (unsigned long long)h->rings,
                         (unsigned long long)h->handled);
}

/* run_handler(t, fn, name, src, is_request, args, capture=False) */
static PyObject *
Hot_run_handler(HotObject *h, PyObject *args)
{
    int t, is_request, capture = 0;
    long src;
    PyObject *fn, *name, *cargs;
    if (!PyArg_ParseTuple(args, "iOOlpO!|p", &t, &fn, &name, &src, &is_request,
                          &PyTuple_Type, &cargs, &capture)) {
        return NULL;
    }
    if (t < 0 || t >= h->T || h->slots[t].rs == NULL) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread");
        return NULL;
    }
    return call_handler(h, t, fn, -1, name, src, is_request, &PyTuple_GET_ITEM(cargs, 0),
                        PyTuple_GET_SIZE(cargs), capture);
}

/* send(t, flags, dest, handler, payload, offset, args): the whole user send (tokens and
 * the Python API use it). */
static PyObject *
Hot_send(HotObject *h, PyObject *args)
{
    int t, flags;
    PyObject *dest, *handler, *payload, *offset, *cargs;
    if (!PyArg_ParseTuple(args, "iiOOOOO!", &t, &flags, &dest, &handler, &payload, &offset,
                          &PyTuple_Type, &cargs)) {
        return NULL;
    }
    if (t < 0 || t >= h->T || h->slots[t].rs == NULL) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread");
        return NULL;
    }
    if (send_user(h, t, flags, dest, handler, payload, offset, &PyTuple_GET_ITEM(cargs, 0),
                  PyTuple_GET_SIZE(cargs)) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* set_conduit_signal(fd, flag): see Conduit.idle_signal */
static PyObject *
Hot_set_conduit_signal(HotObject *h, PyObject *args)
{
    int fd;
    PyObject *flag;
    if (!PyArg_ParseTuple(args, "iO", &fd, &flag)) {
        return NULL;
    }
    if (h->idle_buf.obj != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the conduit signal is already set");
        return NULL;
    }
    if (PyObject_GetBuffer(flag, &h->idle_buf, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (h->idle_buf.len < 1 || fd < 0) {
        PyBuffer_Release(&h->idle_buf);
        PyErr_SetString(PyExc_ValueError, "bad conduit signal");
        return NULL;
    }
    h->net_fd = fd;
    Py_RETURN_NONE;
}

/* set_net_send(send): the conduit's send(proc, header, payload), which user AMs to other
 * nodes go through from here (None: through the engine's send_user) */
static PyObject *
Hot_set_net_send(HotObject *h, PyObject *arg)
{
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "set_net_send needs a callable or None");
        return NULL;
    }
    Py_XSETREF(h->net_send, arg == Py_None ? NULL : Py_NewRef(arg));
    Py_RETURN_NONE;
}

/* net_dispatch(header, payload): run one message the conduit brought, as the engine's
 * dispatch(header, payload) would: user Short and Medium AMs (and system Short AMs with a
 * fast handler) here, everything else (Long, puts, what is malformed: refused there) there. */
static PyObject *
Hot_net_dispatch(HotObject *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "net_dispatch(header, payload)");
        return NULL;
    }
    PyObject *hdr = args[0], *pl = args[1];
    int rc = 1;
    if (PyBytes_CheckExact(hdr) && h->slots != NULL && PyBytes_GET_SIZE(hdr) >= FIXED) {
        const unsigned char *hb = (const unsigned char *)PyBytes_AS_STRING(hdr);
        Py_ssize_t hl = PyBytes_GET_SIZE(hdr);
        if (pl == Py_None) {
            rc = fast_dispatch(h, hb, hl, NULL, -1, NULL);
        } else if (PyMemoryView_Check(pl) && !(hb[0] & F_SYSTEM)) {
            Py_buffer *b = PyMemoryView_GET_BUFFER(pl);
            if (PyBuffer_IsContiguous(b, 'C')) {
                rc = fast_dispatch(h, hb, hl, b->buf, b->len, pl);
            }
        }
    }
    if (rc < 0) {
        return NULL;
    }
    if (rc == 1) {
        return PyObject_Vectorcall(h->py_dispatch, args, 2, NULL);
    }
    Py_RETURN_NONE;
}

static PyObject *
Hot_set_spin(HotObject *h, PyObject *arg)
{
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    h->spin_s = v;
    Py_RETURN_NONE;
}


/* set_wake_fd(fd): the eventfd that nudge() writes while the drainer sleeps. The Hot object
 * owns it from then on and closes it when it goes (a late nudge of another thread never
 * writes into a descriptor reused meanwhile). */
static PyObject *
Hot_set_wake_fd(HotObject *h, PyObject *arg)
{
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (fd < 0 || __atomic_load_n(&h->wake_fd, __ATOMIC_ACQUIRE) >= 0) {
        PyErr_SetString(PyExc_ValueError, "set_wake_fd takes one descriptor, once");
        return NULL;
    }
    __atomic_store_n(&h->wake_fd, (int)fd, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

/* nudge(dest_t): after an in-line AM that ran a handler of rank-thread dest_t. */
static PyObject *
Hot_nudge(HotObject *h, PyObject *arg)
{
    long t = PyLong_AsLong(arg);
    if (t == -1 && PyErr_Occurred()) return NULL;
    if (nudge(h, 1, (int)t) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Hot_nudge_deferred(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    if (nudge(h, 0, -1) < 0) return NULL;
    Py_RETURN_NONE;
}

/* sleep_begin(pred, t): the drainer is about to sleep waiting for rank-thread t (-1: for
 * nothing of its own), on pred() when that is cheap and pure (else None); published before
 * the flag, which is set seq_cst: a thread that completes the wait afterwards sees the flag
 * and wakes it (nudge). */
static PyObject *
Hot_sleep_begin(HotObject *h, PyObject *args)
{
    PyObject *pred;
    int t;
    if (!PyArg_ParseTuple(args, "Oi", &pred, &t)) {
        return NULL;
    }
    Py_XSETREF(h->sleep_pred, pred == Py_None ? NULL : Py_NewRef(pred));
    __atomic_store_n(&h->sleep_slot, t, __ATOMIC_RELAXED);
    __atomic_store_n(&h->sleeping, 1, __ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

static PyObject *
Hot_sleep_end(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    __atomic_store_n(&h->sleeping, 0, __ATOMIC_SEQ_CST);
    Py_CLEAR(h->sleep_pred);
    Py_RETURN_NONE;
}


static PyObject *
Hot_get_drain_lock(HotObject *h, void *closure)
{
    return Py_NewRef((PyObject *)h->drain_lock);
}

static PyObject *
Hot_get_waiters(HotObject *h, void *closure)
{
    return PyLong_FromLong(__atomic_load_n(&h->waiters, __ATOMIC_RELAXED));
}

static int
Hot_set_waiters(HotObject *h, PyObject *v, void *closure)
{
    long n = v == NULL ? -1 : PyLong_AsLong(v);
    if (n < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "waiters must be >= 0");
        return -1;
    }
    __atomic_store_n(&h->waiters, (int)n, __ATOMIC_RELAXED);
    return 0;
}

static PyObject *
Hot_get_handled(HotObject *h, void *closure)
{
    return PyLong_FromUnsignedLongLong(h->handled);
}

static PyMethodDef Hot_methods[] = {
    {"add_rank", (PyCFunction)Hot_add_rank, METH_VARARGS, NULL},
    {"set_finalized", (PyCFunction)Hot_set_finalized, METH_O, NULL},
    {"pshm_init", (PyCFunction)Hot_pshm_init, METH_VARARGS, NULL},
    {"pshm_peer", (PyCFunction)Hot_pshm_peer, METH_VARARGS, NULL},
    {"set_segment", (PyCFunction)Hot_set_segment, METH_VARARGS, NULL},
    {"pshm_send", (PyCFunction)Hot_pshm_send, METH_VARARGS, NULL},
    {"drain", (PyCFunction)Hot_drain, METH_VARARGS, NULL},
    {"pending", (PyCFunction)Hot_pending, METH_NOARGS, NULL},
    {"counts", (PyCFunction)Hot_counts, METH_NOARGS, NULL},
    {"run_handler", (PyCFunction)Hot_run_handler, METH_VARARGS, NULL},
    {"send", (PyCFunction)Hot_send, METH_VARARGS, NULL},
    {"set_spin", (PyCFunction)Hot_set_spin, METH_O, NULL},
    {"set_wake_fd", (PyCFunction)Hot_set_wake_fd, METH_O, NULL},
    {"nudge", (PyCFunction)Hot_nudge, METH_O,
     "nudge(t): after an in-line AM to rank-thread t: wake the sleeping drainer if its wait "
     "may now be satisfied, and the threads waiting on it."},
    {"nudge_deferred", (PyCFunction)Hot_nudge_deferred, METH_NOARGS,
     "After work was deferred: wake the threads waiting on the drainer and the sleeping "
     "drainer (it is to send it)."},
    {"sleep_begin", (PyCFunction)Hot_sleep_begin, METH_VARARGS, NULL},
    {"sleep_end", (PyCFunction)Hot_sleep_end, METH_NOARGS, NULL},
    {"set_net_send", (PyCFunction)Hot_set_net_send, METH_O, NULL},
    {"net_dispatch", (PyCFunction)(void (*)(void))Hot_net_dispatch, METH_FASTCALL, NULL},
    {"set_conduit_signal", (PyCFunction)Hot_set_conduit_signal, METH_VARARGS, NULL},
    {"sys_sender", (PyCFunction)Hot_sys_sender, METH_VARARGS, NULL},
    {"set_sys_handler", (PyCFunction)Hot_set_sys_handler, METH_VARARGS, NULL},
    {"wait_until", (PyCFunction)(void (*)(void))Hot_wait_until, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Hot_getset[] = {
    {"drain_lock", (getter)Hot_get_drain_lock, NULL, NULL, NULL},
    {"handled", (getter)Hot_get_handled, NULL, NULL, NULL},
    {"waiters", (getter)Hot_get_waiters, (setter)Hot_set_waiters,
     "Threads of the Python wait loop sleeping until the drainer makes progress (changed "
     "under the engine's cond).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Hot_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amnet.core._hot.Hot",
    .tp_basicsize = sizeof(HotObject),
    .tp_dealloc = (destructor)Hot_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C half of one process's AM engine (see the module docstring).",
    .tp_traverse = (traverseproc)Hot_traverse,
    .tp_clear = (inquiry)Hot_clear,
    .tp_methods = Hot_methods,
    .tp_getset = Hot_getset,
    .tp_new = Hot_new,
};

/* ------------------------------------------------------------------------------------ */
/* Token                                                                                  */

static int
token_check(TokenObject *tok, const char *what)
{
    if (!tok->live) {
        PyObject *nm = token_name(tok);
        PyErr_Format(AMContextError, "token.%s() after handler %S returned; a reply must be "
                     "sent from inside the request handler", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (!tok->is_request) {
        PyObject *nm = token_name(tok);
        PyErr_Format(AMContextError, "token.%s() in reply handler %S: a reply handler sends "
                     "nothing", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (tok->replied) {
        PyObject *nm = token_name(tok);
        PyErr_Format(AMContextError, "token.%s(): request handler %S already replied; a "
                     "request handler replies at most once", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (tok->thread != PyThread_get_thread_ident()
            || PyThread_tss_get(&cur_token) != (void *)tok) {
        PyObject *nm = token_name(tok);
        PyErr_Format(AMContextError, "token.%s() from another thread than the one running "
                     "handler %S", what, nm);
        Py_XDECREF(nm);
        return -1;
    }
    if (tok->hot->slots == NULL || tok->hot->py_send == NULL) {
        PyErr_SetString(AMContextError, "the engine of this token is closed");
        return -1;
    }
    return 0;
}

static PyObject *
token_reply(TokenObject *tok, int cat, const char *what, PyObject *const *args,
            Py_ssize_t nargs, Py_ssize_t fixed)
{
    if (token_check(tok, what) < 0) {
        return NULL;
    }
    if (nargs < fixed) {
        PyErr_Format(PyExc_TypeError, "token.%s() needs %zd positional arguments, got %zd",
                     what, fixed, nargs);
        return NULL;
    }
    PyObject *src = PyLong_FromLong(tok->source);
    if (src == NULL) {
        return NULL;
    }
    PyObject *payload = fixed >= 2 ? args[1] : Py_None;
    PyObject *zero = PyLong_FromLong(0);
    PyObject *offset = fixed >= 3 ? args[2] : zero;
    int rc = send_user(tok->hot, tok->t, cat | F_REPLY, src, args[0], payload, offset,
                       args + fixed, nargs - fixed);
    Py_DECREF(src);
    Py_DECREF(zero);
    if (rc < 0) {
        return NULL;
    }
    tok->replied = 1;
    Py_RETURN_NONE;
}

static PyObject *
Token_reply_short(TokenObject *tok, PyObject *const *args, Py_ssize_t nargs)
{
    return token_reply(tok, C_SHORT, "reply_short", args, nargs, 1);
}

static PyObject *
Token_reply_medium(TokenObject *tok, PyObject *const *args, Py_ssize_t nargs)
{
    return token_reply(tok, C_MEDIUM, "reply_medium", args, nargs, 2);
}

static PyObject *
Token_reply_long(TokenObject *tok, PyObject *const *args, Py_ssize_t nargs)
{
    return token_reply(tok, C_LONG, "reply_long", args, nargs, 3);
}

static PyObject *
Token_repr(TokenObject *tok)
{
    PyObject *nm = token_name(tok);
    if (nm == NULL) return NULL;
    PyObject *r = PyUnicode_FromFormat("<amnet.Token %s %S from rank %ld>",
                                       tok->is_request ? "request" : "reply", nm, tok->source);
    Py_DECREF(nm);
    return r;
}

static PyObject *
Token_get_rank(TokenObject *tok, void *c)
{
    return PyLong_FromLong(tok->hot->slots != NULL ? tok->hot->slots[tok->t].rank : -1);
}

static PyObject *
Token_get_source(TokenObject *tok, void *c)
{
    return PyLong_FromLong(tok->source);
}

static PyObject *
Token_get_is_request(TokenObject *tok, void *c)
{
    return PyBool_FromLong(tok->is_request);
}

static PyObject *
Token_get_handler(TokenObject *tok, void *c)
{
    return token_name(tok);
}

/* The Endpoint of the rank the AM was sent to. Made before the rank could be reached (see
 * Engine.add_rank), so it is there even while that rank-thread is still in amnet.init(). */
static PyObject *
Token_get_endpoint(TokenObject *tok, void *c)
{
    PyObject *rs = tok->hot->slots != NULL ? tok->hot->slots[tok->t].rs : NULL;
    PyObject *ep = rs != NULL ? PyObject_GetAttrString(rs, "endpoint") : NULL;
    if (ep == NULL || ep == Py_None) {
        Py_XDECREF(ep);
        PyErr_Clear();
        PyErr_SetString(InitError, "this token's rank has no endpoint (its engine is closed)");
        return NULL;
    }
    return ep;
}

static PyMethodDef Token_methods[] = {
    {"reply_short", (PyCFunction)(void (*)(void))Token_reply_short, METH_FASTCALL,
     "reply_short($self, handler, /, *args)\n--\n\n"
     "Send a Short reply to ``token.source``.\n\n"
     "Raises:\n    AMContextError: not in a request handler, or it already replied.\n"
     "    HandlerNotRegistered / HandlerCategoryError / AMArgumentError: bad handler or args."},
    {"reply_medium", (PyCFunction)(void (*)(void))Token_reply_medium, METH_FASTCALL,
     "reply_medium($self, handler, payload, /, *args)\n--\n\n"
     "Send a Medium reply (payload of at most ``ep.max_medium`` bytes) to the source; the "
     "payload may be reused as soon as the call returns.\n\n"
     "Raises: as :meth:`reply_short`, plus PayloadTooLarge."},
    {"reply_long", (PyCFunction)(void (*)(void))Token_reply_long, METH_FASTCALL,
     "reply_long($self, handler, payload, dest_offset, /, *args)\n--\n\n"
     "Send a Long reply: ``payload`` lands at ``dest_offset`` in the source's segment.\n\n"
     "Raises: as :meth:`reply_short`, plus SegmentBoundsError."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
Token_get_replied(TokenObject *tok, void *c)
{
    return PyBool_FromLong(tok->replied);
}

static int
Token_set_replied(TokenObject *tok, PyObject *v, void *c)
{
    int b = v == NULL ? 0 : PyObject_IsTrue(v);
    if (b < 0) {
        return -1;
    }
    tok->replied = (char)b;
    return 0;
}

static PyObject *
Token_get_live(TokenObject *tok, void *c)
{
    return PyBool_FromLong(tok->live);
}

static PyGetSetDef Token_getset[] = {
    {"_live", (getter)Token_get_live, NULL,
     "Whether its handler is still running (the engine holds back what it deferred).", NULL},
    {"_replied", (getter)Token_get_replied, (setter)Token_set_replied,
     "Whether the handler replied (amnet's rpc sets it: the system sends the reply).", NULL},
    {"rank", (getter)Token_get_rank, NULL,
     "The rank the AM was sent to (the one whose handler runs).", NULL},
    {"source", (getter)Token_get_source, NULL, "The rank that sent the AM.", NULL},
    {"is_request", (getter)Token_get_is_request, NULL,
     "True in a request handler, False in a reply handler.", NULL},
    {"handler", (getter)Token_get_handler, NULL, "The running handler's name.", NULL},
    {"endpoint", (getter)Token_get_endpoint, NULL,
     "The Endpoint of the rank the AM was sent to (``token.rank``): what a handler uses to "
     "reach its rank (segment, handlers, rank numbers). Safe even while that rank-thread is "
     "still in amnet.init(), where a script's global ``ep`` may not be set yet.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Token_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amnet.Token",
    .tp_basicsize = sizeof(TokenObject),
    .tp_dealloc = (destructor)Token_dealloc,
    .tp_repr = (reprfunc)Token_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Handed to a handler: who sent the AM and how to reply. Valid only during the "
              "call; made by amnet, never by the user.",
    .tp_methods = Token_methods,
    .tp_getset = Token_getset,
};

/* ------------------------------------------------------------------------------------ */
/* EndpointBase: the entry points of amnet.Endpoint that a round trip goes through        */

typedef struct {
    PyObject_HEAD
    HotObject *hot;
    PyObject *py;                    /* the Python methods' home: AMMixin/ExtendedMixin */
    int t;
} EPObject;

static void
EP_dealloc(EPObject *ep)
{
    PyObject_GC_UnTrack(ep);
    Py_CLEAR(ep->hot);
    Py_TYPE(ep)->tp_free((PyObject *)ep);
}

static int
EP_traverse(EPObject *ep, visitproc visit, void *arg)
{
    Py_VISIT(ep->hot);
    return 0;
}

static int
EP_clear(EPObject *ep)
{
    Py_CLEAR(ep->hot);
    return 0;
}

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
    PyObject *nm = token_name(tok);
    if (send) {
        /* the engine's words (set_errors), as its forbid_send_in_handler says them */
        PyErr_Format(AMContextError, "%s inside %s handler %S%S", what,
                     tok->is_request ? "request" : "reply", nm,
                     tok->is_request ? ForwardHint : ReplyHint);
    } else {
        PyErr_Format(AMContextError, "%s inside %s handler %S: handlers run in a restricted "
                     "context (no polling, waiting, barriers or blocking communication)", what,
                     tok->is_request ? "request" : "reply", nm);
    }
    Py_XDECREF(nm);
    return -1;
}

static PyObject *
ep_request(EPObject *ep, int cat, const char *what, PyObject *const *args, Py_ssize_t nargs,
           Py_ssize_t fixed)
{
    if (ep_live(ep) < 0 || forbid(what, 1) < 0) {
        return NULL;
    }
    if (nargs < fixed) {
        PyErr_Format(PyExc_TypeError, "%s needs %zd positional arguments, got %zd", what,
                     fixed, nargs);
        return NULL;
    }
    HotObject *h = ep->hot;
    PyObject *zero = PyLong_FromLong(0);
    int rc = send_user(h, ep->t, cat, args[0], args[1], fixed >= 3 ? args[2] : Py_None,
                       fixed >= 4 ? args[3] : zero, args + fixed, nargs - fixed);
    Py_DECREF(zero);
    if (rc < 0 || poll_once(h, Py_None) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
EP_request_short(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    return ep_request(ep, C_SHORT, "ep.request_short()", args, nargs, 2);
}

static PyObject *
EP_request_medium(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    return ep_request(ep, C_MEDIUM, "ep.request_medium()", args, nargs, 3);
}

static PyObject *
EP_request_long(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    return ep_request(ep, C_LONG, "ep.request_long()", args, nargs, 4);
}

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
    return wait_until(ep->hot, pred, timeout);
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
        Py_RETURN_NONE;
    }
    return slow_call(ep, "_put_slow", args, nargs, kwnames);
}

/* put_nbi(dest, offset, data, *, bulk=False): within the node complete at once (a copy,
 * as the Python route does there), else the Python put_nbi (_put_nbi_slow). */
static PyObject *
EP_put_nbi(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int plain = kwnames == NULL
        || (PyTuple_GET_SIZE(kwnames) == 1
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "bulk") == 0
            && (args[nargs] == Py_True || args[nargs] == Py_False));
    if (nargs == 3 && plain && local_put(ep, args[0], args[1], args[2])) {
        Py_RETURN_NONE;
    }
    return slow_call(ep, "_put_nbi_slow", args, nargs, kwnames);
}

static PyObject *
EP_get(EPObject *ep, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if ((nargs == 3 || nargs == 4) && kwnames == NULL) {
        PyObject *r = local_get(ep, args[0], args[1], args[2], nargs == 4 ? args[3] : Py_None);
        if (r != NULL) return r;
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
            Py_RETURN_NONE;
        }
        if (PyErr_Occurred()) return NULL;
    }
    return slow_call(ep, "_get_nbi_slow", args, nargs, kwnames);
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
    if (r != NULL) return r;
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

static PyObject *
EP_put_symmetric(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    char *mine, *theirs;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "put_symmetric(dest, local, data) takes 3 arguments");
        return NULL;
    }
    if (!symmetric_base(ep, args[0], &mine, &theirs)) Py_RETURN_FALSE;
    Py_buffer lb, db;
    if (PyObject_GetBuffer(args[1], &lb, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (PyObject_GetBuffer(args[2], &db, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&lb);
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int64_t size = ep->hot->seg_size;
    char *at = lb.buf;
    int ok = at >= mine && lb.len <= size && at - mine <= size - lb.len && db.len <= lb.len;
    if (ok) memcpy(theirs + (at - mine), db.buf, db.len);
    PyBuffer_Release(&db);
    PyBuffer_Release(&lb);
    return PyBool_FromLong(ok);
}

static PyObject *
EP_get_symmetric(EPObject *ep, PyObject *const *args, Py_ssize_t nargs)
{
    char *mine, *theirs;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "get_symmetric(src, local, out) takes 3 arguments");
        return NULL;
    }
    if (!symmetric_base(ep, args[0], &mine, &theirs)) Py_RETURN_FALSE;
    Py_buffer lb, ob;
    if (PyObject_GetBuffer(args[1], &lb, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (PyObject_GetBuffer(args[2], &ob, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&lb);
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int64_t size = ep->hot->seg_size;
    char *at = lb.buf;
    int ok = at >= mine && lb.len <= size && at - mine <= size - lb.len && ob.len >= lb.len;
    if (ok) memcpy(ob.buf, theirs + (at - mine), lb.len);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&lb);
    return PyBool_FromLong(ok);
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

static PyTypeObject EndpointBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amnet.core._hot.EndpointBase",
    .tp_basicsize = sizeof(EPObject),
    .tp_dealloc = (destructor)EP_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C entry points of amnet.Endpoint (the AM round trip and node-local "
              "put/get).",
    .tp_traverse = (traverseproc)EP_traverse,
    .tp_clear = (inquiry)EP_clear,
    .tp_methods = EP_methods,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------ */
/* module                                                                                 */

static PyObject *
current_token(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    PyObject *tok = PyThread_tss_get(&cur_token);
    return Py_NewRef(tok != NULL ? tok : Py_None);
}

static PyObject *
set_errors(PyObject *m, PyObject *args)
{
    PyObject *a, *b, *c, *d;
    if (!PyArg_ParseTuple(args, "OOUU", &a, &b, &c, &d)) {
        return NULL;
    }
    Py_XSETREF(InitError, Py_NewRef(a));
    Py_XSETREF(AMContextError, Py_NewRef(b));
    Py_XSETREF(ForwardHint, Py_NewRef(c));
    Py_XSETREF(ReplyHint, Py_NewRef(d));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"current_token", current_token, METH_NOARGS,
     "current_token() -> Token | None: the token of the handler running on this thread."},
    {"set_errors", set_errors, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hot_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "amnet.core._hot",
    .m_doc = "The AM engine's hot path (see the C source's header).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__hot(void)
{
    if (PyThread_tss_create(&cur_token) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot create the token key");
        return NULL;
    }
    InitError = Py_NewRef(PyExc_RuntimeError);
    AMContextError = Py_NewRef(PyExc_RuntimeError);
    ForwardHint = PyUnicode_FromString("");
    ReplyHint = PyUnicode_FromString("");
    if (ForwardHint == NULL || ReplyHint == NULL) {
        return NULL;
    }
    if (PyType_Ready(&Lock_Type) < 0 || PyType_Ready(&Hot_Type) < 0
            || PyType_Ready(&Token_Type) < 0 || PyType_Ready(&EndpointBase_Type) < 0
            || PyType_Ready(&SysSender_Type) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&hot_module);
    if (m == NULL) {
        return NULL;
    }
#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030D0000
    PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
    if (PyModule_AddObjectRef(m, "Lock", (PyObject *)&Lock_Type) < 0
            || PyModule_AddObjectRef(m, "Hot", (PyObject *)&Hot_Type) < 0
            || PyModule_AddObjectRef(m, "Token", (PyObject *)&Token_Type) < 0
            || PyModule_AddObjectRef(m, "EndpointBase", (PyObject *)&EndpointBase_Type) < 0
            || PyModule_AddIntConstant(m, "MAX_ARGS", MAX_ARGS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
