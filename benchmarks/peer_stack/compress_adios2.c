/*
 * ADIOS2 contender of benchmarks/compression.py: one 3-D global array "u" (float32 or int32) of
 * n^3 values, written by a block decomposition over a grid of ranks, with or without an operator
 * (ZFP fixed accuracy), engine BP5, one ADIOS2 step per step.
 *
 *   mpiexec -n 4 compress_adios2 op=write|read dir=D input=PREFIX n=192 steps=2 dtype=f4 grid=2,2,1 \
 *       codec=none|zfp tolerance=0.001
 *
 * The values come from PREFIX.s<step>.raw (the global array in C order, written by the driver),
 * read before the clock. Timed between barriers: open, define, every step, close and (write)
 * an fsync of every file of dir/out.bp by rank 0. op=read reads every rank's block back and
 * compares it with the input after the clock. Rank 0 prints one JSON line: seconds, bytes,
 * stored (bytes of dir/out.bp, write), max_error and mismatches (read); exit 3 when the
 * operator is not in this ADIOS2 build.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define ADIOS2_USE_MPI 1
#include <adios2_c.h>

static int rank, size;

static void fail(const char *what, const char *why)
{
    fprintf(stderr, "compress_adios2: %s: %s\n", what, why);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static const char *arg(int argc, char **argv, const char *key, const char *def)
{
    size_t k = strlen(key);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=')
            return argv[i] + k + 1;
    if (def == NULL)
        fail(key, "missing argument");
    return def;
}

#define AD(call) do { if ((call) != adios2_error_none) fail(#call, "ADIOS2 error (see above)"); } while (0)

/* fsync every file under path (one level of subdirectories is all BP5 makes); bytes of the files */
static long long sync_tree(const char *path, int do_sync)
{
    long long total = 0;
    DIR *d = opendir(path);
    if (d == NULL)
        fail(path, "cannot open directory");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        struct stat st;
        if (stat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            total += sync_tree(full, do_sync);
            continue;
        }
        total += st.st_size;
        if (do_sync) {
            int fd = open(full, O_RDONLY);
            if (fd < 0 || fsync(fd) != 0)
                fail(full, "fsync");
            close(fd);
        }
    }
    closedir(d);
    return total;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *op = arg(argc, argv, "op", NULL), *dir = arg(argc, argv, "dir", NULL);
    const char *input = arg(argc, argv, "input", NULL), *codec = arg(argc, argv, "codec", "none");
    const char *tolerance = arg(argc, argv, "tolerance", "0.001");
    int is_float = strcmp(arg(argc, argv, "dtype", "f4"), "f4") == 0;
    size_t n = (size_t)atoll(arg(argc, argv, "n", NULL));
    int steps = atoi(arg(argc, argv, "steps", "1"));
    int grid[3];
    if (sscanf(arg(argc, argv, "grid", NULL), "%d,%d,%d", &grid[0], &grid[1], &grid[2]) != 3 ||
        grid[0] * grid[1] * grid[2] != size)
        fail("grid", "three integers whose product is the number of ranks");
    int coord[3] = {rank / (grid[1] * grid[2]), (rank / grid[2]) % grid[1], rank % grid[2]};
    size_t start[3], count[3], shape[3] = {n, n, n};
    for (int k = 0; k < 3; k++) { /* as geometry.block_bounds and sdm.Block split */
        size_t base = n / grid[k], extra = n % grid[k], c = (size_t)coord[k];
        start[k] = c * base + (c < extra ? c : extra);
        count[k] = base + (c < extra ? 1 : 0);
    }
    size_t local = count[0] * count[1] * count[2], esize = 4;
    /* the input values of this rank's block, every step (before the clock) */
    char **data = malloc((size_t)steps * sizeof *data), **got = malloc((size_t)steps * sizeof *got);
    for (int s = 0; s < steps; s++) {
        char path[4096];
        snprintf(path, sizeof path, "%s.s%d.raw", input, s);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            fail(path, "cannot open the input");
        data[s] = malloc(local * esize);
        got[s] = calloc(local, esize);
        for (size_t z = 0; z < count[0]; z++)
            for (size_t y = 0; y < count[1]; y++) {
                off_t at = (off_t)((((start[0] + z) * n + start[1] + y) * n + start[2]) * esize);
                size_t len = count[2] * esize;
                if (pread(fd, data[s] + (z * count[1] + y) * len, len, at) != (ssize_t)len)
                    fail(path, "short read");
            }
        close(fd);
    }
    char bp[4096];
    snprintf(bp, sizeof bp, "%s/out.bp", dir);
    adios2_adios *adios = adios2_init_mpi(MPI_COMM_WORLD);
    adios2_io *io = adios2_declare_io(adios, "io");
    AD(adios2_set_engine(io, "BP5"));
    adios2_type type = is_float ? adios2_type_float : adios2_type_int32_t;
    int writing = strcmp(op, "write") == 0;
    adios2_operator *zfp = NULL;
    if (strcmp(codec, "zfp") == 0 && writing) {
        zfp = adios2_define_operator(adios, "zfp", "zfp");
        if (zfp == NULL) {
            if (rank == 0)
                fprintf(stderr, "this ADIOS2 build has no ZFP operator\n");
            MPI_Finalize();
            return 3;
        }
    } else if (strcmp(codec, "none") != 0 && strcmp(codec, "zfp") != 0) {
        fail("codec", "none or zfp");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    long long stored = 0;
    if (writing) {
        adios2_engine *engine = adios2_open(io, bp, adios2_mode_write);
        if (engine == NULL)
            fail("adios2_open", bp);
        adios2_variable *var = adios2_define_variable(io, "u", type, 3, shape, start, count, adios2_constant_dims_true);
        if (zfp != NULL) {
            size_t idx;
            AD(adios2_add_operation(&idx, var, zfp, "accuracy", tolerance));
        }
        for (int s = 0; s < steps; s++) {
            adios2_step_status status;
            AD(adios2_begin_step(engine, adios2_step_mode_append, -1.0f, &status));
            AD(adios2_put(engine, var, data[s], adios2_mode_deferred));
            AD(adios2_end_step(engine));
        }
        AD(adios2_close(engine));
        if (rank == 0)
            stored = sync_tree(bp, 1);
    } else {
        AD(adios2_set_parameter(io, "OpenTimeoutSecs", "0"));
        adios2_engine *engine = adios2_open(io, bp, adios2_mode_read);
        if (engine == NULL)
            fail("adios2_open", bp);
        for (int s = 0; s < steps; s++) {
            adios2_step_status status;
            AD(adios2_begin_step(engine, adios2_step_mode_read, -1.0f, &status));
            if (status != adios2_step_status_ok)
                fail("adios2_begin_step", "fewer steps than steps=");
            adios2_variable *var = adios2_inquire_variable(io, "u");
            if (var == NULL)
                fail("adios2_inquire_variable", "u");
            AD(adios2_set_selection(var, 3, start, count));
            AD(adios2_get(engine, var, got[s], adios2_mode_deferred));
            AD(adios2_end_step(engine));
        }
        AD(adios2_close(engine));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double seconds = MPI_Wtime() - t0;
    if (!writing) {
        /* BP5's reader leaves a profile, /tmp/out.bp_<pid in hex>_profiling.json, on rank 0 when it
           closes (no parameter turns it off in 2.12); removed after the clock, so a run leaves nothing */
        char profile[64];
        snprintf(profile, sizeof profile, "/tmp/out.bp_%lx_profiling.json", (unsigned long)getpid());
        (void)remove(profile);
    }
    double err = 0.0;
    long long bad = 0;
    if (!writing)
        for (int s = 0; s < steps; s++)
            for (size_t i = 0; i < local; i++) {
                double a, b;
                if (is_float) {
                    a = ((float *)data[s])[i];
                    b = ((float *)got[s])[i];
                } else {
                    a = ((int *)data[s])[i];
                    b = ((int *)got[s])[i];
                }
                double d = fabs(a - b);
                if (!(d <= err)) /* NaN counts */
                    err = isnan(d) ? INFINITY : d;
                bad += a != b;
            }
    double err_all;
    long long bad_all;
    MPI_Reduce(&err, &err_all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&bad, &bad_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        long long nbytes = (long long)(n * n * n * esize) * steps;
        if (writing)
            printf("{\"seconds\": %.9g, \"bytes\": %lld, \"stored\": %lld}\n", seconds, nbytes, stored);
        else
            printf("{\"seconds\": %.9g, \"bytes\": %lld, \"max_error\": %.9g, \"mismatches\": %lld}\n", seconds,
                   nbytes, err_all, bad_all);
        fflush(stdout);
    }
    adios2_finalize(adios);
    for (int s = 0; s < steps; s++) {
        free(data[s]);
        free(got[s]);
    }
    free(data);
    free(got);
    MPI_Finalize();
    return 0;
}
