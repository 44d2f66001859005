/*
 * Shared part of the C drivers of the peer comparison (peer_pnetcdf.c, peer_adios2.c):
 * the key=value command line, the geometry of the access patterns a, b, c, d (and the box
 * of a, the many small files of f), the value formula, the timing protocol with the
 * recursive fsync, the JSON line of rank 0 and the error exits.  Every driver contains
 * only the library calls; everything here is plain C99 + POSIX + MPI.
 *
 * Command line: peer_X op=... pattern=... dir=... plus the keys of the pattern
 *   a: n vars steps          b: rows cols br bc steps     c: rows width steps map
 *   d: count length steps    box (op=box, pattern=a): n vars steps lo=z,y,x hi=z,y,x
 *   f (op=make|scan): count
 * Usage errors exit with code 2 (after MPI_Init, before any I/O, every rank the same way);
 * library errors print "<driver>: <call>(...): <message>" and MPI_Abort(MPI_COMM_WORLD, 1).
 */
#ifndef PEERS_COMMON_H
#define PEERS_COMMON_H

#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mpi.h>

/* ------------------------------------------------------------------ errors ---- */

static const char *peer_prog = "peer";
static int peer_rank = 0;
static int peer_size = 1;

/* A library call failed: one line on stderr, then the whole job ends with code 1. */
static void peer_fail(const char *call, const char *message)
{
    fprintf(stderr, "%s: %s(...): %s\n", peer_prog, call, message);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* A usage error every rank detects alike: rank 0 explains, everybody leaves with `code`. */
static void peer_usage_exit(int code, const char *fmt, ...)
{
    if (peer_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", peer_prog);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(code);
}

/* A bad input only this rank can see (its map file): the job ends with code 2. */
static void peer_local_bad_input(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: rank %d: ", peer_prog, peer_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static void *peer_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL)
        peer_fail("malloc", strerror(errno));
    return p;
}

/* ------------------------------------------------------------ command line ---- */

enum peer_op { OP_WRITE, OP_READ, OP_CHECK, OP_BOX, OP_MAKE, OP_SCAN };

enum peer_key {
    K_OP, K_PATTERN, K_DIR, K_N, K_VARS, K_STEPS, K_ROWS, K_COLS, K_BR, K_BC, K_WIDTH,
    K_MAP, K_COUNT, K_LENGTH, K_LO, K_HI, K_NKEYS
};

static const char *const peer_key_names[K_NKEYS] = {
    "op", "pattern", "dir", "n", "vars", "steps", "rows", "cols", "br", "bc", "width",
    "map", "count", "length", "lo", "hi"
};

typedef struct {
    enum peer_op op;
    char pattern; /* 'a' .. 'd', 'f' */
    const char *dir, *map;
    long long n, vars, steps, rows, cols, br, bc, width, count, length;
    long long lo[3], hi[3];
} peer_args;

/* Parses a positive decimal integer (the whole string) or exits with code 2. */
static long long peer_parse_positive(const char *key, const char *text)
{
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 1)
        peer_usage_exit(2, "%s=%s: a positive integer is required", key, text);
    return value;
}

/* Parses "z,y,x" (three non-negative integers) or exits with code 2. */
static void peer_parse_triple(const char *key, const char *text, long long out[3])
{
    const char *p = text;
    for (int k = 0; k < 3; k++) {
        char *end = NULL;
        errno = 0;
        out[k] = strtoll(p, &end, 10);
        if (errno != 0 || end == p || out[k] < 0 || *end != (k < 2 ? ',' : '\0'))
            peer_usage_exit(2, "%s=%s: three non-negative integers z,y,x are required", key, text);
        p = end + 1;
    }
}

/* The keys each (op, pattern) needs; others named on the command line are ignored. */
static int peer_required_keys(const peer_args *a, const enum peer_key **keys)
{
    static const enum peer_key ka[] = {K_N, K_VARS, K_STEPS};
    static const enum peer_key kb[] = {K_ROWS, K_COLS, K_BR, K_BC, K_STEPS};
    static const enum peer_key kc[] = {K_ROWS, K_WIDTH, K_STEPS, K_MAP};
    static const enum peer_key kd[] = {K_COUNT, K_LENGTH, K_STEPS};
    static const enum peer_key kbox[] = {K_N, K_VARS, K_STEPS, K_LO, K_HI};
    static const enum peer_key kf[] = {K_COUNT};
    int array_op = a->op == OP_WRITE || a->op == OP_READ || a->op == OP_CHECK;
    if (array_op && a->pattern == 'a') { *keys = ka; return 3; }
    if (array_op && a->pattern == 'b') { *keys = kb; return 5; }
    if (array_op && a->pattern == 'c') { *keys = kc; return 4; }
    if (array_op && a->pattern == 'd') { *keys = kd; return 3; }
    if (a->op == OP_BOX && a->pattern == 'a') { *keys = kbox; return 5; }
    if ((a->op == OP_MAKE || a->op == OP_SCAN) && a->pattern == 'f') { *keys = kf; return 1; }
    return -1;
}

/*
 * Parses argv (after MPI_Init, so that only rank 0 prints) into *a; unknown or missing
 * keys, duplicates and bad values end every rank with exit code 2.
 */
static void peer_parse_args(int argc, char **argv, peer_args *a)
{
    const char *given[K_NKEYS] = {0};
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        int key = -1;
        if (eq != NULL)
            for (int k = 0; k < K_NKEYS; k++)
                if (strlen(peer_key_names[k]) == (size_t)(eq - argv[i])
                    && strncmp(argv[i], peer_key_names[k], (size_t)(eq - argv[i])) == 0)
                    key = k;
        if (key < 0)
            peer_usage_exit(2, "unknown argument '%s' (key=value expected)", argv[i]);
        if (given[key] != NULL)
            peer_usage_exit(2, "key '%s' given twice", peer_key_names[key]);
        given[key] = eq + 1;
    }
    for (int k = K_OP; k <= K_DIR; k++)
        if (given[k] == NULL || given[k][0] == '\0')
            peer_usage_exit(2, "missing key '%s'", peer_key_names[k]);
    static const char *const ops[] = {"write", "read", "check", "box", "make", "scan"};
    int op = -1;
    for (int k = 0; k < 6; k++)
        if (strcmp(given[K_OP], ops[k]) == 0)
            op = k;
    if (op < 0)
        peer_usage_exit(2, "op=%s: one of write, read, check, box, make, scan", given[K_OP]);
    a->op = (enum peer_op)op;
    if (strlen(given[K_PATTERN]) != 1 || strchr("abcdf", given[K_PATTERN][0]) == NULL)
        peer_usage_exit(2, "pattern=%s: one of a, b, c, d, f", given[K_PATTERN]);
    a->pattern = given[K_PATTERN][0];
    a->dir = given[K_DIR];
    const enum peer_key *keys = NULL;
    int nkeys = peer_required_keys(a, &keys);
    if (nkeys < 0)
        peer_usage_exit(2, "op=%s does not go with pattern=%c", ops[op], a->pattern);
    for (int j = 0; j < nkeys; j++) {
        enum peer_key k = keys[j];
        const char *v = given[k];
        if (v == NULL)
            peer_usage_exit(2, "missing key '%s' for op=%s pattern=%c", peer_key_names[k], ops[op],
                            a->pattern);
        switch (k) {
        case K_N: a->n = peer_parse_positive("n", v); break;
        case K_VARS: a->vars = peer_parse_positive("vars", v); break;
        case K_STEPS: a->steps = peer_parse_positive("steps", v); break;
        case K_ROWS: a->rows = peer_parse_positive("rows", v); break;
        case K_COLS: a->cols = peer_parse_positive("cols", v); break;
        case K_BR: a->br = peer_parse_positive("br", v); break;
        case K_BC: a->bc = peer_parse_positive("bc", v); break;
        case K_WIDTH: a->width = peer_parse_positive("width", v); break;
        case K_COUNT: a->count = peer_parse_positive("count", v); break;
        case K_LENGTH: a->length = peer_parse_positive("length", v); break;
        case K_LO: peer_parse_triple("lo", v, a->lo); break;
        case K_HI: peer_parse_triple("hi", v, a->hi); break;
        case K_MAP:
            if (v[0] == '\0')
                peer_usage_exit(2, "map= must name a path prefix");
            a->map = v;
            break;
        default: break;
        }
    }
    if (a->op == OP_BOX)
        for (int k = 0; k < 3; k++)
            if (a->lo[k] >= a->hi[k] || a->hi[k] > a->n)
                peer_usage_exit(2, "box lo=%lld,%lld,%lld hi=%lld,%lld,%lld: 0 <= lo < hi <= n=%lld "
                                   "required in every dimension", a->lo[0], a->lo[1], a->lo[2],
                                a->hi[0], a->hi[1], a->hi[2], a->n);
}

