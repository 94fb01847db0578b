/* amnet.core._hot: the Hot type, one per engine: its set-up (ranks, the shared-memory
 * queues, node-local segments, the conduit's send and dispatch) and the methods the Python
 * engine calls. */

#include "_hot.h"

/* -- Hot methods -------------------------------------------------------------------- */

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
    PyObject *l = __atomic_load_n(&h->slots[t].sysfns, __ATOMIC_ACQUIRE);
    if (l == NULL) {
        PyErr_SetString(PyExc_ValueError, "set_sys_handler before add_rank");
        return NULL;
    }
    int rc = 0;
    Py_BEGIN_CRITICAL_SECTION(l);  /* the drainer reads it meanwhile (list_ref) */
    while (rc == 0 && PyList_GET_SIZE(l) <= hidx) {
        rc = PyList_Append(l, Py_None);
    }
    if (rc == 0) {
        rc = PyList_SetItem(l, hidx, Py_NewRef(fn));
    }
    Py_END_CRITICAL_SECTION();
    if (rc < 0) {
        return NULL;
    }
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
    return hot_wait_until(h, args[0], timeout);
}

static void
Hot_release_all(HotObject *h)
{
    release_buffers(h->bufs, h->n);
    h->bufs = NULL;
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
    release_buffers(h->seg_bufs, h->node_ranks);
    h->seg_bufs = NULL;
    PyMem_Free(h->segs);
    h->segs = NULL;
    h->n = 0;
}

static void
Hot_clear_refs(HotObject *h)
{
    Py_CLEAR(h->hooks);  /* and so the callbacks borrowed from it */
    h->py_send = h->py_dispatch = h->py_queue_full = h->py_failed = h->py_net = NULL;
    h->py_wait = h->py_deferred = h->py_wake = h->deferred = h->delayed = NULL;
    h->py_refuse = h->py_sys_failed = h->py_abort_error = h->eng = NULL;
    Py_CLEAR(h->sleep_pred);
    Py_CLEAR(h->net_send);
    Py_CLEAR(h->net_recv);
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
    Py_VISIT(h->hooks);
    Py_VISIT(h->sleep_pred);
    Py_VISIT(h->net_send);
    Py_VISIT(h->net_recv);
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

/* The engine's callbacks and shape, in the order of HotHooks (amnet/core/_engine.py, where
 * each is documented): Hot takes them by position and checks the NamedTuple's field names
 * against these when it is made, so that a renamed method fails there, not mid-job. */
#define HOOKS(X) X(size) X(T) X(first) X(max_medium) X(seg_size) X(send_user) X(dispatch) \
    X(queue_full) X(handler_failed) X(drain_net) X(wait_slow) X(run_deferred) \
    X(wake_waiters) X(refuse) X(sys_handler_failed) X(deferred) X(delayed) X(abort_error) \
    X(engine)
enum {
#define HOOK_INDEX(name) HK_##name,
    HOOKS(HOOK_INDEX)
#undef HOOK_INDEX
    N_HOOKS
};

/* 0 when hooks is a tuple of N_HOOKS whose type names the fields HOOKS does, in its order */
static int
check_hooks(PyObject *hooks)
{
    static const char *const names[] = {
#define HOOK_NAME(name) #name,
        HOOKS(HOOK_NAME)
#undef HOOK_NAME
    };
    PyObject *fields = NULL;
    int ok = PyTuple_Check(hooks) && PyTuple_GET_SIZE(hooks) == N_HOOKS
        && (fields = PyObject_GetAttrString((PyObject *)Py_TYPE(hooks), "_fields")) != NULL
        && PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == N_HOOKS;
    for (int i = 0; ok && i < N_HOOKS; i++) {
        PyObject *f = PyTuple_GET_ITEM(fields, i);
        ok = PyUnicode_Check(f) && PyUnicode_CompareWithASCIIString(f, names[i]) == 0;
    }
    Py_XDECREF(fields);
    PyErr_Clear();
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "Hot: the engine's hooks must be a HotHooks "
                        "(amnet/core/_engine.py) with the fields _hot_engine.c's HOOKS names");
        return -1;
    }
    return 0;
}

