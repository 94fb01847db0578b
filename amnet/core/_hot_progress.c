/* amnet.core._hot: progress. The clock's calibration, one look at the queues and the
 * conduit under the drain lock, the wait loop's spin phase; the system senders (SysSender,
 * Hot.sys_sender). run_deferred, poll_once, nudge and their helpers are inline in _hot.h. */

#include "_hot.h"

void
hot_clock_init(Clock *c)
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

/* -- progress ----------------------------------------------------------------------- */

/* Run one message the conduit brought, msg = {header, payload}, as the engine's dispatch
 * would: user Short and Medium AMs (and system Short AMs with a fast handler) here,
 * everything else (Long, puts, what is malformed: refused there) there. 0 done, -1 error. */
int
hot_net_dispatch(HotObject *h, PyObject *const *msg)
{
    PyObject *hdr = msg[0], *pl = msg[1];
    int rc = 1;
    if (PyBytes_CheckExact(hdr) && h->slots != NULL && PyBytes_GET_SIZE(hdr) >= FIXED) {
        const unsigned char *hb = (const unsigned char *)PyBytes_AS_STRING(hdr);
        Py_ssize_t hl = PyBytes_GET_SIZE(hdr);
        if (pl == Py_None) {
            rc = hot_fast_dispatch(h, hb, hl, NULL, -1, NULL);
        } else if (PyMemoryView_Check(pl) && !(hb[0] & F_SYSTEM)) {
            Py_buffer *b = PyMemoryView_GET_BUFFER(pl);
            if (PyBuffer_IsContiguous(b, 'C')) {
                rc = hot_fast_dispatch(h, hb, hl, b->buf, b->len, pl);
            }
        }
    }
    if (rc == 1) {
        PyObject *r = PyObject_Vectorcall(h->py_dispatch, msg, 2, NULL);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
        rc = 0;
    }
    return rc;
}

/* The engine's drain_net when it has nothing of its own to do (no message held back, no
 * wait): up to BUDGET messages of the conduit's recv(), each run at once, until pred() holds;
 * the throttle rearmed when it brought something. How many ran, -1 on error. */
int
hot_drain_net(HotObject *h, PyObject *pred)
{
    int n = 0;
    while (n < BUDGET) {
        PyObject *m = PyObject_CallNoArgs(h->net_recv);
        if (m == NULL) {
            return -1;
        }
        if (m == Py_None) {
            Py_DECREF(m);
            break;
        }
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) != 2) {
            Py_DECREF(m);
            PyErr_SetString(PyExc_TypeError, "a conduit's recv() returns (header, payload)");
            return -1;
        }
        int rc = hot_net_dispatch(h, &PyTuple_GET_ITEM(m, 0));
        Py_DECREF(m);
        if (rc < 0) {
            return -1;
        }
        n++;
        if (pred != NULL && pred != Py_None) {
            int v = pred_true(pred);
            if (v != 0) {
                if (v < 0) {
                    return -1;
                }
                break;
            }
        }
    }
    if (n) {
        conduit_rearm(h);  /* it brought something: look again next time */
    }
    return n;
}

/* Drain the queues, and the conduit (with a throttle when faster paths exist); now: the
 * monotonic clock (0 to read it here). The caller holds the drain lock (or the engine is
 * lock-free). */
static int
drain_all(HotObject *h, PyObject *pred, double now)
{
    int n = 0;
    if (h->n > 0) {
        n = hot_drain_queues(h, 0, h->nins, BUDGET);
        if (n < 0) {
            return -1;
        }
    }
    if (conduit_due(h, now)) {
        if (h->net_fd >= 0 && ((volatile char *)h->idle_buf.buf)[0]
                && PyObject_Length(h->delayed) == 0) {
            /* the conduit said "nothing until the descriptor is readable" */
            struct pollfd pfd = {h->net_fd, POLLIN, 0};
            if (poll(&pfd, 1, 0) == 0) {
                return n;
            }
        }
        if (h->net_recv != NULL) {  /* nothing held back: the engine's drain_net, here */
            int k = hot_drain_net(h, pred);
            return k < 0 ? -1 : n + k;
        }
        /* the engine's drain_net rearms the throttle when the conduit brought something */
        PyObject *r = PyObject_CallOneArg(h->py_net, pred);
        if (r == NULL) {
            return -1;
        }
        long k = PyLong_AsLong(r);
        Py_DECREF(r);
        if (k < 0) {
            return PyErr_Occurred() ? -1 : n;
        }
        n += (int)k;
    }
    return n;
}

/* One look at everything: 1+ ran, 0 nothing, -1 error, -2 another thread drains. */
int
hot_poll_core(HotObject *h, PyObject *pred, double now)
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

/* Raise the job's JobAborted once the bootstrap client has seen the job end (the engine's
 * abort_error hook says so). */
static int
check_aborted(HotObject *h)
{
    if (h->py_abort_error == NULL) {
        return 0;
    }
    PyObject *a = PyObject_CallNoArgs(h->py_abort_error);
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
PyObject *
hot_wait_until(HotObject *h, PyObject *pred, PyObject *timeout)
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
    unsigned long it = 0, empty = 0;
    int spun = 0;
    if (h->spin_s > 0.0) {
        for (;;) {
            double now = clock_now(&h->clock);
            int n = hot_poll_core(h, pred, now);
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
                if (!hot_idle(&empty) && h->n > 0) {
                    for (int k = 0; k < QUEUE_SPINS && !hot_has_pending(h); k++) {
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
    int rc = hot_queue_send(h, 0, proc, payload != NULL ? F_SYSTEM | C_LONG : F_SYSTEM, na,
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

#define SYSSENDER_REFS(X) X(hot) X(fallback)
AMNET_GC_FUNCS(SysSender, SysSenderObject, SYSSENDER_REFS)
AMNET_GC_DEALLOC(SysSender, SysSenderObject)

PyTypeObject SysSender_Type = AMNET_GC_TYPE(
    SysSender, SysSenderObject, "amnet.core._hot.SysSender",
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "send(dest, args, payload=None): a system AM of one handler (Hot.sys_sender).",
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SysSenderObject, vectorcall));

/* sys_sender(t, hidx, fallback) */
PyObject *
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
