/*
 * PnetCDF contender of the peer comparison: the library calls of every operation of
 * peers_common.h (command line, geometry, timing and output live there).
 * One CDF-5 file dir/out.nc per array run, step = the unlimited (record) dimension,
 * one NC_DOUBLE record variable per variable of the pattern.
 */
#include "peers_common.h"

#include <pnetcdf.h>

static void nc_check(int err, const char *call)
{
    if (err != NC_NOERR)
        peer_fail(call, ncmpi_strerror(err));
}

/* NC(ncmpi_x, (args...)): the call, and on error "peer_pnetcdf: ncmpi_x(...): message". */
#define NC(fn, args) nc_check(fn args, #fn)

/* The requests of L as PnetCDF (start, count) pairs with the step dimension in front. */
typedef struct {
    MPI_Offset **starts, **counts;
    MPI_Offset *storage;
} nc_requests;

static void nc_requests_make(nc_requests *r, const peer_layout *L)
{
    size_t nd = (size_t)L->ndims + 1;
    r->starts = peer_malloc(L->nreq * sizeof *r->starts);
    r->counts = peer_malloc(L->nreq * sizeof *r->counts);
    r->storage = peer_malloc(2 * L->nreq * nd * sizeof *r->storage);
    for (size_t q = 0; q < L->nreq; q++) {
        r->starts[q] = r->storage + 2 * q * nd;
        r->counts[q] = r->starts[q] + nd;
        r->starts[q][0] = 0;
        r->counts[q][0] = 1;
        for (size_t k = 1; k < nd; k++) {
            r->starts[q][k] = (MPI_Offset)L->start[q][k - 1];
            r->counts[q][k] = (MPI_Offset)L->count[q][k - 1];
        }
    }
}

static void nc_requests_free(nc_requests *r)
{
    free(r->starts);
    free(r->counts);
    free(r->storage);
}

static void nc_requests_at_step(nc_requests *r, size_t nreq, long long s)
{
    for (size_t q = 0; q < nreq; q++)
        r->starts[q][0] = (MPI_Offset)s;
}

/* Patterns b and c move several blocks of one variable per step with one varn call. */
static int uses_varn(const peer_layout *L)
{
    return L->pattern == 'b' || L->pattern == 'c';
}

static void pnetcdf_write(const peer_layout *L, const char *path)
{
    int ncid, req, dimids[4];
    int *varids = peer_malloc((size_t)L->nvars * sizeof *varids);
    NC(ncmpi_create, (MPI_COMM_WORLD, path, NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL, &ncid));
    NC(ncmpi_def_dim, (ncid, "step", NC_UNLIMITED, &dimids[0]));
    for (int k = 0; k < L->ndims; k++)
        NC(ncmpi_def_dim, (ncid, L->dimnames[k], (MPI_Offset)L->shape[k], &dimids[k + 1]));
    for (long long v = 0; v < L->nvars; v++)
        NC(ncmpi_def_var, (ncid, peer_varname(L, v), NC_DOUBLE, L->ndims + 1, dimids, &varids[v]));
    NC(ncmpi_enddef, (ncid));
    nc_requests r;
    nc_requests_make(&r, L);
    for (long long s = 0; s < L->steps; s++) {
        nc_requests_at_step(&r, L->nreq, s);
        if (uses_varn(L)) {
            NC(ncmpi_put_varn_double_all, (ncid, varids[0], (int)L->nreq, r.starts, r.counts,
                                           peer_buffer(L, s, 0)));
        } else {
            for (long long v = 0; v < L->nvars; v++)
                NC(ncmpi_iput_vara_double, (ncid, varids[v], r.starts[0], r.counts[0],
                                            peer_buffer(L, s, v), &req));
            NC(ncmpi_wait_all, (ncid, NC_REQ_ALL, NULL, NULL));
        }
    }
    NC(ncmpi_close, (ncid));
    nc_requests_free(&r);
    free(varids);
}

