/* amnet.core._hot: the queues. A handler's call with its token; sending a user AM (in-line,
 * into a node-local process's shared-memory queue, to the conduit); receiving: the checks
 * and the run of an entry (or a conduit's message), fragments, draining the queues. */

#include "_hot.h"

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

/* The table index of handler function fn of slot s, -1 if it is not registered there. A
 * small direct-mapped cache in front of by_fn; an entry is trusted only if fns[idx] is fn. */
static Py_ssize_t
handler_index(Slot *s, PyObject *fn)
{
    Py_ssize_t *c = &s->recent[((uintptr_t)fn >> 4) & 7];
    Py_ssize_t idx = __atomic_load_n(c, __ATOMIC_RELAXED);
    if (idx >= 0) {
        PyObject *f = list_ref(s->fns, idx);
        Py_XDECREF(f);  /* only compared: fn itself is alive (the caller holds it) */
        if (f == fn) {
            return idx;
        }
    }
    PyObject *io = dict_ref(s->by_fn, fn);
    if (io == NULL) {
        return -1;
    }
    idx = PyLong_AsSsize_t(io);
    Py_DECREF(io);
    if (idx < 0) {
        PyErr_Clear();
        return -1;
    }
    __atomic_store_n(c, idx, __ATOMIC_RELAXED);
    return idx;
}

/* Whether entry idx of slot s's table takes category cat with nargs arguments (an entry
 * that declares None takes any); 0 also when idx is not (yet) in the table. */
static int
declared_ok(Slot *s, Py_ssize_t idx, int cat, Py_ssize_t nargs)
{
    PyObject *c = list_ref(s->cats, idx);
    PyObject *na = c == NULL ? NULL : list_ref(s->nargs, idx);
    int ok = na != NULL && (c == Py_None || PyLong_AsLong(c) == cat)
             && (na == Py_None || PyLong_AsSsize_t(na) == nargs);
    Py_XDECREF(c);
    Py_XDECREF(na);
    if (!ok) {
        PyErr_Clear();
    }
    return ok;
}

/* -- tokens ------------------------------------------------------------------------- */

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
    __atomic_store_n(&tok->live, 0, __ATOMIC_RELEASE);  /* read by run_deferred's thread */
#ifndef Py_GIL_DISABLED
    if (Py_REFCNT(tok) == 1 && h->nspare < 4 && tok->hot == h) {
        Py_CLEAR(tok->name);
        h->spare[h->nspare++] = tok;
        return;
    }
#endif
    Py_DECREF(tok);
}

/* Run fn(token, *args) on rank-thread t with the token current on this thread.
 * capture: let an exception propagate (the caller handles it) instead of reporting it
 * through the engine's handler_failed (which ends the job unless on_handler_error is set).
 * Returns a new reference to the result, or NULL with an exception set. */
PyObject *
hot_call_handler(HotObject *h, int t, PyObject *fn, int hidx, PyObject *name, long src,
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
    count(&h->handled);
    if (r == NULL && !capture) {
        /* on_handler_error runs in the handler's context (the token still current) */
        PyObject *exc = PyErr_GetRaisedException();
        PyObject *nm = hot_token_name(tok);
        Slot *s = &h->slots[t];
        PyObject *rs = slot_rs(s);
        if (nm != NULL && rs != NULL) {
            PyObject *srco = PyLong_FromLong(src);
            if (srco != NULL) {
                r = PyObject_CallFunctionObjArgs(h->py_failed, rs, nm, srco, exc, NULL);
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
        count(&h->rings);
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
    count(&h->sent);
    return 1;
}

/* The queue is full: let the engine make progress (it may raise: the job is ending). */
static int
queue_full(HotObject *h, int reply)
{
    count(&h->full_waits);
    return discard(PyObject_CallOneArg(h->py_queue_full, reply ? Py_True : Py_False));
}

/* After a store to shared memory that a wait of these node-local ranks may look for (a flag
 * of a node collective, written without a message): ring the doorbell of each of their
 * processes that sleeps (as a send does), and for ranks of this process nudge (the drainer
 * when it sleeps for that rank, and the threads waiting on it). ranks: a tuple of ints.
 * Costs a fence and a load per process when nobody sleeps. 0, or -1 with an error. */
int
hot_wake_ranks(HotObject *h, PyObject *ranks)
{
    if (!PyTuple_CheckExact(ranks)) {
        PyErr_SetString(PyExc_TypeError, "wake_ranks(ranks): a tuple of ranks");
        return -1;
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  /* the caller's store, then the sleep flags */
    int myproc = h->first / h->T, mine = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ranks); i++) {
        long r = PyLong_AsLong(PyTuple_GET_ITEM(ranks, i));
        if (r < 0 || r >= h->size) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "wake_ranks: no rank %ld", r);
            }
            return -1;
        }
        int proc = (int)(r / h->T);
        if (proc == myproc) {
            mine = 1;
            if (nudge(h, 1, (int)(r - h->first)) < 0) {
                return -1;
            }
        } else if (h->n > 0 && h->proc_li[proc] >= 0) {
            OutQ *o = &h->out[Q_REQ][h->proc_li[proc]];
            if (o->sleep_p != NULL && ld_acq(o->sleep_p)) {
                ring(h, o);
            }
        }
    }
    /* a rank-thread of this process waiting on the drainer (not asleep itself) re-checks
     * its condition only when woken: nudge wakes them only while the drainer sleeps */
    return mine ? wake_waiters(h) : 0;
}

