/*
 * shmem.h: the OpenSHMEM 1.5 C API of switchyard (libswitchyard_shmem).
 *
 * Build with `switchyard cc prog.c -o prog`, run with `switchyard run -n N ./prog`.
 * Implemented in Rust (shim-std/capi); this header declares what it exports.
 */
#ifndef SWITCHYARD_SHMEM_H
#define SWITCHYARD_SHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== version ============================================================ */

#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 5
#define SHMEM_MAX_NAME_LEN 256
#define SHMEM_VENDOR_STRING "switchyard"

/* ==== setup, memory, RMA, AMO, signals, ordering, sync, locks ============ */
/* (state.rs and the modules beside it)                                       */

/* ---- setup, query, environment ------------------------------------------- */

#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
void shmem_query_initialized(int *initialized);
void shmem_query_finalized(int *finalized);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
#if defined(__cplusplus) && __cplusplus >= 201103L
[[noreturn]]
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Noreturn
#endif
void shmem_global_exit(int status);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);

/* ---- memory ---------------------------------------------------------------- */

void *shmem_malloc(size_t size);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);

/* ---- ordering, barrier ------------------------------------------------------ */

void shmem_fence(void);
void shmem_quiet(void);
void shmem_barrier_all(void);

/* ---- RMA --------------------------------------------------------------------- */

/* X(TYPE, TYPENAME) for every standard RMA type (spec table 5). */
#define SHMEM_RMA_TYPES(X) \
    X(float, float)\
    X(double, double)\
    X(long double, longdouble)\
    X(char, char)\
    X(signed char, schar)\
    X(short, short)\
    X(int, int)\
    X(long, long)\
    X(long long, longlong)\
    X(unsigned char, uchar)\
    X(unsigned short, ushort)\
    X(unsigned int, uint)\
    X(unsigned long, ulong)\
    X(unsigned long long, ulonglong)\
    X(int8_t, int8)\
    X(int16_t, int16)\
    X(int32_t, int32)\
    X(int64_t, int64)\
    X(uint8_t, uint8)\
    X(uint16_t, uint16)\
    X(uint32_t, uint32)\
    X(uint64_t, uint64)\
    X(size_t, size)\
    X(ptrdiff_t, ptrdiff)

#define SHMEM_DECL_RMA_(T, N) \
    void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe);
SHMEM_RMA_TYPES(SHMEM_DECL_RMA_)

/* p/g: long double is passed by value in x87 registers, which the Rust
 * library cannot receive: those two are inline over putmem/getmem. */
#define SHMEM_DECL_PG_(T, N) \
    void shmem_##N##_p(T *dest, T value, int pe); \
    T shmem_##N##_g(const T *source, int pe);
#define SHMEM_RMA_PG_TYPES(X) \
    X(float, float)\
    X(double, double)\
    X(char, char)\
    X(signed char, schar)\
    X(short, short)\
    X(int, int)\
    X(long, long)\
    X(long long, longlong)\
    X(unsigned char, uchar)\
    X(unsigned short, ushort)\
    X(unsigned int, uint)\
    X(unsigned long, ulong)\
    X(unsigned long long, ulonglong)\
    X(int8_t, int8)\
    X(int16_t, int16)\
    X(int32_t, int32)\
    X(int64_t, int64)\
    X(uint8_t, uint8)\
    X(uint16_t, uint16)\
    X(uint32_t, uint32)\
    X(uint64_t, uint64)\
    X(size_t, size)\
    X(ptrdiff_t, ptrdiff)
SHMEM_RMA_PG_TYPES(SHMEM_DECL_PG_)

#define SHMEM_DECL_SIZED_(S) \
    void shmem_put##S(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_get##S(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_iput##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_iget##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_put##S##_nbi(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_get##S##_nbi(void *dest, const void *source, size_t nelems, int pe);
SHMEM_DECL_SIZED_(8)
SHMEM_DECL_SIZED_(16)
SHMEM_DECL_SIZED_(32)
SHMEM_DECL_SIZED_(64)
SHMEM_DECL_SIZED_(128)

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe);
/* @@MORE@@ */

/* ==== teams and collectives (team.rs, coll.rs) ============================ */