/* Hot(hooks, route, lockfree, throttle_s): hooks the engine's HotHooks, route the list of
 * each process's route. */
static PyObject *
Hot_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *hooks, *route;
    int lockfree;
    double every;
    if (!PyArg_ParseTuple(args, "OOpd", &hooks, &route, &lockfree, &every)
            || check_hooks(hooks) < 0) {
        return NULL;
    }
    HotObject *h = (HotObject *)type->tp_alloc(type, 0);
    if (h == NULL) {
        return NULL;
    }
    h->wake_fd = -1;  /* before anything can fail: dealloc closes it when >= 0 */
    h->sleep_slot = -1;
    h->hooks = Py_NewRef(hooks);
#define HOOK(name) PyTuple_GET_ITEM(hooks, HK_##name)
    h->size = PyLong_AsLong(HOOK(size));
    h->T = PyLong_AsLong(HOOK(T));
    h->first = PyLong_AsLong(HOOK(first));
    h->max_medium = PyLong_AsLongLong(HOOK(max_medium));
    h->seg_size = PyLong_AsLongLong(HOOK(seg_size));
    if (PyErr_Occurred()) goto fail;
    h->py_send = HOOK(send_user);
    h->py_dispatch = HOOK(dispatch);
    h->py_queue_full = HOOK(queue_full);
    h->py_failed = HOOK(handler_failed);
    h->py_net = HOOK(drain_net);
    h->py_wait = HOOK(wait_slow);
    h->py_deferred = HOOK(run_deferred);
    h->py_wake = HOOK(wake_waiters);
    h->py_refuse = HOOK(refuse);
    h->py_sys_failed = HOOK(sys_handler_failed);
    h->deferred = HOOK(deferred);
    h->delayed = HOOK(delayed);
    h->py_abort_error = HOOK(abort_error);
    h->eng = HOOK(engine);
#undef HOOK
    h->net_fd = -1;
    h->drain_lock = (LockObject *)PyObject_CallNoArgs((PyObject *)&Lock_Type);
    if (h->drain_lock == NULL) goto fail;
    h->lockfree = lockfree;
    hot_clock_init(&h->clock);
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
    Py_XSETREF(s->fns, fns);
    Py_XSETREF(s->cats, cats);
    Py_XSETREF(s->nargs, nargs);
    Py_XSETREF(s->names, names);
    Py_XSETREF(s->by_fn, by_fn);
    /* a new rank here: its extensions' ports register again (published with a release
     * store: the drainer may look at it as soon as a peer sends) */
    PyObject *sysfns = PyList_New(0);
    if (sysfns == NULL) {
        return NULL;
    }
    PyObject *old = __atomic_exchange_n(&s->sysfns, sysfns, __ATOMIC_ACQ_REL);
    Py_XDECREF(old);
    s->rank = rank;
    s->finalized = 0;
    for (int i = 0; i < 8; i++) {
        s->recent[i] = -1;
    }
    /* the rank last: the dispatchers look at a slot's tables only once it has one */
    PyObject *oldrs = s->rs;
    __atomic_store_n(&s->rs, Py_NewRef(rs), __ATOMIC_RELEASE);
    Py_XDECREF(oldrs);
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

/* Where queue qn's tail word, entries and payload slots are in an object: queues[qn] of
 * the layout's list (amnet/pshm/_layout.py, Layout.queues), byte offsets. */
static int
queue_at(PyObject *queues, int qn, Py_ssize_t *tail, Py_ssize_t *ents, Py_ssize_t *slots)
{
    PyObject *q = PySequence_GetItem(queues, qn);
    if (q == NULL) {
        return -1;
    }
    int ok = PyArg_ParseTuple(q, "nnn", tail, ents, slots);
    Py_DECREF(q);
    return ok ? 0 : -1;
}

