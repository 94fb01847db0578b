/* The remote-atomic table of amnet/core/_atomics.py as hardware atomics on a word in
 * memory: shared by amnet.pshm._native (Words.atomic) and amnet.core._hot (ep.atomic's
 * node-local path), so both run exactly the same code. GCC/Clang __atomic builtins only. */
#ifndef AMNET_ATOMIC_TABLE_H
#define AMNET_ATOMIC_TABLE_H

#include <stdint.h>
#include <string.h>

/* ops and dtypes: the order of OPS and DTYPES in amnet/core/_atomics.py */
enum { OP_GET, OP_SET, OP_SWAP, OP_CAS, OP_FADD, OP_FSUB, OP_FAND, OP_FOR, OP_FXOR, OP_FMIN,
       OP_FMAX, N_OPS };
enum { DT_I4, DT_I8, DT_U4, DT_U8, DT_F4, DT_F8, N_DTYPES };

/* --- the atomic table ------------------------------------------------------------------ */

/* fadd/fsub with numpy's NaN payloads made explicit (IEEE leaves them open, and compilers
 * may swap the operands of a commutative add): a NaN operand comes out quieted, and when both
 * are NaN, fadd keeps the added value's and fsub the old value's, as numpy's in-place
 * add/subtract on x86-64 do. Everything else is the plain IEEE operation. */
#define F4_ISNAN(b) (((b) & 0x7FFFFFFFu) > 0x7F800000u)
#define F8_ISNAN(b) (((b) & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull)
#define F4_QUIET(b) ((b) | 0x00400000u)
#define F8_QUIET(b) ((b) | 0x0008000000000000ull)

/* One float width's helpers, one body for both (F the prefix, FT the float, UT its bits'
 * word, ISNAN/QUIET its NaN tests): F_of (the float of some bits) and bits_of_F (back), by
 * memcpy, which no aliasing rule forbids; F_add and F_sub on bits, as above. */
#define DEFINE_FLOAT(F, FT, UT, ISNAN, QUIET)                                               \
    static inline FT F##_of(UT b) { FT f; memcpy(&f, &b, sizeof f); return f; }            \
    static inline UT bits_of_##F(FT f) { UT b; memcpy(&b, &f, sizeof b); return b; }        \
    static inline UT                                                                        \
    F##_add(UT old, UT v)                                                                   \
    {                                                                                       \
        return ISNAN(v) ? QUIET(v) : ISNAN(old) ? QUIET(old)                                \
                                                : bits_of_##F(F##_of(old) + F##_of(v));     \
    }                                                                                       \
    static inline UT                                                                        \
    F##_sub(UT old, UT v)                                                                   \
    {                                                                                       \
        return ISNAN(old) ? QUIET(old) : ISNAN(v) ? QUIET(v)                                \
                                                  : bits_of_##F(F##_of(old) - F##_of(v));   \
    }
DEFINE_FLOAT(f4, float, uint32_t, F4_ISNAN, F4_QUIET)
DEFINE_FLOAT(f8, double, uint64_t, F8_ISNAN, F8_QUIET)

/* numpy.minimum / numpy.maximum on floats, as apply() runs them (in place on one element):
 * NaN propagates (the old value's when both are NaN, unquieted), and a tie (0.0 vs -0.0)
 * takes the new value. */
#define NP_SELECT(T, FT, of, name, cmp)                                                     \
    static inline T name(T old, T v)                                                        \
    {                                                                                       \
        FT a = of(old), b = of(v);                                                          \
        return (a cmp b || a != a) ? old : v; /* bits chosen, never converted */            \
    }
NP_SELECT(uint32_t, float, f4_of, f4_min, <)
NP_SELECT(uint32_t, float, f4_of, f4_max, >)
NP_SELECT(uint64_t, double, f8_of, f8_min, <)
NP_SELECT(uint64_t, double, f8_of, f8_max, >)

