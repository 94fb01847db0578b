/* amnet.coll._cmail: what its files share (one extension: _cmail.c, the module and the data
 * handler's common case; _cmail_core.c, the fast path's bookkeeping). */
#ifndef AMNET_COLL_CMAIL_H
#define AMNET_COLL_CMAIL_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../_c/pyext.h"  /* what amnet's extensions share: type shapes, discard */

/* Free threading: d[k] as a new reference (NULL and no error when absent); a borrowed one
 * could be freed by another thread's store meanwhile. 3.11 and 3.12 (always with the GIL)
 * get the same call. */
static inline int
cm_dict_ref(PyObject *d, PyObject *k, PyObject **v)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyDict_GetItemRef(d, k, v);
#else
    *v = Py_XNewRef(PyDict_GetItemWithError(d, k));
    return *v != NULL ? 1 : PyErr_Occurred() ? -1 : 0;
#endif
}

extern PyTypeObject CoreType;     /* Core: one team's fast path of one rank */
extern PyTypeObject KeyPredType;  /* the wait's predicate of Core.finish */

#endif
