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
 * arguments and their errors) goes to the Python engine (amnet/core/_engine.py and the files
 * of its parts: _send.py, _dispatch.py, _progress.py, as this extension's), which stays
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
 * (Py_GIL_DISABLED) the same locks protect the same state, and what the GIL used to make
 * atomic is made so here ("Free threading" below: the handler tables, counters, set-up).
 *
 * The progress rules of both wait loops have their one owner here: how many messages a drain
 * runs (BUDGET), when a spinning thread gives its core away (hot_idle, YIELD_EVERY) and how
 * often an idle conduit is looked at (conduit_due); the engine's Python loop calls them
 * (Hot.idle, Hot.conduit_due) and reads the constants from the module.
 *
 * The sources, one extension (setup.py lists them); this header is their one internal
 * interface (the shared structs, the small helpers inlined on the hot path, and what one file
 * calls in another, with hidden visibility: the module exports only PyInit__hot):
 *   _hot.c           the module: its state (the exceptions, the current token), PyInit__hot
 *   _hot_lock.c      the Lock type (the drain lock, the request queues' producer locks)
 *   _hot_queue.c     the queues: a token's creation and the handler call, sending (in-line,
 *                    into a queue, to the conduit), receiving (dispatch, fragments, drain)
 *   _hot_progress.c  progress: draining queues and conduit, polling, the wait loop; the
 *                    system senders (SysSender)
 *   _hot_engine.c    the Hot type: set-up (ranks, pshm, segments, the conduit's route), its
 *                    methods for the Python engine
 *   _hot_token.c     the Token type (reply_*, its attributes)
 *   _hot_ep.c        EndpointBase: request_*, poll, wait_until, put/get (and _nbi), atomics,
 *                    the symmetric forms, segment_offset
 * Their Python twins: sending _send.py (_hot_queue.c's send, _hot_ep.c), receiving
 * _dispatch.py (_hot_queue.c's dispatch, _hot_token.c), progress _progress.py
 * (_hot_progress.c); set-up _engine.py (_hot_engine.c), which hands C its HotHooks.
 *
 * The mpi conduit's envelopes in C (MPIRing) are an extension of their own, with the conduit
 * (amnet/conduits/_mpiring.c).
 */

#ifndef AMNET_CORE_HOT_H
#define AMNET_CORE_HOT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_c/pyext.h"  /* what amnet's extensions share: type shapes, discard */

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

/* The wire format's numbers and the routes: written here only; amnet/core/_wire.py takes
 * them from the module (HOT_CONSTANTS) and checks its struct formats against FIXED. */
enum { R_INLINE = 0, R_PSHM = 1, R_NET = 2 };
enum { C_SHORT = 0, C_MEDIUM = 1, C_LONG = 2, CAT_MASK = 3, F_REPLY = 4, F_SYSTEM = 8,
       F_KNOWN = 15 };
#define MAX_ARGS 16
#define FIXED 20
#include "../pshm/_queue.h"  /* a queue entry's layout (Q_*, E_*, ENTRY, HDR_AT) */
#define BUDGET 256       /* messages one drain runs before its caller re-checks its condition */
#define YIELD_EVERY 256  /* a spinning rank gives its core away after this many empty polls */

/* name, value: the constants the module exports (_hot.c), for the Python that needs them */
#define HOT_CONSTANTS(X) \
    X("INLINE", R_INLINE) X("PSHM", R_PSHM) X("NET", R_NET) \
    X("SHORT", C_SHORT) X("MEDIUM", C_MEDIUM) X("LONG", C_LONG) X("CATEGORY_MASK", CAT_MASK) \
    X("REPLY", F_REPLY) X("SYSTEM", F_SYSTEM) X("KNOWN_FLAGS", F_KNOWN) \
    X("MAX_ARGS", MAX_ARGS) X("FIXED_SIZE", FIXED) \
    X("DRAIN_BUDGET", BUDGET) X("YIELD_EVERY", YIELD_EVERY)

static inline double
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

/* ------------------------------------------------------------------------------------ */
/* Free threading. With the GIL (3.11, 3.12, and 3.13+ default builds) a C function that calls
 * no Python code runs without interruption; free-threaded (Py_GIL_DISABLED) it does not, so:
 * the handler tables, which a rank's Python code appends to while other threads dispatch to
 * it, are read through new references (list_ref, dict_ref: a list's item array may be
 * replaced meanwhile); counters that several threads bump are atomic (count); what set-up
 * writes once is published under a critical section on the Hot object. The shims give 3.11
 * and 3.12 the same calls. */

#if PY_VERSION_HEX < 0x030D0000
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* item i of list l as a new reference; NULL (no error set) when i is out of range */
static inline PyObject *
list_ref(PyObject *l, Py_ssize_t i)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *v = PyList_GetItemRef(l, i);
#else
    PyObject *v = Py_XNewRef(PyList_GetItem(l, i));
#endif
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* d[k] as a new reference; NULL (no error set) when absent or on error */
static inline PyObject *
dict_ref(PyObject *d, PyObject *k)
{
    PyObject *v = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyDict_GetItemRef(d, k, &v) < 0) {
        PyErr_Clear();
    }
#else
    v = Py_XNewRef(PyDict_GetItemWithError(d, k));
    if (v == NULL) {
        PyErr_Clear();
    }
#endif
    return v;
}

/* a statistic several threads bump by n: an atomic add (relaxed: it orders nothing) where
 * they run at once; with the GIL, which serializes every caller here, a plain one (a locked
 * add on every message would be a cost for nothing) */
static inline void
count_n(uint64_t *c, uint64_t n)
{
#ifdef Py_GIL_DISABLED
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
#else
    *c += n;
#endif
}

static inline void
count(uint64_t *c)
{
    count_n(c, 1);
}

static inline uint64_t
count_of(uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------------------ */
/* Lock: a plain mutex usable from C without a method call; the GIL is let go while a
 * blocking acquire waits (the holder may need it to finish).                           */

typedef struct {
    PyObject_HEAD
    int held;                        /* taken with one compare-and-swap */
    int waiters;                     /* threads sleeping in lock_wait */
    unsigned long owner;             /* the holder's thread ident, 0: none (lock_mine) */
    pthread_mutex_t m;
    pthread_cond_t c;
} LockObject;

static inline int
lock_try(LockObject *l)
{
    int zero = 0;
    if (!__atomic_compare_exchange_n(&l->held, &zero, 1, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED)) {
        return 0;
    }
    __atomic_store_n(&l->owner, PyThread_get_thread_ident(), __ATOMIC_RELAXED);
    return 1;
}

/* Whether the calling thread holds the lock. Only a holder stores its own ident, and it
 * clears it before letting go, so a thread reads its own ident here only while it holds
 * the lock (relaxed: its own stores are ordered for it). */
static inline int
lock_mine(LockObject *l)
{
    return __atomic_load_n(&l->owner, __ATOMIC_RELAXED) == PyThread_get_thread_ident();
}

static inline void
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
    __atomic_store_n(&l->owner, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&l->held, 0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&l->waiters, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&l->m);
        pthread_cond_signal(&l->c);
        pthread_mutex_unlock(&l->m);
    }
}

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

/* a slot's RankState, or NULL before add_rank: add_rank stores it last, with release, so a
 * thread that sees it also sees the slot's tables */
static inline PyObject *
slot_rs(const Slot *s)
{
    return __atomic_load_n(&s->rs, __ATOMIC_ACQUIRE);
}

typedef struct TokenObject TokenObject;

typedef struct {
    PyObject_HEAD
    /* the engine's HotHooks (amnet/core/_engine.py), owned; the callbacks below are borrowed
     * from it (a tuple: they live as long as it does) */
    PyObject *hooks;
    PyObject *py_send, *py_dispatch, *py_queue_full, *py_failed, *py_net, *py_wait;
    PyObject *py_deferred, *py_wake, *deferred, *delayed, *py_refuse, *py_sys_failed;
    PyObject *py_abort_error;
    PyObject *eng;                   /* the engine, for the Handles C makes */
    PyObject *net_send;              /* the conduit's send(proc, header, payload); NULL: none */
    PyObject *net_recv;              /* its recv() -> (header, payload) | None; NULL: the engine's */
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
    Py_ssize_t sleep_at;             /* byte offset of a peer's sleeping flag (the layout's) */
    Py_buffer *bufs;                 /* the node's objects, mine at li */
    OutQ *out[2];
    InQ *ins;                        /* replies first */
    /* node-local segments, by rank - node_first (NULL: not addressable) */
    int node_first, node_ranks;
    char **segs;
    Py_buffer *seg_bufs;
    double conduit_every, spin_s;
    Clock clock;
    int waiters;                     /* threads of the Python wait loop sleeping on the drainer */
    int sleeping;                    /* the drainer blocks in a receive (Engine._block) */
    int nudged;                      /* its wake_fd was written since that sleep began */
    int wake_fd;                     /* eventfd that ends its sleep (-1: none) */
    PyObject *sleep_pred;            /* its wait's condition when cheap and pure, else NULL */
    int sleep_slot;                  /* the rank-thread it waits for (-1: none of its own) */
    Slot *slots;
    TokenObject *spare[4];           /* tokens to reuse (in-line AMs nest two deep) */
    int nspare;
    /* what threads write as they go, on cache lines of their own: free-threaded, a sibling
     * spinning on the fields above would otherwise lose its line at every write */
    char pad0[64];
    uint64_t sent, received, rings, full_waits, handled;  /* statistics: atomic (count) */
    double conduit_at;               /* when the conduit was last looked at: atomic (conduit_due) */
    unsigned long empty;             /* the Python wait loop's empty polls (hot_idle) */
    char pad1[64];
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

/* ------------------------------------------------------------------------------------ */
/* between the files: hidden, so that calls stay direct (no PLT, no interposition)       */

#pragma GCC visibility push(hidden)

/* the module's state, defined in _hot.c: the amnet exceptions, the current token of each
 * thread */
extern PyObject *InitError, *AMContextError;
/* what a handler is told when it sends anything but its one reply (set_errors: the engine's
 * FORWARD_HINT and REPLY_HINT, so that C and Python say the same words) */
extern PyObject *ForwardHint, *ReplyHint, *RestrictedHint;
extern Py_tss_t cur_token;
/* amnet.core._ops's Handle and Done classes, the kinds "get" and "put", and DONE (set_handles):
 * what get_nb and put_nb return when the copy happened at once within the node */
extern PyObject *HandleClass, *DoneClass, *DoneObj, *KindGet, *KindPut;
/* the offsets of Handle's slots _eng, _op, kind and Done's value: made without __init__ */
extern Py_ssize_t HandleSlots[3], DoneSlot;

/* the types (each in its file; _hot.c readies them) */
extern PyTypeObject Lock_Type, Hot_Type, Token_Type, EndpointBase_Type, SysSender_Type;

/* _hot_queue.c */
PyObject *hot_call_handler(HotObject *h, int t, PyObject *fn, int hidx, PyObject *name,
                           long src, int is_request, PyObject *const *args, Py_ssize_t nargs,
                           int capture);
int hot_wake_ranks(HotObject *h, PyObject *ranks);
int hot_pshm_send(HotObject *h, int reply, int s, const unsigned char *hdr, Py_ssize_t hl,
                  const char *payload, int64_t plen, int64_t eflags);
int hot_queue_send(HotObject *h, int reply, int proc, int flags, Py_ssize_t nargs,
                   Py_ssize_t hidx, long src, long dest, const int64_t *a, PyObject *payload,
                   int64_t max);
int hot_send_user(HotObject *h, int t, int flags, PyObject *dest, PyObject *handler,
                  PyObject *payload, PyObject *offset, PyObject *const *args, Py_ssize_t nargs);
int hot_fast_dispatch(HotObject *h, const unsigned char *hdr, int64_t hl, char *payload,
                      int64_t plen, PyObject *pobj);
int hot_drain_queues(HotObject *h, int from, int to, int budget);
int hot_has_pending(HotObject *h);

/* _hot_progress.c */
int hot_net_dispatch(HotObject *h, PyObject *const *msg);
int hot_drain_net(HotObject *h, PyObject *pred);
void hot_clock_init(Clock *c);
int hot_poll_core(HotObject *h, PyObject *pred, double now);
PyObject *hot_wait_until(HotObject *h, PyObject *pred, PyObject *timeout);
PyObject *Hot_sys_sender(HotObject *h, PyObject *args);

/* _hot_token.c */
PyObject *hot_token_name(TokenObject *tok);

#pragma GCC visibility pop

/* ------------------------------------------------------------------------------------ */
/* small helpers of the hot path that several files call: inline wherever they are used */

static inline int
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

/* What ep.request_* and token.reply_* share (_hot_ep.c, _hot_token.c): the method of each
 * category, one line each (HOT_AM_METHOD: prefix##name(self, args, nargs) calls
 * send(self, cat, "obj.name()", args, nargs, fixed), send being ep_request or token_reply);
 * the count of their positional arguments checked (at least `fixed`: `what` names the call
 * when fewer); and the AM sent to `dest` from the AM's own arguments: its handler, then its
 * payload (Medium and Long: k >= 2) and offset (Long: k == 3), k of them in all, then its
 * args. */
#define HOT_AM_METHOD(prefix, Obj, obj, name, send, cat, fixed)                           \
    static PyObject *                                                                     \
    prefix##name(Obj *self, PyObject *const *args, Py_ssize_t nargs)                      \
    {                                                                                     \
        return send(self, cat, obj "." #name "()", args, nargs, fixed);                   \
    }

static inline int
enough_args(const char *what, Py_ssize_t nargs, Py_ssize_t fixed)
{
    if (nargs < fixed) {
        PyErr_Format(PyExc_TypeError, "%s needs %zd positional arguments, got %zd", what,
                     fixed, nargs);
        return -1;
    }
    return 0;
}

static inline int
send_am_args(HotObject *h, int t, int flags, PyObject *dest, PyObject *const *am,
             Py_ssize_t n, Py_ssize_t k)
{
    PyObject *zero = PyLong_FromLong(0);
    int rc = hot_send_user(h, t, flags, dest, am[0], k >= 2 ? am[1] : Py_None,
                           k >= 3 ? am[2] : zero, am + k, n - k);
    Py_DECREF(zero);
    return rc;
}

/* Whether the calling thread is inside a drain of this process (it holds the drain lock):
 * a poll from there (a system handler's or a wait condition's node-local atomic, an
 * ep.poll() in a condition) neither drains again nor runs deferred work, which sends and
 * may block (a full queue, a sibling's barrier lock) while the process cannot drain. */
static inline int
in_drain(HotObject *h)
{
    return !h->lockfree && lock_mine(h->drain_lock);
}

static inline int
run_deferred(HotObject *h)
{
    if (in_drain(h)) {
        return 0;
    }
    if (PyObject_Length(h->deferred) <= 0) {
        PyErr_Clear();
        return 0;
    }
    return discard(PyObject_CallNoArgs(h->py_deferred));
}

/* After a drain (not lock-free): wake the threads waiting on the drainer, if any. */
static inline int
wake_waiters(HotObject *h)
{
    if (__atomic_load_n(&h->waiters, __ATOMIC_RELAXED) <= 0) {
        return 0;
    }
    return discard(PyObject_CallNoArgs(h->py_wake));
}

static inline int
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
static inline int
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
            if (wake) {
                /* a reference of our own, taken where sleep_begin/sleep_end swap it (a
                 * critical section on h; with the GIL, the GIL): the sleeper may end its
                 * sleep and drop it while we call it */
                PyObject *p;
                Py_BEGIN_CRITICAL_SECTION(h);
                p = Py_XNewRef(h->sleep_pred);
                Py_END_CRITICAL_SECTION();
                if (p != NULL) {
                    wake = pred_true(p);
                    Py_DECREF(p);
                    if (wake < 0) {
                        PyErr_Clear();  /* let the sleeper call it and see the error */
                        wake = 1;
                    }
                }
            }
        }
        /* one write per sleep: until it ends, the sleeper is awake or about to be (it may
         * wait for the interpreter lock a while, and a write per in-line AM meanwhile cost
         * a system call each, doubling an in-line round trip) */
        if (wake && !__atomic_exchange_n(&h->nudged, 1, __ATOMIC_ACQ_REL)) {
            uint64_t one = 1;
            ssize_t w = write(fd, &one, sizeof one);
            (void)w;
        }
    }
    return wake_waiters(h);
}

/* One poll: what ep.poll() does. Returns how many ran, -1 on error. */
static inline int
poll_once(HotObject *h, PyObject *pred)
{
    int n = hot_poll_core(h, pred, 0.0);
    if (n == -1 || run_deferred(h) < 0) {
        return -1;
    }
    return n < 0 ? 0 : n;
}

/* The progress rules both wait loops (C's spin phase, the engine's Python loop) follow, in
 * one place: */

/* The conduit throttle. A process with faster paths than the conduit (shared-memory queues,
 * in-line AMs between rank-threads) looks at an idle conduit at most every conduit_every
 * seconds: an empty look (~1.3 us through Python) costs more than a look at every queue.
 * Returns 1 (and stamps now) when it is time to look; now == 0.0: read the clock here. */
static inline int
conduit_due(HotObject *h, double now)
{
    if (!h->throttle) {
        return 1;
    }
    if (now == 0.0) {
        now = clock_now(&h->clock);
    }
    double at;
    __atomic_load(&h->conduit_at, &at, __ATOMIC_RELAXED);
    if (now - at < h->conduit_every) {
        return 0;
    }
    __atomic_store(&h->conduit_at, &now, __ATOMIC_RELAXED);
    return 1;
}

/* The conduit brought something, or a loop driver was told it is readable: look again at
 * the next poll. */
static inline void
conduit_rearm(HotObject *h)
{
    double zero = 0.0;
    __atomic_store(&h->conduit_at, &zero, __ATOMIC_RELAXED);
}

/* A poll that found nothing: a spinning thread gives its core away (sched_yield, the GIL
 * released) once every YIELD_EVERY of them, counted in *empty: the caller's own count (the C
 * spin loop's, kept on its stack: a count shared with the other threads would move a cache
 * line between cores at every poll), or the process's (the Python loop's). Returns 1 when it
 * yielded. */
static inline int
hot_idle(unsigned long *empty)
{
    if (__atomic_add_fetch(empty, 1, __ATOMIC_RELAXED) % YIELD_EVERY) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    sched_yield();
    Py_END_ALLOW_THREADS
    return 1;
}

#endif /* AMNET_CORE_HOT_H */
