/* amnet.conduits._mpiring: MPIRing's internal interface, between _mpiring_mpi.c (the MPI
 * calls, the envelopes' send and receive) and _mpiring.c (the type: set-up, the methods the
 * conduit's Python calls, statistics; the module). The design notes are at the top of
 * _mpiring_mpi.c. */

#ifndef AMNET_CORE_HOT_MPI_H
#define AMNET_CONDUITS_MPIRING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../_c/pyext.h"  /* what amnet's extensions share: type shapes, discard */

#include <stdint.h>
#include <string.h>

#define ENVELOPE 16  /* the envelope's bytes (the module exports it: _mpi.py checks its own) */
#define REAP_AT 16
enum { K_HEADER = 0, K_INLINE = 1, K_BULK = 2 };

typedef int (*isend4_t)(const void *, int, int, int, int, int, void *);
typedef int (*isend8_t)(const void *, int, void *, int, int, void *, void *);
typedef int (*improbe4_t)(int, int, int, int *, void *, void *);
typedef int (*improbe8_t)(int, int, void *, int *, void *, void *);
typedef int (*mrecv4_t)(void *, int, int, void *, void *);
typedef int (*mrecv8_t)(void *, int, void *, void *, void *);
typedef int (*irecv4_t)(void *, int, int, int, int, int, void *);
typedef int (*irecv8_t)(void *, int, void *, int, int, void *, void *);
typedef int (*test_t)(void *, int *, void *);
typedef int (*count4_t)(const void *, int, int *);
typedef int (*count8_t)(const void *, void *, int *);
typedef int (*cancel_t)(void *);
typedef int (*wait_t)(void *, void *);

typedef struct {
    int64_t req;                     /* the request (4 or 8 bytes of it) */
    char *buf;                       /* the envelope, freed once the send completed */
} Send;

typedef struct {
    PyObject_HEAD
    void *isend, *improbe, *mrecv, *irecv, *test, *count, *cancel, *wait;
    int probe;                       /* envelopes by matched probes, else posted receives */
    int h8;                          /* handles are pointers (8 bytes), else ints */
    intptr_t comm, byte;
    int any, tag, depth, head, filled, closed, st_size, src_off, procs;
    int stopped;                     /* stop(): sends refused, nothing received */
    Py_ssize_t bufsize, inline_max, direct_max, copy_out, max_header;
    PyObject **bufs;                 /* bytearrays, one per slot of the ring */
    char *done;                      /* slot i holds an envelope not yet taken */
    Py_buffer *views;                /* their buffers, held: never resized, never moved */
    int64_t *reqs;                   /* posted receives: each slot's request */
    char *sts;                       /* each slot's MPI_Status (st_size bytes each) */
    char *st2;                       /* a scratch MPI_Status */
    Send *sends;                     /* envelopes in flight, oldest at s_head */
    Py_ssize_t s_head, s_tail, s_cap;
    int *drank, *dtag;               /* each process's rank and envelope tag (set_dests) */
    int64_t *sent, *sent_bytes;
    int64_t received, received_bytes, dropped;
    PyObject *acquire, *release, *post_slow, *take_slow;
} MPIRingObject;

#pragma GCC visibility push(hidden)

extern PyTypeObject MPIRing_Type;

/* _mpiring_mpi.c: the MPI calls with the library's handle types (0 or 1 done, -1 error set) */
int mpi_error(const char *what, int rc);
int m_isend(MPIRingObject *r, const void *buf, int n, int dest, int tag, void *req);
int m_fill(MPIRingObject *r, int i);
int m_free(MPIRingObject *r, int i);
int m_irecv(MPIRingObject *r, int i);
int m_test(MPIRingObject *r, int64_t *req, char *st);
int m_count(MPIRingObject *r, const char *st, int *count);
/* MPI_LOCK through its Python methods; unlock keeps an exception already set */
int lock_call(PyObject *fn);
void unlock(MPIRingObject *r);
int reap(MPIRingObject *r);
/* the methods on the message path (taking MPI_LOCK themselves) */
PyObject *MPIRing_send(MPIRingObject *r, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames);
PyObject *MPIRing_recv(MPIRingObject *r, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames);
PyObject *MPIRing_ready(MPIRingObject *r, PyObject *Py_UNUSED(ignored));

#pragma GCC visibility pop

#endif