/* pshm_init(procs, li, depth, slot, queues, sleep_at, mine): the shape and offsets are the
 * layout's (amnet/pshm/_layout.py): queues[qn] = (tail, entries, slots) of queue number
 * qn = kind * n + sender, sleep_at the byte offset of an object's sleeping flag. */
static PyObject *
Hot_pshm_init(HotObject *h, PyObject *args)
{
    PyObject *procs, *queues, *mine;
    int li;
    long long depth, slot;
    Py_ssize_t sleep_at;
    if (!PyArg_ParseTuple(args, "OiLLOnO", &procs, &li, &depth, &slot, &queues, &sleep_at,
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
    if (PySequence_Length(queues) != 2 * n || sleep_at < 0 || sleep_at % 8) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad PSHM layout");
        goto fail;
    }
    h->li = li;
    h->depth = depth;
    h->slot = slot;
    h->sleep_at = sleep_at;
    char *base = h->bufs[li].buf;
    Py_ssize_t tail, ents, slots;
    int k = 0;
    for (int kind = Q_REP; kind >= Q_REQ; kind--) {  /* replies first */
        for (int s = 0; s < n; s++) {
            if (s == li) continue;
            if (queue_at(queues, kind * (int)n + s, &tail, &ents, &slots) < 0) goto fail;
            InQ *q = &h->ins[k++];
            q->tail_p = (int64_t *)(base + tail);
            q->ents = ents;
            q->slots = slots;
            q->tail = 0;
        }
        if (kind == Q_REP) h->nrep = k;
    }
    h->nins = k;
    /* the offsets of my queues in a peer's object are the same numbers: keep them */
    for (int kind = Q_REQ; kind <= Q_REP; kind++) {
        if (queue_at(queues, kind * (int)n + li, &tail, &ents, &slots) < 0) goto fail;
        for (int s = 0; s < n; s++) {
            OutQ *o = &h->out[kind][s];
            o->ents = ents;
            o->slots = slots;
            o->bell = -1;
            o->tail_p = (int64_t *)(intptr_t)tail;  /* an offset until mapped */
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
        o->sleep_p = (int64_t *)(base + h->sleep_at);
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
    /* every rank-thread sets its own at once (Engine.add_rank): the node's arrays are made
     * by the first, under a critical section on the Hot object; node-local puts and gets
     * read them only after the init collective that follows */
    int ok = 0;
    Py_BEGIN_CRITICAL_SECTION(h);
    if (h->segs == NULL) {
        if (count <= 0) {
            PyErr_SetString(PyExc_ValueError, "bad node shape");
            goto out;
        }
        char **segs = PyMem_Calloc(count, sizeof(char *));
        Py_buffer *bufs = PyMem_Calloc(count, sizeof(Py_buffer));
        if (segs == NULL || bufs == NULL) {
            PyMem_Free(segs);
            PyMem_Free(bufs);
            PyErr_NoMemory();
            goto out;
        }
        h->seg_bufs = bufs;
        h->node_first = first;
        h->node_ranks = count;
        h->segs = segs;
    }
    r -= h->node_first;
    if (r < 0 || r >= h->node_ranks || h->seg_bufs[r].obj != NULL) {
        PyErr_SetString(PyExc_ValueError, "bad segment rank");
        goto out;
    }
    if (PyObject_GetBuffer(buf, &h->seg_bufs[r], PyBUF_WRITABLE) < 0) {
        goto out;
    }
    if (h->seg_bufs[r].len < h->seg_size) {
        PyBuffer_Release(&h->seg_bufs[r]);
        PyErr_SetString(PyExc_ValueError, "segment buffer too small");
        goto out;
    }
    h->segs[r] = h->seg_bufs[r].buf;
    ok = 1;
out:;
    Py_END_CRITICAL_SECTION();
    if (!ok) {
        return NULL;
    }
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
    if (hot_pshm_send(h, reply, h->proc_li[proc], hb.buf, hb.len, pb.buf, plen, eflags) == 0) {
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
    int n = hot_drain_queues(h, 0, reply_only ? h->nrep : h->nins, budget);
    return n < 0 ? NULL : PyLong_FromLong(n);
}

static PyObject *
Hot_pending(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(h->n > 0 && hot_has_pending(h));
}

static PyObject *
Hot_counts(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("KKKKK", (unsigned long long)count_of(&h->sent),
                         (unsigned long long)count_of(&h->received),
                         (unsigned long long)count_of(&h->full_waits),
                         (unsigned long long)count_of(&h->rings),
                         (unsigned long long)count_of(&h->handled));
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
    if (t < 0 || t >= h->T || slot_rs(&h->slots[t]) == NULL) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread");
        return NULL;
    }
    return hot_call_handler(h, t, fn, -1, name, src, is_request, &PyTuple_GET_ITEM(cargs, 0),
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
    if (t < 0 || t >= h->T || slot_rs(&h->slots[t]) == NULL) {
        PyErr_SetString(PyExc_ValueError, "bad rank-thread");
        return NULL;
    }
    if (hot_send_user(h, t, flags, dest, handler, payload, offset, &PyTuple_GET_ITEM(cargs, 0),
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

/* *slot = arg, a callable (a new reference) or None (NULL); what set_net_send and
 * set_net_recv share */
static PyObject *
set_callable(PyObject **slot, PyObject *arg, const char *what)
{
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s needs a callable or None", what);
        return NULL;
    }
    Py_XSETREF(*slot, arg == Py_None ? NULL : Py_NewRef(arg));
    Py_RETURN_NONE;
}

/* set_net_send(send): the conduit's send(proc, header, payload), which user AMs to other
 * nodes go through from here (None: through the engine's send_user) */
static PyObject *
Hot_set_net_send(HotObject *h, PyObject *arg)
{
    return set_callable(&h->net_send, arg, "set_net_send");
}

/* set_net_recv(recv): the conduit's recv(), which a drain calls here, without the engine's
 * drain_net, while no message is held back (None: the engine's drain_net, as with
 * AMNET_NET_LATENCY_US) */
static PyObject *
Hot_set_net_recv(HotObject *h, PyObject *arg)
{
    return set_callable(&h->net_recv, arg, "set_net_recv");
}

/* drain_net(pred) -> int: the engine's drain_net without a wait, when nothing is held back
 * (set_net_recv): how many ran */
static PyObject *
Hot_drain_net(HotObject *h, PyObject *pred)
{
    if (h->net_recv == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "drain_net: no conduit recv (set_net_recv)");
        return NULL;
    }
    int n = hot_drain_net(h, pred);
    return n < 0 ? NULL : PyLong_FromLong(n);
}

/* net_dispatch(header, payload): run one message the conduit brought (hot_net_dispatch) */
static PyObject *
Hot_net_dispatch(HotObject *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "net_dispatch(header, payload)");
        return NULL;
    }
    if (hot_net_dispatch(h, args) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* conduit_due() -> bool: the throttle (conduit_due in _hot.h) for the engine's own drain. */
static PyObject *
Hot_conduit_due(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(conduit_due(h, 0.0));
}

static PyObject *
Hot_conduit_rearm(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    conduit_rearm(h);
    Py_RETURN_NONE;
}

/* in_drain() -> bool: the calling thread holds the drain lock (in_drain in _hot.h). */
static PyObject *
Hot_in_drain(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(in_drain(h));
}

/* idle() -> bool: a poll of the engine's wait loop found nothing (hot_idle in _hot.h). */
static PyObject *
Hot_idle(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(hot_idle(&h->empty));
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

/* wake_ranks(ranks): after a store that node-local ranks' waits may look for (hot_wake_ranks) */
static PyObject *
Hot_wake_ranks(HotObject *h, PyObject *ranks)
{
    if (hot_wake_ranks(h, ranks) < 0) return NULL;
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
    PyObject *old;
    Py_BEGIN_CRITICAL_SECTION(h);  /* nudge takes its reference under it */
    old = h->sleep_pred;
    h->sleep_pred = pred == Py_None ? NULL : Py_NewRef(pred);
    Py_END_CRITICAL_SECTION();
    Py_XDECREF(old);
    __atomic_store_n(&h->sleep_slot, t, __ATOMIC_RELAXED);
    __atomic_store_n(&h->nudged, 0, __ATOMIC_RELAXED);  /* published by the store below */
    __atomic_store_n(&h->sleeping, 1, __ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

static PyObject *
Hot_sleep_end(HotObject *h, PyObject *Py_UNUSED(ignored))
{
    __atomic_store_n(&h->sleeping, 0, __ATOMIC_SEQ_CST);
    PyObject *old;
    Py_BEGIN_CRITICAL_SECTION(h);
    old = h->sleep_pred;
    h->sleep_pred = NULL;
    Py_END_CRITICAL_SECTION();
    Py_XDECREF(old);
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
    return PyLong_FromUnsignedLongLong(count_of(&h->handled));
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
    {"conduit_due", (PyCFunction)Hot_conduit_due, METH_NOARGS,
     "conduit_due() -> bool: whether a drain is to look at the conduit now (the throttle: "
     "an idle conduit is looked at every throttle_s at most); True stamps the look."},
    {"conduit_rearm", (PyCFunction)Hot_conduit_rearm, METH_NOARGS,
     "The conduit brought something (or its descriptor fired): look again at the next drain."},
    {"idle", (PyCFunction)Hot_idle, METH_NOARGS,
     "idle() -> bool: a poll found nothing; gives the core away (sched_yield) once every "
     "YIELD_EVERY of them and says whether it did."},
    {"in_drain", (PyCFunction)Hot_in_drain, METH_NOARGS,
     "in_drain() -> bool: the calling thread holds the drain lock (it runs a drain, or a "
     "handler or a wait condition inside one): deferred work waits for it to let go."},
    {"set_wake_fd", (PyCFunction)Hot_set_wake_fd, METH_O, NULL},
    {"wake_ranks", (PyCFunction)Hot_wake_ranks, METH_O,
     "wake_ranks(ranks): after a store to shared memory that waits of these node-local ranks "
     "may look for: ring the doorbells of their sleeping processes, nudge this process's."},
    {"nudge", (PyCFunction)Hot_nudge, METH_O,
     "nudge(t): after an in-line AM to rank-thread t: wake the sleeping drainer if its wait "
     "may now be satisfied, and the threads waiting on it."},
    {"nudge_deferred", (PyCFunction)Hot_nudge_deferred, METH_NOARGS,
     "After work was deferred: wake the threads waiting on the drainer and the sleeping "
     "drainer (it is to send it)."},
    {"sleep_begin", (PyCFunction)Hot_sleep_begin, METH_VARARGS, NULL},
    {"sleep_end", (PyCFunction)Hot_sleep_end, METH_NOARGS, NULL},
    {"set_net_send", (PyCFunction)Hot_set_net_send, METH_O, NULL},
    {"set_net_recv", (PyCFunction)Hot_set_net_recv, METH_O, NULL},
    {"drain_net", (PyCFunction)Hot_drain_net, METH_O, NULL},
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

PyTypeObject Hot_Type = AMNET_GC_TYPE(
    Hot, HotObject, "amnet.core._hot.Hot", Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C half of one process's AM engine (see the module docstring).",
    .tp_methods = Hot_methods, .tp_getset = Hot_getset, .tp_new = Hot_new);
