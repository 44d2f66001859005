/*
 * ADIOS2 contender of benchmarks/async.py: the ASTRO3D-like workload of peer_stack/async_python.py
 * in C. `arrays` 3-D float32 arrays a0, a1, ... of n^3 values, block-distributed over a grid of
 * ranks; every step, `sweeps` sweeps of the 7-point stencil b = 0.4 a + 0.1 (sum of the six
 * neighbours) over the interior of each local block (no halo exchange; the block's faces stay),
 * then (mode=sync|async) one BP5 step with every array. mode=async sets the BP5 parameter
 * AsyncWrite=On, mode=sync AsyncWrite=Off, mode=compute writes nothing.
 *
 *   mpiexec -n 2 async_adios2 mode=sync|async|compute dir=D n=128 arrays=4 steps=6 sweeps=3 grid=2,1,1
 *
 * Timed between barriers: open, every step (compute and put/end_step), close and an fsync of every
 * file of dir/out.bp by rank 0. Rank 0 prints one JSON line: seconds (the total), compute and dump
 * (seconds in the stencil and in begin_step..end_step, the largest over the ranks), close (seconds
 * in adios2_close and the fsync), cpu (CPU seconds of the rank's process, every thread, the kernel's
 * work for it included; the largest), bytes (of every step) and checksum (the sum of the last
 * step's values, every rank: the same as the Python driver's for the same arguments).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#define ADIOS2_USE_MPI 1
#include <adios2_c.h>

static int rank, size;

static double cpu_seconds(void) /* user and system time of every thread of this process */
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + 1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

static void fail(const char *what, const char *why)
{
    fprintf(stderr, "async_adios2: %s: %s\n", what, why);
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

static void sync_tree(const char *path)
{
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
            sync_tree(full);
            continue;
        }
        int fd = open(full, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0)
            fail(full, "fsync");
        close(fd);
    }
    closedir(d);
}

