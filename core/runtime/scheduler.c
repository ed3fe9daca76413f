/* The engine loop's scheduler (scheduler.h). */
#include <stdint.h>
#include <stdlib.h>

#include "scheduler.h"
#include "tide/log.h"
#include "tide/status.h"

struct sched {
    const struct tide_sched_ops *ops;
    int max, n_running;
    uint64_t next_order;
    uint64_t *order; /* [max] admission order of the slot's sequence */
    bool *running;   /* [max] */
    bool *posted;    /* [max] asked for a forward */
    int *slots;      /* [max] one forward's posted slots */
    int lead;        /* slot of the lead; -1: nobody leads */
    bool lead_left;  /* the lead finished during this round */
};

/* Slot s's sequence ran to its next forward (1) or finished (0). */
static void sc_after(struct sched *c, int s, int r)
{
    c->posted[s] = r == 1;
    if (r == 1)
        return;
    c->running[s] = false;
    c->n_running--;
    if (c->lead == s) {
        c->lead = -1;
        c->lead_left = true;
    }
    if (c->n_running == 0)
        c->ops->drained(c->ops->user);
}

/* Admit into the lowest free slot; the sequence runs to its first forward. */
static int sc_admit(struct sched *c, int *what)
{
    int s = 0;
    while (c->running[s])
        s++;
    const int n = c->n_running;
    *what = c->ops->admit(c->ops->user, s, n);
    if (*what != TIDE_SCHED_ADMITTED)
        return *what < 0 ? *what : TIDE_OK;
    c->running[s] = true;
    c->order[s] = c->next_order++;
    c->n_running++;
    if (c->lead < 0) {
        /* The batch is empty (else a lead runs): s leads from its start,
         * even after one that ended at its admission. */
        c->lead = s;
        c->lead_left = false;
    }
    const int r = c->ops->resume(c->ops->user, s, true, c->lead == s, TIDE_OK);
    if (r < 0) {
        sc_after(c, s, 0);
        return r;
    }
    sc_after(c, s, r);
    return TIDE_OK;
}

/* After a round: when the lead left, the oldest running sequence leads. */
static void sc_new_lead(struct sched *c)
{
    if (!c->lead_left)
        return;
    c->lead_left = false;
    for (int s = 0; s < c->max; s++)
        if (c->running[s] && (c->lead < 0 || c->order[s] < c->order[c->lead]))
            c->lead = s;
    if (c->lead >= 0)
        c->ops->lead(c->ops->user, c->lead);
}

/* End every running sequence with rc (the run stops). */
static void sc_abort(struct sched *c, int rc)
{
    for (int s = 0; s < c->max; s++)
        if (c->running[s]) {
            c->ops->resume(c->ops->user, s, false, false, rc);
            sc_after(c, s, 0);
        }
}

int tide_sched_run(int max_batch, const struct tide_sched_ops *ops)
{
    if (max_batch < 1) {
        tide_error("batch: max_batch must be at least 1 (got %d)", max_batch);
        return TIDE_E_INVAL;
    }
    struct sched c = {.ops = ops, .max = max_batch, .lead = -1};
    c.order = calloc((size_t)max_batch, sizeof *c.order);
    c.running = calloc((size_t)max_batch, sizeof *c.running);
    c.posted = calloc((size_t)max_batch, sizeof *c.posted);
    c.slots = calloc((size_t)max_batch, sizeof *c.slots);
    int rc = c.order && c.running && c.posted && c.slots ? TIDE_OK : TIDE_E_NOMEM;
    bool hold = false; /* a sequence waits for the batch to drain */
    while (rc == TIDE_OK) {
        /* Admission: the held sequence once the batch drained, then new
         * ones while a slot is free. */
        if (hold && c.n_running == 0)
            hold = false;
        while (rc == TIDE_OK && !hold && c.n_running < c.max) {
            int what;
            rc = sc_admit(&c, &what);
            if (what == TIDE_SCHED_HOLD)
                hold = true;
            if (what == TIDE_SCHED_NONE)
                break;
        }
        if (rc != TIDE_OK || (c.n_running == 0 && !hold))
            break;
        if (c.n_running == 0)
            continue; /* the held one is admitted next */
        if (ops->between)
            ops->between(ops->user);
        int n = 0;
        for (int s = 0; s < c.max; s++)
            if (c.running[s] && c.posted[s])
                c.slots[n++] = s;
        if (ops->round_begin)
            ops->round_begin(ops->user);
        const int frc = ops->forward(ops->user, c.slots, n, c.lead);
        for (int i = 0; i < n && rc == TIDE_OK; i++) {
            const int s = c.slots[i];
            const int r = ops->resume(ops->user, s, false, c.lead == s, frc);
            if (r < 0) {
                sc_after(&c, s, 0);
                rc = r;
            } else {
                sc_after(&c, s, r);
            }
        }
        if (ops->round_end)
            ops->round_end(ops->user);
        if (rc == TIDE_OK)
            sc_new_lead(&c);
    }
    if (rc != TIDE_OK && c.running)
        sc_abort(&c, rc);
    free(c.order);
    free(c.running);
    free(c.posted);
    free(c.slots);
    return rc;
}