/*
 * MPI_Init, then the arguments; `prog` names the driver in every message.
 * Leaves peer_rank and peer_size set.
 */
static void peer_init(int *argc, char ***argv, const char *prog, peer_args *a)
{
    peer_prog = prog;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &peer_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &peer_size);
    peer_parse_args(*argc, *argv, a);
}

/* ------------------------------------------------------------------- values ---- */

/* value(step s, var v, global linear index i); exact in double for s*1024+v < 2**21. */
static double peer_value(long long s, long long v, uint64_t i)
{
    return (double)((((uint64_t)(s * 1024 + v)) << 32) + i);
}

/* --------------------------------------------------------------- geometry ---- */

/*
 * The decomposition of one pattern on this rank: `nvars` variables of `ndims` dimensions
 * (the step dimension not counted) and shape `shape`; per (step, var) one local buffer of
 * `local_elems` doubles (buf[s * nvars + v]) and `nreq` requests, request q being the box
 * start[q], count[q] of the global array stored C-ordered at buf + offset[q].  Pattern c
 * gets its requests (the runs) only from peer_find_runs, inside the timing.
 */
typedef struct {
    char pattern;
    int ndims;
    size_t shape[3];
    const char *dimnames[3];
    long long nvars, steps;
    size_t local_elems;
    size_t nreq;
    size_t (*start)[3], (*count)[3];
    size_t *offset;
    double **buf;
    /* pattern c: the global row of each local row */
    int64_t *map;
    size_t nlocal_rows;
} peer_layout;