/* one sweep of the stencil over the interior of a local block of shape c[0] x c[1] x c[2] */
static void sweep(const float *restrict a, float *restrict b, const size_t *c)
{
    size_t sy = c[2], sz = c[1] * c[2];
    for (size_t z = 1; z + 1 < c[0]; z++)
        for (size_t y = 1; y + 1 < c[1]; y++) {
            size_t i0 = z * sz + y * sy;
            for (size_t x = 1; x + 1 < c[2]; x++) {
                size_t i = i0 + x;
                b[i] = 0.4f * a[i] + 0.1f * (a[i - sz] + a[i + sz] + a[i - sy] + a[i + sy] + a[i - 1] + a[i + 1]);
            }
        }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = arg(argc, argv, "mode", NULL), *dir = arg(argc, argv, "dir", NULL);
    size_t n = (size_t)atoll(arg(argc, argv, "n", NULL));
    int narrays = atoi(arg(argc, argv, "arrays", "4")), steps = atoi(arg(argc, argv, "steps", "6"));
    int sweeps = atoi(arg(argc, argv, "sweeps", "1"));
    int writing = strcmp(mode, "compute") != 0, async = strcmp(mode, "async") == 0;
    if (writing && !async && strcmp(mode, "sync") != 0)
        fail("mode", "compute, sync or async");
    int grid[3];
    if (sscanf(arg(argc, argv, "grid", NULL), "%d,%d,%d", &grid[0], &grid[1], &grid[2]) != 3 ||
        grid[0] * grid[1] * grid[2] != size)
        fail("grid", "three integers whose product is the number of ranks");
    int coord[3] = {rank / (grid[1] * grid[2]), (rank / grid[2]) % grid[1], rank % grid[2]};
    size_t start[3], count[3], shape[3] = {n, n, n};
    for (int k = 0; k < 3; k++) { /* as sdm.Block splits an axis */
        size_t base = n / grid[k], extra = n % grid[k], c = (size_t)coord[k];
        start[k] = c * base + (c < extra ? c : extra);
        count[k] = base + (c < extra ? 1 : 0);
    }
    size_t local = count[0] * count[1] * count[2];
    float **cur = malloc((size_t)narrays * sizeof *cur), **nxt = malloc((size_t)narrays * sizeof *nxt);
    for (int a = 0; a < narrays; a++) { /* as async_python.py: ((gz*7 + gy*3 + gx + a) mod 97) / 97 */
        cur[a] = malloc(local * sizeof(float));
        nxt[a] = malloc(local * sizeof(float));
        for (size_t z = 0; z < count[0]; z++)
            for (size_t y = 0; y < count[1]; y++)
                for (size_t x = 0; x < count[2]; x++) {
                    size_t g = (start[0] + z) * 7 + (start[1] + y) * 3 + start[2] + x + (size_t)a;
                    cur[a][(z * count[1] + y) * count[2] + x] = (float)(g % 97) / 97.0f;
                }
        memcpy(nxt[a], cur[a], local * sizeof(float));
    }
    char bp[4096];
    snprintf(bp, sizeof bp, "%s/out.bp", dir);
    adios2_adios *adios = adios2_init_mpi(MPI_COMM_WORLD);
    adios2_io *io = adios2_declare_io(adios, "io");
    AD(adios2_set_engine(io, "BP5"));
    AD(adios2_set_parameter(io, "AsyncWrite", async ? "On" : "Off"));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), cpu0 = cpu_seconds(), tc = 0, td = 0, tclose = 0;
    adios2_engine *engine = NULL;
    adios2_variable **vars = malloc((size_t)narrays * sizeof *vars);
    if (writing) {
        engine = adios2_open(io, bp, adios2_mode_write);
        if (engine == NULL)
            fail("adios2_open", bp);
        for (int a = 0; a < narrays; a++) {
            char name[32];
            snprintf(name, sizeof name, "a%d", a);
            vars[a] = adios2_define_variable(io, name, adios2_type_float, 3, shape, start, count,
                                             adios2_constant_dims_true);
        }
    }
    for (int s = 0; s < steps; s++) {
        double c0 = MPI_Wtime();
        for (int k = 0; k < sweeps; k++)
            for (int a = 0; a < narrays; a++) {
                sweep(cur[a], nxt[a], count);
                float *t = cur[a];
                cur[a] = nxt[a];
                nxt[a] = t;
            }
        double c1 = MPI_Wtime();
        tc += c1 - c0;
        if (writing) {
            adios2_step_status status;
            AD(adios2_begin_step(engine, adios2_step_mode_append, -1.0f, &status));
            for (int a = 0; a < narrays; a++)
                AD(adios2_put(engine, vars[a], cur[a], adios2_mode_deferred));
            AD(adios2_end_step(engine));
            td += MPI_Wtime() - c1;
        }
    }
    if (writing) {
        double c0 = MPI_Wtime();
        AD(adios2_close(engine));
        if (rank == 0)
            sync_tree(bp);
        tclose = MPI_Wtime() - c0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double seconds = MPI_Wtime() - t0, cpu = cpu_seconds() - cpu0;
    double sum = 0;
    for (int a = 0; a < narrays; a++)
        for (size_t i = 0; i < local; i++)
            sum += cur[a][i];
    double mine[4] = {tc, td, tclose, cpu}, most[4], total;
    MPI_Reduce(mine, most, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("{\"seconds\": %.9g, \"compute\": %.9g, \"dump\": %.9g, \"close\": %.9g, \"cpu\": %.9g, \"bytes\": %lld, "
               "\"checksum\": %.9g, \"thread_level\": %d}\n", seconds, most[0], most[1], most[2], most[3],
               writing ? (long long)(n * n * n * 4) * narrays * steps : 0LL, total, provided);
        fflush(stdout);
    }
    adios2_finalize(adios);
    for (int a = 0; a < narrays; a++) {
        free(cur[a]);
        free(nxt[a]);
    }
    free(cur);
    free(nxt);
    free(vars);
    MPI_Finalize();
    return 0;
}
