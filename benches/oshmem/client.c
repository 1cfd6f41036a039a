/* Small-operation client for any OpenSHMEM 1.4+ library: the same source is
 * compiled with `switchyard cc` and with Open MPI's `oshcc` by run.sh beside
 * it, and both are run in the same run.
 *
 * PE 0 works on PE 1 (PE 1, and any further PE, waits in a barrier):
 *
 *   put_rate.S  S-byte shmem_putmem stream of N puts, then shmem_quiet:
 *               M msg/s (median of the repetitions)
 *   get_lat.S   S-byte blocking shmem_getmem, each timed alone:
 *               p50 and p99 in ns
 *   fadd_rate   shmem_long_atomic_fetch_add back to back: M ops/s (median)
 *   fadd_lat    one fetch-add timed alone: p50 and p99 in ns
 *
 * A single operation is timed with two CLOCK_MONOTONIC reads; the cost of
 * an empty pair (its median, printed as `timer`) is subtracted from every
 * sample. Sizes default to 8 and 64 bytes.
 *
 * Output (PE 0, stdout): one line per figure, `@ NAME VALUE UNIT`, which
 * run.sh collects; anything else is commentary. The target checks what it
 * received (the last put, the fetch-add total), so a library that drops
 * operations fails instead of winning: exit status 1.
 *
 * Usage: client [-n PUTS] [-r REPS] [-l SAMPLES] [-s SIZE]...
 *   -n  operations per rate repetition (default 200000)
 *   -r  rate repetitions, the median is printed (default 5)
 *   -l  latency samples per figure (default 100000)
 *   -s  a message size in bytes, 1..4096 (repeatable; default 8 and 64)
 */
#define _POSIX_C_SOURCE 200809L
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES 8
#define MAX_SIZE 4096

/* The symmetric area: puts land at PUT_OFF, gets read GET_OFF, the counter
 * sits alone in its own cache line. */
#define PUT_OFF 0
#define GET_OFF (MAX_SIZE + 64)
#define CTR_OFF (2 * MAX_SIZE + 128)
#define AREA (CTR_OFF + 64)

struct opts {
    long puts, reps, samples;
    int sizes[MAX_SIZES], n_sizes;
};

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile `p` (0..100) of `n` sorted samples. */
static uint64_t pct(const uint64_t *v, long n, double p) {
    long i = (long)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[i];
}

static double median(double *v, long n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median cost of an empty timed interval. */
static uint64_t timer_cost(uint64_t *buf, long n) {
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        buf[i] = now_ns() - t0;
    }
    qsort(buf, (size_t)n, sizeof *buf, cmp_u64);
    return pct(buf, n, 50);
}

static void report_lat(const char *name, uint64_t *v, long n) {
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    printf("@ %s.p50 %llu ns\n", name, (unsigned long long)pct(v, n, 50));
    printf("@ %s.p99 %llu ns\n", name, (unsigned long long)pct(v, n, 99));
}

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s [-n PUTS] [-r REPS] [-l SAMPLES] [-s SIZE]...\n", prog);
    exit(2);
}

static long positive(const char *prog, const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1) usage(prog);
    return v;
}

static struct opts parse(int argc, char **argv) {
    struct opts o = {200000, 5, 100000, {0}, 0};
    int c;
    while ((c = getopt(argc, argv, "n:r:l:s:")) != -1) {
        switch (c) {
        case 'n': o.puts = positive(argv[0], optarg); break;
        case 'r': o.reps = positive(argv[0], optarg); break;
        case 'l': o.samples = positive(argv[0], optarg); break;
        case 's': {
            long s = positive(argv[0], optarg);
            if (s > MAX_SIZE || o.n_sizes == MAX_SIZES) usage(argv[0]);
            o.sizes[o.n_sizes++] = (int)s;
            break;
        }
        default: usage(argv[0]);
        }
    }
    if (optind != argc) usage(argv[0]);
    if (o.n_sizes == 0) {
        o.sizes[0] = 8;
        o.sizes[1] = 64;
        o.n_sizes = 2;
    }
    return o;
}

/* The value the last put of a stream of `n` carries. */
static uint64_t stamp(int size, long rep, long i) {
    return ((uint64_t)size << 48) ^ ((uint64_t)rep << 32) ^ (uint64_t)i;
}

static void put_rate(const struct opts *o, char *area, int size, int peer, double *rates) {
    static uint64_t src[MAX_SIZE / 8];
    memset(src, 0xab, sizeof src);
    for (long i = 0; i < o->puts / 10; i++) shmem_putmem(area + PUT_OFF, src, (size_t)size, peer);
    shmem_quiet();
    for (long r = 0; r < o->reps; r++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < o->puts; i++) {
            src[0] = stamp(size, r, i);
            shmem_putmem(area + PUT_OFF, src, (size_t)size, peer);
        }
        shmem_quiet();
        rates[r] = (double)o->puts * 1e3 / (double)(now_ns() - t0);
    }
}

