/* amnet.pshm._native: the few machine-level primitives the shared-memory network needs.
 *
 * - fence(): a full (sequentially consistent) memory fence.
 * - Words: aligned 8-byte atomic loads, stores and fetch-adds on a shared buffer, and the
 *   remote-atomic table of amnet/core/_atomics.py run as real hardware atomics.
 * - sysv_create / sysv_attach / sysv_remove: System V shared memory, for the sysv backing.
 *
 * Only GCC/Clang __atomic builtins are used (no platform assembly), so the ordering is right
 * on weakly ordered machines (arm64, POWER) as well as on x86-64 TSO.
 *
 * Free threading: with Py_GIL_DISABLED every Words method runs inside a critical section on
 * the object, so release() can never free the buffer under a concurrent load/store. The
 * memory operations themselves are atomic whatever the build.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/types.h>

#ifdef Py_GIL_DISABLED
#define OBJ_LOCK(o) Py_BEGIN_CRITICAL_SECTION(o)
#define OBJ_UNLOCK(o) Py_END_CRITICAL_SECTION()
#else
#define OBJ_LOCK(o) {
#define OBJ_UNLOCK(o) }
#endif

typedef struct {
    PyTypeObject *words_type;
    PyTypeObject *sysv_type;
} native_state;

static inline native_state *
get_state(PyObject *module)
{
    return (native_state *)PyModule_GetState(module);
}

/* ------------------------------------------------------------------------------------ */
/* argument helpers                                                                       */

/* An int in [-2**63, 2**64) as its 64-bit pattern; OverflowError/TypeError otherwise. */
static int
as_bits64(PyObject *o, uint64_t *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(o);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        *out = (uint64_t)u;
        return 0;
    }
    if (overflow < 0) {
        PyErr_SetString(PyExc_OverflowError, "value does not fit 64 bits");
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static int
as_ssize(PyObject *o, Py_ssize_t *out)
{
    Py_ssize_t v = PyNumber_AsSsize_t(o, PyExc_IndexError);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = v;
    return 0;
}

static int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t want)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name,
                     want, nargs);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* fence                                                                                  */

static PyObject *
native_fence(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------ */
/* Words                                                                                  */

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int held;           /* view holds an export */
    Py_ssize_t nwords;
    char *base;
    Py_ssize_t nbytes;
} WordsObject;

