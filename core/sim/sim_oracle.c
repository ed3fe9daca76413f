/* Policies with future knowledge (Belady, best static set in hindsight) and
 * the oracle lower bound (sim.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "tide/log.h"
#include "tide/status.h"

/* ---- Hindsight policies ---------------------------------------------------- */

struct tide_policy {
    enum tide_sim_hindsight kind;
    struct tide_policy_shape shape;
    const struct tide_sim_trace *t;
    const uint32_t *fwd_index; /* the replay's current forward per layer */
    int32_t *initial;          /* [L][budget] */
    /* Belady: per layer and expert, the sorted forwards that use it. */
    uint32_t **uses;   /* [L] -> [n_pairs of the layer] */
    uint32_t **use_at; /* [L] -> [E + 1] offsets into uses[l] */
    uint32_t **cursor; /* [L] -> [E] */
    int32_t *order;    /* [E] */
    uint8_t *held;     /* [E] */
    struct tide_solver_ws ws;
};

static void hs_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    for (int l = 0; p->uses && l < p->shape.n_moe_layers; l++) {
        free(p->uses[l]);
        free(p->use_at[l]);
        free(p->cursor[l]);
    }
    free(p->uses);
    free(p->use_at);
    free(p->cursor);
    free(p->initial);
    free(p->order);
    free(p->held);
    tide_solver_ws_free(&p->ws);
    free(p);
}

static int hs_initial(struct tide_policy *p, int layer, int32_t *out)
{
    const int B = p->shape.budget;
    memcpy(out, &p->initial[(size_t)layer * B], sizeof *out * (size_t)B);
    return B;
}

static void hs_block_begin(struct tide_policy *p, int block, bool first_generated) {}

/* Place every active expert by residency after the promotions. */
static void hs_place(const struct tide_policy *p, const struct tide_policy_view *v,
                     struct tide_plan *out)
{
    for (int e = 0; e < p->shape.n_experts; e++)
        out->place[e] = v->resident[e] ? TIDE_PLACE_DEVICE : TIDE_PLACE_HOST;
    for (int i = 0; i < out->n_promote; i++) {
        if (out->evict[i] >= 0)
            out->place[out->evict[i]] = TIDE_PLACE_HOST;
        out->place[out->promote[i]] = TIDE_PLACE_DEVICE;
    }
}

/* The forward after `now` at which layer l uses e next; UINT32_MAX if never. */
static uint32_t hs_next_use(struct tide_policy *p, int l, int e, uint32_t now)
{
    const uint32_t *u = p->uses[l], end = p->use_at[l][e + 1];
    uint32_t *c = &p->cursor[l][e];
    while (*c < end && u[*c] <= now)
        (*c)++;
    return *c < end ? u[*c] : UINT32_MAX;
}

static int hs_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    out->n_promote = 0;
    if (p->kind == SIM_BELADY) {
        const int E = p->shape.n_experts, l = v->layer;
        const uint32_t now = p->fwd_index[l];
        int n_act = tide_rank_top(v->counts, E, E, p->order, &p->ws);
        if (n_act < 0)
            return n_act;
        int free_slots = p->shape.budget;
        for (int e = 0; e < E; e++)
            free_slots -= v->resident[e] != 0;
        memcpy(p->held, v->resident, (size_t)E);
        for (int i = 0; i < n_act; i++) {
            int32_t e = p->order[i], victim = -1;
            if (p->held[e])
                continue;
            if (free_slots > 0) {
                free_slots--;
            } else {
                /* Farthest next use among residents idle this step; ties: lower id. */
                uint32_t far = 0;
                for (int r = 0; r < E; r++) {
                    if (!p->held[r] || v->counts[r])
                        continue;
                    uint32_t nu = hs_next_use(p, l, r, now);
                    if (victim < 0 || nu > far) {
                        victim = r;
                        far = nu;
                    }
                }
                if (victim < 0)
                    break; /* every slot holds an active expert */
                p->held[victim] = 0;
            }
            p->held[e] = 1;
            out->promote[out->n_promote] = e;
            out->evict[out->n_promote] = victim;
            out->n_promote++;
        }
    }
    hs_place(p, v, out);
    return TIDE_OK;
}