/* Name of variable v of the layout's pattern, as every contender names it. */
static const char *peer_varname(const peer_layout *L, long long v)
{
    static char name[32];
    switch (L->pattern) {
    case 'a': snprintf(name, sizeof name, "a%lld", v); break;
    case 'b': return "b";
    case 'c': return "c";
    default: snprintf(name, sizeof name, "d%03lld", v); break;
    }
    return name;
}

static void peer_alloc_requests(peer_layout *L, size_t nreq)
{
    L->nreq = nreq;
    L->start = peer_malloc(nreq * sizeof *L->start);
    L->count = peer_malloc(nreq * sizeof *L->count);
    L->offset = peer_malloc(nreq * sizeof *L->offset);
}

/* Reads this rank's map file <map>.<P>.<r> (little-endian int64 global rows). */
static void peer_read_map(peer_layout *L, const char *prefix, long long rows)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.%d", prefix, peer_size, peer_rank);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        peer_local_bad_input("map file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size % 8 != 0)
        peer_local_bad_input("map file %s: size is not a multiple of 8", path);
    L->nlocal_rows = (size_t)st.st_size / 8;
    unsigned char *raw = peer_malloc((size_t)st.st_size);
    if (fread(raw, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        peer_local_bad_input("map file %s: short read", path);
    fclose(f);
    L->map = peer_malloc(L->nlocal_rows * sizeof *L->map);
    for (size_t j = 0; j < L->nlocal_rows; j++) {
        uint64_t u = 0;
        for (int b = 7; b >= 0; b--)
            u = (u << 8) | raw[8 * j + (size_t)b];
        L->map[j] = (int64_t)u;
        if (L->map[j] < 0 || L->map[j] >= rows)
            peer_local_bad_input("map file %s: row %lld outside [0, %lld)", path,
                                 (long long)L->map[j], rows);
    }
    free(raw);
}

/* Block split of pattern a: the 3-D box of this rank in the MPI_Dims_create grid. */
/* [lo, hi) of block c of p along an axis of n: the first n % p blocks one longer (as sdm.Block splits). */
static void peer_block(long long n, long long p, long long c, long long *lo, long long *hi)
{
    long long base = n / p, extra = n % p;
    *lo = c * base + (c < extra ? c : extra);
    *hi = *lo + base + (c < extra ? 1 : 0);
}

static void peer_layout_a(peer_layout *L, long long n)
{
    int dims[3] = {0, 0, 0};
    MPI_Dims_create(peer_size, 3, dims);
    int coords[3] = {peer_rank / (dims[1] * dims[2]), (peer_rank / dims[2]) % dims[1],
                     peer_rank % dims[2]};
    peer_alloc_requests(L, 1);
    L->ndims = 3;
    L->local_elems = 1;
    for (int k = 0; k < 3; k++) {
        long long lo, hi;
        peer_block(n, dims[k], coords[k], &lo, &hi);
        L->shape[k] = (size_t)n;
        L->start[0][k] = (size_t)lo;
        L->count[0][k] = (size_t)(hi - lo);
        L->local_elems *= (size_t)(hi - lo);
    }
    L->offset[0] = 0;
    L->dimnames[0] = "z";
    L->dimnames[1] = "y";
    L->dimnames[2] = "x";
}

/* Block-cyclic pattern b: one request per local br x bc block, packed block after block. */
static void peer_layout_b(peer_layout *L, const peer_args *a)
{
    int dims[2] = {0, 0};
    MPI_Dims_create(peer_size, 2, dims);
    int pr = dims[0], pc = dims[1], myr = peer_rank / pc, myc = peer_rank % pc;
    if (a->rows % (pr * a->br) != 0 || a->cols % (pc * a->bc) != 0)
        peer_usage_exit(2, "pattern b: rows=%lld must be a multiple of pr*br=%d*%lld and cols=%lld "
                           "of pc*bc=%d*%lld", a->rows, pr, a->br, a->cols, pc, a->bc);
    size_t nbr = (size_t)(a->rows / a->br / pr), nbc = (size_t)(a->cols / a->bc / pc);
    size_t block = (size_t)(a->br * a->bc);
    peer_alloc_requests(L, nbr * nbc);
    for (size_t jr = 0; jr < nbr; jr++)
        for (size_t jc = 0; jc < nbc; jc++) {
            size_t q = jr * nbc + jc;
            L->start[q][0] = ((size_t)myr + jr * (size_t)pr) * (size_t)a->br;
            L->start[q][1] = ((size_t)myc + jc * (size_t)pc) * (size_t)a->bc;
            L->count[q][0] = (size_t)a->br;
            L->count[q][1] = (size_t)a->bc;
            L->offset[q] = q * block;
        }
    L->ndims = 2;
    L->shape[0] = (size_t)a->rows;
    L->shape[1] = (size_t)a->cols;
    L->local_elems = nbr * nbc * block;
    L->dimnames[0] = "row";
    L->dimnames[1] = "col";
}

/* Builds the decomposition of args' pattern (reads the map of pattern c); no buffers yet. */
static void peer_layout_init(peer_layout *L, const peer_args *a)
{
    memset(L, 0, sizeof *L);
    L->pattern = a->pattern;
    L->steps = a->steps;
    L->nvars = 1;
    switch (a->pattern) {
    case 'a':
        L->nvars = a->vars;
        peer_layout_a(L, a->n);
        break;
    case 'b':
        peer_layout_b(L, a);
        break;
    case 'c':
        peer_read_map(L, a->map, a->rows);
        L->ndims = 2;
        L->shape[0] = (size_t)a->rows;
        L->shape[1] = (size_t)a->width;
        L->local_elems = L->nlocal_rows * (size_t)a->width;
        L->dimnames[0] = "row";
        L->dimnames[1] = "col";
        break;
    default: { /* 'd' */
        long long lo, hi;
        peer_block(a->length, peer_size, peer_rank, &lo, &hi);
        L->nvars = a->count;
        L->ndims = 1;
        L->shape[0] = (size_t)a->length;
        peer_alloc_requests(L, 1);
        L->start[0][0] = (size_t)lo;
        L->count[0][0] = (size_t)(hi - lo);
        L->offset[0] = 0;
        L->local_elems = (size_t)(hi - lo);
        L->dimnames[0] = "i";
        break;
    }
    }
}

/*
 * Pattern c, inside the timing: cuts the local rows into runs (maximal sequences of
 * consecutive local rows holding consecutive global rows), one request per run.
 * No-op for the other patterns.
 */
static void peer_find_runs(peer_layout *L)
{
    if (L->pattern != 'c')
        return;
    size_t n = L->nlocal_rows, runs = 0;
    for (size_t j = 0; j < n; j++)
        if (j == 0 || L->map[j] != L->map[j - 1] + 1)
            runs++;
    peer_alloc_requests(L, runs);
    size_t q = 0;
    for (size_t j = 0; j < n; j++) {
        if (j == 0 || L->map[j] != L->map[j - 1] + 1) {
            L->start[q][0] = (size_t)L->map[j];
            L->start[q][1] = 0;
            L->count[q][0] = 0;
            L->count[q][1] = L->shape[1];
            L->offset[q] = j * L->shape[1];
            q++;
        }
        L->count[q - 1][0]++;
    }
}

/* Expected contents of buffer (s, v) of this rank, written to out[local_elems]. */
static void peer_expected(const peer_layout *L, long long s, long long v, double *out)
{
    if (L->pattern == 'c') {
        size_t w = L->shape[1];
        for (size_t j = 0; j < L->nlocal_rows; j++)
            for (size_t x = 0; x < w; x++)
                out[j * w + x] = peer_value(s, v, (uint64_t)L->map[j] * w + x);
        return;
    }
    for (size_t q = 0; q < L->nreq; q++) {
        /* the request box, padded to 3-D with leading extents of 1 */
        size_t st[3] = {0, 0, 0}, ct[3] = {1, 1, 1}, sh[3] = {1, 1, 1};
        int pad = 3 - L->ndims;
        for (int k = 0; k < L->ndims; k++) {
            st[pad + k] = L->start[q][k];
            ct[pad + k] = L->count[q][k];
            sh[pad + k] = L->shape[k];
        }
        double *o = out + L->offset[q];
        for (size_t z = 0; z < ct[0]; z++)
            for (size_t y = 0; y < ct[1]; y++) {
                uint64_t row = ((uint64_t)(st[0] + z) * sh[1] + (st[1] + y)) * sh[2] + st[2];
                for (size_t x = 0; x < ct[2]; x++)
                    *o++ = peer_value(s, v, row + x);
            }
    }
}

/*
 * Allocates every (step, var) buffer before the timing: with the expected values for a
 * write, with NaN for a read (touching every page, so no page is first mapped inside the
 * timing).
 */
static void peer_alloc_buffers(peer_layout *L, int fill)
{
    size_t nbuf = (size_t)(L->steps * L->nvars);
    L->buf = peer_malloc(nbuf * sizeof *L->buf);
    for (size_t b = 0; b < nbuf; b++) {
        L->buf[b] = peer_malloc(L->local_elems * sizeof(double));
        if (fill)
            peer_expected(L, (long long)b / L->nvars, (long long)b % L->nvars, L->buf[b]);
        else
            for (size_t e = 0; e < L->local_elems; e++)
                L->buf[b][e] = NAN;
    }
}

static double *peer_buffer(const peer_layout *L, long long s, long long v)
{
    return L->buf[s * L->nvars + v];
}

/* Mismatching elements of this rank's buffers after a read (compared with the formula). */
static long long peer_count_mismatches(const peer_layout *L)
{
    long long bad = 0;
    double *want = peer_malloc(L->local_elems * sizeof(double));
    for (long long s = 0; s < L->steps; s++)
        for (long long v = 0; v < L->nvars; v++) {
            const double *got = peer_buffer(L, s, v);
            peer_expected(L, s, v, want);
            for (size_t e = 0; e < L->local_elems; e++)
                bad += got[e] != want[e];
        }
    free(want);
    return bad;
}

/* Payload bytes of this rank's buffers (all steps, all variables). */
static long long peer_local_bytes(const peer_layout *L)
{
    return (long long)(L->local_elems * sizeof(double)) * L->steps * L->nvars;
}

/* ------------------------------------------------------------------ the box ---- */

static size_t peer_box_elems(const peer_args *a)
{
    return (size_t)((a->hi[0] - a->lo[0]) * (a->hi[1] - a->lo[1]) * (a->hi[2] - a->lo[2]));
}

/* Mismatches of a box of var a0 at step steps-1 (C order, extents hi-lo) with the formula. */
static long long peer_box_mismatches(const peer_args *a, const double *got)
{
    long long bad = 0;
    uint64_t n = (uint64_t)a->n;
    for (long long z = a->lo[0]; z < a->hi[0]; z++)
        for (long long y = a->lo[1]; y < a->hi[1]; y++)
            for (long long x = a->lo[2]; x < a->hi[2]; x++)
                bad += *got++ != peer_value(a->steps - 1, 0, ((uint64_t)z * n + (uint64_t)y) * n
                                                                 + (uint64_t)x);
    return bad;
}

/* ------------------------------------------------------------- pattern f ---- */

enum { PEER_F_X_LEN = 16 };

static double peer_f_reynolds(long long i)
{
    return 100.0 + (double)(i * 37 % 1000);
}

static const char *peer_f_mesh(long long i)
{
    return i % 3 == 0 ? "fine" : "coarse";
}

/* The scan's predicate: mesh == "fine" and reynolds > 800. */
static int peer_f_selected(const char *mesh, double reynolds)
{
    return strcmp(mesh, "fine") == 0 && reynolds > 800.0;
}

/* Path of file i of pattern f: dir/run-%04d.<ext>. */
static void peer_f_path(char *out, size_t size, const char *dir, long long i, const char *ext)
{
    snprintf(out, size, "%s/run-%04lld.%s", dir, i, ext);
}

/* ----------------------------------------------------------- files, timing ---- */

/* fsync()s every regular file below path (recursively; directories are walked, links not): how many. */
static long long peer_fsync_tree(const char *path)
{
    long long files = 0;
    struct stat st;
    if (lstat(path, &st) != 0)
        peer_fail("lstat", strerror(errno));
    if (S_ISREG(st.st_mode)) {
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            peer_fail("open", strerror(errno));
        if (fsync(fd) != 0)
            peer_fail("fsync", strerror(errno));
        close(fd);
        files = 1;
    } else if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d == NULL)
            peer_fail("opendir", strerror(errno));
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char child[4096];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            files += peer_fsync_tree(child);
        }
        closedir(d);
    }
    return files;
}

