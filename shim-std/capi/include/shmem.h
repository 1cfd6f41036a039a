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

/* The complex routines: C's _Complex types, which C++ compilers of the GNU
 * family accept as an extension (the same layout as std::complex). */
#if !defined(__cplusplus)
#define SHMEM_HAVE_COMPLEX_ 1
#define SHMEM_COMPLEX_DECL_
#elif defined(__GNUC__)
#define SHMEM_HAVE_COMPLEX_ 1
#define SHMEM_COMPLEX_DECL_ __extension__
#else
#define SHMEM_HAVE_COMPLEX_ 0
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
/* Profiling control: accepted, no profiling library is attached. */
static inline void shmem_pcontrol(const int level, ...) { (void)level; }

/* ---- memory ---------------------------------------------------------------- */

#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L

void *shmem_malloc(size_t size);
void *shmem_malloc_with_hints(size_t size, long hints);
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

/* ---- signals (before RMA's put_signal declarations) -------------------- */

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

#define SHMEM_DECL_PUT_SIGNAL_(T, N) \
    void shmem_##N##_put_signal(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_##N##_put_signal_nbi(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
SHMEM_RMA_TYPES(SHMEM_DECL_PUT_SIGNAL_)
#define SHMEM_DECL_SIZED_SIGNAL_(S) \
    void shmem_put##S##_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_put##S##_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
SHMEM_DECL_SIZED_SIGNAL_(8)
SHMEM_DECL_SIZED_SIGNAL_(16)
SHMEM_DECL_SIZED_SIGNAL_(32)
SHMEM_DECL_SIZED_SIGNAL_(64)
SHMEM_DECL_SIZED_SIGNAL_(128)
SHMEM_DECL_SIZED_SIGNAL_(mem)
uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);

/* ---- AMO ----------------------------------------------------------------- */

/* The spec's standard AMO types (table 6), the extended ones (with float and
 * double) and the bitwise ones. */
#define SHMEM_AMO_STD_TYPES(X) \
    X(int, int) \
    X(long, long) \
    X(long long, longlong) \
    X(unsigned int, uint) \
    X(unsigned long, ulong) \
    X(unsigned long long, ulonglong) \
    X(int32_t, int32) \
    X(int64_t, int64) \
    X(uint32_t, uint32) \
    X(uint64_t, uint64) \
    X(size_t, size) \
    X(ptrdiff_t, ptrdiff)
#define SHMEM_AMO_EXT_TYPES(X) \
    X(float, float) \
    X(double, double) \
    X(int, int) \
    X(long, long) \
    X(long long, longlong) \
    X(unsigned int, uint) \
    X(unsigned long, ulong) \
    X(unsigned long long, ulonglong) \
    X(int32_t, int32) \
    X(int64_t, int64) \
    X(uint32_t, uint32) \
    X(uint64_t, uint64) \
    X(size_t, size) \
    X(ptrdiff_t, ptrdiff)
#define SHMEM_AMO_BIT_TYPES(X) \
    X(unsigned int, uint) \
    X(unsigned long, ulong) \
    X(unsigned long long, ulonglong) \
    X(int32_t, int32) \
    X(int64_t, int64) \
    X(uint32_t, uint32) \
    X(uint64_t, uint64)

#define SHMEM_DECL_AMO_EXT_(T, N) \
    T shmem_##N##_atomic_fetch(const T *source, int pe); \
    void shmem_##N##_atomic_set(T *dest, T value, int pe); \
    T shmem_##N##_atomic_swap(T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_nbi(T *fetch, const T *source, int pe); \
    void shmem_##N##_atomic_swap_nbi(T *fetch, T *dest, T value, int pe);
SHMEM_AMO_EXT_TYPES(SHMEM_DECL_AMO_EXT_)
#define SHMEM_DECL_AMO_STD_(T, N) \
    T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe); \
    T shmem_##N##_atomic_fetch_inc(T *dest, int pe); \
    void shmem_##N##_atomic_inc(T *dest, int pe); \
    T shmem_##N##_atomic_fetch_add(T *dest, T value, int pe); \
    void shmem_##N##_atomic_add(T *dest, T value, int pe); \
    void shmem_##N##_atomic_compare_swap_nbi(T *fetch, T *dest, T cond, T value, int pe); \
    void shmem_##N##_atomic_fetch_inc_nbi(T *fetch, T *dest, int pe); \
    void shmem_##N##_atomic_fetch_add_nbi(T *fetch, T *dest, T value, int pe);
SHMEM_AMO_STD_TYPES(SHMEM_DECL_AMO_STD_)
#define SHMEM_DECL_AMO_BIT_(T, N) \
    T shmem_##N##_atomic_fetch_and(T *dest, T value, int pe); \
    void shmem_##N##_atomic_and(T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_and_nbi(T *fetch, T *dest, T value, int pe); \
    T shmem_##N##_atomic_fetch_or(T *dest, T value, int pe); \
    void shmem_##N##_atomic_or(T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_or_nbi(T *fetch, T *dest, T value, int pe); \
    T shmem_##N##_atomic_fetch_xor(T *dest, T value, int pe); \
    void shmem_##N##_atomic_xor(T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_xor_nbi(T *fetch, T *dest, T value, int pe);
SHMEM_AMO_BIT_TYPES(SHMEM_DECL_AMO_BIT_)

/* ---- point-to-point synchronization --------------------------------------- */

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_GE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_LE 5

#define SHMEM_P2P_TYPES(X) \
    X(short, short) \
    X(int, int) \
    X(long, long) \
    X(long long, longlong) \
    X(unsigned short, ushort) \
    X(unsigned int, uint) \
    X(unsigned long, ulong) \
    X(unsigned long long, ulonglong) \
    X(int32_t, int32) \
    X(int64_t, int64) \
    X(uint32_t, uint32) \
    X(uint64_t, uint64) \
    X(size_t, size) \
    X(ptrdiff_t, ptrdiff)

#define SHMEM_DECL_P2P_(T, N) \
    void shmem_##N##_wait_until(T *ivar, int cmp, T cmp_value); \
    void shmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, T cmp_value); \
    void shmem_##N##_wait_until_all_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_wait_until_any_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_wait_until_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, const T *cmp_values); \
    int shmem_##N##_test(T *ivar, int cmp, T cmp_value); \
    int shmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, T cmp_value); \
    int shmem_##N##_test_all_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_test_any_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_test_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, const T *cmp_values);
SHMEM_P2P_TYPES(SHMEM_DECL_P2P_)


/* ---- communication contexts ------------------------------------------------
 * One context serves the whole PE here: every context orders and completes
 * with all of this PE's operations (stronger than the spec asks), so the
 * shmem_ctx_* forms check the context (switchyard_ctx_check, skipped for
 * SHMEM_CTX_DEFAULT) and forward to the plain ones. The C11 generic names
 * (and the C++ overloads) take an optional context first. */

typedef struct shmem_ctx_opaque_ *shmem_ctx_t;
#define SHMEM_CTX_SERIALIZED (1L << 0)
#define SHMEM_CTX_PRIVATE (1L << 1)
#define SHMEM_CTX_NOSTORE (1L << 2)
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)
#define SHMEM_CTX_DEFAULT ((shmem_ctx_t)1)

int shmem_ctx_create(long options, shmem_ctx_t *ctx);
void shmem_ctx_destroy(shmem_ctx_t ctx);
/* Checks ctx before a shmem_ctx_* routine runs on it (store: a put or an
 * AMO) and returns the job PE of pe, a PE of the context's team: ends the
 * job for a context that is not live, a pe outside its team, a
 * SHMEM_CTX_PRIVATE context used from another thread, a store on a
 * SHMEM_CTX_NOSTORE one. */
int switchyard_ctx_check(shmem_ctx_t ctx, int store, int pe);
/* A context made on a team numbers PEs in the team: pe becomes a job PE. */
#define SHMEM_CTX_PE_(ctx, store, pe) \
    do { if ((ctx) != SHMEM_CTX_DEFAULT) pe = switchyard_ctx_check((ctx), (store), (pe)); } while (0)

/* ---- locks ---------------------------------------------------------------- */

void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

/* ==== teams and collectives (team.rs, coll.rs) ============================ */

/* ---- teams ---------------------------------------------------------------- */

/* A team handle: an opaque pointer (NULL is SHMEM_TEAM_INVALID). */
typedef struct switchyard_team_ *shmem_team_t;
#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_TEAM_WORLD ((shmem_team_t)0x5E7A0000)
#define SHMEM_TEAM_SHARED ((shmem_team_t)0x5E7A0001)

typedef struct {
    int num_contexts;
} shmem_team_config_t;
#define SHMEM_TEAM_NUM_CONTEXTS (1L << 0)

int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask,
                             shmem_team_t *new_team);
int shmem_team_split_2d(shmem_team_t parent_team, int xrange,
                        const shmem_team_config_t *xaxis_config, long xaxis_mask,
                        shmem_team_t *xaxis_team, const shmem_team_config_t *yaxis_config,
                        long yaxis_mask, shmem_team_t *yaxis_team);
void shmem_team_destroy(shmem_team_t team);
int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx);
int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team);
void *shmem_team_ptr(shmem_team_t team, const void *dest, int pe);
int shmem_team_sync(shmem_team_t team);
void shmem_sync_all(void);

/* ---- active-set work arrays ------------------------------------------------ */