static const struct tide_policy_ops hs_ops = {
    .size = sizeof(struct tide_policy_ops),
    .destroy = hs_destroy,
    .initial = hs_initial,
    .block_begin = hs_block_begin,
    .plan = hs_plan,
};

/* Best static: per layer, the top-B experts by rows over the whole trace,
 * ties to the lower id, filled up in id order. Belady starts from 0..B-1,
 * like the plugins' default. */
static int hs_sets(struct tide_policy *p)
{
    const int L = p->shape.n_moe_layers, E = p->shape.n_experts, B = p->shape.budget;
    p->initial = malloc(sizeof *p->initial * (size_t)(L * B > 0 ? L * B : 1));
    uint32_t *tot = calloc((size_t)E, sizeof *tot);
    if (!p->initial || !tot) {
        free(tot);
        return TIDE_E_NOMEM;
    }
    int rc = TIDE_OK;
    for (int l = 0; l < L && rc == TIDE_OK; l++) {
        int32_t *set = &p->initial[(size_t)l * B];
        if (p->kind != SIM_BEST_STATIC) {
            for (int i = 0; i < B; i++)
                set[i] = i;
            continue;
        }
        memset(tot, 0, sizeof *tot * (size_t)E);
        for (size_t j = 0; j < p->t->n_fwd[l]; j++) {
            const struct tide_solver_fwd *f = &p->t->fwd[l][j];
            for (uint32_t a = 0; a < f->n_active; a++)
                tot[f->ids[a]] += f->cnt[a];
        }
        int n = tide_rank_top(tot, E, B, set, &p->ws);
        if (n < 0) {
            rc = n;
            break;
        }
        memset(p->held, 0, (size_t)E);
        for (int i = 0; i < n; i++)
            p->held[set[i]] = 1;
        for (int e = 0; e < E && n < B; e++)
            if (!p->held[e])
                set[n++] = e;
    }
    free(tot);
    return rc;
}

static int hs_uses(struct tide_policy *p)
{
    const int L = p->shape.n_moe_layers, E = p->shape.n_experts;
    p->uses = calloc((size_t)L, sizeof *p->uses);
    p->use_at = calloc((size_t)L, sizeof *p->use_at);
    p->cursor = calloc((size_t)L, sizeof *p->cursor);
    if (!p->uses || !p->use_at || !p->cursor)
        return TIDE_E_NOMEM;
    for (int l = 0; l < L; l++) {
        const struct tide_solver_fwd *fw = p->t->fwd[l];
        const size_t n = p->t->n_fwd[l];
        size_t pairs = 0;
        for (size_t j = 0; j < n; j++)
            pairs += fw[j].n_active;
        p->uses[l] = malloc(sizeof **p->uses * (pairs ? pairs : 1));
        p->use_at[l] = calloc((size_t)E + 1, sizeof **p->use_at);
        p->cursor[l] = calloc((size_t)E, sizeof **p->cursor);
        if (!p->uses[l] || !p->use_at[l] || !p->cursor[l])
            return TIDE_E_NOMEM;
        uint32_t *at = p->use_at[l];
        for (size_t j = 0; j < n; j++)
            for (uint32_t a = 0; a < fw[j].n_active; a++)
                at[fw[j].ids[a] + 1]++;
        for (int e = 0; e < E; e++)
            at[e + 1] += at[e];
        memcpy(p->cursor[l], at, sizeof *at * (size_t)E);
        for (size_t j = 0; j < n; j++)
            for (uint32_t a = 0; a < fw[j].n_active; a++)
                p->uses[l][p->cursor[l][fw[j].ids[a]]++] = (uint32_t)j;
        memcpy(p->cursor[l], at, sizeof *at * (size_t)E);
    }
    return TIDE_OK;
}

