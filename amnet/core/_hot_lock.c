/* amnet.core._hot: the Lock type, a plain mutex usable from C without a method call (the
 * engine's drain lock, the request queues' producer locks). lock_try, lock_wait and lock_rel,
 * which the hot path takes it with, are inline in _hot.h. */

#include "_hot.h"

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

PyTypeObject Lock_Type = AMNET_TYPE(
    Lock, LockObject, "amnet.core._hot.Lock", Py_TPFLAGS_DEFAULT,
    .tp_doc = "A mutex that C code takes without a method call (the engine's drain lock).",
    .tp_methods = Lock_methods, .tp_new = Lock_new);
