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

/* ==== teams and collectives (team.rs, coll.rs) ============================ */

/* ==== deprecated names ===================================================== */

#ifdef __cplusplus
}
#endif

#endif /* SWITCHYARD_SHMEM_H */