int sim_hindsight_create(enum tide_sim_hindsight kind, const struct tide_sim_trace *t,
                         const struct tide_policy_shape *shape, const uint32_t *fwd_index,
                         const struct tide_policy_ops **ops, struct tide_policy **out)
{
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->kind = kind;
    p->shape = *shape;
    p->t = t;
    p->fwd_index = fwd_index;
    p->order = malloc(sizeof *p->order * (size_t)shape->n_experts);
    p->held = malloc((size_t)shape->n_experts);
    int rc = p->order && p->held ? hs_sets(p) : TIDE_E_NOMEM;
    if (rc == TIDE_OK && kind == SIM_BELADY)
        rc = hs_uses(p);
    if (rc != TIDE_OK) {
        hs_destroy(p);
        return rc;
    }
    *ops = &hs_ops;
    *out = p;
    return TIDE_OK;
}

/* ---- The oracle: min-cost flow per layer ---------------------------------- */

struct fl_edge {
    int32_t to;
    int32_t cap;
    double cost;
};

struct flow {
    int n_nodes;
    struct fl_edge *e; /* edges in pairs: 2k forward, 2k+1 residual */
    int n_e, cap_e;
    int32_t *first; /* [n_nodes + 1] CSR over adjacency */
    int32_t *adj;   /* [n_e] edge ids grouped by tail */
    int32_t *tail;  /* [n_e] */
    double *pot, *dist;
    int32_t *prev; /* edge into each node on the shortest path */
    int32_t *heap_node;
    double *heap_key;
    int heap_n, heap_cap;
};

static int fl_add(struct flow *f, int from, int to, int cap, double cost)
{
    if (f->n_e + 2 > f->cap_e) {
        int n = f->cap_e ? 2 * f->cap_e : 1024;
        struct fl_edge *e = realloc(f->e, sizeof *e * (size_t)n);
        int32_t *t = realloc(f->tail, sizeof *t * (size_t)n);
        if (e)
            f->e = e;
        if (t)
            f->tail = t;
        if (!e || !t)
            return TIDE_E_NOMEM;
        f->cap_e = n;
    }
    f->e[f->n_e] = (struct fl_edge){to, cap, cost};
    f->tail[f->n_e++] = from;
    f->e[f->n_e] = (struct fl_edge){from, 0, -cost};
    f->tail[f->n_e++] = to;
    return TIDE_OK;
}

static void fl_free(struct flow *f)
{
    free(f->e);
    free(f->first);
    free(f->adj);
    free(f->tail);
    free(f->pot);
    free(f->dist);
    free(f->prev);
    free(f->heap_node);
    free(f->heap_key);
    memset(f, 0, sizeof *f);
}

static int fl_build(struct flow *f)
{
    const int N = f->n_nodes;
    f->first = calloc((size_t)N + 1, sizeof *f->first);
    f->adj = malloc(sizeof *f->adj * (size_t)(f->n_e ? f->n_e : 1));
    f->pot = calloc((size_t)N, sizeof *f->pot);
    f->dist = malloc(sizeof *f->dist * (size_t)N);
    f->prev = malloc(sizeof *f->prev * (size_t)N);
    if (!f->first || !f->adj || !f->pot || !f->dist || !f->prev)
        return TIDE_E_NOMEM;
    for (int k = 0; k < f->n_e; k++)
        f->first[f->tail[k] + 1]++;
    for (int v = 0; v < N; v++)
        f->first[v + 1] += f->first[v];
    int32_t *fill = malloc(sizeof *fill * (size_t)N);
    if (!fill)
        return TIDE_E_NOMEM;
    memcpy(fill, f->first, sizeof *fill * (size_t)N);
    for (int k = 0; k < f->n_e; k++)
        f->adj[fill[f->tail[k]]++] = k;
    free(fill);
    return TIDE_OK;
}

static int fl_push(struct flow *f, int v, double key)
{
    if (f->heap_n == f->heap_cap) {
        int n = f->heap_cap ? 2 * f->heap_cap : 1024;
        int32_t *a = realloc(f->heap_node, sizeof *a * (size_t)n);
        double *b = realloc(f->heap_key, sizeof *b * (size_t)n);
        if (a)
            f->heap_node = a;
        if (b)
            f->heap_key = b;
        if (!a || !b)
            return TIDE_E_NOMEM;
        f->heap_cap = n;
    }
    int i = f->heap_n++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (f->heap_key[up] <= key)
            break;
        f->heap_node[i] = f->heap_node[up];
        f->heap_key[i] = f->heap_key[up];
        i = up;
    }
    f->heap_node[i] = v;
    f->heap_key[i] = key;
    return TIDE_OK;
}

