/* amnet.coll._cmail: what its files share (one extension: _cmail.c, the module and the data
 * handler's common case; _cmail_core.c, the fast path's bookkeeping). */
#ifndef AMNET_COLL_CMAIL_H
#define AMNET_COLL_CMAIL_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyTypeObject CoreType;     /* Core: one team's fast path of one rank */
extern PyTypeObject KeyPredType;  /* the wait's predicate of Core.finish */

#endif