/* Queue one message to node-local process index s, waiting (polling) while the queue is
 * full; a payload larger than a slot goes in fragments. */
int
hot_pshm_send(HotObject *h, int reply, int s, const unsigned char *hdr, Py_ssize_t hl,
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
int
hot_queue_send(HotObject *h, int reply, int proc, int flags, Py_ssize_t nargs, Py_ssize_t hidx,
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
    int rc = hot_pshm_send(h, reply, h->proc_li[proc], hb, hl, p, plen, 0);
    if (pb.obj != NULL) {
        PyBuffer_Release(&pb);
    }
    return rc;
}

/* Pack a header and hand it, with ``payload`` (NULL: none; else bytes, or a contiguous
 * 1-D buffer of unsigned bytes, of at most max_medium: the Medium payload), to the conduit's
 * send for process ``proc``, as the engine's send_user would: 0 sent, -1 error, 1 not handled
 * here (any other payload, or one too large: the caller's slow path takes it and says what is
 * wrong). */
static int
net_send(HotObject *h, int proc, int flags, Py_ssize_t nargs, Py_ssize_t hidx, long src,
         long dest, const int64_t *a, PyObject *payload)
{
    PyObject *mv = NULL;  /* a view of a payload that is not bytes (the conduit copies it) */
    if (payload != NULL) {
        Py_ssize_t len;
        if (PyBytes_CheckExact(payload)) {
            len = PyBytes_GET_SIZE(payload);
        } else {
            mv = PyMemoryView_FromObject(payload);
            if (mv == NULL) {
                PyErr_Clear();
                return 1;
            }
            Py_buffer *b = PyMemoryView_GET_BUFFER(mv);
            if (b->ndim != 1 || b->format == NULL || strcmp(b->format, "B") != 0
                    || !PyBuffer_IsContiguous(b, 'C')) {
                Py_DECREF(mv);
                return 1;
            }
            len = b->len;
            payload = mv;
        }
        if (len > h->max_medium) {
            Py_XDECREF(mv);
            return 1;
        }
        if (len == 0) {
            payload = NULL;  /* as send_user: an empty Medium payload travels as none */
        }
    }
    PyObject *hdr = PyBytes_FromStringAndSize(NULL, FIXED + 8 * nargs);
    if (hdr == NULL) {
        Py_XDECREF(mv);
        return -1;
    }
    pack_header((unsigned char *)PyBytes_AS_STRING(hdr), flags, nargs, hidx, src, dest, 0, a);
    PyObject *po = PyLong_FromLong(proc);
    if (po == NULL) {
        Py_DECREF(hdr);
        Py_XDECREF(mv);
        return -1;
    }
    PyObject *stack[] = {po, hdr, payload != NULL ? payload : Py_None};
    PyObject *r = PyObject_Vectorcall(h->net_send, stack, 3, NULL);
    Py_DECREF(po);
    Py_DECREF(hdr);
    Py_XDECREF(mv);
    return discard(r);
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
    if (idx < 0 || !declared_ok(s, idx, cat, nargs)) {
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
        PyObject *fn = slot_rs(d) == NULL ? NULL : list_ref(d->fns, idx);
        if (fn == NULL) {
            return 1;
        }
        PyObject *cargs[MAX_ARGS + 1];
        PyObject *mv = NULL;
        Py_ssize_t k = 0;
        if (cat == C_MEDIUM) {
            /* bytes only here (read-only, kept alive by the caller during the call) */
            if (!PyBytes_CheckExact(payload) || PyBytes_GET_SIZE(payload) > h->max_medium) {
                Py_DECREF(fn);
                return 1;
            }
            mv = PyMemoryView_FromObject(payload);
            if (mv == NULL) {
                Py_DECREF(fn);
                return -1;
            }
            cargs[k++] = mv;
        }
        for (Py_ssize_t i = 0; i < nargs; i++) {
            cargs[k++] = args[i];
        }
        PyObject *r = hot_call_handler(h, (int)(dest - h->first), fn, (int)idx, NULL, s->rank,
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
    return hot_queue_send(h, flags & F_REPLY, proc, flags, nargs, idx, s->rank, dest, a,
                          cat == C_MEDIUM ? payload : NULL, h->max_medium);
}

/* fast_send, or the Python engine's send_user(rs, flags, dest, handler, payload, offset,
 * args) when the fast path does not apply. */
int
hot_send_user(HotObject *h, int t, int flags, PyObject *dest, PyObject *handler, PyObject *payload,
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
        PyObject *stack[] = {slot_rs(&h->slots[t]), fl, dest, handler, payload, offset, tup};
        r = PyObject_Vectorcall(h->py_send, stack, 7, NULL);
        Py_DECREF(fl);
    }
    Py_DECREF(tup);
    return discard(r);
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
    PyObject *sysfns = s == NULL || slot_rs(s) == NULL ? NULL
                       : __atomic_load_n(&s->sysfns, __ATOMIC_ACQUIRE);
    PyObject *fn = sysfns == NULL ? NULL : list_ref(sysfns, hidx);
    if (fn == NULL || fn == Py_None) {
        Py_XDECREF(fn);
        return 1;
    }
    PyObject *args = PyTuple_New(nargs);
    if (args == NULL) {
        Py_DECREF(fn);
        return -1;
    }
    for (int i = 0; i < nargs; i++) {
        PyObject *v = PyLong_FromLongLong((long long)get_le(hdr + FIXED + 8 * i, 8));
        if (v == NULL) {
            Py_DECREF(args);
            Py_DECREF(fn);
            return -1;
        }
        PyTuple_SET_ITEM(args, i, v);
    }
    PyObject *pv = cat == C_LONG ? PyMemoryView_FromMemory(payload, plen, PyBUF_WRITE)
                                 : Py_NewRef(Py_None);
    PyObject *so = PyLong_FromUnsignedLongLong(src);
    int rc = -1;
    if (pv != NULL && so != NULL) {
        PyObject *stack[] = {so, args, pv, (flags & F_REPLY) ? Py_True : Py_False};
        PyObject *r = PyObject_Vectorcall(fn, stack, 4, NULL);
        if (r != NULL) {
            Py_DECREF(r);
            count(&h->handled);
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
                    count(&h->handled);
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
    Py_DECREF(fn);
    return rc;
}

/* Run a user Short/Medium AM straight from its entry: 1 not handled here (the Python
 * dispatcher checks it, refuses it or runs it), 0 ran, -1 error. */
int
hot_fast_dispatch(HotObject *h, const unsigned char *hdr, int64_t hl, char *payload, int64_t plen,
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
    if (s == NULL || slot_rs(s) == NULL || !declared_ok(s, hidx, cat, nargs)) {
        return 1;
    }
    int64_t t = s - h->slots;
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
    PyObject *fn = list_ref(s->fns, hidx);
    if (fn == NULL) {  /* not in the table (being truncated): the Python dispatcher says */
        rc = 1;
        goto done;
    }
    PyObject *r = hot_call_handler(h, (int)t, fn, (int)hidx, NULL, (long)src, !(flags & F_REPLY),
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
    return discard(r);
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
int
hot_drain_queues(HotObject *h, int from, int to, int budget)
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
                rc = bad ? 1 : hot_fast_dispatch(h, (unsigned char *)e + HDR_AT, hl, p, p ? plen : -1, NULL);
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
    count_n(&h->received, (uint64_t)n);
    return n;
}

int
hot_has_pending(HotObject *h)
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