static int fl_pop(struct flow *f, double *key)
{
    int v = f->heap_node[0];
    *key = f->heap_key[0];
    int n = --f->heap_n, i = 0;
    if (n > 0) {
        int32_t lv = f->heap_node[n];
        double lk = f->heap_key[n];
        for (;;) {
            int c = 2 * i + 1;
            if (c >= n)
                break;
            if (c + 1 < n && f->heap_key[c + 1] < f->heap_key[c])
                c++;
            if (f->heap_key[c] >= lk)
                break;
            f->heap_node[i] = f->heap_node[c];
            f->heap_key[i] = f->heap_key[c];
            i = c;
        }
        f->heap_node[i] = lv;
        f->heap_key[i] = lk;
    }
    return v;
}

/* Successive shortest paths from node 0 to node n_nodes-1, at most `units`
 * units, stopping when another unit would not lower the cost. Nodes are
 * numbered in topological order, so the first potentials come from one DAG
 * pass. Adds the cost of the flow into *cost. */
static int fl_solve(struct flow *f, int units, double *cost)
{
    const int N = f->n_nodes, sink = N - 1;
    for (int v = 0; v < N; v++)
        f->pot[v] = INFINITY;
    f->pot[0] = 0;
    for (int v = 0; v < N; v++) {
        if (f->pot[v] == INFINITY)
            continue;
        for (int k = f->first[v]; k < f->first[v + 1]; k++) {
            const struct fl_edge *e = &f->e[f->adj[k]];
            if (e->cap > 0 && f->pot[v] + e->cost < f->pot[e->to])
                f->pot[e->to] = f->pot[v] + e->cost;
        }
    }
    for (int v = 0; v < N; v++)
        if (f->pot[v] == INFINITY)
            f->pot[v] = 0; /* unreachable: never on a path */
    for (int u = 0; u < units; u++) {
        for (int v = 0; v < N; v++) {
            f->dist[v] = INFINITY;
            f->prev[v] = -1;
        }
        f->dist[0] = 0;
        f->heap_n = 0;
        int rc = fl_push(f, 0, 0);
        while (rc == TIDE_OK && f->heap_n) {
            double d;
            int v = fl_pop(f, &d);
            if (d > f->dist[v])
                continue;
            for (int k = f->first[v]; k < f->first[v + 1]; k++) {
                const int id = f->adj[k];
                const struct fl_edge *e = &f->e[id];
                if (e->cap <= 0)
                    continue;
                double rcost = e->cost + f->pot[v] - f->pot[e->to];
                if (rcost < 0)
                    rcost = 0; /* rounding */
                double nd = d + rcost;
                if (nd < f->dist[e->to]) {
                    f->dist[e->to] = nd;
                    f->prev[e->to] = id;
                    rc = fl_push(f, e->to, nd);
                }
            }
        }
        if (rc != TIDE_OK)
            return rc;
        if (f->dist[sink] == INFINITY)
            break;
        double path = f->dist[sink] + f->pot[sink] - f->pot[0];
        if (path >= -1e-9)
            break; /* another slot would not help */
        for (int v = 0; v < N; v++)
            if (f->dist[v] < INFINITY)
                f->pot[v] += f->dist[v];
        for (int v = sink; v != 0;) {
            const int id = f->prev[v];
            f->e[id].cap--;
            f->e[id ^ 1].cap++;
            v = f->tail[id];
        }
        *cost += path;
    }
    return TIDE_OK;
}

/* Per-forward weights of the three streams: device, copy, host. */
struct or_lambda {
    double d, c, h;
};