static void pnetcdf_read(peer_layout *L, const char *path)
{
    int ncid, req;
    int *varids = peer_malloc((size_t)L->nvars * sizeof *varids);
    NC(ncmpi_open, (MPI_COMM_WORLD, path, NC_NOWRITE, MPI_INFO_NULL, &ncid));
    for (long long v = 0; v < L->nvars; v++)
        NC(ncmpi_inq_varid, (ncid, peer_varname(L, v), &varids[v]));
    nc_requests r;
    nc_requests_make(&r, L);
    for (long long s = 0; s < L->steps; s++) {
        nc_requests_at_step(&r, L->nreq, s);
        if (uses_varn(L)) {
            NC(ncmpi_get_varn_double_all, (ncid, varids[0], (int)L->nreq, r.starts, r.counts,
                                           peer_buffer(L, s, 0)));
        } else {
            for (long long v = 0; v < L->nvars; v++)
                NC(ncmpi_iget_vara_double, (ncid, varids[v], r.starts[0], r.counts[0],
                                            peer_buffer(L, s, v), &req));
            NC(ncmpi_wait_all, (ncid, NC_REQ_ALL, NULL, NULL));
        }
    }
    NC(ncmpi_close, (ncid));
    nc_requests_free(&r);
    free(varids);
}

static void pnetcdf_box(const peer_args *a, const char *path, double *out)
{
    int ncid, varid;
    MPI_Offset start[4] = {a->steps - 1, a->lo[0], a->lo[1], a->lo[2]};
    MPI_Offset count[4] = {1, a->hi[0] - a->lo[0], a->hi[1] - a->lo[1], a->hi[2] - a->lo[2]};
    NC(ncmpi_open, (MPI_COMM_SELF, path, NC_NOWRITE, MPI_INFO_NULL, &ncid));
    NC(ncmpi_inq_varid, (ncid, "a0", &varid));
    NC(ncmpi_get_vara_double_all, (ncid, varid, start, count, out));
    NC(ncmpi_close, (ncid));
}

static void pnetcdf_make_one(long long i, const char *path)
{
    int ncid, dimid, varid, case_ = (int)i;
    double reynolds = peer_f_reynolds(i), x[PEER_F_X_LEN];
    const char *mesh = peer_f_mesh(i);
    MPI_Offset start = 0, count = PEER_F_X_LEN;
    for (int k = 0; k < PEER_F_X_LEN; k++)
        x[k] = (double)i;
    NC(ncmpi_create, (MPI_COMM_SELF, path, NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL, &ncid));
    NC(ncmpi_put_att_int, (ncid, NC_GLOBAL, "case", NC_INT, 1, &case_));
    NC(ncmpi_put_att_double, (ncid, NC_GLOBAL, "reynolds", NC_DOUBLE, 1, &reynolds));
    NC(ncmpi_put_att_text, (ncid, NC_GLOBAL, "mesh", (MPI_Offset)strlen(mesh), mesh));
    NC(ncmpi_def_dim, (ncid, "n", PEER_F_X_LEN, &dimid));
    NC(ncmpi_def_var, (ncid, "x", NC_DOUBLE, 1, &dimid, &varid));
    NC(ncmpi_enddef, (ncid));
    NC(ncmpi_put_vara_double_all, (ncid, varid, &start, &count, x));
    NC(ncmpi_close, (ncid));
}

static int pnetcdf_scan_one(const char *path, long long *bytes)
{
    int ncid, case_;
    double reynolds;
    MPI_Offset len;
    char mesh[64];
    NC(ncmpi_open, (MPI_COMM_SELF, path, NC_NOWRITE, MPI_INFO_NULL, &ncid));
    NC(ncmpi_get_att_int, (ncid, NC_GLOBAL, "case", &case_));
    NC(ncmpi_get_att_double, (ncid, NC_GLOBAL, "reynolds", &reynolds));
    NC(ncmpi_inq_attlen, (ncid, NC_GLOBAL, "mesh", &len));
    if (len < 0 || len >= (MPI_Offset)sizeof mesh)
        peer_fail("ncmpi_inq_attlen", "attribute mesh is too long");
    NC(ncmpi_get_att_text, (ncid, NC_GLOBAL, "mesh", mesh));
    mesh[len] = '\0';
    NC(ncmpi_close, (ncid));
    *bytes += (long long)(sizeof case_ + sizeof reynolds) + (long long)len;
    return peer_f_selected(mesh, reynolds);
}

static void pnetcdf_setup(int solo)
{
    (void)solo;
}

static void pnetcdf_teardown(void)
{
}

int main(int argc, char **argv)
{
    static const peer_driver driver = {
        "peer_pnetcdf", "nc", pnetcdf_setup, pnetcdf_teardown, pnetcdf_write, pnetcdf_read,
        pnetcdf_box, pnetcdf_make_one, pnetcdf_scan_one,
    };
    return peer_main(argc, argv, &driver);
}
