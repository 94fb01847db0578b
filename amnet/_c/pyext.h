/* What amnet's C extensions share (amnet.core._hot, amnet.coll._cmail, amnet.coll._shm,
 * amnet.conduits._mpiring): the shape of their static types and of their references' garbage
 * collection, a call's result let go, little-endian integers. Each extension is a .so of its own, so this header
 * holds only macros and static inline functions: each expands in place, at no call's cost,
 * and the hot paths compile to the code they were written out as before.
 *
 * Include it after <Python.h> (each extension's internal header does). */

#ifndef AMNET_C_PYEXT_H
#define AMNET_C_PYEXT_H

#include <stdint.h>

/* A call's result that is not wanted: 0, or -1 when the call failed (r NULL, its error
 * set). `return discard(PyObject_CallNoArgs(f));` */
static inline int
discard(PyObject *r)
{
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* n bytes of v, little-endian, at p (the wire's and the envelopes' integers), and back */
static inline void
put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static inline uint64_t
get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

/* A static type, in the shape every type of ours has: named `name` (module.Class), its
 * objects `Obj`, its functions named P_* (P_dealloc at least), `flags` (Py_TPFLAGS_DEFAULT
 * and any others), then the slots that differ as designated initializers (.tp_doc = ...,
 * .tp_methods = ..., ...). `PyTypeObject Lock_Type = AMNET_TYPE(Lock, LockObject, ...);` */
#define AMNET_TYPE(P, Obj, name, flags, ...) {                                            \
        PyVarObject_HEAD_INIT(NULL, 0)                                                    \
        .tp_name = (name),                                                                \
        .tp_basicsize = sizeof(Obj),                                                      \
        .tp_dealloc = (destructor)P##_dealloc,                                            \
        .tp_flags = (flags),                                                              \
        __VA_ARGS__                                                                       \
    }

/* The same for a type whose objects take part in the garbage collector's search (they may
 * be part of reference cycles): P_traverse and P_clear too (AMNET_GC_FUNCS makes them). */
#define AMNET_GC_TYPE(P, Obj, name, flags, ...)                                           \
    AMNET_TYPE(P, Obj, name, (flags) | Py_TPFLAGS_HAVE_GC,                                \
               .tp_traverse = (traverseproc)P##_traverse, .tp_clear = (inquiry)P##_clear, \
               __VA_ARGS__)

/* A GC type's P_traverse and P_clear from one list of the object's references, REFS(X)
 * calling X(field) for each: a reference added to the list is visited and cleared alike.
 * P_dealloc, which untracks the object and clears it first, is the type's own (what else
 * the object owns differs); AMNET_GC_DEALLOC is the one for those that own nothing else. */
#define AMNET_GC_VISIT_(f) Py_VISIT(o->f);
#define AMNET_GC_CLEAR_(f) Py_CLEAR(o->f);
#define AMNET_GC_FUNCS(P, Obj, REFS)                                                      \
    static int                                                                            \
    P##_traverse(Obj *o, visitproc visit, void *arg)                                      \
    {                                                                                     \
        REFS(AMNET_GC_VISIT_)                                                             \
        return 0;                                                                         \
    }                                                                                     \
    static int                                                                            \
    P##_clear(Obj *o)                                                                     \
    {                                                                                     \
        REFS(AMNET_GC_CLEAR_)                                                             \
        return 0;                                                                         \
    }
#define AMNET_GC_DEALLOC(P, Obj)                                                          \
    static void                                                                           \
    P##_dealloc(Obj *o)                                                                   \
    {                                                                                     \
        PyObject_GC_UnTrack(o);                                                           \
        P##_clear(o);                                                                     \
        Py_TYPE(o)->tp_free((PyObject *)o);                                               \
    }

/* Release the buffers of an array of n that were taken (obj set), then free the array
 * (NULL: none). */
static inline void
release_buffers(Py_buffer *b, Py_ssize_t n)
{
    if (b != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (b[i].obj != NULL) {
                PyBuffer_Release(&b[i]);
            }
        }
        PyMem_Free(b);
    }
}

#endif /* AMNET_C_PYEXT_H */
