/* amnet.coll._cmail: the collectives' DATA handler's common case in C.
 *
 * Every data message of amnet.coll goes through Mailbox.on_data (amnet/coll/_msg.py); in
 * Python that costs about as much as the message itself (three frames, a lock, five dict
 * operations). store() files the common case -- a whole message (one chunk, no
 * acknowledgement wanted) for a call that is neither failed (dead) nor completed, with no
 * receive buffer posted anywhere in the mailbox -- exactly as on_data would: its digest
 * noted under the call (CONFLICT when it differs from one noted before), its bytes in
 * ``ready`` under (team, seq, tag, index). Anything else returns False with nothing changed,
 * and the caller hands the message to on_data.
 *
 * The mailbox's lock is taken as on_data takes it (its acquire and release, called), so
 * the rank's own thread, which reads and changes the same dicts under it, sees the message
 * filed all at once. Only dicts and sets with tuple-of-int keys are touched: no Python code
 * runs in between. The fast path's Core is in _cmail_core.c.
 */
#include "_cmail.h"

/* store(state, args, payload) -> bool. state: the Mailbox's c_state tuple (acquire,
 * release, dead, active, next_seq, digests, posted, ready, CONFLICT). */
static PyObject *
store(PyObject *mod, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_CheckExact(argv[0]) || PyTuple_GET_SIZE(argv[0]) != 9
            || !PyTuple_CheckExact(argv[1]) || PyTuple_GET_SIZE(argv[1]) != 8) {
        Py_RETURN_FALSE;
    }
    PyObject *st = argv[0], *a = argv[1], *payload = argv[2];
    PyObject *acquire = PyTuple_GET_ITEM(st, 0), *release = PyTuple_GET_ITEM(st, 1);
    PyObject *dead = PyTuple_GET_ITEM(st, 2), *active = PyTuple_GET_ITEM(st, 3);
    PyObject *next_seq = PyTuple_GET_ITEM(st, 4), *digests = PyTuple_GET_ITEM(st, 5);
    PyObject *posted = PyTuple_GET_ITEM(st, 6), *ready = PyTuple_GET_ITEM(st, 7);
    PyObject *conflict = PyTuple_GET_ITEM(st, 8);
    for (Py_ssize_t i = 0; i < 8; i++) {
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(a, i))) {
            Py_RETURN_FALSE;
        }
    }
    /* chunk 0 of n == 1, no acknowledgement */
    long chunk = PyLong_AsLong(PyTuple_GET_ITEM(a, 4));
    long n = PyLong_AsLong(PyTuple_GET_ITEM(a, 5));
    long ack = PyLong_AsLong(PyTuple_GET_ITEM(a, 7));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (chunk != 0 || n != 1 || ack != 0 || !PyDict_CheckExact(posted)
            || PyDict_GET_SIZE(posted) != 0) {
        Py_RETURN_FALSE;
    }
    PyObject *team = PyTuple_GET_ITEM(a, 0), *seq = PyTuple_GET_ITEM(a, 1);
    PyObject *digest = PyTuple_GET_ITEM(a, 6);
    PyObject *data;
    if (payload == Py_None) {
        data = PyBytes_FromStringAndSize(NULL, 0);
    } else {
        data = PyBytes_FromObject(payload);
    }
    if (data == NULL) {
        return NULL;
    }
    PyObject *call = PyTuple_Pack(2, team, seq);
    PyObject *key = PyTuple_Pack(4, team, seq, PyTuple_GET_ITEM(a, 2), PyTuple_GET_ITEM(a, 3));
    if (call == NULL || key == NULL) {
        goto fail_nolock;
    }
    PyObject *r = PyObject_CallNoArgs(acquire);
    if (r == NULL) {
        goto fail_nolock;
    }
    Py_DECREF(r);
    int filed = 0;
    int c = PySet_Contains(dead, call);
    if (c != 0) {
        goto done;  /* a failed call (or an error): on_data says */
    }
    c = PyDict_Contains(active, call);
    if (c < 0) {
        goto done;
    }
    if (c == 0) {
        /* not in flight: a call I have completed when seq < next_seq[team] */
        PyObject *ns = PyDict_GetItemWithError(next_seq, team);  /* borrowed */
        if (ns == NULL && PyErr_Occurred()) {
            goto done;
        }
        if (ns != NULL) {
            int lt = PyObject_RichCompareBool(seq, ns, Py_LT);
            if (lt != 0) {
                goto done;  /* late data (or an error): on_data asks the others */
            }
        }
    }
    PyObject *d = PyDict_GetItemWithError(digests, call);  /* borrowed */
    if (d == NULL) {
        if (PyErr_Occurred() || PyDict_SetItem(digests, call, digest) < 0) {
            goto done;
        }
    } else {
        int eq = PyObject_RichCompareBool(d, digest, Py_EQ);
        if (eq < 0 || (eq == 0 && PyDict_SetItem(digests, call, conflict) < 0)) {
            goto done;
        }
    }
    if (PyDict_SetItem(ready, key, data) < 0) {
        goto done;
    }
    filed = 1;
done:
    r = PyObject_CallNoArgs(release);
    Py_DECREF(call);
    Py_DECREF(key);
    Py_DECREF(data);
    if (r == NULL) {
        return NULL;
    }
    Py_DECREF(r);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(filed);
fail_nolock:
    Py_XDECREF(call);
    Py_XDECREF(key);
    Py_DECREF(data);
    return NULL;
}


static PyMethodDef methods[] = {
    {"store", (PyCFunction)(void (*)(void))store, METH_FASTCALL,
     "store(state, args, payload) -> bool: file a whole data message as Mailbox.on_data "
     "would (True), or change nothing (False: on_data takes it)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "amnet.coll._cmail",
    "The collectives' DATA handler's common case in C (see Mailbox.on_data).", -1, methods,
};

PyMODINIT_FUNC
PyInit__cmail(void)
{
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&KeyPredType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    /* every mailbox dict a handler writes is written under the mailbox's lock, here and in
     * amnet.coll._msg; what only the owning rank-thread writes (next_seq, descs, history)
     * is read through new references */
    PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
    return m;
}