struct or_layer {
    const struct tide_solver_fwd *fw;
    size_t n;
    int budget, E;
    const struct tide_cost *cost;
    bool serial;
    const struct or_lambda *lam; /* [n] (overlap) */
    /* results */
    uint8_t *served; /* [pairs] use ran on the device */
    uint32_t *loads; /* [n] promotions counted at each forward */
    double bound_us, step_bound_us;
};

/* Costs of one use of `rows` at forward j: on the host and on the device. */
static void or_use_cost(const struct or_layer *o, size_t j, uint32_t rows, double *host,
                        double *dev)
{
    const struct tide_cost *c = o->cost;
    const double h = tide_cost_host(c, rows), d = tide_cost_device(c, rows);
    const double down = c->down_us_row * rows, up = c->up_us_row * rows;
    if (o->serial) {
        *host = down + h + up;
        *dev = d;
    } else {
        const struct or_lambda *l = &o->lam[j];
        *host = l->c * up + l->h * (down + h + up);
        *dev = l->d * d;
    }
}

static double or_dense(const struct or_layer *o, size_t j)
{
    const struct tide_cost *c = o->cost;
    return c->p.dense_us + c->p.dense_us_per_token * o->fw[j].tokens;
}

/* Solve one layer: build the graph, run the flow, read the schedule. */
static int or_layer_solve(struct or_layer *o)
{
    const size_t T = o->n;
    const int E = o->E;
    size_t U = 0;
    for (size_t j = 0; j < T; j++)
        U += o->fw[j].n_active;
    /* Node numbering in time order: A_j, then (in, out) of each use of j. */
    int32_t *a_node = malloc(sizeof *a_node * (T + 1));
    int32_t *last_out = malloc(sizeof *last_out * (size_t)E); /* previous use's out node */
    int32_t *last_fwd = malloc(sizeof *last_fwd * (size_t)E);
    int32_t *use_edge = malloc(sizeof *use_edge * (U ? U : 1)); /* in->out edge of each use */
    int32_t *load_edge = malloc(sizeof *load_edge * (U ? U : 1));
    size_t *load_at = malloc(sizeof *load_at * (U ? U : 1));
    /* Step forwards and a sparse table of the copy weight for range minima. */
    int32_t *last_step = malloc(sizeof *last_step * (T ? T : 1));
    int levels = 1;
    while (((size_t)1 << levels) <= T)
        levels++;
    double *rmq = malloc(sizeof *rmq * (T ? T : 1) * (size_t)levels);
    struct flow f = {0};
    int rc = a_node && last_out && last_fwd && use_edge && load_edge && load_at && last_step && rmq
                 ? TIDE_OK
                 : TIDE_E_NOMEM;
    if (rc != TIDE_OK)
        goto done;
    int32_t next = 0;
    for (size_t j = 0; j < T; j++) {
        a_node[j] = next++;
        next += 2 * (int32_t)o->fw[j].n_active;
    }
    a_node[T] = next++;
    f.n_nodes = next;
    for (size_t j = 0; j < T; j++) {
        bool step = o->fw[j].phase == TIDE_TRACE_STEP;
        last_step[j] = step ? (int32_t)j : (j ? last_step[j - 1] : -1);
        rmq[j] = step ? (o->serial ? 1.0 : o->lam[j].c) : INFINITY;
    }
    for (int k = 1; k < levels; k++)
        for (size_t j = 0; j + ((size_t)1 << k) <= T; j++) {
            double x = rmq[(size_t)(k - 1) * T + j],
                   y = rmq[(size_t)(k - 1) * T + j + ((size_t)1 << (k - 1))];
            rmq[(size_t)k * T + j] = x < y ? x : y;
        }
    for (int e = 0; e < E; e++) {
        last_out[e] = -1;
        last_fwd[e] = -1;
    }
    for (size_t j = 0; j < T && rc == TIDE_OK; j++)
        rc = fl_add(&f, a_node[j], a_node[j + 1], o->budget, 0);
    const double beta = o->cost->promote_us;
    size_t u = 0;
    for (size_t j = 0; j < T && rc == TIDE_OK; j++) {
        const struct tide_solver_fwd *fw = &o->fw[j];
        const bool step = fw->phase == TIDE_TRACE_STEP;
        for (uint32_t a = 0; a < fw->n_active && rc == TIDE_OK; a++, u++) {
            const int e = fw->ids[a];
            const int32_t in = a_node[j] + 1 + 2 * (int32_t)a, out = in + 1;
            double hc, dc;
            or_use_cost(o, j, fw->cnt[a], &hc, &dc);
            double sav = hc - dc;
            if (step && sav < 0)
                sav = 0; /* a resident may run on the host in a step */
            use_edge[u] = f.n_e;
            if ((rc = fl_add(&f, in, out, 1, -sav)) != TIDE_OK)
                break;
            /* Load: the cheapest copy weight among the step forwards since
             * the previous use, issued (for capacity) at the last of them. */
            load_edge[u] = -1;
            const int32_t lo = last_fwd[e] + 1, hi = last_step[j];
            if (hi >= lo && hi >= 0) {
                size_t len = (size_t)(hi - lo + 1);
                int k = 0;
                while (((size_t)2 << k) <= len)
                    k++;
                double w = rmq[(size_t)k * T + (size_t)lo];
                double w2 = rmq[(size_t)k * T + (size_t)hi + 1 - ((size_t)1 << k)];
                w = w < w2 ? w : w2;
                load_edge[u] = f.n_e;
                load_at[u] = (size_t)hi;
                rc = fl_add(&f, a_node[hi], in, 1, w * beta);
            }
            if (rc == TIDE_OK && last_out[e] < 0) /* resident from the start, for free */
                rc = fl_add(&f, a_node[0], in, 1, 0);
            if (rc == TIDE_OK && last_out[e] >= 0) /* kept since the previous use */
                rc = fl_add(&f, last_out[e], in, 1, 0);
            if (rc == TIDE_OK) /* dropped after this use */
                rc = fl_add(&f, out, a_node[j + 1], 1, 0);
            last_out[e] = out;
            last_fwd[e] = (int32_t)j;
        }
    }
    if (rc == TIDE_OK)
        rc = fl_build(&f);
    double flow_cost = 0;
    if (rc == TIDE_OK)
        rc = fl_solve(&f, o->budget, &flow_cost);
    if (rc != TIDE_OK)
        goto done;
    /* The bound: everything on the host, plus the flow's savings. */
    double base = 0, step_base = 0;
    u = 0;
    for (size_t j = 0; j < T; j++) {
        double fj = or_dense(o, j);
        for (uint32_t a = 0; a < o->fw[j].n_active; a++, u++) {
            double hc, dc;
            or_use_cost(o, j, o->fw[j].cnt[a], &hc, &dc);
            o->served[u] = f.e[use_edge[u]].cap == 0;
            /* A served use in a step costs the cheaper side (see or_layer_solve). */
            if (!o->served[u])
                fj += hc;
            else
                fj += o->fw[j].phase == TIDE_TRACE_STEP && hc < dc ? hc : dc;
        }
        base += fj;
        if (o->fw[j].phase == TIDE_TRACE_STEP)
            step_base += fj;
    }
    memset(o->loads, 0, sizeof *o->loads * T);
    double load_cost = 0;
    for (size_t k = 0; k < u; k++)
        if (load_edge[k] >= 0 && f.e[load_edge[k]].cap == 0) {
            o->loads[load_at[k]]++;
            load_cost += f.e[load_edge[k]].cost;
        }
    /* Equal to (all on the host) + flow_cost, up to rounding. */
    o->bound_us = base + load_cost;
    o->step_bound_us = step_base + load_cost;
done:
    fl_free(&f);
    free(a_node);
    free(last_out);
    free(last_fwd);
    free(use_edge);
    free(load_edge);
    free(load_at);
    free(last_step);
    free(rmq);
    return rc;
}