#define SHMEM_SYNC_VALUE 0L
#define SHMEM_SYNC_SIZE 72
#define SHMEM_BARRIER_SYNC_SIZE 72
#define SHMEM_BCAST_SYNC_SIZE 72
#define SHMEM_REDUCE_SYNC_SIZE 72
#define SHMEM_COLLECT_SYNC_SIZE 72
#define SHMEM_ALLTOALL_SYNC_SIZE 72
#define SHMEM_ALLTOALLS_SYNC_SIZE 72
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 16
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* ---- synchronization --------------------------------------------------------- */

void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync);
/* shmem_sync(team) (one argument) is shmem_team_sync; four arguments: the
 * active-set form above. */
#define SHMEM_SYNC_PICK_(a1, a2, a3, a4, NAME, ...) NAME
#define shmem_sync(...) \
    SHMEM_SYNC_PICK_(__VA_ARGS__, shmem_sync, shmem_sync_needs_1_or_4_arguments, \
                     shmem_sync_needs_1_or_4_arguments, shmem_team_sync, -)(__VA_ARGS__)

/* ---- broadcast, collect, fcollect, alltoall, alltoalls on teams ------------- */

int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_float_broadcast(shmem_team_t team, float *dest, const float *source, size_t nelems, int PE_root);
int shmem_float_collect(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_float_fcollect(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_float_alltoall(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_float_alltoalls(shmem_team_t team, float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_double_broadcast(shmem_team_t team, double *dest, const double *source, size_t nelems, int PE_root);
int shmem_double_collect(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_double_fcollect(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_double_alltoall(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_double_alltoalls(shmem_team_t team, double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_longdouble_broadcast(shmem_team_t team, long double *dest, const long double *source, size_t nelems, int PE_root);
int shmem_longdouble_collect(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_longdouble_fcollect(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_longdouble_alltoall(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_longdouble_alltoalls(shmem_team_t team, long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_char_broadcast(shmem_team_t team, char *dest, const char *source, size_t nelems, int PE_root);
int shmem_char_collect(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_char_fcollect(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_char_alltoall(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_char_alltoalls(shmem_team_t team, char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_schar_broadcast(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems, int PE_root);
int shmem_schar_collect(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_schar_fcollect(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_schar_alltoall(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_schar_alltoalls(shmem_team_t team, signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_short_broadcast(shmem_team_t team, short *dest, const short *source, size_t nelems, int PE_root);
int shmem_short_collect(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_short_fcollect(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_short_alltoall(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_short_alltoalls(shmem_team_t team, short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int_broadcast(shmem_team_t team, int *dest, const int *source, size_t nelems, int PE_root);
int shmem_int_collect(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_int_fcollect(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_int_alltoall(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_int_alltoalls(shmem_team_t team, int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_long_broadcast(shmem_team_t team, long *dest, const long *source, size_t nelems, int PE_root);
int shmem_long_collect(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_long_fcollect(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_long_alltoall(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_long_alltoalls(shmem_team_t team, long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_longlong_broadcast(shmem_team_t team, long long *dest, const long long *source, size_t nelems, int PE_root);
int shmem_longlong_collect(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_longlong_fcollect(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_longlong_alltoall(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_longlong_alltoalls(shmem_team_t team, long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uchar_broadcast(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems, int PE_root);
int shmem_uchar_collect(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_uchar_fcollect(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_uchar_alltoall(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_uchar_alltoalls(shmem_team_t team, unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ushort_broadcast(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems, int PE_root);
int shmem_ushort_collect(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_ushort_fcollect(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_ushort_alltoall(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_ushort_alltoalls(shmem_team_t team, unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint_broadcast(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems, int PE_root);
int shmem_uint_collect(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_uint_fcollect(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_uint_alltoall(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_uint_alltoalls(shmem_team_t team, unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ulong_broadcast(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems, int PE_root);
int shmem_ulong_collect(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulong_fcollect(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulong_alltoall(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulong_alltoalls(shmem_team_t team, unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ulonglong_broadcast(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems, int PE_root);
int shmem_ulonglong_collect(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_ulonglong_fcollect(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_ulonglong_alltoall(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_ulonglong_alltoalls(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int8_broadcast(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems, int PE_root);
int shmem_int8_collect(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int8_fcollect(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int8_alltoall(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int8_alltoalls(shmem_team_t team, int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int16_broadcast(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems, int PE_root);
int shmem_int16_collect(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int16_fcollect(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int16_alltoall(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int16_alltoalls(shmem_team_t team, int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int32_broadcast(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems, int PE_root);
int shmem_int32_collect(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int32_fcollect(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int32_alltoall(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int32_alltoalls(shmem_team_t team, int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int64_broadcast(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems, int PE_root);
int shmem_int64_collect(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_int64_fcollect(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_int64_alltoall(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_int64_alltoalls(shmem_team_t team, int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint8_broadcast(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems, int PE_root);
int shmem_uint8_collect(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint8_fcollect(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint8_alltoall(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint8_alltoalls(shmem_team_t team, uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint16_broadcast(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems, int PE_root);
int shmem_uint16_collect(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint16_fcollect(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint16_alltoall(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint16_alltoalls(shmem_team_t team, uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint32_broadcast(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems, int PE_root);
int shmem_uint32_collect(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint32_fcollect(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint32_alltoall(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint32_alltoalls(shmem_team_t team, uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint64_broadcast(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems, int PE_root);
int shmem_uint64_collect(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_uint64_fcollect(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_uint64_alltoall(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_uint64_alltoalls(shmem_team_t team, uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_size_broadcast(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems, int PE_root);
int shmem_size_collect(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_size_fcollect(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_size_alltoall(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_size_alltoalls(shmem_team_t team, size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ptrdiff_broadcast(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int PE_root);
int shmem_ptrdiff_collect(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_ptrdiff_fcollect(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_ptrdiff_alltoall(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_ptrdiff_alltoalls(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);

/* ---- the same on active sets (deprecated) ------------------------------------ */

void shmem_broadcast32(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast64(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_collect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_collect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);

/* ---- reductions on teams ----------------------------------------------------- */

int shmem_uchar_and_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_and_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_and_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_and_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_and_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_and_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_and_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_and_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_and_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_and_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_and_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_and_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_and_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_and_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_uchar_or_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_or_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_or_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_or_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_or_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_or_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_or_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_or_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_or_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_or_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_or_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_or_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_or_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_or_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_uchar_xor_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_xor_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_xor_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_xor_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_xor_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_xor_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_xor_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_xor_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_xor_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_xor_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_xor_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_xor_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_xor_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_xor_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_char_max_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_max_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_max_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_max_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_max_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_max_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_max_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_max_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_max_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_max_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_max_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_max_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_max_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_max_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_max_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_max_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_max_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_max_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_max_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_max_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_max_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_max_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_max_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
int shmem_char_min_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_min_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_min_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_min_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_min_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_min_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_min_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_min_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_min_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_min_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_min_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_min_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_min_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_min_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_min_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_min_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_min_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_min_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_min_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_min_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_min_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_min_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_min_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
int shmem_char_sum_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_sum_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_sum_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_sum_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_sum_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_sum_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_sum_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_sum_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_sum_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_sum_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_sum_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_sum_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_sum_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_sum_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_sum_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_sum_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_sum_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_sum_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_sum_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_sum_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_sum_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_sum_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_sum_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
int shmem_char_prod_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_prod_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_prod_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_prod_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_prod_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_prod_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_prod_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_prod_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_prod_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_prod_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_prod_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_prod_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_prod_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_prod_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_prod_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_prod_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_prod_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_prod_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_prod_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_prod_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_prod_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_prod_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_prod_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
#if SHMEM_HAVE_COMPLEX_
SHMEM_COMPLEX_DECL_ int shmem_complexd_sum_reduce(shmem_team_t team, double _Complex *dest, const double _Complex *source, size_t nreduce);
SHMEM_COMPLEX_DECL_ int shmem_complexf_sum_reduce(shmem_team_t team, float _Complex *dest, const float _Complex *source, size_t nreduce);
SHMEM_COMPLEX_DECL_ int shmem_complexd_prod_reduce(shmem_team_t team, double _Complex *dest, const double _Complex *source, size_t nreduce);
SHMEM_COMPLEX_DECL_ int shmem_complexf_prod_reduce(shmem_team_t team, float _Complex *dest, const float _Complex *source, size_t nreduce);
#endif

/* ---- reductions on active sets (deprecated) ------------------------------------ */

void shmem_short_and_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_and_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_and_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_and_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_short_or_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_or_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_or_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_or_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_short_xor_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_xor_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_xor_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_xor_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_short_max_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_max_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_max_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_max_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_max_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_max_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
void shmem_short_min_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_min_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_min_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_min_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_min_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_min_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
void shmem_short_sum_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_sum_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_sum_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_sum_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_sum_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_sum_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
void shmem_short_prod_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_prod_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_prod_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_prod_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_prod_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_prod_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
#if SHMEM_HAVE_COMPLEX_
SHMEM_COMPLEX_DECL_ void shmem_complexd_sum_to_all(double _Complex *dest, const double _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double _Complex *pWrk, long *pSync);
SHMEM_COMPLEX_DECL_ void shmem_complexf_sum_to_all(float _Complex *dest, const float _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float _Complex *pWrk, long *pSync);
SHMEM_COMPLEX_DECL_ void shmem_complexd_prod_to_all(double _Complex *dest, const double _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double _Complex *pWrk, long *pSync);
SHMEM_COMPLEX_DECL_ void shmem_complexf_prod_to_all(float _Complex *dest, const float _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float _Complex *pWrk, long *pSync);
#endif

#if defined(__x86_64__)
/* long double reductions: x86-64 (80-bit extended) only */
int shmem_longdouble_max_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
int shmem_longdouble_min_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
int shmem_longdouble_sum_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
int shmem_longdouble_prod_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
void shmem_longdouble_max_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
void shmem_longdouble_min_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
void shmem_longdouble_sum_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
void shmem_longdouble_prod_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
#endif

/* ---- C11 generic names -------------------------------------------------------- */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus)
#if defined(__x86_64__)
#define SHMEM_LD_REDUCE_(op) long double: shmem_longdouble_##op##_reduce,
#else
#define SHMEM_LD_REDUCE_(op)
#endif
#define shmem_broadcast(team, dest, source, nelems, PE_root) \
  _Generic(*(dest), \
    float: shmem_float_broadcast, \
    double: shmem_double_broadcast, \
    long double: shmem_longdouble_broadcast, \
    char: shmem_char_broadcast, \
    signed char: shmem_schar_broadcast, \
    short: shmem_short_broadcast, \
    int: shmem_int_broadcast, \
    long: shmem_long_broadcast, \
    long long: shmem_longlong_broadcast, \
    unsigned char: shmem_uchar_broadcast, \
    unsigned short: shmem_ushort_broadcast, \
    unsigned int: shmem_uint_broadcast, \
    unsigned long: shmem_ulong_broadcast, \
    unsigned long long: shmem_ulonglong_broadcast)(team, dest, source, nelems, PE_root)

#define shmem_collect(team, dest, source, nelems) \
  _Generic(*(dest), \
    float: shmem_float_collect, \
    double: shmem_double_collect, \
    long double: shmem_longdouble_collect, \
    char: shmem_char_collect, \
    signed char: shmem_schar_collect, \
    short: shmem_short_collect, \
    int: shmem_int_collect, \
    long: shmem_long_collect, \
    long long: shmem_longlong_collect, \
    unsigned char: shmem_uchar_collect, \
    unsigned short: shmem_ushort_collect, \
    unsigned int: shmem_uint_collect, \
    unsigned long: shmem_ulong_collect, \
    unsigned long long: shmem_ulonglong_collect)(team, dest, source, nelems)

#define shmem_fcollect(team, dest, source, nelems) \
  _Generic(*(dest), \
    float: shmem_float_fcollect, \
    double: shmem_double_fcollect, \
    long double: shmem_longdouble_fcollect, \
    char: shmem_char_fcollect, \
    signed char: shmem_schar_fcollect, \
    short: shmem_short_fcollect, \
    int: shmem_int_fcollect, \
    long: shmem_long_fcollect, \
    long long: shmem_longlong_fcollect, \
    unsigned char: shmem_uchar_fcollect, \
    unsigned short: shmem_ushort_fcollect, \
    unsigned int: shmem_uint_fcollect, \
    unsigned long: shmem_ulong_fcollect, \
    unsigned long long: shmem_ulonglong_fcollect)(team, dest, source, nelems)

#define shmem_alltoall(team, dest, source, nelems) \
  _Generic(*(dest), \
    float: shmem_float_alltoall, \
    double: shmem_double_alltoall, \
    long double: shmem_longdouble_alltoall, \
    char: shmem_char_alltoall, \
    signed char: shmem_schar_alltoall, \
    short: shmem_short_alltoall, \
    int: shmem_int_alltoall, \
    long: shmem_long_alltoall, \
    long long: shmem_longlong_alltoall, \
    unsigned char: shmem_uchar_alltoall, \
    unsigned short: shmem_ushort_alltoall, \
    unsigned int: shmem_uint_alltoall, \
    unsigned long: shmem_ulong_alltoall, \
    unsigned long long: shmem_ulonglong_alltoall)(team, dest, source, nelems)

#define shmem_alltoalls(team, dest, source, dst, sst, nelems) \
  _Generic(*(dest), \
    float: shmem_float_alltoalls, \
    double: shmem_double_alltoalls, \
    long double: shmem_longdouble_alltoalls, \
    char: shmem_char_alltoalls, \
    signed char: shmem_schar_alltoalls, \
    short: shmem_short_alltoalls, \
    int: shmem_int_alltoalls, \
    long: shmem_long_alltoalls, \
    long long: shmem_longlong_alltoalls, \
    unsigned char: shmem_uchar_alltoalls, \
    unsigned short: shmem_ushort_alltoalls, \
    unsigned int: shmem_uint_alltoalls, \
    unsigned long: shmem_ulong_alltoalls, \
    unsigned long long: shmem_ulonglong_alltoalls)(team, dest, source, dst, sst, nelems)

#define shmem_and_reduce(team, dest, source, nreduce) \
  _Generic(*(dest), \
    unsigned char: shmem_uchar_and_reduce, \
    unsigned short: shmem_ushort_and_reduce, \
    unsigned int: shmem_uint_and_reduce, \
    unsigned long: shmem_ulong_and_reduce, \
    unsigned long long: shmem_ulonglong_and_reduce, \
    int8_t: shmem_int8_and_reduce, \
    int16_t: shmem_int16_and_reduce, \
    int32_t: shmem_int32_and_reduce, \
    int64_t: shmem_int64_and_reduce)(team, dest, source, nreduce)

#define shmem_or_reduce(team, dest, source, nreduce) \
  _Generic(*(dest), \
    unsigned char: shmem_uchar_or_reduce, \
    unsigned short: shmem_ushort_or_reduce, \
    unsigned int: shmem_uint_or_reduce, \
    unsigned long: shmem_ulong_or_reduce, \
    unsigned long long: shmem_ulonglong_or_reduce, \
    int8_t: shmem_int8_or_reduce, \
    int16_t: shmem_int16_or_reduce, \
    int32_t: shmem_int32_or_reduce, \
    int64_t: shmem_int64_or_reduce)(team, dest, source, nreduce)

#define shmem_xor_reduce(team, dest, source, nreduce) \
  _Generic(*(dest), \
    unsigned char: shmem_uchar_xor_reduce, \
    unsigned short: shmem_ushort_xor_reduce, \
    unsigned int: shmem_uint_xor_reduce, \
    unsigned long: shmem_ulong_xor_reduce, \
    unsigned long long: shmem_ulonglong_xor_reduce, \
    int8_t: shmem_int8_xor_reduce, \
    int16_t: shmem_int16_xor_reduce, \
    int32_t: shmem_int32_xor_reduce, \
    int64_t: shmem_int64_xor_reduce)(team, dest, source, nreduce)

#define shmem_max_reduce(team, dest, source, nreduce) \
  _Generic(*(dest), \
    SHMEM_LD_REDUCE_(max) \
    char: shmem_char_max_reduce, \
    signed char: shmem_schar_max_reduce, \
    short: shmem_short_max_reduce, \
    int: shmem_int_max_reduce, \
    long: shmem_long_max_reduce, \
    long long: shmem_longlong_max_reduce, \
    unsigned char: shmem_uchar_max_reduce, \
    unsigned short: shmem_ushort_max_reduce, \
    unsigned int: shmem_uint_max_reduce, \
    unsigned long: shmem_ulong_max_reduce, \
    unsigned long long: shmem_ulonglong_max_reduce, \
    float: shmem_float_max_reduce, \
    double: shmem_double_max_reduce)(team, dest, source, nreduce)

#define shmem_min_reduce(team, dest, source, nreduce) \
  _Generic(*(dest), \
    SHMEM_LD_REDUCE_(min) \
    char: shmem_char_min_reduce, \
    signed char: shmem_schar_min_reduce, \
    short: shmem_short_min_reduce, \
    int: shmem_int_min_reduce, \
    long: shmem_long_min_reduce, \
    long long: shmem_longlong_min_reduce, \
    unsigned char: shmem_uchar_min_reduce, \
    unsigned short: shmem_ushort_min_reduce, \
    unsigned int: shmem_uint_min_reduce, \
    unsigned long: shmem_ulong_min_reduce, \
    unsigned long long: shmem_ulonglong_min_reduce, \
    float: shmem_float_min_reduce, \
    double: shmem_double_min_reduce)(team, dest, source, nreduce)

#define shmem_sum_reduce(team, dest, source, nreduce) \
  _Generic(*(dest), \
    SHMEM_LD_REDUCE_(sum) \
    char: shmem_char_sum_reduce, \
    signed char: shmem_schar_sum_reduce, \
    short: shmem_short_sum_reduce, \
    int: shmem_int_sum_reduce, \
    long: shmem_long_sum_reduce, \
    long long: shmem_longlong_sum_reduce, \
    unsigned char: shmem_uchar_sum_reduce, \
    unsigned short: shmem_ushort_sum_reduce, \
    unsigned int: shmem_uint_sum_reduce, \
    unsigned long: shmem_ulong_sum_reduce, \
    unsigned long long: shmem_ulonglong_sum_reduce, \
    float: shmem_float_sum_reduce, \
    double: shmem_double_sum_reduce, \
    double _Complex: shmem_complexd_sum_reduce, \
    float _Complex: shmem_complexf_sum_reduce)(team, dest, source, nreduce)

#define shmem_prod_reduce(team, dest, source, nreduce) \
  _Generic(*(dest), \
    SHMEM_LD_REDUCE_(prod) \
    char: shmem_char_prod_reduce, \
    signed char: shmem_schar_prod_reduce, \
    short: shmem_short_prod_reduce, \
    int: shmem_int_prod_reduce, \
    long: shmem_long_prod_reduce, \
    long long: shmem_longlong_prod_reduce, \
    unsigned char: shmem_uchar_prod_reduce, \
    unsigned short: shmem_ushort_prod_reduce, \
    unsigned int: shmem_uint_prod_reduce, \
    unsigned long: shmem_ulong_prod_reduce, \
    unsigned long long: shmem_ulonglong_prod_reduce, \
    float: shmem_float_prod_reduce, \
    double: shmem_double_prod_reduce, \
    double _Complex: shmem_complexd_prod_reduce, \
    float _Complex: shmem_complexf_prod_reduce)(team, dest, source, nreduce)
#endif

/* ==== deprecated names ===================================================== */

void start_pes(int npes);
int _my_pe(void);
int _num_pes(void);
void *shmalloc(size_t size);
void shfree(void *ptr);
void *shrealloc(void *ptr, size_t size);
void *shmemalign(size_t alignment, size_t size);

#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_LE SHMEM_CMP_LE

#define SHMEM_DECL_OLD_AMO_(T, N) \
    T shmem_##N##_cswap(T *dest, T cond, T value, int pe); \
    T shmem_##N##_fadd(T *dest, T value, int pe); \
    T shmem_##N##_finc(T *dest, int pe); \
    void shmem_##N##_add(T *dest, T value, int pe); \
    void shmem_##N##_inc(T *dest, int pe);
#define SHMEM_DECL_OLD_EXT_(T, N) \
    T shmem_##N##_swap(T *dest, T value, int pe); \
    T shmem_##N##_fetch(const T *source, int pe); \
    void shmem_##N##_set(T *dest, T value, int pe);
#define SHMEM_DECL_OLD_WAIT_(T, N) void shmem_##N##_wait(T *ivar, T cmp_value);
SHMEM_DECL_OLD_AMO_(int, int)
SHMEM_DECL_OLD_AMO_(long, long)
SHMEM_DECL_OLD_AMO_(long long, longlong)
SHMEM_DECL_OLD_EXT_(int, int)
SHMEM_DECL_OLD_EXT_(long, long)
SHMEM_DECL_OLD_EXT_(long long, longlong)
SHMEM_DECL_OLD_EXT_(float, float)
SHMEM_DECL_OLD_EXT_(double, double)
SHMEM_DECL_OLD_WAIT_(short, short)
SHMEM_DECL_OLD_WAIT_(int, int)
SHMEM_DECL_OLD_WAIT_(long, long)
SHMEM_DECL_OLD_WAIT_(long long, longlong)
long shmem_swap(long *dest, long value, int pe);
void shmem_wait(long *ivar, long cmp_value);

/* ==== shmemx: switchyard extensions ======================================= */

/* Prints this PE's counters and latency percentiles (its stats segment) to
 * stderr; SWITCHYARD_STATS_PRINT=1 prints the same at shmem_finalize. */
void shmemx_stats_print(void);

/* Writes this PE's route trace (its newest routing decisions and the frames
 * it applied for peers) to a new file at path (0600, must not exist), for
 * `switchyard trace FILE`. Returns 0, or -1 on failure. */
int shmemx_trace_dump(const char *path);

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


/* communication-context forms (see shmem_ctx_t) */
/* (fence and quiet on SHMEM_CTX_INVALID do nothing) */
static inline void shmem_ctx_fence(shmem_ctx_t ctx) {
    if (ctx == SHMEM_CTX_INVALID) return;
    if (ctx != SHMEM_CTX_DEFAULT) (void)switchyard_ctx_check(ctx, 0, 0);
    shmem_fence();
}
static inline void shmem_ctx_quiet(shmem_ctx_t ctx) {
    if (ctx == SHMEM_CTX_INVALID) return;
    if (ctx != SHMEM_CTX_DEFAULT) (void)switchyard_ctx_check(ctx, 0, 0);
    shmem_quiet();
}
#define SHMEM_CTX_RMA_(T, N) \
    static inline void shmem_ctx_##N##_put(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_put(dest, source, nelems, pe); } \
    static inline void shmem_ctx_##N##_get(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); shmem_##N##_get(dest, source, nelems, pe); } \
    static inline void shmem_ctx_##N##_iput(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_iput(dest, source, dst, sst, nelems, pe); } \
    static inline void shmem_ctx_##N##_iget(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); shmem_##N##_iget(dest, source, dst, sst, nelems, pe); } \
    static inline void shmem_ctx_##N##_put_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_put_nbi(dest, source, nelems, pe); } \
    static inline void shmem_ctx_##N##_get_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); shmem_##N##_get_nbi(dest, source, nelems, pe); } \
    static inline void shmem_ctx_##N##_p(shmem_ctx_t ctx, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_p(dest, value, pe); } \
    static inline T shmem_ctx_##N##_g(shmem_ctx_t ctx, const T *source, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); return shmem_##N##_g(source, pe); } \
    static inline void shmem_ctx_##N##_put_signal(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_put_signal(dest, source, nelems, sig_addr, signal, sig_op, pe); } \
    static inline void shmem_ctx_##N##_put_signal_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_put_signal_nbi(dest, source, nelems, sig_addr, signal, sig_op, pe); }
SHMEM_RMA_TYPES(SHMEM_CTX_RMA_)
#define SHMEM_CTX_SIZED_(S) \
    static inline void shmem_ctx_put##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_put##S(dest, source, nelems, pe); } \
    static inline void shmem_ctx_get##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); shmem_get##S(dest, source, nelems, pe); } \
    static inline void shmem_ctx_put##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_put##S##_nbi(dest, source, nelems, pe); } \
    static inline void shmem_ctx_get##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); shmem_get##S##_nbi(dest, source, nelems, pe); } \
    static inline void shmem_ctx_put##S##_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_put##S##_signal(dest, source, nelems, sig_addr, signal, sig_op, pe); } \
    static inline void shmem_ctx_put##S##_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_put##S##_signal_nbi(dest, source, nelems, sig_addr, signal, sig_op, pe); }
SHMEM_CTX_SIZED_(8)
SHMEM_CTX_SIZED_(16)
SHMEM_CTX_SIZED_(32)
SHMEM_CTX_SIZED_(64)
SHMEM_CTX_SIZED_(128)
SHMEM_CTX_SIZED_(mem)
#define SHMEM_CTX_ISIZED_(S) \
    static inline void shmem_ctx_iput##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_iput##S(dest, source, dst, sst, nelems, pe); } \
    static inline void shmem_ctx_iget##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); shmem_iget##S(dest, source, dst, sst, nelems, pe); }
SHMEM_CTX_ISIZED_(8)
SHMEM_CTX_ISIZED_(16)
SHMEM_CTX_ISIZED_(32)
SHMEM_CTX_ISIZED_(64)
SHMEM_CTX_ISIZED_(128)
#define SHMEM_CTX_AMO_EXT_(T, N) \
    static inline T shmem_ctx_##N##_atomic_fetch(shmem_ctx_t ctx, const T *source, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); return shmem_##N##_atomic_fetch(source, pe); } \
    static inline void shmem_ctx_##N##_atomic_set(shmem_ctx_t ctx, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_set(dest, value, pe); } \
    static inline T shmem_ctx_##N##_atomic_swap(shmem_ctx_t ctx, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); return shmem_##N##_atomic_swap(dest, value, pe); } \
    static inline void shmem_ctx_##N##_atomic_fetch_nbi(shmem_ctx_t ctx, T *fetch, const T *source, int pe) { SHMEM_CTX_PE_(ctx, 0, pe); shmem_##N##_atomic_fetch_nbi(fetch, source, pe); } \
    static inline void shmem_ctx_##N##_atomic_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_swap_nbi(fetch, dest, value, pe); }
SHMEM_AMO_EXT_TYPES(SHMEM_CTX_AMO_EXT_)
#define SHMEM_CTX_AMO_STD_(T, N) \
    static inline T shmem_ctx_##N##_atomic_compare_swap(shmem_ctx_t ctx, T *dest, T cond, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); return shmem_##N##_atomic_compare_swap(dest, cond, value, pe); } \
    static inline T shmem_ctx_##N##_atomic_fetch_inc(shmem_ctx_t ctx, T *dest, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); return shmem_##N##_atomic_fetch_inc(dest, pe); } \
    static inline void shmem_ctx_##N##_atomic_inc(shmem_ctx_t ctx, T *dest, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_inc(dest, pe); } \
    static inline T shmem_ctx_##N##_atomic_fetch_add(shmem_ctx_t ctx, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); return shmem_##N##_atomic_fetch_add(dest, value, pe); } \
    static inline void shmem_ctx_##N##_atomic_add(shmem_ctx_t ctx, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_add(dest, value, pe); } \
    static inline void shmem_ctx_##N##_atomic_compare_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T cond, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_compare_swap_nbi(fetch, dest, cond, value, pe); } \
    static inline void shmem_ctx_##N##_atomic_fetch_inc_nbi(shmem_ctx_t ctx, T *fetch, T *dest, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_fetch_inc_nbi(fetch, dest, pe); } \
    static inline void shmem_ctx_##N##_atomic_fetch_add_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_fetch_add_nbi(fetch, dest, value, pe); }
SHMEM_AMO_STD_TYPES(SHMEM_CTX_AMO_STD_)
#define SHMEM_CTX_AMO_BIT_OP_(T, N, OP) \
    static inline T shmem_ctx_##N##_atomic_fetch_##OP(shmem_ctx_t ctx, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); return shmem_##N##_atomic_fetch_##OP(dest, value, pe); } \
    static inline void shmem_ctx_##N##_atomic_##OP(shmem_ctx_t ctx, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_##OP(dest, value, pe); } \
    static inline void shmem_ctx_##N##_atomic_fetch_##OP##_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe) { SHMEM_CTX_PE_(ctx, 1, pe); shmem_##N##_atomic_fetch_##OP##_nbi(fetch, dest, value, pe); }
#define SHMEM_CTX_AMO_BIT_(T, N) SHMEM_CTX_AMO_BIT_OP_(T, N, and) SHMEM_CTX_AMO_BIT_OP_(T, N, or) SHMEM_CTX_AMO_BIT_OP_(T, N, xor)
SHMEM_AMO_BIT_TYPES(SHMEM_CTX_AMO_BIT_)

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
struct shmem_generic_unmatched_ { char never_; }; /* ends every association list */
#define SHMEM_G_END_ struct shmem_generic_unmatched_ : (void *)0
#define SHMEM_GSEL_(p, LIST, F) _Generic(*(p), LIST(F) SHMEM_G_END_)
/* The generic names take an optional context first: the argument count
 * picks the plain or the shmem_ctx_ form, the pointed-to type the routine. */
#define SHMEM_NARGS_(...) SHMEM_NARGS_N_(__VA_ARGS__, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define SHMEM_NARGS_N_(a1, a2, a3, a4, a5, a6, a7, a8, a9, N, ...) N
#define SHMEM_CAT_(a, b) SHMEM_CAT2_(a, b)
#define SHMEM_CAT2_(a, b) a##b
#define SHMEM_BYCOUNT_(NAME, ...) SHMEM_CAT_(NAME, SHMEM_NARGS_(__VA_ARGS__))(__VA_ARGS__)
/* AMO on the basic types: standard (int, long, long long and unsigned),
 * extended (plus float, double), bitwise (unsigned, int32_t, int64_t). */
#define SHMEM_GENERIC_AMO_STD_(X) \
    X(int, int) X(long, long) X(long long, longlong) \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)
#define SHMEM_GENERIC_AMO_EXT_(X) SHMEM_GENERIC_AMO_STD_(X) X(float, float) X(double, double)
#define SHMEM_GENERIC_AMO_BIT_(X) \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong) \
    X(int32_t, int32) X(int64_t, int64)
#define SHMEM_G_put_(T, N) T : shmem_##N##_put,
#define SHMEM_GC_put_(T, N) T : shmem_ctx_##N##_put,
#define SHMEM_put_4(dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_put_)(dest, source, nelems, pe)
#define SHMEM_put_5(ctx, dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_put_)(ctx, dest, source, nelems, pe)
#define shmem_put(...) SHMEM_BYCOUNT_(SHMEM_put_, __VA_ARGS__)
#define SHMEM_G_get_(T, N) T : shmem_##N##_get,
#define SHMEM_GC_get_(T, N) T : shmem_ctx_##N##_get,
#define SHMEM_get_4(dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_get_)(dest, source, nelems, pe)
#define SHMEM_get_5(ctx, dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_get_)(ctx, dest, source, nelems, pe)
#define shmem_get(...) SHMEM_BYCOUNT_(SHMEM_get_, __VA_ARGS__)
#define SHMEM_G_iput_(T, N) T : shmem_##N##_iput,
#define SHMEM_GC_iput_(T, N) T : shmem_ctx_##N##_iput,
#define SHMEM_iput_6(dest, source, dst, sst, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_iput_)(dest, source, dst, sst, nelems, pe)
#define SHMEM_iput_7(ctx, dest, source, dst, sst, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_iput_)(ctx, dest, source, dst, sst, nelems, pe)
#define shmem_iput(...) SHMEM_BYCOUNT_(SHMEM_iput_, __VA_ARGS__)
#define SHMEM_G_iget_(T, N) T : shmem_##N##_iget,
#define SHMEM_GC_iget_(T, N) T : shmem_ctx_##N##_iget,
#define SHMEM_iget_6(dest, source, dst, sst, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_iget_)(dest, source, dst, sst, nelems, pe)
#define SHMEM_iget_7(ctx, dest, source, dst, sst, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_iget_)(ctx, dest, source, dst, sst, nelems, pe)
#define shmem_iget(...) SHMEM_BYCOUNT_(SHMEM_iget_, __VA_ARGS__)
#define SHMEM_G_put_nbi_(T, N) T : shmem_##N##_put_nbi,
#define SHMEM_GC_put_nbi_(T, N) T : shmem_ctx_##N##_put_nbi,
#define SHMEM_put_nbi_4(dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_put_nbi_)(dest, source, nelems, pe)
#define SHMEM_put_nbi_5(ctx, dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_put_nbi_)(ctx, dest, source, nelems, pe)
#define shmem_put_nbi(...) SHMEM_BYCOUNT_(SHMEM_put_nbi_, __VA_ARGS__)
#define SHMEM_G_get_nbi_(T, N) T : shmem_##N##_get_nbi,
#define SHMEM_GC_get_nbi_(T, N) T : shmem_ctx_##N##_get_nbi,
#define SHMEM_get_nbi_4(dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_get_nbi_)(dest, source, nelems, pe)
#define SHMEM_get_nbi_5(ctx, dest, source, nelems, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_get_nbi_)(ctx, dest, source, nelems, pe)
#define shmem_get_nbi(...) SHMEM_BYCOUNT_(SHMEM_get_nbi_, __VA_ARGS__)
#define SHMEM_G_p_(T, N) T : shmem_##N##_p,
#define SHMEM_GC_p_(T, N) T : shmem_ctx_##N##_p,
#define SHMEM_p_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_p_)(dest, value, pe)
#define SHMEM_p_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_p_)(ctx, dest, value, pe)
#define shmem_p(...) SHMEM_BYCOUNT_(SHMEM_p_, __VA_ARGS__)
#define SHMEM_G_g_(T, N) T : shmem_##N##_g,
#define SHMEM_GC_g_(T, N) T : shmem_ctx_##N##_g,
#define SHMEM_g_2(source, pe) SHMEM_GSEL_(source, SHMEM_GENERIC_TYPES, SHMEM_G_g_)(source, pe)
#define SHMEM_g_3(ctx, source, pe) SHMEM_GSEL_(source, SHMEM_GENERIC_TYPES, SHMEM_GC_g_)(ctx, source, pe)
#define shmem_g(...) SHMEM_BYCOUNT_(SHMEM_g_, __VA_ARGS__)
#define SHMEM_G_put_signal_(T, N) T : shmem_##N##_put_signal,
#define SHMEM_GC_put_signal_(T, N) T : shmem_ctx_##N##_put_signal,
#define SHMEM_put_signal_7(dest, source, nelems, sig_addr, signal, sig_op, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_put_signal_)(dest, source, nelems, sig_addr, signal, sig_op, pe)
#define SHMEM_put_signal_8(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_put_signal_)(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe)
#define shmem_put_signal(...) SHMEM_BYCOUNT_(SHMEM_put_signal_, __VA_ARGS__)
#define SHMEM_G_put_signal_nbi_(T, N) T : shmem_##N##_put_signal_nbi,
#define SHMEM_GC_put_signal_nbi_(T, N) T : shmem_ctx_##N##_put_signal_nbi,
#define SHMEM_put_signal_nbi_7(dest, source, nelems, sig_addr, signal, sig_op, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_G_put_signal_nbi_)(dest, source, nelems, sig_addr, signal, sig_op, pe)
#define SHMEM_put_signal_nbi_8(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_TYPES, SHMEM_GC_put_signal_nbi_)(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe)
#define shmem_put_signal_nbi(...) SHMEM_BYCOUNT_(SHMEM_put_signal_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_(T, N) T : shmem_##N##_atomic_fetch,
#define SHMEM_GC_atomic_fetch_(T, N) T : shmem_ctx_##N##_atomic_fetch,
#define SHMEM_atomic_fetch_2(source, pe) SHMEM_GSEL_(source, SHMEM_GENERIC_AMO_EXT_, SHMEM_G_atomic_fetch_)(source, pe)
#define SHMEM_atomic_fetch_3(ctx, source, pe) SHMEM_GSEL_(source, SHMEM_GENERIC_AMO_EXT_, SHMEM_GC_atomic_fetch_)(ctx, source, pe)
#define shmem_atomic_fetch(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_, __VA_ARGS__)
#define SHMEM_G_atomic_set_(T, N) T : shmem_##N##_atomic_set,
#define SHMEM_GC_atomic_set_(T, N) T : shmem_ctx_##N##_atomic_set,
#define SHMEM_atomic_set_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_EXT_, SHMEM_G_atomic_set_)(dest, value, pe)
#define SHMEM_atomic_set_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_EXT_, SHMEM_GC_atomic_set_)(ctx, dest, value, pe)
#define shmem_atomic_set(...) SHMEM_BYCOUNT_(SHMEM_atomic_set_, __VA_ARGS__)
#define SHMEM_G_atomic_swap_(T, N) T : shmem_##N##_atomic_swap,
#define SHMEM_GC_atomic_swap_(T, N) T : shmem_ctx_##N##_atomic_swap,
#define SHMEM_atomic_swap_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_EXT_, SHMEM_G_atomic_swap_)(dest, value, pe)
#define SHMEM_atomic_swap_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_EXT_, SHMEM_GC_atomic_swap_)(ctx, dest, value, pe)
#define shmem_atomic_swap(...) SHMEM_BYCOUNT_(SHMEM_atomic_swap_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_nbi_(T, N) T : shmem_##N##_atomic_fetch_nbi,
#define SHMEM_GC_atomic_fetch_nbi_(T, N) T : shmem_ctx_##N##_atomic_fetch_nbi,
#define SHMEM_atomic_fetch_nbi_3(fetch, source, pe) SHMEM_GSEL_(source, SHMEM_GENERIC_AMO_EXT_, SHMEM_G_atomic_fetch_nbi_)(fetch, source, pe)
#define SHMEM_atomic_fetch_nbi_4(ctx, fetch, source, pe) SHMEM_GSEL_(source, SHMEM_GENERIC_AMO_EXT_, SHMEM_GC_atomic_fetch_nbi_)(ctx, fetch, source, pe)
#define shmem_atomic_fetch_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_swap_nbi_(T, N) T : shmem_##N##_atomic_swap_nbi,
#define SHMEM_GC_atomic_swap_nbi_(T, N) T : shmem_ctx_##N##_atomic_swap_nbi,
#define SHMEM_atomic_swap_nbi_4(fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_EXT_, SHMEM_G_atomic_swap_nbi_)(fetch, dest, value, pe)
#define SHMEM_atomic_swap_nbi_5(ctx, fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_EXT_, SHMEM_GC_atomic_swap_nbi_)(ctx, fetch, dest, value, pe)
#define shmem_atomic_swap_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_swap_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_compare_swap_(T, N) T : shmem_##N##_atomic_compare_swap,
#define SHMEM_GC_atomic_compare_swap_(T, N) T : shmem_ctx_##N##_atomic_compare_swap,
#define SHMEM_atomic_compare_swap_4(dest, cond, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_compare_swap_)(dest, cond, value, pe)
#define SHMEM_atomic_compare_swap_5(ctx, dest, cond, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_compare_swap_)(ctx, dest, cond, value, pe)
#define shmem_atomic_compare_swap(...) SHMEM_BYCOUNT_(SHMEM_atomic_compare_swap_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_inc_(T, N) T : shmem_##N##_atomic_fetch_inc,
#define SHMEM_GC_atomic_fetch_inc_(T, N) T : shmem_ctx_##N##_atomic_fetch_inc,
#define SHMEM_atomic_fetch_inc_2(dest, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_fetch_inc_)(dest, pe)
#define SHMEM_atomic_fetch_inc_3(ctx, dest, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_fetch_inc_)(ctx, dest, pe)
#define shmem_atomic_fetch_inc(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_inc_, __VA_ARGS__)
#define SHMEM_G_atomic_inc_(T, N) T : shmem_##N##_atomic_inc,
#define SHMEM_GC_atomic_inc_(T, N) T : shmem_ctx_##N##_atomic_inc,
#define SHMEM_atomic_inc_2(dest, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_inc_)(dest, pe)
#define SHMEM_atomic_inc_3(ctx, dest, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_inc_)(ctx, dest, pe)
#define shmem_atomic_inc(...) SHMEM_BYCOUNT_(SHMEM_atomic_inc_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_add_(T, N) T : shmem_##N##_atomic_fetch_add,
#define SHMEM_GC_atomic_fetch_add_(T, N) T : shmem_ctx_##N##_atomic_fetch_add,
#define SHMEM_atomic_fetch_add_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_fetch_add_)(dest, value, pe)
#define SHMEM_atomic_fetch_add_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_fetch_add_)(ctx, dest, value, pe)
#define shmem_atomic_fetch_add(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_add_, __VA_ARGS__)
#define SHMEM_G_atomic_add_(T, N) T : shmem_##N##_atomic_add,
#define SHMEM_GC_atomic_add_(T, N) T : shmem_ctx_##N##_atomic_add,
#define SHMEM_atomic_add_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_add_)(dest, value, pe)
#define SHMEM_atomic_add_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_add_)(ctx, dest, value, pe)
#define shmem_atomic_add(...) SHMEM_BYCOUNT_(SHMEM_atomic_add_, __VA_ARGS__)
#define SHMEM_G_atomic_compare_swap_nbi_(T, N) T : shmem_##N##_atomic_compare_swap_nbi,
#define SHMEM_GC_atomic_compare_swap_nbi_(T, N) T : shmem_ctx_##N##_atomic_compare_swap_nbi,
#define SHMEM_atomic_compare_swap_nbi_5(fetch, dest, cond, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_compare_swap_nbi_)(fetch, dest, cond, value, pe)
#define SHMEM_atomic_compare_swap_nbi_6(ctx, fetch, dest, cond, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_compare_swap_nbi_)(ctx, fetch, dest, cond, value, pe)
#define shmem_atomic_compare_swap_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_compare_swap_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_inc_nbi_(T, N) T : shmem_##N##_atomic_fetch_inc_nbi,
#define SHMEM_GC_atomic_fetch_inc_nbi_(T, N) T : shmem_ctx_##N##_atomic_fetch_inc_nbi,
#define SHMEM_atomic_fetch_inc_nbi_3(fetch, dest, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_fetch_inc_nbi_)(fetch, dest, pe)
#define SHMEM_atomic_fetch_inc_nbi_4(ctx, fetch, dest, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_fetch_inc_nbi_)(ctx, fetch, dest, pe)
#define shmem_atomic_fetch_inc_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_inc_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_add_nbi_(T, N) T : shmem_##N##_atomic_fetch_add_nbi,
#define SHMEM_GC_atomic_fetch_add_nbi_(T, N) T : shmem_ctx_##N##_atomic_fetch_add_nbi,
#define SHMEM_atomic_fetch_add_nbi_4(fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_G_atomic_fetch_add_nbi_)(fetch, dest, value, pe)
#define SHMEM_atomic_fetch_add_nbi_5(ctx, fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_STD_, SHMEM_GC_atomic_fetch_add_nbi_)(ctx, fetch, dest, value, pe)
#define shmem_atomic_fetch_add_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_add_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_and_(T, N) T : shmem_##N##_atomic_fetch_and,
#define SHMEM_GC_atomic_fetch_and_(T, N) T : shmem_ctx_##N##_atomic_fetch_and,
#define SHMEM_atomic_fetch_and_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_fetch_and_)(dest, value, pe)
#define SHMEM_atomic_fetch_and_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_fetch_and_)(ctx, dest, value, pe)
#define shmem_atomic_fetch_and(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_and_, __VA_ARGS__)
#define SHMEM_G_atomic_and_(T, N) T : shmem_##N##_atomic_and,
#define SHMEM_GC_atomic_and_(T, N) T : shmem_ctx_##N##_atomic_and,
#define SHMEM_atomic_and_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_and_)(dest, value, pe)
#define SHMEM_atomic_and_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_and_)(ctx, dest, value, pe)
#define shmem_atomic_and(...) SHMEM_BYCOUNT_(SHMEM_atomic_and_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_and_nbi_(T, N) T : shmem_##N##_atomic_fetch_and_nbi,
#define SHMEM_GC_atomic_fetch_and_nbi_(T, N) T : shmem_ctx_##N##_atomic_fetch_and_nbi,
#define SHMEM_atomic_fetch_and_nbi_4(fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_fetch_and_nbi_)(fetch, dest, value, pe)
#define SHMEM_atomic_fetch_and_nbi_5(ctx, fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_fetch_and_nbi_)(ctx, fetch, dest, value, pe)
#define shmem_atomic_fetch_and_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_and_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_or_(T, N) T : shmem_##N##_atomic_fetch_or,
#define SHMEM_GC_atomic_fetch_or_(T, N) T : shmem_ctx_##N##_atomic_fetch_or,
#define SHMEM_atomic_fetch_or_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_fetch_or_)(dest, value, pe)
#define SHMEM_atomic_fetch_or_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_fetch_or_)(ctx, dest, value, pe)
#define shmem_atomic_fetch_or(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_or_, __VA_ARGS__)
#define SHMEM_G_atomic_or_(T, N) T : shmem_##N##_atomic_or,
#define SHMEM_GC_atomic_or_(T, N) T : shmem_ctx_##N##_atomic_or,
#define SHMEM_atomic_or_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_or_)(dest, value, pe)
#define SHMEM_atomic_or_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_or_)(ctx, dest, value, pe)
#define shmem_atomic_or(...) SHMEM_BYCOUNT_(SHMEM_atomic_or_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_or_nbi_(T, N) T : shmem_##N##_atomic_fetch_or_nbi,
#define SHMEM_GC_atomic_fetch_or_nbi_(T, N) T : shmem_ctx_##N##_atomic_fetch_or_nbi,
#define SHMEM_atomic_fetch_or_nbi_4(fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_fetch_or_nbi_)(fetch, dest, value, pe)
#define SHMEM_atomic_fetch_or_nbi_5(ctx, fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_fetch_or_nbi_)(ctx, fetch, dest, value, pe)
#define shmem_atomic_fetch_or_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_or_nbi_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_xor_(T, N) T : shmem_##N##_atomic_fetch_xor,
#define SHMEM_GC_atomic_fetch_xor_(T, N) T : shmem_ctx_##N##_atomic_fetch_xor,
#define SHMEM_atomic_fetch_xor_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_fetch_xor_)(dest, value, pe)
#define SHMEM_atomic_fetch_xor_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_fetch_xor_)(ctx, dest, value, pe)
#define shmem_atomic_fetch_xor(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_xor_, __VA_ARGS__)
#define SHMEM_G_atomic_xor_(T, N) T : shmem_##N##_atomic_xor,
#define SHMEM_GC_atomic_xor_(T, N) T : shmem_ctx_##N##_atomic_xor,
#define SHMEM_atomic_xor_3(dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_xor_)(dest, value, pe)
#define SHMEM_atomic_xor_4(ctx, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_xor_)(ctx, dest, value, pe)
#define shmem_atomic_xor(...) SHMEM_BYCOUNT_(SHMEM_atomic_xor_, __VA_ARGS__)
#define SHMEM_G_atomic_fetch_xor_nbi_(T, N) T : shmem_##N##_atomic_fetch_xor_nbi,
#define SHMEM_GC_atomic_fetch_xor_nbi_(T, N) T : shmem_ctx_##N##_atomic_fetch_xor_nbi,
#define SHMEM_atomic_fetch_xor_nbi_4(fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_G_atomic_fetch_xor_nbi_)(fetch, dest, value, pe)
#define SHMEM_atomic_fetch_xor_nbi_5(ctx, fetch, dest, value, pe) SHMEM_GSEL_(dest, SHMEM_GENERIC_AMO_BIT_, SHMEM_GC_atomic_fetch_xor_nbi_)(ctx, fetch, dest, value, pe)
#define shmem_atomic_fetch_xor_nbi(...) SHMEM_BYCOUNT_(SHMEM_atomic_fetch_xor_nbi_, __VA_ARGS__)

/* point-to-point synchronization on the basic types */
#define SHMEM_GENERIC_P2P_(X) \
    X(short, short) X(int, int) X(long, long) X(long long, longlong) \
    X(unsigned short, ushort) X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)
#define SHMEM_G_WU_(T, N) T : shmem_##N##_wait_until,
#define SHMEM_G_WUALL_(T, N) T : shmem_##N##_wait_until_all,
#define SHMEM_G_WUANY_(T, N) T : shmem_##N##_wait_until_any,
#define SHMEM_G_WUSOME_(T, N) T : shmem_##N##_wait_until_some,
#define SHMEM_G_WUALLV_(T, N) T : shmem_##N##_wait_until_all_vector,
#define SHMEM_G_WUANYV_(T, N) T : shmem_##N##_wait_until_any_vector,
#define SHMEM_G_WUSOMEV_(T, N) T : shmem_##N##_wait_until_some_vector,
#define SHMEM_G_T_(T, N) T : shmem_##N##_test,
#define SHMEM_G_TALL_(T, N) T : shmem_##N##_test_all,
#define SHMEM_G_TANY_(T, N) T : shmem_##N##_test_any,
#define SHMEM_G_TSOME_(T, N) T : shmem_##N##_test_some,
#define SHMEM_G_TALLV_(T, N) T : shmem_##N##_test_all_vector,
#define SHMEM_G_TANYV_(T, N) T : shmem_##N##_test_any_vector,
#define SHMEM_G_TSOMEV_(T, N) T : shmem_##N##_test_some_vector,
#define shmem_wait_until(ivar, cmp, v) SHMEM_GSEL_(ivar, SHMEM_GENERIC_P2P_, SHMEM_G_WU_)(ivar, cmp, v)
#define shmem_wait_until_all(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_WUALL_)(ivars, n, status, cmp, v)
#define shmem_wait_until_any(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_WUANY_)(ivars, n, status, cmp, v)
#define shmem_wait_until_some(ivars, n, idx, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_WUSOME_)(ivars, n, idx, status, cmp, v)
#define shmem_wait_until_all_vector(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_WUALLV_)(ivars, n, status, cmp, v)
#define shmem_wait_until_any_vector(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_WUANYV_)(ivars, n, status, cmp, v)
#define shmem_wait_until_some_vector(ivars, n, idx, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_WUSOMEV_)(ivars, n, idx, status, cmp, v)
#define shmem_test(ivar, cmp, v) SHMEM_GSEL_(ivar, SHMEM_GENERIC_P2P_, SHMEM_G_T_)(ivar, cmp, v)
#define shmem_test_all(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_TALL_)(ivars, n, status, cmp, v)
#define shmem_test_any(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_TANY_)(ivars, n, status, cmp, v)
#define shmem_test_some(ivars, n, idx, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_TSOME_)(ivars, n, idx, status, cmp, v)
#define shmem_test_all_vector(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_TALLV_)(ivars, n, status, cmp, v)
#define shmem_test_any_vector(ivars, n, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_TANYV_)(ivars, n, status, cmp, v)
#define shmem_test_some_vector(ivars, n, idx, status, cmp, v) SHMEM_GSEL_(ivars, SHMEM_GENERIC_P2P_, SHMEM_G_TSOMEV_)(ivars, n, idx, status, cmp, v)
#endif /* C11 generics */

/* ---- C++: the generic names as overloads (basic types, optional context) -- */
#if defined(__cplusplus)
#define SHMEM_CXX_RMA_TYPES_(X) \
    X(float, float) X(double, double) X(long double, longdouble) X(char, char) \
    X(signed char, schar) X(short, short) X(int, int) X(long, long) X(long long, longlong) \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint) \
    X(unsigned long, ulong) X(unsigned long long, ulonglong)
#define SHMEM_CXX_AMO_STD_(X) \
    X(int, int) X(long, long) X(long long, longlong) \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong)
#define SHMEM_CXX_AMO_EXT_(X) SHMEM_CXX_AMO_STD_(X) X(float, float) X(double, double)
#define SHMEM_CXX_AMO_BIT_(X) \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong) \
    X(int32_t, int32) X(int64_t, int64)
#define SHMEM_CXX_put_(T, N) \
    inline void shmem_put(T * dest, const T * source, size_t nelems, int pe) { shmem_##N##_put(dest, source, nelems, pe); } \
    inline void shmem_put(shmem_ctx_t ctx, T * dest, const T * source, size_t nelems, int pe) { shmem_ctx_##N##_put(ctx, dest, source, nelems, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_put_)
#define SHMEM_CXX_get_(T, N) \
    inline void shmem_get(T * dest, const T * source, size_t nelems, int pe) { shmem_##N##_get(dest, source, nelems, pe); } \
    inline void shmem_get(shmem_ctx_t ctx, T * dest, const T * source, size_t nelems, int pe) { shmem_ctx_##N##_get(ctx, dest, source, nelems, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_get_)
#define SHMEM_CXX_iput_(T, N) \
    inline void shmem_iput(T * dest, const T * source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { shmem_##N##_iput(dest, source, dst, sst, nelems, pe); } \
    inline void shmem_iput(shmem_ctx_t ctx, T * dest, const T * source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { shmem_ctx_##N##_iput(ctx, dest, source, dst, sst, nelems, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_iput_)
#define SHMEM_CXX_iget_(T, N) \
    inline void shmem_iget(T * dest, const T * source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { shmem_##N##_iget(dest, source, dst, sst, nelems, pe); } \
    inline void shmem_iget(shmem_ctx_t ctx, T * dest, const T * source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { shmem_ctx_##N##_iget(ctx, dest, source, dst, sst, nelems, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_iget_)
#define SHMEM_CXX_put_nbi_(T, N) \
    inline void shmem_put_nbi(T * dest, const T * source, size_t nelems, int pe) { shmem_##N##_put_nbi(dest, source, nelems, pe); } \
    inline void shmem_put_nbi(shmem_ctx_t ctx, T * dest, const T * source, size_t nelems, int pe) { shmem_ctx_##N##_put_nbi(ctx, dest, source, nelems, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_put_nbi_)
#define SHMEM_CXX_get_nbi_(T, N) \
    inline void shmem_get_nbi(T * dest, const T * source, size_t nelems, int pe) { shmem_##N##_get_nbi(dest, source, nelems, pe); } \
    inline void shmem_get_nbi(shmem_ctx_t ctx, T * dest, const T * source, size_t nelems, int pe) { shmem_ctx_##N##_get_nbi(ctx, dest, source, nelems, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_get_nbi_)
#define SHMEM_CXX_p_(T, N) \
    inline void shmem_p(T * dest, T value, int pe) { shmem_##N##_p(dest, value, pe); } \
    inline void shmem_p(shmem_ctx_t ctx, T * dest, T value, int pe) { shmem_ctx_##N##_p(ctx, dest, value, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_p_)
#define SHMEM_CXX_g_(T, N) \
    inline T shmem_g(const T * source, int pe) { return shmem_##N##_g(source, pe); } \
    inline T shmem_g(shmem_ctx_t ctx, const T * source, int pe) { return shmem_ctx_##N##_g(ctx, source, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_g_)
#define SHMEM_CXX_put_signal_(T, N) \
    inline void shmem_put_signal(T * dest, const T * source, size_t nelems, uint64_t * sig_addr, uint64_t signal, int sig_op, int pe) { shmem_##N##_put_signal(dest, source, nelems, sig_addr, signal, sig_op, pe); } \
    inline void shmem_put_signal(shmem_ctx_t ctx, T * dest, const T * source, size_t nelems, uint64_t * sig_addr, uint64_t signal, int sig_op, int pe) { shmem_ctx_##N##_put_signal(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_put_signal_)
#define SHMEM_CXX_put_signal_nbi_(T, N) \
    inline void shmem_put_signal_nbi(T * dest, const T * source, size_t nelems, uint64_t * sig_addr, uint64_t signal, int sig_op, int pe) { shmem_##N##_put_signal_nbi(dest, source, nelems, sig_addr, signal, sig_op, pe); } \
    inline void shmem_put_signal_nbi(shmem_ctx_t ctx, T * dest, const T * source, size_t nelems, uint64_t * sig_addr, uint64_t signal, int sig_op, int pe) { shmem_ctx_##N##_put_signal_nbi(ctx, dest, source, nelems, sig_addr, signal, sig_op, pe); }
SHMEM_CXX_RMA_TYPES_(SHMEM_CXX_put_signal_nbi_)
#define SHMEM_CXX_atomic_fetch_(T, N) \
    inline T shmem_atomic_fetch(const T * source, int pe) { return shmem_##N##_atomic_fetch(source, pe); } \
    inline T shmem_atomic_fetch(shmem_ctx_t ctx, const T * source, int pe) { return shmem_ctx_##N##_atomic_fetch(ctx, source, pe); }
SHMEM_CXX_AMO_EXT_(SHMEM_CXX_atomic_fetch_)
#define SHMEM_CXX_atomic_set_(T, N) \
    inline void shmem_atomic_set(T * dest, T value, int pe) { shmem_##N##_atomic_set(dest, value, pe); } \
    inline void shmem_atomic_set(shmem_ctx_t ctx, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_set(ctx, dest, value, pe); }
SHMEM_CXX_AMO_EXT_(SHMEM_CXX_atomic_set_)
#define SHMEM_CXX_atomic_swap_(T, N) \
    inline T shmem_atomic_swap(T * dest, T value, int pe) { return shmem_##N##_atomic_swap(dest, value, pe); } \
    inline T shmem_atomic_swap(shmem_ctx_t ctx, T * dest, T value, int pe) { return shmem_ctx_##N##_atomic_swap(ctx, dest, value, pe); }
SHMEM_CXX_AMO_EXT_(SHMEM_CXX_atomic_swap_)
#define SHMEM_CXX_atomic_fetch_nbi_(T, N) \
    inline void shmem_atomic_fetch_nbi(T * fetch, const T * source, int pe) { shmem_##N##_atomic_fetch_nbi(fetch, source, pe); } \
    inline void shmem_atomic_fetch_nbi(shmem_ctx_t ctx, T * fetch, const T * source, int pe) { shmem_ctx_##N##_atomic_fetch_nbi(ctx, fetch, source, pe); }
SHMEM_CXX_AMO_EXT_(SHMEM_CXX_atomic_fetch_nbi_)
#define SHMEM_CXX_atomic_swap_nbi_(T, N) \
    inline void shmem_atomic_swap_nbi(T * fetch, T * dest, T value, int pe) { shmem_##N##_atomic_swap_nbi(fetch, dest, value, pe); } \
    inline void shmem_atomic_swap_nbi(shmem_ctx_t ctx, T * fetch, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_swap_nbi(ctx, fetch, dest, value, pe); }
SHMEM_CXX_AMO_EXT_(SHMEM_CXX_atomic_swap_nbi_)
#define SHMEM_CXX_atomic_compare_swap_(T, N) \
    inline T shmem_atomic_compare_swap(T * dest, T cond, T value, int pe) { return shmem_##N##_atomic_compare_swap(dest, cond, value, pe); } \
    inline T shmem_atomic_compare_swap(shmem_ctx_t ctx, T * dest, T cond, T value, int pe) { return shmem_ctx_##N##_atomic_compare_swap(ctx, dest, cond, value, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_compare_swap_)
#define SHMEM_CXX_atomic_fetch_inc_(T, N) \
    inline T shmem_atomic_fetch_inc(T * dest, int pe) { return shmem_##N##_atomic_fetch_inc(dest, pe); } \
    inline T shmem_atomic_fetch_inc(shmem_ctx_t ctx, T * dest, int pe) { return shmem_ctx_##N##_atomic_fetch_inc(ctx, dest, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_fetch_inc_)
#define SHMEM_CXX_atomic_inc_(T, N) \
    inline void shmem_atomic_inc(T * dest, int pe) { shmem_##N##_atomic_inc(dest, pe); } \
    inline void shmem_atomic_inc(shmem_ctx_t ctx, T * dest, int pe) { shmem_ctx_##N##_atomic_inc(ctx, dest, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_inc_)
#define SHMEM_CXX_atomic_fetch_add_(T, N) \
    inline T shmem_atomic_fetch_add(T * dest, T value, int pe) { return shmem_##N##_atomic_fetch_add(dest, value, pe); } \
    inline T shmem_atomic_fetch_add(shmem_ctx_t ctx, T * dest, T value, int pe) { return shmem_ctx_##N##_atomic_fetch_add(ctx, dest, value, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_fetch_add_)
#define SHMEM_CXX_atomic_add_(T, N) \
    inline void shmem_atomic_add(T * dest, T value, int pe) { shmem_##N##_atomic_add(dest, value, pe); } \
    inline void shmem_atomic_add(shmem_ctx_t ctx, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_add(ctx, dest, value, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_add_)
#define SHMEM_CXX_atomic_compare_swap_nbi_(T, N) \
    inline void shmem_atomic_compare_swap_nbi(T * fetch, T * dest, T cond, T value, int pe) { shmem_##N##_atomic_compare_swap_nbi(fetch, dest, cond, value, pe); } \
    inline void shmem_atomic_compare_swap_nbi(shmem_ctx_t ctx, T * fetch, T * dest, T cond, T value, int pe) { shmem_ctx_##N##_atomic_compare_swap_nbi(ctx, fetch, dest, cond, value, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_compare_swap_nbi_)
#define SHMEM_CXX_atomic_fetch_inc_nbi_(T, N) \
    inline void shmem_atomic_fetch_inc_nbi(T * fetch, T * dest, int pe) { shmem_##N##_atomic_fetch_inc_nbi(fetch, dest, pe); } \
    inline void shmem_atomic_fetch_inc_nbi(shmem_ctx_t ctx, T * fetch, T * dest, int pe) { shmem_ctx_##N##_atomic_fetch_inc_nbi(ctx, fetch, dest, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_fetch_inc_nbi_)
#define SHMEM_CXX_atomic_fetch_add_nbi_(T, N) \
    inline void shmem_atomic_fetch_add_nbi(T * fetch, T * dest, T value, int pe) { shmem_##N##_atomic_fetch_add_nbi(fetch, dest, value, pe); } \
    inline void shmem_atomic_fetch_add_nbi(shmem_ctx_t ctx, T * fetch, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_fetch_add_nbi(ctx, fetch, dest, value, pe); }
SHMEM_CXX_AMO_STD_(SHMEM_CXX_atomic_fetch_add_nbi_)
#define SHMEM_CXX_atomic_fetch_and_(T, N) \
    inline T shmem_atomic_fetch_and(T * dest, T value, int pe) { return shmem_##N##_atomic_fetch_and(dest, value, pe); } \
    inline T shmem_atomic_fetch_and(shmem_ctx_t ctx, T * dest, T value, int pe) { return shmem_ctx_##N##_atomic_fetch_and(ctx, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_fetch_and_)
#define SHMEM_CXX_atomic_and_(T, N) \
    inline void shmem_atomic_and(T * dest, T value, int pe) { shmem_##N##_atomic_and(dest, value, pe); } \
    inline void shmem_atomic_and(shmem_ctx_t ctx, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_and(ctx, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_and_)
#define SHMEM_CXX_atomic_fetch_and_nbi_(T, N) \
    inline void shmem_atomic_fetch_and_nbi(T * fetch, T * dest, T value, int pe) { shmem_##N##_atomic_fetch_and_nbi(fetch, dest, value, pe); } \
    inline void shmem_atomic_fetch_and_nbi(shmem_ctx_t ctx, T * fetch, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_fetch_and_nbi(ctx, fetch, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_fetch_and_nbi_)
#define SHMEM_CXX_atomic_fetch_or_(T, N) \
    inline T shmem_atomic_fetch_or(T * dest, T value, int pe) { return shmem_##N##_atomic_fetch_or(dest, value, pe); } \
    inline T shmem_atomic_fetch_or(shmem_ctx_t ctx, T * dest, T value, int pe) { return shmem_ctx_##N##_atomic_fetch_or(ctx, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_fetch_or_)
#define SHMEM_CXX_atomic_or_(T, N) \
    inline void shmem_atomic_or(T * dest, T value, int pe) { shmem_##N##_atomic_or(dest, value, pe); } \
    inline void shmem_atomic_or(shmem_ctx_t ctx, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_or(ctx, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_or_)
#define SHMEM_CXX_atomic_fetch_or_nbi_(T, N) \
    inline void shmem_atomic_fetch_or_nbi(T * fetch, T * dest, T value, int pe) { shmem_##N##_atomic_fetch_or_nbi(fetch, dest, value, pe); } \
    inline void shmem_atomic_fetch_or_nbi(shmem_ctx_t ctx, T * fetch, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_fetch_or_nbi(ctx, fetch, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_fetch_or_nbi_)
#define SHMEM_CXX_atomic_fetch_xor_(T, N) \
    inline T shmem_atomic_fetch_xor(T * dest, T value, int pe) { return shmem_##N##_atomic_fetch_xor(dest, value, pe); } \
    inline T shmem_atomic_fetch_xor(shmem_ctx_t ctx, T * dest, T value, int pe) { return shmem_ctx_##N##_atomic_fetch_xor(ctx, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_fetch_xor_)
#define SHMEM_CXX_atomic_xor_(T, N) \
    inline void shmem_atomic_xor(T * dest, T value, int pe) { shmem_##N##_atomic_xor(dest, value, pe); } \
    inline void shmem_atomic_xor(shmem_ctx_t ctx, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_xor(ctx, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_xor_)
#define SHMEM_CXX_atomic_fetch_xor_nbi_(T, N) \
    inline void shmem_atomic_fetch_xor_nbi(T * fetch, T * dest, T value, int pe) { shmem_##N##_atomic_fetch_xor_nbi(fetch, dest, value, pe); } \
    inline void shmem_atomic_fetch_xor_nbi(shmem_ctx_t ctx, T * fetch, T * dest, T value, int pe) { shmem_ctx_##N##_atomic_fetch_xor_nbi(ctx, fetch, dest, value, pe); }
SHMEM_CXX_AMO_BIT_(SHMEM_CXX_atomic_fetch_xor_nbi_)
#endif /* C++ overloads */

#endif /* SWITCHYARD_SHMEM_H */
