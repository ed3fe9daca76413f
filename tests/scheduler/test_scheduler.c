/* The scheduler (core/runtime/scheduler.h) driven by scripted sequences.
 * Each sequence runs a given number of forwards; every call the scheduler
 * makes is written to a log, and each test compares the whole log:
 *   +A0   A admitted into slot 0       HA  A held until the batch drains
 *   XA    A refused at admission       E   admission failed (run stops)
 *   [ ]   round_begin, round_end       F(AB)LA  a forward of A then B, A leading
 *   -A    A finished                   !A  A ended by a failure
 *   LB    B leads from now on          D   the batch drained */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "scheduler.h"
#include "tide/status.h"

struct fseq {
    char name;
    int fwds;        /* forwards it runs */
    bool big;        /* needs the batch drained first */
    bool refuse;     /* refused at admission */
    bool fail_admit; /* its admission fails the run */
};

struct fake {
    const struct fseq *q;
    int n, next;
    const struct fseq *in[8]; /* by slot */
    int left[8];              /* forwards left, by slot */
    int fail_at;              /* this forward (from 1) fails; 0: none */
    int forwards, betweens, depth;
    bool nested; /* a round began inside a round */
    char log[512];
};

static void fk_log(struct fake *f, const char *s)
{
    strncat(f->log, s, sizeof f->log - strlen(f->log) - 1);
}

static int fk_admit(void *u, int slot, int n_running)
{
    struct fake *f = u;
    char b[8];
    if (f->next >= f->n)
        return TIDE_SCHED_NONE;
    const struct fseq *s = &f->q[f->next];
    if (s->fail_admit) {
        fk_log(f, "E");
        return TIDE_E_NOMEM;
    }
    if (s->big && n_running > 0) {
        snprintf(b, sizeof b, "H%c", s->name);
        fk_log(f, b);
        return TIDE_SCHED_HOLD;
    }
    f->next++;
    if (s->refuse) {
        snprintf(b, sizeof b, "X%c", s->name);
        fk_log(f, b);
        return TIDE_SCHED_AGAIN;
    }
    f->in[slot] = s;
    f->left[slot] = s->fwds;
    snprintf(b, sizeof b, "+%c%d", s->name, slot);
    fk_log(f, b);
    return TIDE_SCHED_ADMITTED;
}

static int fk_resume(void *u, int slot, bool first, bool lead, int fwd_rc)
{
    (void)lead;
    struct fake *f = u;
    char b[8];
    const struct fseq *s = f->in[slot];
    if (fwd_rc != TIDE_OK) {
        snprintf(b, sizeof b, "!%c", s->name);
        fk_log(f, b);
        f->in[slot] = NULL;
        return 0;
    }
    if (!first)
        f->left[slot]--;
    if (f->left[slot] > 0)
        return 1;
    snprintf(b, sizeof b, "-%c", s->name);
    fk_log(f, b);
    f->in[slot] = NULL;
    return 0;
}

static int fk_forward(void *u, const int *slots, int n, int lead)
{
    struct fake *f = u;
    char b[32];
    int k = 0;
    b[k++] = 'F';
    b[k++] = '(';
    for (int i = 0; i < n; i++)
        b[k++] = f->in[slots[i]]->name;
    b[k++] = ')';
    b[k++] = 'L';
    b[k++] = lead >= 0 ? f->in[lead]->name : '-';
    b[k] = 0;
    fk_log(f, b);
    f->forwards++;
    return f->forwards == f->fail_at ? TIDE_E_IO : TIDE_OK;
}

static void fk_lead(void *u, int slot)
{
    struct fake *f = u;
    char b[8];
    snprintf(b, sizeof b, "L%c", f->in[slot]->name);
    fk_log(f, b);
}

static void fk_drained(void *u)
{
    fk_log(u, "D");
}

static void fk_between(void *u)
{
    ((struct fake *)u)->betweens++;
}

static void fk_round_begin(void *u)
{
    struct fake *f = u;
    f->nested = f->nested || f->depth != 0;
    f->depth++;
    fk_log(f, "[");
}

static void fk_round_end(void *u)
{
    struct fake *f = u;
    f->depth--;
    fk_log(f, "]");
}