static PyObject *
Words_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *obj;
    static char *kwlist[] = {"buffer", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Words", kwlist, &obj)) {
        return NULL;
    }
    WordsObject *self = (WordsObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    if (PyObject_GetBuffer(obj, &self->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->held = 1;
    if (((uintptr_t)self->view.buf) % 8 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "Words needs a buffer whose base is 8-byte aligned, got address %p",
                     self->view.buf);
        Py_DECREF(self);
        return NULL;
    }
    self->base = (char *)self->view.buf;
    self->nbytes = self->view.len;
    self->nwords = self->view.len / 8;
    return (PyObject *)self;
}

static void
Words_release_view(WordsObject *self)
{
    if (self->held) {
        self->held = 0;
        self->base = NULL;
        self->nwords = 0;
        self->nbytes = 0;
        PyBuffer_Release(&self->view);
    }
}

static void
Words_dealloc(WordsObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Words_release_view(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
words_closed(void)
{
    PyErr_SetString(PyExc_ValueError, "operation on a released Words");
    return -1;
}

/* word index -> pointer; -1 with IndexError/ValueError set */
static inline int
word_ptr(WordsObject *self, PyObject *arg, int64_t **out)
{
    Py_ssize_t i;
    if (as_ssize(arg, &i) < 0) {
        return -1;
    }
    if (!self->held) {
        return words_closed();
    }
    if (i < 0 || i >= self->nwords) {
        PyErr_Format(PyExc_IndexError, "word index %zd out of range(%zd)", i, self->nwords);
        return -1;
    }
    *out = (int64_t *)(self->base) + i;
    return 0;
}

static PyObject *
Words_load(WordsObject *self, PyObject *arg)
{
    PyObject *res = NULL;
    int64_t *p;
    OBJ_LOCK(self);
    if (word_ptr(self, arg, &p) == 0) {
        res = PyLong_FromLongLong(__atomic_load_n(p, __ATOMIC_ACQUIRE));
    }
    OBJ_UNLOCK(self);
    return res;
}

/* store(i, v) and fetch_add(i, d), one owner: the word's index and value checked, then the
 * write under the object's lock (add: a wrapping fetch-and-add, the old value returned;
 * else a store) */
static inline PyObject *
words_write(WordsObject *self, PyObject *const *args, Py_ssize_t nargs, int add)
{
    PyObject *res = NULL;
    int64_t *p;
    uint64_t v;
    if (check_nargs(add ? "fetch_add" : "store", nargs, 2) < 0 || as_bits64(args[1], &v) < 0) {
        return NULL;
    }
    OBJ_LOCK(self);
    if (word_ptr(self, args[0], &p) == 0) {
        if (add) {
            uint64_t old = __atomic_fetch_add((uint64_t *)p, v, __ATOMIC_SEQ_CST);
            res = PyLong_FromLongLong((long long)(int64_t)old);
        } else {
            __atomic_store_n(p, (int64_t)v, __ATOMIC_SEQ_CST);
            res = Py_NewRef(Py_None);
        }
    }
    OBJ_UNLOCK(self);
    return res;
}

static PyObject *
Words_store(WordsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return words_write(self, args, nargs, 0);
}

static PyObject *
Words_fetch_add(WordsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return words_write(self, args, nargs, 1);
}

#include "_atomic_table.h"
#include "_queue.h"

/* value bits of a dtype: the signed int of its size, as numpy's astype would take it */
static int
as_bits_of(PyObject *o, int size, uint64_t *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || (size == 4 && (v < INT32_MIN || v > INT32_MAX))) {
        PyErr_Format(PyExc_OverflowError, "value bits do not fit a signed %d-byte int",
                     size);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static PyObject *
Words_atomic(WordsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t offset;
    long opl, dil;
    uint64_t b1 = 0, b2 = 0;
    if (check_nargs("atomic", nargs, 5) < 0 || as_ssize(args[0], &offset) < 0) {
        return NULL;
    }
    opl = PyLong_AsLong(args[1]);
    if (opl == -1 && PyErr_Occurred()) {
        return NULL;
    }
    dil = PyLong_AsLong(args[2]);
    if (dil == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (opl < 0 || opl >= N_OPS) {
        PyErr_Format(PyExc_ValueError, "atomic op index %ld not in range(%d)", opl, N_OPS);
        return NULL;
    }
    if (dil < 0 || dil >= N_DTYPES) {
        PyErr_Format(PyExc_ValueError, "atomic dtype index %ld not in range(%d)", dil,
                     N_DTYPES);
        return NULL;
    }
    int op = (int)opl, di = (int)dil;
    int size = (di == DT_I8 || di == DT_U8 || di == DT_F8) ? 8 : 4;
    int isfloat = (di == DT_F4 || di == DT_F8);
    if (isfloat && (op == OP_FAND || op == OP_FOR || op == OP_FXOR)) {
        PyErr_SetString(PyExc_ValueError, "bitwise atomic op on a float dtype");
        return NULL;
    }
    if (op != OP_GET && as_bits_of(args[3], size, &b1) < 0) {
        return NULL;
    }
    if (op == OP_CAS && as_bits_of(args[4], size, &b2) < 0) {
        return NULL;
    }
    PyObject *res = NULL;
    OBJ_LOCK(self);
    if (!self->held) {
        words_closed();
    }
    else if (offset < 0 || offset > self->nbytes - size) {
        PyErr_Format(PyExc_IndexError, "atomic offset %zd (+%d bytes) out of a %zd-byte buffer",
                     offset, size, self->nbytes);
    }
    else if (offset % size != 0) {
        PyErr_Format(PyExc_ValueError, "atomic offset %zd is not aligned to %d bytes", offset,
                     size);
    }
    else if (size == 4) {
        uint32_t old = atomic32((uint32_t *)(self->base + offset), op, di, (uint32_t)b1,
                                (uint32_t)b2);
        res = PyLong_FromLong((long)(int32_t)old);
    }
    else {
        uint64_t old = atomic64((uint64_t *)(self->base + offset), op, di, b1, b2);
        res = PyLong_FromLongLong((long long)(int64_t)old);
    }
    OBJ_UNLOCK(self);
    return res;
}

static PyObject *
Words_release(WordsObject *self, PyObject *Py_UNUSED(ignored))
{
    OBJ_LOCK(self);
    Words_release_view(self);
    OBJ_UNLOCK(self);
    Py_RETURN_NONE;
}

static PyObject *
Words_get_nwords(WordsObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->nwords);
}

static PyObject *
Words_get_released(WordsObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(!self->held);
}

static PyMethodDef Words_methods[] = {
    {"load", (PyCFunction)Words_load, METH_O,
     "load(i) -> int: acquire-load int64 word i. Raises IndexError, ValueError if released."},
    {"store", (PyCFunction)(void (*)(void))Words_store, METH_FASTCALL,
     "store(i, v): seq-cst store of v (an int in [-2**63, 2**64)) into word i.\n"
     "Raises IndexError, OverflowError, ValueError if released."},
    {"fetch_add", (PyCFunction)(void (*)(void))Words_fetch_add, METH_FASTCALL,
     "fetch_add(i, d) -> int: seq-cst wrapping add of d to word i; returns the old value.\n"
     "Raises IndexError, OverflowError, ValueError if released."},
    {"atomic", (PyCFunction)(void (*)(void))Words_atomic, METH_FASTCALL,
     "atomic(offset, opi, di, b1, b2) -> int: amnet.core._atomics.apply as a hardware\n"
     "atomic; returns the old value's bits. Raises IndexError (offset out of range),\n"
     "ValueError (misaligned offset, bad op/dtype index, bitwise op on floats, released),\n"
     "OverflowError (bits that do not fit the dtype's size)."},
    {"release", (PyCFunction)Words_release, METH_NOARGS,
     "release(): drop the buffer export; later calls raise ValueError. Idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Words_getset[] = {
    {"nwords", (getter)Words_get_nwords, NULL, "length of the buffer in int64 words", NULL},
    {"released", (getter)Words_get_released, NULL, "whether release() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Words_doc,
"Words(buffer): atomic int64 words over a writable, C-contiguous, 8-byte aligned buffer.\n\n"
"Holds the buffer export until release() or deallocation. Raises BufferError/TypeError\n"
"when the object exports no writable contiguous buffer, ValueError when its base is not\n"
"8-byte aligned.");

static PyType_Slot Words_slots[] = {
    {Py_tp_new, Words_new},
    {Py_tp_dealloc, Words_dealloc},
    {Py_tp_methods, Words_methods},
    {Py_tp_getset, Words_getset},
    {Py_tp_doc, (void *)Words_doc},
    {0, NULL},
};

static PyType_Spec Words_spec = {
    .name = "amnet.pshm._native.Words",
    .basicsize = sizeof(WordsObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Words_slots,
};

/* ------------------------------------------------------------------------------------ */
/* SysV shared memory                                                                     */

typedef struct {
    PyObject_HEAD
    void *addr;          /* NULL once detached */
    Py_ssize_t size;
    Py_ssize_t exports;
    int shmid;
} SysvObject;

static PyObject *
native_sysv_create(PyObject *module, PyObject *arg)
{
    Py_ssize_t size = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (size <= 0) {
        PyErr_Format(PyExc_ValueError, "sysv_create: size must be positive, got %zd", size);
        return NULL;
    }
    int id = shmget(IPC_PRIVATE, (size_t)size, IPC_CREAT | 0600);
    if (id == -1) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(id);
}

static int
as_shmid(PyObject *arg, int *out)
{
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (id < 0 || id > INT32_MAX) {
        errno = EINVAL;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *out = (int)id;
    return 0;
}

static PyObject *
native_sysv_attach(PyObject *module, PyObject *arg)
{
    int id;
    struct shmid_ds ds;
    if (as_shmid(arg, &id) < 0) {
        return NULL;
    }
    if (shmctl(id, IPC_STAT, &ds) == -1) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    void *addr = shmat(id, NULL, 0);
    if (addr == (void *)-1) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyTypeObject *tp = get_state(module)->sysv_type;
    SysvObject *self = (SysvObject *)tp->tp_alloc(tp, 0);
    if (self == NULL) {
        shmdt(addr);
        return NULL;
    }
    self->addr = addr;
    self->size = (Py_ssize_t)ds.shm_segsz;
    self->exports = 0;
    self->shmid = id;
    return (PyObject *)self;
}

static PyObject *
native_sysv_remove(PyObject *module, PyObject *arg)
{
    int id;
    if (as_shmid(arg, &id) < 0) {
        return NULL;
    }
    if (shmctl(id, IPC_RMID, NULL) == -1) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static int
Sysv_getbuffer(SysvObject *self, Py_buffer *view, int flags)
{
    int rc = -1;
    OBJ_LOCK(self);
    if (self->addr == NULL) {
        PyErr_SetString(PyExc_ValueError, "SysvMapping is closed");
    }
    else if (PyBuffer_FillInfo(view, (PyObject *)self, self->addr, self->size, 0, flags) == 0) {
        self->exports++;
        rc = 0;
    }
    OBJ_UNLOCK(self);
    return rc;
}

static void
Sysv_releasebuffer(SysvObject *self, Py_buffer *Py_UNUSED(view))
{
    OBJ_LOCK(self);
    self->exports--;
    OBJ_UNLOCK(self);
}

static PyObject *
Sysv_close(SysvObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *res = NULL;
    OBJ_LOCK(self);
    if (self->exports > 0) {
        PyErr_Format(PyExc_BufferError,
                     "cannot close a SysvMapping with %zd buffer export(s) alive",
                     self->exports);
    }
    else {
        if (self->addr != NULL && shmdt(self->addr) == -1) {
            PyErr_SetFromErrno(PyExc_OSError);
        }
        else {
            self->addr = NULL;
            res = Py_NewRef(Py_None);
        }
    }
    OBJ_UNLOCK(self);
    return res;
}

static void
Sysv_dealloc(SysvObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->addr != NULL) {
        shmdt(self->addr); /* no export can be alive: each holds a reference */
        self->addr = NULL;
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
Sysv_enter(SysvObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(self);
}

static PyObject *
Sysv_exit(SysvObject *self, PyObject *const *Py_UNUSED(args), Py_ssize_t Py_UNUSED(n))
{
    return Sysv_close(self, NULL);
}

static Py_ssize_t
Sysv_len(SysvObject *self)
{
    return self->size;
}

static PyObject *
Sysv_get_size(SysvObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->size);
}

static PyObject *
Sysv_get_shmid(SysvObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->shmid);
}

static PyObject *
Sysv_get_closed(SysvObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->addr == NULL);
}

static PyMethodDef Sysv_methods[] = {
    {"close", (PyCFunction)Sysv_close, METH_NOARGS,
     "close(): detach (shmdt). Raises BufferError while buffer exports are alive,\n"
     "OSError if shmdt fails. Idempotent."},
    {"__enter__", (PyCFunction)Sysv_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Sysv_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Sysv_getset[] = {
    {"size", (getter)Sysv_get_size, NULL, "size of the segment in bytes", NULL},
    {"shmid", (getter)Sysv_get_shmid, NULL, "the SysV shm id", NULL},
    {"closed", (getter)Sysv_get_closed, NULL, "whether close() detached it", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Sysv_doc,
"A SysV shared memory segment attached to this process (made by sysv_attach).\n\n"
"Exports its memory as a writable buffer; getting a buffer of a closed mapping raises\n"
"ValueError. Deallocation detaches it.");

static PyType_Slot Sysv_slots[] = {
    {Py_tp_dealloc, Sysv_dealloc},
    {Py_tp_methods, Sysv_methods},
    {Py_tp_getset, Sysv_getset},
    {Py_tp_doc, (void *)Sysv_doc},
    {Py_bf_getbuffer, Sysv_getbuffer},
    {Py_bf_releasebuffer, Sysv_releasebuffer},
    {Py_sq_length, Sysv_len},
    {0, NULL},
};

static PyType_Spec Sysv_spec = {
    .name = "amnet.pshm._native.SysvMapping",
    .basicsize = sizeof(SysvObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Sysv_slots,
};

/* ------------------------------------------------------------------------------------ */
/* module                                                                                 */

static PyMethodDef native_methods[] = {
    {"fence", native_fence, METH_NOARGS,
     "fence(): a sequentially consistent memory fence (__atomic_thread_fence)."},
    {"sysv_create", native_sysv_create, METH_O,
     "sysv_create(size) -> int: shmget(IPC_PRIVATE, size, IPC_CREAT|0600); the shm id.\n"
     "Raises ValueError (size <= 0), OSError with errno (ENOMEM, ENOSPC, EINVAL...)."},
    {"sysv_attach", native_sysv_attach, METH_O,
     "sysv_attach(shmid) -> SysvMapping: shmat the segment. Raises OSError with errno\n"
     "(EINVAL/EIDRM: no such id, EACCES)."},
    {"sysv_remove", native_sysv_remove, METH_O,
     "sysv_remove(shmid): shmctl(IPC_RMID). Attached processes keep it until they detach.\n"
     "Raises OSError with errno (EINVAL/EIDRM: no such id, EPERM)."},
    {NULL, NULL, 0, NULL},
};

static int
native_exec(PyObject *module)
{
    native_state *st = get_state(module);
    st->words_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Words_spec, NULL);
    if (st->words_type == NULL || PyModule_AddType(module, st->words_type) < 0) {
        return -1;
    }
    st->sysv_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &Sysv_spec, NULL);
    if (st->sysv_type == NULL || PyModule_AddType(module, st->sysv_type) < 0) {
        return -1;
    }
#define ADD_CONSTANT(name, value) \
    if (PyModule_AddIntConstant(module, name, value) < 0) { \
        return -1; \
    }
    PSHM_QUEUE_CONSTANTS(ADD_CONSTANT)
#undef ADD_CONSTANT
    return 0;
}

static int
native_traverse(PyObject *module, visitproc visit, void *arg)
{
    native_state *st = get_state(module);
    Py_VISIT(st->words_type);
    Py_VISIT(st->sysv_type);
    return 0;
}

static int
native_clear(PyObject *module)
{
    native_state *st = get_state(module);
    Py_CLEAR(st->words_type);
    Py_CLEAR(st->sysv_type);
    return 0;
}

static void
native_free(void *module)
{
    native_clear((PyObject *)module);
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, native_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_GIL_DISABLED
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

PyDoc_STRVAR(native_doc,
"Machine-level primitives of the shared-memory network: fences, atomic words over shared\n"
"buffers, the remote-atomic table as hardware atomics, and SysV shared memory.");

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "amnet.pshm._native",
    .m_doc = native_doc,
    .m_size = sizeof(native_state),
    .m_methods = native_methods,
    .m_slots = native_slots,
    .m_traverse = native_traverse,
    .m_clear = native_clear,
    .m_free = native_free,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
