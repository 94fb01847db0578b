/* A shared-memory queue entry's layout: the one place these numbers are written.
 *
 * The AM hot path (amnet/core/_hot_queue.c) writes and reads entries with them; this
 * package's extension (amnet.pshm._native) exports them, and amnet/pshm/_layout.py takes
 * them from there to lay out a process's object (the picture: docs/pshm.md). Where the
 * queues of an object start is the layout's (Layout.queues): it hands the offsets to C.
 *
 * An entry (ENTRY bytes): word 0 the sequence number + 1 that publishes it, word 1 the
 * payload length, word 2 the header length << 8 | its flags (E_*), the AM header (the wire
 * format, amnet/core/_wire.py) from HDR_AT. */
#ifndef AMNET_PSHM_QUEUE_H
#define AMNET_PSHM_QUEUE_H

enum { Q_REQ = 0, Q_REP = 1 };         /* queue kinds: requests, replies */
enum { E_MORE = 1, E_DEPOSITED = 2 };  /* entry flags: a fragment; a Long payload in place */
enum { ENTRY = 256, HDR_AT = 24 };     /* bytes per entry; where its AM header starts */

/* name, value: what amnet.pshm._native exports */
#define PSHM_QUEUE_CONSTANTS(X) \
    X("REQ", Q_REQ) X("REP", Q_REP) X("F_MORE", E_MORE) X("F_DEPOSITED", E_DEPOSITED) \
    X("ENTRY", ENTRY) X("HDR_AT", HDR_AT)

#endif