/* Start of a timed section: barrier, then the clock. */
static double peer_clock_start(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime();
}

/* End of a timed write: rank 0 fsyncs every file below dir (*files: how many there are; 0 on other
   ranks), barrier, elapsed seconds. */
static double peer_clock_stop_write(double t0, const char *dir, long long *files)
{
    *files = peer_rank == 0 ? peer_fsync_tree(dir) : 0;
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
}

/* End of a timed read: barrier, elapsed seconds. */
static double peer_clock_stop_read(double t0)
{
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
}

/* Sum over all ranks (result valid on rank 0). */
static long long peer_sum(long long local)
{
    long long total = 0;
    MPI_Reduce(&local, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    return total;
}

/*
 * The one JSON line of rank 0; negative mismatches / matches / files are left out.
 * Then MPI_Finalize and exit code 0.
 */
static void peer_report_and_exit(double seconds, long long bytes, long long mismatches,
                                 long long matches, long long files)
{
    if (peer_rank == 0) {
        printf("{\"seconds\": %.9f, \"bytes\": %lld", seconds, bytes);
        if (mismatches >= 0)
            printf(", \"mismatches\": %lld", mismatches);
        if (matches >= 0)
            printf(", \"matches\": %lld", matches);
        if (files >= 0)
            printf(", \"files\": %lld", files);
        printf("}\n");
        fflush(stdout);
    }
    MPI_Finalize();
    exit(0);
}

/* The file of the array patterns: dir/out.<ext>. */
static void peer_out_path(char *out, size_t size, const char *dir, const char *ext)
{
    snprintf(out, size, "%s/out.%s", dir, ext);
}

/* ------------------------------------------------------------ the driver ---- */

/*
 * What a driver supplies: the library calls only.  Every callback runs inside the timing
 * except setup and teardown; a NULL callback means the library cannot do that operation
 * (the binary then exits with code 3 before any I/O).
 */
typedef struct {
    const char *prog; /* name in messages: "peer_pnetcdf" */
    const char *ext;  /* file name extension: "nc", "bp" */
    /* library start-up before the timing; solo: only rank 0 works (box, make, scan) */
    void (*setup)(int solo);
    /* library shut-down after the timing (on the ranks that ran setup) */
    void (*teardown)(void);
    /* create path, define L's variables, write every step of L->buf, close */
    void (*write)(const peer_layout *L, const char *path);
    /* open path, read every step of every variable into L->buf, close */
    void (*read)(peer_layout *L, const char *path);
    /* open path (one process), read the box of var a0 at step steps-1 into out, close */
    void (*box)(const peer_args *a, const char *path, double *out);
    /* create the small file i of pattern f at path (one process) */
    void (*make_one)(long long i, const char *path);
    /* open file path of pattern f, read its attributes: 1 if it is selected, else 0;
       adds the attribute bytes read to *bytes */
    int (*scan_one)(const char *path, long long *bytes);
} peer_driver;

/* An operation the library cannot do: exit code 3 before any I/O. */
static void peer_unsupported(const char *what, char pattern)
{
    peer_usage_exit(3, "%s with pattern %c is not available for this library", what, pattern);
}

/* Runs the operation of the command line with driver d; never returns. */
static int peer_main(int argc, char **argv, const peer_driver *d)
{
    peer_args a;
    peer_layout L;
    char path[4096];
    double t0, seconds;
    peer_init(&argc, &argv, d->prog, &a);
    peer_out_path(path, sizeof path, a.dir, d->ext);
    switch (a.op) {
    case OP_WRITE: {
        if (d->write == NULL)
            peer_unsupported("op=write", a.pattern);
        peer_layout_init(&L, &a);
        peer_alloc_buffers(&L, 1);
        d->setup(0);
        t0 = peer_clock_start();
        peer_find_runs(&L);
        d->write(&L, path);
        long long files;
        seconds = peer_clock_stop_write(t0, a.dir, &files);
        d->teardown();
        long long bytes = peer_sum(peer_local_bytes(&L));
        peer_report_and_exit(seconds, bytes, -1, -1, files);
        break;
    }
    case OP_READ:
    case OP_CHECK: {
        if (d->read == NULL)
            peer_unsupported(a.op == OP_READ ? "op=read" : "op=check", a.pattern);
        peer_layout_init(&L, &a);
        peer_alloc_buffers(&L, 0);
        d->setup(0);
        t0 = peer_clock_start();
        peer_find_runs(&L);
        d->read(&L, path);
        seconds = peer_clock_stop_read(t0);
        d->teardown();
        long long bytes = peer_sum(peer_local_bytes(&L));
        long long bad = a.op == OP_CHECK ? peer_sum(peer_count_mismatches(&L)) : -1;
        peer_report_and_exit(seconds, bytes, bad, -1, -1);
        break;
    }
    case OP_BOX: {
        if (d->box == NULL)
            peer_unsupported("op=box", a.pattern);
        size_t elems = peer_box_elems(&a);
        double *out = NULL;
        if (peer_rank == 0) {
            out = peer_malloc(elems * sizeof(double));
            for (size_t e = 0; e < elems; e++)
                out[e] = NAN;
            d->setup(1);
        }
        t0 = peer_clock_start();
        if (peer_rank == 0)
            d->box(&a, path, out);
        seconds = peer_clock_stop_read(t0);
        long long bad = 0;
        if (peer_rank == 0) {
            d->teardown();
            bad = peer_box_mismatches(&a, out);
        }
        peer_report_and_exit(seconds, (long long)(elems * sizeof(double)), bad, -1, -1);
        break;
    }
    case OP_MAKE: {
        if (d->make_one == NULL)
            peer_unsupported("op=make", a.pattern);
        if (peer_rank == 0)
            d->setup(1);
        t0 = peer_clock_start();
        if (peer_rank == 0)
            for (long long i = 0; i < a.count; i++) {
                peer_f_path(path, sizeof path, a.dir, i, d->ext);
                d->make_one(i, path);
            }
        long long files;
        seconds = peer_clock_stop_write(t0, a.dir, &files);
        if (peer_rank == 0)
            d->teardown();
        peer_report_and_exit(seconds, a.count * PEER_F_X_LEN * (long long)sizeof(double), -1, -1, files);
        break;
    }
    case OP_SCAN: {
        if (d->scan_one == NULL)
            peer_unsupported("op=scan", a.pattern);
        long long matches = 0, bytes = 0;
        if (peer_rank == 0)
            d->setup(1);
        t0 = peer_clock_start();
        if (peer_rank == 0)
            for (long long i = 0; i < a.count; i++) {
                peer_f_path(path, sizeof path, a.dir, i, d->ext);
                matches += d->scan_one(path, &bytes);
            }
        seconds = peer_clock_stop_read(t0);
        if (peer_rank == 0)
            d->teardown();
        peer_report_and_exit(seconds, bytes, -1, matches, -1);
        break;
    }
    }
    return 0;
}

#endif /* PEERS_COMMON_H */
