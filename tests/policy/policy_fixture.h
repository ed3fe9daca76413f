/* A fixture for driving a policy plugin without a model.
 *
 * It loads the plugin by name through the core loader from $TIDE_PLUGIN_DIR,
 * builds the plugin's option section with the core config API, creates an
 * instance for a given shape and keeps a simulated residency map. Every plan
 * is checked against the plan rules and then applied to the map, and is
 * returned as text so tests can assert it exactly:
 *
 *     "P[4<0 5<-] D[1 4 5] H[7]"
 *
 * P lists the promotions as EXPERT<EVICTED ('-' for a free slot), in plan
 * order; D the active experts placed on the device and H those placed on the
 * host, in ascending id order. A plan that breaks a rule comes back as
 * "INVALID: <why>", a failing plan() call as "ERROR <status>". */
#ifndef TIDE_TEST_POLICY_FIXTURE_H
#define TIDE_TEST_POLICY_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "loader.h"
#include "polcheck.h"
#include "tide/policy.h"

struct pf {
    struct tide_plugin_set *set;
    const struct tide_plugin_desc *desc;
    const struct tide_policy_ops *ops;
    struct tide_config *cfg;
    struct tide_policy *p;
    struct tide_policy_shape shape;
    uint8_t *resident; /* [n_moe_layers][n_experts] simulated residency */
    uint32_t *counts;  /* [n_experts] counts of the current plan() */
    int32_t *promote;  /* [n_experts] */
    int32_t *evict;    /* [n_experts] */
    uint8_t *place;    /* [n_experts] */
    int block;         /* current block, set by pf_block */
    char text[8192];   /* the last plan or residency as text */
    /* Handed to create() in the shape when set before pf_create (0 / NULL: unknown). */
    const struct tide_policy_costs *costs;
    int max_steps, block_length;
};

/* Scan $TIDE_PLUGIN_DIR, find the policy plugin `name` and register its
 * option section. Returns TIDE_OK or a status (messages are logged). */
int pf_load(struct pf *f, const char *name);

/* Set an option of the plugin's section: pf_opt(f, "interval", "2"). */
int pf_opt(struct pf *f, const char *key, const char *value);

/* Create the instance for the shape and fill the residency map from
 * initial(). Returns the create() status, or TIDE_E_INVAL when initial()
 * returns an invalid set (reported on stderr). */
int pf_create(struct pf *f, int n_moe_layers, int n_experts, int budget);

/* pf_load, then pf_opt for each blank-separated "key=value" of opts (NULL or
 * "" for none). Returns the first failing status. */
int pf_load_opts(struct pf *f, const char *plugin, const char *opts);

/* The plugin's option section after pf_load (what create() is handed). */
const struct tide_opts *pf_section(const struct pf *f);

/* pf_load_opts, then pf_create. Returns the first failing status. */
int pf_open(struct pf *f, const char *plugin, const char *opts, int n_moe_layers, int n_experts,
            int budget);

/* True when rc is TIDE_OK; else reports file:line and counts a failure. */
bool pf_expect_ok(int rc, const char *file, int line, int *checks, int *failures);

/* pf_open as a harness check: true when it succeeded. */
#define PF_OPEN(f, plugin, opts, layers, experts, budget)                                          \
    pf_expect_ok(pf_open((f), (plugin), (opts), (layers), (experts), (budget)), __FILE__,          \
                 __LINE__, &test_checks, &test_failures)

/* True when the loaded descriptor is named `name`, has version 0.1.0, kind
 * policy, a full-size ops table and exactly the blank-separated option names
 * (NULL for none); else prints what differs. */
bool pf_desc_ok(const struct pf *f, const char *name, const char *options);

/* pf_open with costs (and the shape's max_steps) handed to create(); test
 * costs come from tide_polcheck_costs_init (polcheck.h). */
int pf_open_costs(struct pf *f, const char *plugin, const char *opts, int n_moe_layers,
                  int n_experts, int budget, const struct tide_policy_costs *costs, int max_steps);

/* A generation starts: calls prompt_begin (when the plugin has it). */
void pf_prompt(struct pf *f, uint32_t prompt_len, const float *vec, int dim);

/* Start a block: calls block_begin(block, first_generated). */
void pf_block(struct pf *f, int block, bool first_generated);

/* Plan one layer at one step of the current block with counts given as
 * "EXPERT:COUNT ..." (others 0); check and apply the plan. Returns the plan
 * as text (valid until the next call). */
const char *pf_plan(struct pf *f, int layer, int step, const char *counts);

/* The same with a full counts array [n_experts]. */
const char *pf_plan_counts(struct pf *f, int layer, int step, const uint32_t *counts);

/* The residents of a layer as "0 3 5" (valid until the next call). */
const char *pf_residents(struct pf *f, int layer);

/* Destroy the instance (if any), the config and the plugin set. */
void pf_close(struct pf *f);

/* Capture log messages (warnings and errors) into a buffer. */
void pf_log_capture(void);
/* Everything captured since pf_log_capture, one message a line. */
const char *pf_log_text(void);
/* Restore logging to stderr. */
void pf_log_release(void);

/* String equality as a harness check (harness.h must be included first). */
#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        test_checks++;                                                                             \
        if (!sa_ || strcmp(sa_, sb_)) {                                                            \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s\n    got:      \"%s\"\n    expected: \"%s\"\n", __FILE__,   \
                    __LINE__, #a, sa_ ? sa_ : "(null)", sb_);                                      \
        }                                                                                          \
    } while (0)

#endif
