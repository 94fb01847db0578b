/* amnet.coll._cmail, the fast path's bookkeeping (amnet/coll/_fast.py): the Core type.
 *
 * Core(box, runs, descs, forbid, wait, send, follow, tid, me, ranks, others, timeout, keep):
 * one team's fast path of one rank. start() begins a call, sends its messages and enters it;
 * finish() waits for its messages and completes it; both as Fast's Python did, for the
 * common case. What is rare goes back to Python: follow(code, call) answers a check that
 * came before the call was entered (code 1), asks the members about data of another call
 * (2), prunes the history (4). */
#include "_cmail.h"

typedef struct {
    PyObject_HEAD
    PyObject *box, *acquire, *release, *history, *asked, *verdicts, *aborts, *digests;
    PyObject *ready, *next_seq, *runs, *descs, *forbid, *wait, *send, *follow, *tid;
    PyObject *me, *ranks, *others, *timeout;
    long keep;
} Core;

typedef struct {
    PyObject_HEAD
    PyObject *ready, *keys, *verdicts, *aborts;
} KeyPred;

static void
KeyPred_dealloc(KeyPred *p)
{
    Py_XDECREF(p->ready);
    Py_XDECREF(p->keys);
    Py_XDECREF(p->verdicts);
    Py_XDECREF(p->aborts);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int
all_in(PyObject *ready, PyObject *keys)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        int c = PyDict_Contains(ready, PyTuple_GET_ITEM(keys, i));
        if (c <= 0) {
            return c;
        }
    }
    return 1;
}

/* pred(): every key in ready, or a verdict or an abort anywhere (the caller looks) */
static PyObject *
KeyPred_call(KeyPred *p, PyObject *args, PyObject *kw)
{
    int c = all_in(p->ready, p->keys);
    if (c < 0) {
        return NULL;
    }
    return PyBool_FromLong(c || PyDict_GET_SIZE(p->verdicts) || PyDict_GET_SIZE(p->aborts));
}

PyTypeObject KeyPredType = AMNET_TYPE(
    KeyPred, KeyPred, "amnet.coll._cmail.KeyPred", Py_TPFLAGS_DEFAULT,
    .tp_call = (ternaryfunc)KeyPred_call);

/* A Core is part of cycles (the mailbox holds the teams, a team its fast path, the fast
 * path its Core, the Core the mailbox and the fast path's follow): it takes part in the
 * garbage collector's search. */
#define CORE_REFS(X) X(box) X(acquire) X(release) X(history) X(asked) X(verdicts) X(aborts) \
    X(digests) X(ready) X(next_seq) X(runs) X(descs) X(forbid) X(wait) X(send) X(follow)   \
    X(tid) X(me) X(ranks) X(others) X(timeout)
AMNET_GC_FUNCS(Core, Core, CORE_REFS)
AMNET_GC_DEALLOC(Core, Core)

static PyObject *
attr(PyObject *o, const char *name)
{
    return PyObject_GetAttrString(o, name);
}

static PyObject *
Core_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *box, *runs, *descs, *forbid, *wait, *send, *follow, *tid, *me, *ranks, *others;
    PyObject *timeout;
    long keep;
    if (!PyArg_ParseTuple(args, "OO!O!OOOOO!O!O!O!O!l", &box, &PyList_Type, &runs,
                          &PyDict_Type, &descs, &forbid, &wait, &send, &follow,
                          &PyLong_Type, &tid, &PyLong_Type, &me, &PyTuple_Type, &ranks,
                          &PyTuple_Type, &others, &PyFloat_Type, &timeout, &keep)) {
        return NULL;
    }
    Core *c = (Core *)type->tp_alloc(type, 0);
    if (c == NULL) {
        return NULL;
    }
    PyObject *lock = attr(box, "lock");
    if (lock != NULL) {
        c->acquire = attr(lock, "acquire");
        c->release = attr(lock, "release");
        Py_DECREF(lock);
    }
    c->history = attr(box, "history");
    c->asked = attr(box, "asked");
    c->verdicts = attr(box, "verdicts");
    c->aborts = attr(box, "aborts");
    c->digests = attr(box, "digests");
    c->ready = attr(box, "ready");
    c->next_seq = attr(box, "next_seq");
    c->box = Py_NewRef(box);
    c->runs = Py_NewRef(runs);
    c->descs = Py_NewRef(descs);
    c->forbid = Py_NewRef(forbid);
    c->wait = Py_NewRef(wait);
    c->send = Py_NewRef(send);
    c->follow = Py_NewRef(follow);
    c->tid = Py_NewRef(tid);
    c->me = Py_NewRef(me);
    c->ranks = Py_NewRef(ranks);
    c->others = Py_NewRef(others);
    c->timeout = Py_NewRef(timeout);
    c->keep = keep;
    if (PyErr_Occurred() || !c->acquire || !c->release || !PyDict_Check(c->history)
            || !PySet_Check(c->asked) || !PyDict_Check(c->verdicts) || !PyDict_Check(c->aborts)
            || !PyDict_Check(c->digests) || !PyDict_Check(c->ready)
            || !PyDict_Check(c->next_seq)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "Core: not a Mailbox");
        }
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static int
locked(Core *c, int take)
{
    return discard(PyObject_CallNoArgs(take ? c->acquire : c->release));
}