/* PE 1's check of the last put of a stream (sizes of 8 bytes or more). */
static int check_put(const struct opts *o, const char *area, int size) {
    uint64_t got;
    if (size < 8) return 0;
    memcpy(&got, area + PUT_OFF, sizeof got);
    uint64_t want = stamp(size, o->reps - 1, o->puts - 1);
    if (got == want) return 0;
    fprintf(stderr, "PE 1: put_rate.%d: the last put holds %#llx, not %#llx\n", size,
            (unsigned long long)got, (unsigned long long)want);
    return 1;
}

static void get_lat(const struct opts *o, char *area, int size, int peer, uint64_t timer,
                    uint64_t *lat) {
    static char dst[MAX_SIZE];
    for (long i = 0; i < o->samples / 10; i++) shmem_getmem(dst, area + GET_OFF, (size_t)size, peer);
    for (long i = 0; i < o->samples; i++) {
        uint64_t t0 = now_ns();
        shmem_getmem(dst, area + GET_OFF, (size_t)size, peer);
        uint64_t d = now_ns() - t0;
        lat[i] = d > timer ? d - timer : 0;
    }
    if (dst[0] != 0x5a || dst[size - 1] != 0x5a) {
        fprintf(stderr, "PE 0: get_lat.%d: read %#x, not 0x5a\n", size, dst[0]);
        exit(1);
    }
}

int main(int argc, char **argv) {
    struct opts o = parse(argc, argv);
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    if (npes < 2) {
        if (me == 0) fprintf(stderr, "client: needs at least 2 PEs\n");
        shmem_finalize();
        return 2;
    }
    char *area = shmem_malloc(AREA);
    if (area == NULL) {
        fprintf(stderr, "PE %d: shmem_malloc(%d) failed\n", me, AREA);
        return 1;
    }
    memset(area, 0x5a, AREA);
    long *ctr = (long *)(void *)(area + CTR_OFF);
    *ctr = 0;
    long n_lat = o.samples > o.reps ? o.samples : o.reps;
    uint64_t *lat = malloc((size_t)n_lat * sizeof *lat);
    double *rates = malloc((size_t)o.reps * sizeof *rates);
    if (lat == NULL || rates == NULL) {
        fprintf(stderr, "PE %d: out of memory\n", me);
        return 1;
    }
    shmem_barrier_all();
    int bad = 0, peer = 1;
    char name[64];

    uint64_t timer = me == 0 ? timer_cost(lat, o.samples) : 0;
    if (me == 0) {
        printf("# client: %d PEs, %ld ops x %ld reps per rate, %ld latency samples\n", npes,
               o.puts, o.reps, o.samples);
        printf("@ timer %llu ns\n", (unsigned long long)timer);
    }
    for (int k = 0; k < o.n_sizes; k++) {
        int size = o.sizes[k];
        if (me == 0) {
            put_rate(&o, area, size, peer, rates);
            snprintf(name, sizeof name, "put_rate.%d", size);
            printf("@ %s %.2f Mmsg/s\n", name, median(rates, o.reps));
        }
        shmem_barrier_all();
        if (me == 1) bad |= check_put(&o, area, size);
        shmem_barrier_all();
    }
    for (int k = 0; k < o.n_sizes; k++) {
        int size = o.sizes[k];
        if (me == 0) {
            get_lat(&o, area, size, peer, timer, lat);
            snprintf(name, sizeof name, "get_lat.%d", size);
            report_lat(name, lat, o.samples);
        }
        shmem_barrier_all();
    }

    long adds = o.puts * o.reps + o.samples;
    if (me == 0) {
        long sink = 0;
        for (long r = 0; r < o.reps; r++) {
            uint64_t t0 = now_ns();
            for (long i = 0; i < o.puts; i++) sink += shmem_long_atomic_fetch_add(ctr, 1, peer);
            rates[r] = (double)o.puts * 1e3 / (double)(now_ns() - t0);
        }
        for (long i = 0; i < o.samples; i++) {
            uint64_t t0 = now_ns();
            sink += shmem_long_atomic_fetch_add(ctr, 1, peer);
            uint64_t d = now_ns() - t0;
            lat[i] = d > timer ? d - timer : 0;
        }
        /* The old values sum to 0 + 1 + ... + (adds - 1). */
        if (sink != adds * (adds - 1) / 2) {
            fprintf(stderr, "PE 0: fetch-add returned wrong old values\n");
            bad = 1;
        }
        printf("@ fadd_rate %.2f Mops/s\n", median(rates, o.reps));
        report_lat("fadd_lat", lat, o.samples);
    }
    shmem_barrier_all();
    if (me == 1 && *ctr != adds) {
        fprintf(stderr, "PE 1: the counter is %ld, not %ld\n", *ctr, adds);
        bad = 1;
    }
    fflush(stdout);
    shmem_barrier_all();
    free(lat);
    free(rates);
    shmem_free(area);
    shmem_finalize();
    return bad;
}
