/*
 * ADIOS2 contender of the peer comparison: the library calls of every operation of
 * peers_common.h (command line, geometry, timing and output live there).
 * Engine BP5, one dataset dir/out.bp per array run, one global array per variable of the
 * pattern (step = ADIOS2 step), one adios2_set_selection + deferred put/get per block.
 */
#include "peers_common.h"

/* the MPI flavour of the C API (adios2_init_mpi); CMake users get it from the target */
#define ADIOS2_USE_MPI 1
#include <adios2_c.h>

static adios2_adios *adios = NULL;
static long long io_serial = 0;

static const char *adios2_error_name(adios2_error err)
{
    switch (err) {
    case adios2_error_invalid_argument: return "adios2_error_invalid_argument";
    case adios2_error_system_error: return "adios2_error_system_error";
    case adios2_error_runtime_error: return "adios2_error_runtime_error";
    case adios2_error_exception: return "adios2_error_exception";
    default: return "unknown adios2_error";
    }
}

static void ad_check(adios2_error err, const char *call)
{
    if (err != adios2_error_none)
        peer_fail(call, adios2_error_name(err));
}

static void *ad_check_ptr(void *handle, const char *call)
{
    if (handle == NULL)
        peer_fail(call, "NULL handle (see the ADIOS2 message above)");
    return handle;
}

/* AD(adios2_x, (args...)) for calls returning adios2_error, ADH(...) for handles. */
#define AD(fn, args) ad_check(fn args, #fn)
#define ADH(fn, args) ad_check_ptr((void *)fn args, #fn)

/*
 * ADIOS2's BP5 reader writes a profile, /tmp/<file name>_<pid in hex>_profiling.json, when
 * it closes (rank 0 of its communicator; no parameter turns it off in 2.12). That is part
 * of what a read costs, so it stays in the timing; the files are removed at teardown,
 * after the clock, so that a run leaves nothing in /tmp.
 */
static char **profiles = NULL;
static size_t nprofiles = 0, profiles_cap = 0;

static adios2_engine *open_reader(adios2_io *io, const char *path, adios2_mode mode)
{
    adios2_engine *engine = ADH(adios2_open, (io, path, mode));
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (nprofiles == profiles_cap) {
        profiles_cap = profiles_cap ? 2 * profiles_cap : 16;
        profiles = realloc(profiles, profiles_cap * sizeof *profiles);
        if (profiles == NULL)
            peer_fail("realloc", "out of memory");
    }
    size_t len = strlen(base) + 64;
    profiles[nprofiles] = malloc(len);
    if (profiles[nprofiles] == NULL)
        peer_fail("malloc", "out of memory");
    snprintf(profiles[nprofiles++], len, "/tmp/%s_%lx_profiling.json", base, (unsigned long)getpid());
    return engine;
}

static void remove_reader_profiles(void)
{
    for (size_t i = 0; i < nprofiles; i++) {
        (void)remove(profiles[i]); /* absent where this process was not rank 0 of the reader */
        free(profiles[i]);
    }
    free(profiles);
    profiles = NULL;
    nprofiles = profiles_cap = 0;
}

/* A new IO object with the BP5 engine named name[32] (one per file: attributes live in the IO). */
static adios2_io *declare_io(char *name)
{
    snprintf(name, 32, "io%lld", io_serial++);
    adios2_io *io = ADH(adios2_declare_io, (adios, name));
    AD(adios2_set_engine, (io, "BP5"));
    return io;
}

static void drop_io(const char *name)
{
    adios2_bool removed;
    AD(adios2_remove_io, (&removed, adios, name));
}

/* Selects request q of L on var (no-op for a zero-sized block, reported as 0). */
static int select_request(adios2_variable *var, const peer_layout *L, size_t q)
{
    for (int k = 0; k < L->ndims; k++)
        if (L->count[q][k] == 0)
            return 0;
    AD(adios2_set_selection, (var, (size_t)L->ndims, L->start[q], L->count[q]));
    return 1;
}

static void adios2_write_layout(const peer_layout *L, const char *path)
{
    char ioname[32];
    adios2_io *io = declare_io(ioname);
    adios2_engine *engine = ADH(adios2_open, (io, path, adios2_mode_write));
    adios2_variable **vars = peer_malloc((size_t)L->nvars * sizeof *vars);
    size_t zero[3] = {0, 0, 0};
    for (long long v = 0; v < L->nvars; v++)
        vars[v] = ADH(adios2_define_variable,
                      (io, peer_varname(L, v), adios2_type_double, (size_t)L->ndims, L->shape, zero,
                       L->nreq ? L->count[0] : zero, adios2_constant_dims_false));
    for (long long s = 0; s < L->steps; s++) {
        adios2_step_status status;
        AD(adios2_begin_step, (engine, adios2_step_mode_append, -1.0f, &status));
        for (long long v = 0; v < L->nvars; v++)
            for (size_t q = 0; q < L->nreq; q++)
                if (select_request(vars[v], L, q))
                    AD(adios2_put, (engine, vars[v], peer_buffer(L, s, v) + L->offset[q],
                                    adios2_mode_deferred));
        AD(adios2_end_step, (engine));
    }
    AD(adios2_close, (engine));
    free(vars);
    drop_io(ioname);
}