static int
follow(Core *c, long code, PyObject *call)
{
    PyObject *k = PyLong_FromLong(code);
    if (k == NULL) {
        return -1;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(c->follow, k, call, NULL);
    Py_DECREF(k);
    return discard(r);
}

/* (tid, seq), a call's name (Py_BuildValue parses its format at every call) */
static PyObject *
call_of(PyObject *tid, long seq)
{
    PyObject *s = PyLong_FromLong(seq);
    if (s == NULL) {
        return NULL;
    }
    PyObject *t = PyTuple_Pack(2, tid, s);
    Py_DECREF(s);
    return t;
}

/* the history: this call's description in, the one KEEP calls back out; 4 when it needs
 * pruning (more than box.prune_at descriptions, which is never below 2 KEEP), -1 on error */
static int
note_history(Core *c, PyObject *tid, long seq, PyObject *key, PyObject *sig)
{
    if (PyDict_SetItem(c->history, key, sig) < 0) {
        return -1;
    }
    if (seq >= c->keep) {  /* (a look first: a KeyError costs more than the rest) */
        PyObject *old = call_of(tid, seq - c->keep);
        if (old == NULL) {
            return -1;
        }
        int in = PyDict_Contains(c->history, old);
        int rc = in > 0 ? PyDict_DelItem(c->history, old) : in;
        Py_DECREF(old);
        if (rc < 0) {
            return -1;
        }
    }
    if (PyDict_GET_SIZE(c->history) <= 2 * c->keep) {  /* (no look at prune_at needed) */
        return 0;
    }
    PyObject *at = attr(c->box, "prune_at");
    if (at == NULL) {
        return -1;
    }
    long pa = PyLong_AsLong(at);
    Py_DECREF(at);
    if (pa == -1 && PyErr_Occurred()) {
        return -1;
    }
    return PyDict_GET_SIZE(c->history) > pa ? 4 : 0;
}

/* start(key, what, data, send, complete) -> (tid, seq, digest, sig); None when the general
 * path is to take the call, False when key has no description yet (nothing done either).
 * send: data goes to every other member; complete: the call receives nothing. */
static PyObject *
Core_start(Core *c, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "start(key, what, data, send, complete)");
        return NULL;
    }
    PyObject *key = argv[0], *what = argv[1], *data = argv[2];
    int to_all = PyObject_IsTrue(argv[3]), complete = PyObject_IsTrue(argv[4]);
    PyObject *seq_o;
    if (cm_dict_ref(c->next_seq, c->tid, &seq_o) < 0) {
        return NULL;
    }
    long seq = seq_o == NULL ? 0 : PyLong_AsLong(seq_o);
    Py_XDECREF(seq_o);
    if (seq == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *call = call_of(c->tid, seq);
    if (call == NULL) {
        return NULL;
    }
    PyObject *out = NULL;
    if (PyList_GET_SIZE(c->runs) || (PyDict_GET_SIZE(c->verdicts)
                                     && PyDict_Contains(c->verdicts, call))
            || (PyDict_GET_SIZE(c->aborts) && PyDict_Contains(c->aborts, call))) {
        out = Py_NewRef(Py_None);
        goto end;
    }
    PyObject *r = PyObject_CallOneArg(c->forbid, what);
    if (r == NULL) {
        goto end;
    }
    Py_DECREF(r);
    /* (digest, sig), held: a handler run by a send's wait might clear descs */
    PyObject *desc;
    int got = cm_dict_ref(c->descs, key, &desc);
    if (got <= 0) {
        out = got < 0 ? NULL : Py_NewRef(Py_False);
        goto end;
    }
    PyObject *dg = PyTuple_GET_ITEM(desc, 0), *sig = PyTuple_GET_ITEM(desc, 1);
    PyObject *res = PyTuple_Pack(4, c->tid, PyTuple_GET_ITEM(call, 1), dg, sig);
    if (res == NULL) {
        Py_DECREF(desc);
        goto end;
    }
    if (to_all && PyTuple_GET_SIZE(c->ranks)) {
        PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
        PyObject *a = zero && one ? PyTuple_Pack(8, c->tid, PyTuple_GET_ITEM(call, 1), zero,
                                                 c->me, zero, one, dg, zero) : NULL;
        Py_XDECREF(zero);
        Py_XDECREF(one);
        if (a == NULL) {
            goto fail_res;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c->ranks); i++) {
            PyObject *stack[3] = {PyTuple_GET_ITEM(c->ranks, i), a, data};
            PyObject *s = PyObject_Vectorcall(c->send, stack, 3, NULL);
            if (s == NULL) {
                Py_DECREF(a);
                goto fail_res;
            }
            Py_DECREF(s);
        }
        Py_DECREF(a);
    }
    /* enter it (after its messages went, so that they leave sooner) */
    int codes = 0;
    if (!complete) {
        /* without the lock: only this thread changes the history; a check that comes
         * before the call's end is answered there (finish, under the lock) */
        int h = note_history(c, c->tid, seq, call, sig);
        if (h < 0) {
            goto fail_res;
        }
        codes |= h;
    } else {
        if (locked(c, 1) < 0) {
            goto fail_res;
        }
        int h = note_history(c, c->tid, seq, call, sig);
        int ok = h >= 0;
        codes |= ok ? h : 0;
        if (ok && PySet_GET_SIZE(c->asked)) {
            int in = PySet_Contains(c->asked, call);
            ok = in >= 0;
            codes |= in > 0 ? 1 : 0;  /* follow(1) discards it and answers */
        }
        PyObject *nxt = ok ? PyLong_FromLong(seq + 1) : NULL;
        ok = nxt != NULL && PyDict_SetItem(c->next_seq, c->tid, nxt) == 0;
        Py_XDECREF(nxt);
        if (ok && PyDict_GET_SIZE(c->digests)) {
            PyObject *late = PyDict_GetItemWithError(c->digests, call);
            if (late != NULL) {
                int eq = PyObject_RichCompareBool(late, dg, Py_EQ);
                ok = eq >= 0 && PyDict_DelItem(c->digests, call) == 0;
                codes |= eq == 0 ? 2 : 0;
            } else {
                ok = !PyErr_Occurred();
            }
        }
        if (locked(c, 0) < 0 || !ok) {
            goto fail_res;
        }
    }
    for (long code = 1; code <= 4; code <<= 1) {
        if ((codes & code) && follow(c, code, call) < 0) {
            goto fail_res;
        }
    }
    Py_DECREF(desc);
    out = res;
    goto end;