struct or_item {
    double d, h; /* device time; host path (download, compute, upload) */
};

static int or_ratio_desc(const void *a, const void *b)
{
    const struct or_item *x = a, *y = b;
    double l = x->h * y->d, r = y->h * x->d; /* h/d descending */
    return (l < r) - (l > r);
}

static int or_h_desc(const void *a, const void *b)
{
    const struct or_item *x = a, *y = b;
    return (x->h < y->h) - (x->h > y->h);
}

/* A lower bound on one overlapped forward under any placement of at most B
 * residents, with promotions free: dense + min over x in [0,1]^n, sum x <= B
 * of max(D(x), H(x)), relaxed twice: (a) H alone (the B largest host paths on
 * the device) and (b) the Lagrangian of the balance point of D and H without
 * the cardinality (the crossing expert of the h/d order gives the weights),
 * minimised with the cardinality. Both never exceed the true minimum. */
static double or_forward_bound(const struct or_layer *o, size_t j, struct or_item *it)
{
    const struct tide_solver_fwd *f = &o->fw[j];
    const struct tide_cost *c = o->cost;
    const int n = (int)f->n_active;
    double H = 0;
    for (int a = 0; a < n; a++) {
        const uint32_t r = f->cnt[a];
        it[a].d = tide_cost_device(c, r);
        it[a].h = (c->down_us_row + c->up_us_row) * r + tide_cost_host(c, r);
        H += it[a].h;
    }
    const int B = o->budget;
    /* (a) */
    qsort(it, (size_t)n, sizeof *it, or_h_desc);
    double a_bound = H;
    for (int a = 0; a < n && a < B; a++)
        a_bound -= it[a].h;
    /* (b) the balance point, then its weights with the cardinality. */
    qsort(it, (size_t)n, sizeof *it, or_ratio_desc);
    double D = 0, Hr = H, wd = 0, wh = 1;
    for (int a = 0; a < n; a++) {
        if (D + it[a].d >= Hr - it[a].h) {
            wd = it[a].h / (it[a].d + it[a].h);
            wh = 1 - wd;
            break;
        }
        D += it[a].d;
        Hr -= it[a].h;
    }
    for (int a = 0; a < n; a++)
        it[a].h = wh * it[a].h - wd * it[a].d; /* the saving of placing it on the device */
    qsort(it, (size_t)n, sizeof *it, or_h_desc);
    double b_bound = wh * H;
    for (int a = 0; a < n && a < B && it[a].h > 0; a++)
        b_bound -= it[a].h;
    return or_dense(o, j) + (a_bound > b_bound ? a_bound : b_bound);
}