/* Run q[n] over max slots; the log must be want and the status rc. */
static void run(int max, const struct fseq *q, int n, int fail_at, int rc, const char *want)
{
    struct fake f = {.q = q, .n = n, .fail_at = fail_at};
    const struct tide_sched_ops ops = {
        .user = &f,
        .admit = fk_admit,
        .resume = fk_resume,
        .forward = fk_forward,
        .lead = fk_lead,
        .drained = fk_drained,
        .between = fk_between,
        .round_begin = fk_round_begin,
        .round_end = fk_round_end,
    };
    CHECK_EQ_INT(tide_sched_run(max, &ops), rc);
    if (strcmp(f.log, want)) {
        fprintf(stderr, "log  %s\nwant %s\n", f.log, want);
        CHECK(!"the scheduler's calls differ");
    }
    CHECK_EQ_INT(f.betweens, f.forwards); /* between() before every forward */
    CHECK_EQ_INT(f.depth, 0);             /* every round that began ended */
    CHECK(!f.nested);
    for (int s = 0; s < max; s++)
        CHECK(!f.in[s]); /* every sequence ended */
}

/* A batch of one is the sequence's forwards one after another. */
static void test_single(void)
{
    const struct fseq q[] = {{.name = 'A', .fwds = 2}};
    run(1, q, 1, 0, TIDE_OK, "+A0[F(A)LA][F(A)LA-AD]");
    const struct fseq q2[] = {{.name = 'A', .fwds = 1}, {.name = 'B', .fwds = 1}};
    run(1, q2, 2, 0, TIDE_OK, "+A0[F(A)LA-AD]+B0[F(B)LB-BD]");
}

/* Sequences share forwards; one joins the lowest free slot as another
 * leaves; the lead's leaving hands the clock on after the round. */
static void test_join_leave(void)
{
    const struct fseq q[] = {
        {.name = 'A', .fwds = 2}, {.name = 'B', .fwds = 3}, {.name = 'C', .fwds = 1}};
    run(2, q, 3, 0, TIDE_OK, "+A0+B1[F(AB)LA][F(AB)LA-A]LB+C0[F(CB)LB-C-BD]");
}

/* The new lead is the oldest running sequence, not the lowest slot. */
static void test_lead_by_age(void)
{
    const struct fseq q[] = {{.name = 'A', .fwds = 3},
                             {.name = 'B', .fwds = 1},
                             {.name = 'C', .fwds = 5},
                             {.name = 'D', .fwds = 5}};
    run(3, q, 4, 0, TIDE_OK,
        "+A0+B1+C2[F(ABC)LA-B]+D1[F(ADC)LA][F(ADC)LA-A]LC[F(DC)LC][F(DC)LC-C]LD[F(D)LD-DD]");
}

/* One that needs a bigger reserve waits for the batch to drain, and those
 * behind it wait with it (first come, first served). */
static void test_hold(void)
{
    const struct fseq q[] = {
        {.name = 'A', .fwds = 1}, {.name = 'B', .fwds = 1, .big = true}, {.name = 'C', .fwds = 1}};
    run(2, q, 3, 0, TIDE_OK, "+A0HB[F(A)LA-AD]+B0+C1[F(BC)LB-B-CD]");
}

/* A failed forward ends every sequence in it; the run goes on. */
static void test_forward_fails(void)
{
    const struct fseq q[] = {
        {.name = 'A', .fwds = 3}, {.name = 'B', .fwds = 3}, {.name = 'C', .fwds = 1}};
    run(2, q, 3, 2, TIDE_OK, "+A0+B1[F(AB)LA][F(AB)LA!A!BD]+C0[F(C)LC-CD]");
}

/* A refused sequence is passed over; one that ends at its admission leaves
 * the next one leading from its start, with no takeover after the round. */
static void test_refused_and_empty(void)
{
    const struct fseq q[] = {{.name = 'X', .fwds = 1, .refuse = true}, {.name = 'A', .fwds = 1}};
    run(1, q, 2, 0, TIDE_OK, "XX+A0[F(A)LA-AD]");
    const struct fseq q2[] = {{.name = 'Z', .fwds = 0}, {.name = 'A', .fwds = 2}};
    run(2, q2, 2, 0, TIDE_OK, "+Z0-ZD+A0[F(A)LA][F(A)LA-AD]");
}

/* A failing admission stops the run and ends the running sequences. */
static void test_run_fails(void)
{
    const struct fseq q[] = {{.name = 'A', .fwds = 3},
                             {.name = 'E', .fwds = 1, .fail_admit = true}};
    run(2, q, 2, 0, TIDE_E_NOMEM, "+A0E!AD");
    const struct tide_sched_ops ops = {0};
    CHECK_EQ_INT(tide_sched_run(0, &ops), TIDE_E_INVAL);
}

int main(void)
{
    TEST_RUN(test_single);
    TEST_RUN(test_join_leave);
    TEST_RUN(test_lead_by_age);
    TEST_RUN(test_hold);
    TEST_RUN(test_forward_fails);
    TEST_RUN(test_refused_and_empty);
    TEST_RUN(test_run_fails);
    TEST_DONE();
}