static void adios2_read_layout(peer_layout *L, const char *path)
{
    char ioname[32];
    adios2_io *io = declare_io(ioname);
    /* the file is complete: fail at once if it is missing instead of waiting for a writer */
    AD(adios2_set_parameter, (io, "OpenTimeoutSecs", "0"));
    adios2_engine *engine = open_reader(io, path, adios2_mode_read);
    for (long long s = 0; s < L->steps; s++) {
        adios2_step_status status;
        AD(adios2_begin_step, (engine, adios2_step_mode_read, -1.0f, &status));
        if (status != adios2_step_status_ok)
            peer_fail("adios2_begin_step", "fewer steps in the file than steps=");
        for (long long v = 0; v < L->nvars; v++) {
            adios2_variable *var = ADH(adios2_inquire_variable, (io, peer_varname(L, v)));
            for (size_t q = 0; q < L->nreq; q++)
                if (select_request(var, L, q))
                    AD(adios2_get, (engine, var, peer_buffer(L, s, v) + L->offset[q],
                                    adios2_mode_deferred));
        }
        AD(adios2_end_step, (engine));
    }
    AD(adios2_close, (engine));
    drop_io(ioname);
}

static void adios2_box(const peer_args *a, const char *path, double *out)
{
    size_t start[3], count[3];
    for (int k = 0; k < 3; k++) {
        start[k] = (size_t)a->lo[k];
        count[k] = (size_t)(a->hi[k] - a->lo[k]);
    }
    char ioname[32];
    adios2_io *io = declare_io(ioname);
    adios2_engine *engine = open_reader(io, path, adios2_mode_readRandomAccess);
    adios2_variable *var = ADH(adios2_inquire_variable, (io, "a0"));
    AD(adios2_set_step_selection, (var, (size_t)(a->steps - 1), 1));
    AD(adios2_set_selection, (var, 3, start, count));
    AD(adios2_get, (engine, var, out, adios2_mode_sync));
    AD(adios2_close, (engine));
    drop_io(ioname);
}

static void adios2_make_one(long long i, const char *path)
{
    int32_t case_ = (int32_t)i;
    double reynolds = peer_f_reynolds(i), x[PEER_F_X_LEN];
    size_t shape = PEER_F_X_LEN, start = 0;
    for (int k = 0; k < PEER_F_X_LEN; k++)
        x[k] = (double)i;
    char ioname[32];
    adios2_io *io = declare_io(ioname);
    adios2_engine *engine = ADH(adios2_open, (io, path, adios2_mode_write));
    ADH(adios2_define_attribute, (io, "case", adios2_type_int32_t, &case_));
    ADH(adios2_define_attribute, (io, "reynolds", adios2_type_double, &reynolds));
    ADH(adios2_define_attribute, (io, "mesh", adios2_type_string, peer_f_mesh(i)));
    adios2_variable *var = ADH(adios2_define_variable, (io, "x", adios2_type_double, 1, &shape,
                                                        &start, &shape, adios2_constant_dims_true));
    adios2_step_status status;
    AD(adios2_begin_step, (engine, adios2_step_mode_append, -1.0f, &status));
    AD(adios2_put, (engine, var, x, adios2_mode_deferred));
    AD(adios2_end_step, (engine));
    AD(adios2_close, (engine));
    drop_io(ioname);
}

static int adios2_scan_one(const char *path, long long *bytes)
{
    int32_t case_;
    double reynolds;
    char mesh[64];
    size_t size, len;
    char ioname[32];
    adios2_io *io = declare_io(ioname);
    adios2_engine *engine = open_reader(io, path, adios2_mode_readRandomAccess);
    adios2_attribute *attr = ADH(adios2_inquire_attribute, (io, "case"));
    AD(adios2_attribute_data, (&case_, &size, attr));
    attr = ADH(adios2_inquire_attribute, (io, "reynolds"));
    AD(adios2_attribute_data, (&reynolds, &size, attr));
    attr = ADH(adios2_inquire_attribute, (io, "mesh"));
    AD(adios2_attribute_string_data, (attr, NULL, &len));
    if (len >= sizeof mesh)
        peer_fail("adios2_attribute_string_data", "attribute mesh is too long");
    AD(adios2_attribute_string_data, (attr, mesh, &len));
    mesh[len] = '\0';
    AD(adios2_close, (engine));
    drop_io(ioname);
    *bytes += (long long)(sizeof case_ + sizeof reynolds + len);
    return peer_f_selected(mesh, reynolds);
}

static void adios2_setup(int solo)
{
    adios = ADH(adios2_init_mpi, (solo ? MPI_COMM_SELF : MPI_COMM_WORLD));
}

static void adios2_teardown(void)
{
    AD(adios2_finalize, (adios));
    adios = NULL;
    remove_reader_profiles();
}

int main(int argc, char **argv)
{
    static const peer_driver driver = {
        "peer_adios2", "bp", adios2_setup, adios2_teardown, adios2_write_layout,
        adios2_read_layout, adios2_box, adios2_make_one, adios2_scan_one,
    };
    return peer_main(argc, argv, &driver);
}
