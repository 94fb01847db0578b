/* amnet.core._hot: the module (its state, current_token, set_errors, PyInit__hot). The
 * design notes, and which file holds what, are in _hot.h. */

#include "_hot.h"
#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>  /* PyMemberDef; T_OBJECT_EX, Py_T_OBJECT_EX from 3.12 */
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif

/* module state: the amnet exceptions, the current token of each thread                  */

PyObject *InitError, *AMContextError;
/* what a handler is told when it sends anything but its one reply (set_errors: the engine's
 * FORWARD_HINT and REPLY_HINT, so that C and Python say the same words) */
PyObject *ForwardHint, *ReplyHint, *RestrictedHint;
Py_tss_t cur_token = Py_tss_NEEDS_INIT;
PyObject *HandleClass, *DoneClass, *DoneObj, *KindGet, *KindPut;
Py_ssize_t HandleSlots[3], DoneSlot;

/* the offset of the __slots__ member ``name`` of class ``cls``, or -1 with an exception */
static Py_ssize_t
slot_offset(PyObject *cls, const char *name)
{
    PyObject *d = PyObject_GetAttrString(cls, name);
    if (d == NULL) return -1;
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == Py_T_OBJECT_EX) off = m->offset;
    }
    Py_DECREF(d);
    if (off < 0) PyErr_Format(PyExc_TypeError, "%s is no object slot", name);
    return off;
}

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
    PyObject *a, *b, *c, *d, *e;
    if (!PyArg_ParseTuple(args, "OOUUU", &a, &b, &c, &d, &e)) {
        return NULL;
    }
    Py_XSETREF(InitError, Py_NewRef(a));
    Py_XSETREF(AMContextError, Py_NewRef(b));
    Py_XSETREF(ForwardHint, Py_NewRef(c));
    Py_XSETREF(ReplyHint, Py_NewRef(d));
    Py_XSETREF(RestrictedHint, Py_NewRef(e));
    Py_RETURN_NONE;
}

static PyObject *
set_handles(PyObject *m, PyObject *args)
{
    PyObject *h, *d, *done;
    if (!PyArg_ParseTuple(args, "OOO", &h, &d, &done)) {
        return NULL;
    }
    if (!PyType_Check(h) || !PyType_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "set_handles needs the Handle and Done classes");
        return NULL;
    }
    /* exactly their slots, nothing else (no __dict__, no __weakref__, no other slot that
     * the objects made in C would leave NULL) */
    Py_ssize_t base = PyBaseObject_Type.tp_basicsize;
    if (((PyTypeObject *)h)->tp_basicsize != base + 3 * (Py_ssize_t)sizeof(PyObject *)
            || ((PyTypeObject *)d)->tp_basicsize != base + (Py_ssize_t)sizeof(PyObject *)
            || ((PyTypeObject *)h)->tp_dictoffset != 0
            || ((PyTypeObject *)d)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "set_handles: Handle must have exactly the slots "
                        "_eng, _op, kind and Done exactly value");
        return NULL;
    }
    Py_ssize_t hs[3], ds;
    if ((hs[0] = slot_offset(h, "_eng")) < 0 || (hs[1] = slot_offset(h, "_op")) < 0
            || (hs[2] = slot_offset(h, "kind")) < 0 || (ds = slot_offset(d, "value")) < 0) {
        return NULL;
    }
    memcpy(HandleSlots, hs, sizeof hs);
    DoneSlot = ds;
    Py_XSETREF(HandleClass, Py_NewRef(h));
    Py_XSETREF(DoneClass, Py_NewRef(d));
    Py_XSETREF(DoneObj, Py_NewRef(done));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"current_token", current_token, METH_NOARGS,
     "current_token() -> Token | None: the token of the handler running on this thread."},
    {"set_errors", set_errors, METH_VARARGS, NULL},
    {"set_handles", set_handles, METH_VARARGS, NULL},
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
    RestrictedHint = PyUnicode_FromString("");
    KindGet = PyUnicode_InternFromString("get");
    KindPut = PyUnicode_InternFromString("put");
    if (ForwardHint == NULL || ReplyHint == NULL || RestrictedHint == NULL || KindGet == NULL || KindPut == NULL) {
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
            || PyModule_AddObjectRef(m, "EndpointBase", (PyObject *)&EndpointBase_Type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#define ADD_CONSTANT(name, value) \
    if (PyModule_AddIntConstant(m, name, value) < 0) { \
        Py_DECREF(m); \
        return NULL; \
    }
    HOT_CONSTANTS(ADD_CONSTANT)  /* _hot.h: the wire's numbers, the progress rules' */
#undef ADD_CONSTANT
    return m;
}
