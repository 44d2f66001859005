/* Reads an Exodus II file with Sandia's Exodus C library and prints what test_exodus.py compares.
 *
 * usage: exodus_reader FILE BLOCK_ID SIDE_SET_ID NODAL_VAR_INDEX NODE_SET_ID
 *
 * Prints one line per item, values separated by spaces (floating point with %.17g):
 *   init TITLE|dim nodes elems blocks node_sets side_sets
 *   steps N
 *   coordx/coordy/coordz VALUES
 *   conn BLOCK_ID ELEMS NODES_PER_ELEM VALUES (1-based local node numbers, row by row)
 *   sideset_elems ID VALUES / sideset_sides ID VALUES (1-based local element numbers, side numbers)
 *   nodal_var INDEX STEP VALUES (at the last time step)
 *   elem_var 1 STEP BLOCK_ID VALUES (element variable 1 of the block at the last time step)
 *   nodeset_factors ID VALUES (the node set's distribution factors)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <exodusII.h>

static void fail(const char *what, int status)
{
    fprintf(stderr, "exodus_reader: %s failed (%d)\n", what, status);
    exit(1);
}

static void print_doubles(const char *label, const double *v, int n)
{
    printf("%s", label);
    for (int i = 0; i < n; i++)
        printf(" %.17g", v[i]);
    printf("\n");
}

static void print_ints(const char *label, const int *v, int n)
{
    printf("%s", label);
    for (int i = 0; i < n; i++)
        printf(" %d", v[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: exodus_reader FILE BLOCK_ID SIDE_SET_ID NODAL_VAR_INDEX NODE_SET_ID\n");
        return 2;
    }
    int comp_ws = sizeof(double), io_ws = 0, status;
    float version = 0.0f;
    int exoid = ex_open(argv[1], EX_READ, &comp_ws, &io_ws, &version);
    if (exoid < 0)
        fail("ex_open", exoid);
    int block_id = atoi(argv[2]), side_set_id = atoi(argv[3]), var_index = atoi(argv[4]), node_set_id = atoi(argv[5]);

    char title[MAX_LINE_LENGTH + 1];
    int dim, nodes, elems, blocks, node_sets, side_sets;
    if ((status = ex_get_init(exoid, title, &dim, &nodes, &elems, &blocks, &node_sets, &side_sets)) < 0)
        fail("ex_get_init", status);
    printf("init %s|%d %d %d %d %d %d\n", title, dim, nodes, elems, blocks, node_sets, side_sets);
    int steps = ex_inquire_int(exoid, EX_INQ_TIME);
    printf("steps %d\n", steps);

    double *x = calloc(nodes, sizeof(double)), *y = calloc(nodes, sizeof(double)),
           *z = calloc(nodes, sizeof(double));
    if ((status = ex_get_coord(exoid, x, y, z)) < 0)
        fail("ex_get_coord", status);
    print_doubles("coordx", x, nodes);
    print_doubles("coordy", y, nodes);
    print_doubles("coordz", z, nodes);

    char elem_type[MAX_STR_LENGTH + 1];
    int in_block, per_elem, per_edge, per_face, attrs;
    if ((status = ex_get_block(exoid, EX_ELEM_BLOCK, block_id, elem_type, &in_block, &per_elem, &per_edge,
                               &per_face, &attrs)) < 0)
        fail("ex_get_block", status);
    int *conn = calloc((size_t)in_block * per_elem, sizeof(int));
    if ((status = ex_get_conn(exoid, EX_ELEM_BLOCK, block_id, conn, NULL, NULL)) < 0)
        fail("ex_get_conn", status);
    char label[128];
    snprintf(label, sizeof label, "conn %d %s %d %d", block_id, elem_type, in_block, per_elem);
    print_ints(label, conn, in_block * per_elem);

    int in_set, factors;
    if ((status = ex_get_set_param(exoid, EX_SIDE_SET, side_set_id, &in_set, &factors)) < 0)
        fail("ex_get_set_param", status);
    int *set_elems = calloc(in_set, sizeof(int)), *set_sides = calloc(in_set, sizeof(int));
    if ((status = ex_get_set(exoid, EX_SIDE_SET, side_set_id, set_elems, set_sides)) < 0)
        fail("ex_get_set", status);
    snprintf(label, sizeof label, "sideset_elems %d", side_set_id);
    print_ints(label, set_elems, in_set);
    snprintf(label, sizeof label, "sideset_sides %d", side_set_id);
    print_ints(label, set_sides, in_set);
    printf("sideset_factors %d %d\n", side_set_id, factors);

    double *values = calloc(nodes, sizeof(double));
    if ((status = ex_get_var(exoid, steps, EX_NODAL, var_index, 1, nodes, values)) < 0)
        fail("ex_get_var", status);
    snprintf(label, sizeof label, "nodal_var %d %d", var_index, steps);
    print_doubles(label, values, nodes);

    double *elem_values = calloc(in_block, sizeof(double));
    if ((status = ex_get_var(exoid, steps, EX_ELEM_BLOCK, 1, block_id, in_block, elem_values)) < 0)
        fail("ex_get_var (element)", status);
    snprintf(label, sizeof label, "elem_var 1 %d %d", steps, block_id);
    print_doubles(label, elem_values, in_block);

    if ((status = ex_get_set_param(exoid, EX_NODE_SET, node_set_id, &in_set, &factors)) < 0)
        fail("ex_get_set_param (node set)", status);
    double *node_factors = calloc(factors, sizeof(double));
    if ((status = ex_get_set_dist_fact(exoid, EX_NODE_SET, node_set_id, node_factors)) < 0)
        fail("ex_get_set_dist_fact", status);
    snprintf(label, sizeof label, "nodeset_factors %d", node_set_id);
    print_doubles(label, node_factors, factors);

    ex_close(exoid);
    free(x), free(y), free(z), free(conn), free(set_elems), free(set_sides), free(values), free(elem_values),
        free(node_factors);
    return 0;
}