fail_res:
    Py_DECREF(res);
    Py_DECREF(desc);
end:
    Py_DECREF(call);
    return out;
}

/* finish(call, keys) -> [payloads]: the messages of keys (None: one of tag 0 from every other
 * member), taken from the mailbox once all are in with my digest, and the call complete;
 * None, taking nothing, when not (within the wait's timeout: the general path takes over) */
static PyObject *
Core_finish(Core *c, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_CheckExact(argv[0]) || PyTuple_GET_SIZE(argv[0]) != 4) {
        PyErr_SetString(PyExc_TypeError, "finish(call, keys)");
        return NULL;
    }
    PyObject *cl = argv[0], *keys = argv[1];
    PyObject *tid = PyTuple_GET_ITEM(cl, 0), *seq_o = PyTuple_GET_ITEM(cl, 1);
    PyObject *dg = PyTuple_GET_ITEM(cl, 2);
    if (keys == Py_None) {
        Py_ssize_t m = PyTuple_GET_SIZE(c->others);
        keys = PyTuple_New(m);
        if (keys == NULL) {
            return NULL;
        }
        PyObject *zero = PyLong_FromLong(0);
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject *k = zero ? PyTuple_Pack(4, tid, seq_o, zero,
                                              PyTuple_GET_ITEM(c->others, i)) : NULL;
            if (k == NULL) {
                Py_XDECREF(zero);
                Py_DECREF(keys);
                return NULL;
            }
            PyTuple_SET_ITEM(keys, i, k);
        }
        Py_DECREF(zero);
    } else if (!PyTuple_CheckExact(keys)) {
        PyErr_SetString(PyExc_TypeError, "finish: keys must be a tuple or None");
        return NULL;
    } else {
        Py_INCREF(keys);
    }
    PyObject *out = NULL, *call = PyTuple_Pack(2, tid, seq_o);
    if (call == NULL) {
        goto end;
    }
    int have = all_in(c->ready, keys);
    if (have < 0) {
        goto end;
    }
    if (!have) {
        KeyPred *p = PyObject_New(KeyPred, &KeyPredType);
        if (p == NULL) {
            goto end;
        }
        p->ready = Py_NewRef(c->ready);
        p->keys = Py_NewRef(keys);
        p->verdicts = Py_NewRef(c->verdicts);
        p->aborts = Py_NewRef(c->aborts);
        PyObject *r = PyObject_CallFunctionObjArgs(c->wait, (PyObject *)p, c->timeout, NULL);
        Py_DECREF(p);
        if (r == NULL) {
            goto end;
        }
        Py_DECREF(r);
        have = all_in(c->ready, keys);
        if (have <= 0) {
            out = have < 0 ? NULL : Py_NewRef(Py_None);
            goto end;
        }
    }
    if (locked(c, 1) < 0) {
        goto end;
    }
    int ok = 1, asked = 0;
    PyObject *d = PyDict_GetItemWithError(c->digests, call);
    if (d == NULL && PyErr_Occurred()) {
        ok = 0;
    } else if (d != NULL) {
        int eq = PyObject_RichCompareBool(d, dg, Py_EQ);
        if (eq <= 0) {  /* another digest (or an error): the general path compares */
            ok = eq < 0 ? 0 : -1;
        }
    }
    if (ok == 1 && PyDict_GET_SIZE(c->verdicts)) {
        int v = PyDict_Contains(c->verdicts, call);
        ok = v < 0 ? 0 : (v ? -1 : 1);
    }
    PyObject *got = NULL;
    if (ok == 1) {
        got = PyList_New(PyTuple_GET_SIZE(keys));
        ok = got != NULL;
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(keys); i++) {
            PyObject *k = PyTuple_GET_ITEM(keys, i);
            PyObject *v = PyDict_GetItemWithError(c->ready, k);
            if (v == NULL) {
                ok = 0;
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_RuntimeError, "finish: a message went missing");
                }
                break;
            }
            PyList_SET_ITEM(got, i, Py_NewRef(v));
            ok = PyDict_DelItem(c->ready, k) == 0;
        }
        if (ok && d != NULL) {
            ok = PyDict_DelItem(c->digests, call) == 0;
        }
        long sq = ok ? PyLong_AsLong(seq_o) : -1;
        PyObject *nxt = ok && !(sq == -1 && PyErr_Occurred()) ? PyLong_FromLong(sq + 1) : NULL;
        ok = ok && nxt != NULL && PyDict_SetItem(c->next_seq, tid, nxt) == 0;
        Py_XDECREF(nxt);
        if (ok && PySet_GET_SIZE(c->asked)) {
            int in = PySet_Contains(c->asked, call);
            ok = in >= 0;
            asked = in > 0;
        }
    }
    if (locked(c, 0) < 0) {
        ok = 0;
    }
    if (ok == -1) {
        out = Py_NewRef(Py_None);
    } else if (ok == 1 && (!asked || follow(c, 1, cl) == 0)) {
        out = Py_NewRef(got);
    }
    Py_XDECREF(got);
end:
    Py_XDECREF(call);
    Py_DECREF(keys);
    return out;
}

static PyMethodDef Core_methods[] = {
    {"start", (PyCFunction)(void (*)(void))Core_start, METH_FASTCALL,
     "start(key, what, data, send, complete): begin, send and enter a call."},
    {"finish", (PyCFunction)(void (*)(void))Core_finish, METH_FASTCALL,
     "finish(call, keys): wait for a call's messages and complete it."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject CoreType = AMNET_GC_TYPE(
    Core, Core, "amnet.coll._cmail.Core", Py_TPFLAGS_DEFAULT,
    .tp_doc = "One team's fast path of one rank (see amnet/coll/_fast.py).",
    .tp_methods = Core_methods, .tp_new = Core_new);