#define CAS_LOOP(T, p, old, newexpr)                                                        \
    do {                                                                                    \
        old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                         \
        for (;;) {                                                                          \
            T nv_ = (newexpr);                                                              \
            if (nv_ == old) {                                                               \
                break; /* nothing to change: a read */                                      \
            }                                                                               \
            if (__atomic_compare_exchange_n(p, &old, nv_, 0, __ATOMIC_SEQ_CST,              \
                                            __ATOMIC_SEQ_CST)) {                            \
                break;                                                                      \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* atomic32 / atomic64: one body for both widths (UT the unsigned word, ST the signed one,
 * DF/DU the float and unsigned dtypes of that width, F the float helpers' prefix). */
#define DEFINE_ATOMIC(NAME, UT, ST, DF, DU, F)                                              \
static UT                                                                                  \
NAME(UT *p, int op, int di, UT v, UT v2)                                                   \
{                                                                                          \
    UT old;                                                                                \
    switch (op) {                                                                          \
    case OP_GET:                                                                           \
        return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                       \
    case OP_SET:                                                                           \
    case OP_SWAP:                                                                          \
        return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                \
    case OP_CAS:                                                                           \
        if (di != DF) {                                                                    \
            old = v;                                                                       \
            __atomic_compare_exchange_n(p, &old, v2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
            return old;                                                                    \
        }                                                                                  \
        old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                        \
        for (;;) {                                                                         \
            if (old != v && !(F##_of(old) == F##_of(v))) {                                 \
                return old;                                                                \
            }                                                                              \
            if (__atomic_compare_exchange_n(p, &old, v2, 0, __ATOMIC_SEQ_CST,              \
                                            __ATOMIC_SEQ_CST)) {                           \
                return old;                                                                \
            }                                                                              \
        }                                                                                  \
    case OP_FAND:                                                                          \
        return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);                                 \
    case OP_FOR:                                                                           \
        return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);                                  \
    case OP_FXOR:                                                                          \
        return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);                                 \
    default:                                                                               \
        break;                                                                             \
    }                                                                                      \
    if (di == DF) {                                                                        \
        switch (op) {                                                                      \
        case OP_FADD:                                                                      \
            CAS_LOOP(UT, p, old, F##_add(old, v));                                         \
            return old;                                                                    \
        case OP_FSUB:                                                                      \
            CAS_LOOP(UT, p, old, F##_sub(old, v));                                         \
            return old;                                                                    \
        case OP_FMIN:                                                                      \
            CAS_LOOP(UT, p, old, F##_min(old, v));                                         \
            return old;                                                                    \
        default: /* OP_FMAX */                                                             \
            CAS_LOOP(UT, p, old, F##_max(old, v));                                         \
            return old;                                                                    \
        }                                                                                  \
    }                                                                                      \
    switch (op) {                                                                          \
    case OP_FADD:                                                                          \
        return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);                                 \
    case OP_FSUB:                                                                          \
        return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);                                 \
    case OP_FMIN:                                                                          \
        if (di == DU) {                                                                    \
            CAS_LOOP(UT, p, old, old < v ? old : v);                                       \
        }                                                                                  \
        else {                                                                             \
            CAS_LOOP(UT, p, old, (ST)old < (ST)v ? old : v);                               \
        }                                                                                  \
        return old;                                                                        \
    default: /* OP_FMAX */                                                                 \
        if (di == DU) {                                                                    \
            CAS_LOOP(UT, p, old, old > v ? old : v);                                       \
        }                                                                                  \
        else {                                                                             \
            CAS_LOOP(UT, p, old, (ST)old > (ST)v ? old : v);                               \
        }                                                                                  \
        return old;                                                                        \
    }                                                                                      \
}

DEFINE_ATOMIC(atomic32, uint32_t, int32_t, DT_F4, DT_U4, f4)
DEFINE_ATOMIC(atomic64, uint64_t, int64_t, DT_F8, DT_U8, f8)

#endif