/* Evaluate a layer's schedule with the full model; also yields the streams
 * for the next pass's weights. */
static void or_evaluate(const struct or_layer *o, struct tide_sim_counters *c,
                        struct or_lambda *lam)
{
    size_t u = 0;
    for (size_t j = 0; j < o->n; j++) {
        const struct tide_solver_fwd *fw = &o->fw[j];
        struct tide_layer_work w = {.tokens = fw->tokens, .promotions = o->loads[j]};
        for (uint32_t a = 0; a < fw->n_active; a++, u++) {
            uint32_t n = fw->cnt[a];
            if (o->served[u]) {
                w.device_us += tide_cost_device(o->cost, n);
                c->hit_rows += n;
            } else {
                w.host_us += tide_cost_host(o->cost, n);
                w.host_rows += n;
            }
        }
        c->miss_rows += w.host_rows;
        c->promotions += w.promotions;
        c->tokens += fw->tokens;
        c->active += fw->n_active;
        double us = tide_cost_layer_us(o->cost, &w);
        c->us += us;
        if (fw->phase == TIDE_TRACE_STEP)
            c->step_us += us;
        if (lam) {
            struct tide_layer_streams s;
            tide_cost_streams(o->cost, &w, &s);
            double D = s.device, C = s.weights + s.act_up, H = s.act_down + s.host + s.act_up;
            /* One-hot on the bottleneck: the bound is tight at this schedule. */
            lam[j] = (struct or_lambda){0, 0, 0};
            if (D >= C && D >= H)
                lam[j].d = 1;
            else if (C >= H)
                lam[j].c = 1;
            else
                lam[j].h = 1;
        }
    }
}

void tide_sim_oracle_free(struct tide_sim_oracle *o)
{
    if (!o)
        return;
    free(o->layer_bound_us);
    o->layer_bound_us = NULL;
}