/* ==== deprecated names ===================================================== */

void start_pes(int npes);
int _my_pe(void);
int _num_pes(void);
void *shmalloc(size_t size);
void shfree(void *ptr);
void *shrealloc(void *ptr, size_t size);
void *shmemalign(size_t alignment, size_t size);
/* @@DEPRECATED-MORE@@ */

#ifdef __cplusplus
}
#endif

/* ==== inline helpers and C11 generics (after the declarations) ============ */

static inline void shmem_longdouble_p(long double *dest, long double value, int pe) {
    shmem_putmem(dest, &value, sizeof value, pe);
}
static inline long double shmem_longdouble_g(const long double *source, int pe) {
    long double v;
    shmem_getmem(&v, source, sizeof v, pe);
    return v;
}

/* ---- C11 generic interfaces (spec 1.5, on the basic C types; the
 * fixed-width typedefs are the same types) ------------------------------------ */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus)
#define SHMEM_GENERIC_TYPES(X) \
    X(float, float)\
    X(double, double)\
    X(long double, longdouble)\
    X(char, char)\
    X(signed char, schar)\
    X(short, short)\
    X(int, int)\
    X(long, long)\
    X(long long, longlong)\
    X(unsigned char, uchar)\
    X(unsigned short, ushort)\
    X(unsigned int, uint)\
    X(unsigned long, ulong)\
    X(unsigned long long, ulonglong)
struct shmem_generic_unmatched_;
#define SHMEM_G_END_ struct shmem_generic_unmatched_ : (void *)0
#define SHMEM_G_PUT_(T, N) T : shmem_##N##_put,
#define SHMEM_G_GET_(T, N) T : shmem_##N##_get,
#define SHMEM_G_IPUT_(T, N) T : shmem_##N##_iput,
#define SHMEM_G_IGET_(T, N) T : shmem_##N##_iget,
#define SHMEM_G_PUTNBI_(T, N) T : shmem_##N##_put_nbi,
#define SHMEM_G_GETNBI_(T, N) T : shmem_##N##_get_nbi,
#define SHMEM_G_P_(T, N) T : shmem_##N##_p,
#define SHMEM_G_G_(T, N) T : shmem_##N##_g,
#define shmem_put(dest, source, nelems, pe) \
    _Generic(*(dest), SHMEM_GENERIC_TYPES(SHMEM_G_PUT_) SHMEM_G_END_)(dest, source, nelems, pe)
#define shmem_get(dest, source, nelems, pe) \
    _Generic(*(dest), SHMEM_GENERIC_TYPES(SHMEM_G_GET_) SHMEM_G_END_)(dest, source, nelems, pe)
#define shmem_iput(dest, source, dst, sst, nelems, pe) \
    _Generic(*(dest), SHMEM_GENERIC_TYPES(SHMEM_G_IPUT_) SHMEM_G_END_)(dest, source, dst, sst, nelems, pe)
#define shmem_iget(dest, source, dst, sst, nelems, pe) \
    _Generic(*(dest), SHMEM_GENERIC_TYPES(SHMEM_G_IGET_) SHMEM_G_END_)(dest, source, dst, sst, nelems, pe)
#define shmem_put_nbi(dest, source, nelems, pe) \
    _Generic(*(dest), SHMEM_GENERIC_TYPES(SHMEM_G_PUTNBI_) SHMEM_G_END_)(dest, source, nelems, pe)
#define shmem_get_nbi(dest, source, nelems, pe) \
    _Generic(*(dest), SHMEM_GENERIC_TYPES(SHMEM_G_GETNBI_) SHMEM_G_END_)(dest, source, nelems, pe)
#define shmem_p(dest, value, pe) \
    _Generic(*(dest), SHMEM_GENERIC_TYPES(SHMEM_G_P_) SHMEM_G_END_)(dest, value, pe)
#define shmem_g(source, pe) \
    _Generic(*(source), SHMEM_GENERIC_TYPES(SHMEM_G_G_) SHMEM_G_END_)(source, pe)
/* @@GENERIC-MORE@@ */
#endif /* C11 generics */

#endif /* SWITCHYARD_SHMEM_H */