int tide_sim_oracle(const struct tide_sim_trace *t, int budget, const int *layer_budget,
                    const struct tide_cost *cost, const struct tide_progress *progress,
                    struct tide_sim_oracle *out)
{
    memset(out, 0, sizeof *out);
    const int L = (int)t->h.n_layers, E = (int)t->h.n_experts;
    out->layer_bound_us = calloc((size_t)L, sizeof *out->layer_bound_us);
    if (!out->layer_bound_us)
        return TIDE_E_NOMEM;
    const bool serial = !cost->p.overlap;
    const int passes = serial ? 1 : 2;
    int rc = TIDE_OK;
    for (int l = 0; l < L && rc == TIDE_OK; l++) {
        const size_t n = t->n_fwd[l];
        size_t pairs = 0;
        for (size_t j = 0; j < n; j++)
            pairs += t->fwd[l][j].n_active;
        int b = layer_budget ? layer_budget[l] : budget;
        struct or_layer o = {
            .fw = t->fwd[l],
            .n = n,
            .budget = b < E ? b : E,
            .E = E,
            .cost = cost,
            .serial = serial,
        };
        struct or_lambda *lam = malloc(sizeof *lam * (n ? n : 1));
        o.served = malloc(pairs ? pairs : 1);
        o.loads = malloc(sizeof *o.loads * (n ? n : 1));
        uint8_t *best_served = malloc(pairs ? pairs : 1);
        uint32_t *best_loads = malloc(sizeof *best_loads * (n ? n : 1));
        if (!lam || !o.served || !o.loads || !best_served || !best_loads)
            rc = TIDE_E_NOMEM;
        o.lam = lam;
        double best = -INFINITY, best_step = 0;
        for (int pass = 0; pass < passes && rc == TIDE_OK; pass++) {
            /* With overlap, pass 0 only finds a reference schedule: the
             * optimum of the serial costs, whose bottleneck stream per
             * forward sets the weights of the bounding passes. */
            o.serial = serial || pass == 0;
            if ((rc = or_layer_solve(&o)) != TIDE_OK ||
                (rc = tide_progress_report(progress, (uint64_t)(l * passes + pass + 1),
                                           (uint64_t)(L * passes))) != TIDE_OK)
                break;
            tide_debug("oracle: layer %d pass %d %s %.1f us", l, pass,
                       o.serial && !serial ? "reference" : "bound", o.bound_us);
            if ((serial || pass > 0) && o.bound_us > best) {
                best = o.bound_us;
                best_step = o.step_bound_us;
                memcpy(best_served, o.served, pairs);
                memcpy(best_loads, o.loads, sizeof *best_loads * n);
            }
            if (pass + 1 < passes) {
                struct tide_sim_counters scratch = {0};
                or_evaluate(&o, &scratch, lam);
            }
        }
        if (rc == TIDE_OK && !serial) {
            /* The forward-by-forward bound, when it is the better one. */
            struct or_item *it = malloc(sizeof *it * (size_t)E);
            double fb = 0, fb_step = 0;
            for (size_t j = 0; it && j < n; j++) {
                double fj = or_forward_bound(&o, j, it);
                fb += fj;
                if (o.fw[j].phase == TIDE_TRACE_STEP)
                    fb_step += fj;
            }
            if (!it)
                rc = TIDE_E_NOMEM;
            tide_debug("oracle: layer %d forward-by-forward bound %.1f us", l, fb);
            if (fb > best) {
                best = fb;
                best_step = fb_step;
            }
            free(it);
        }
        if (rc == TIDE_OK) {
            memcpy(o.served, best_served, pairs);
            memcpy(o.loads, best_loads, sizeof *best_loads * n);
            or_evaluate(&o, &out->sched, NULL);
            out->layer_bound_us[l] = best;
            out->bound_us += best;
            out->step_bound_us += best_step;
        }
        free(lam);
        free(o.served);
        free(o.loads);
        free(best_served);
        free(best_loads);
    }
    out->schedule = serial;
    if (rc != TIDE_OK)
        tide_sim_oracle_free(out);
    return rc;
}
