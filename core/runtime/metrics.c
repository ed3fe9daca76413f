#include "metrics.h"

void tide_traffic_add(struct tide_traffic *a, const struct tide_traffic *b)
{
    a->tokens += b->tokens;
    a->active += b->active;
    a->hit_rows += b->hit_rows;
    a->miss_rows += b->miss_rows;
    a->promotions += b->promotions;
    a->evictions += b->evictions;
    a->weight_bytes += b->weight_bytes;
    a->act_bytes += b->act_bytes;
}

void tide_metrics_layer_line(FILE *f, enum tide_trace_phase phase, int block, int step, int layer,
                             const struct tide_traffic *t, const char *tail)
{
    static const char *const name[] = {"prefill", "step", "kv"};
    fprintf(f,
            "{\"type\":\"layer\",\"phase\":\"%s\",\"block\":%d,\"step\":%d,\"layer\":%d,"
            "\"tokens\":%llu,\"active\":%llu,\"hit_rows\":%llu,\"miss_rows\":%llu,"
            "\"promotions\":%llu,\"evictions\":%llu,\"weight_bytes\":%llu,"
            "\"act_bytes\":%llu,%s}\n",
            name[phase], block, phase == TIDE_TRACE_STEP ? step : -1, layer,
            (unsigned long long)t->tokens, (unsigned long long)t->active,
            (unsigned long long)t->hit_rows, (unsigned long long)t->miss_rows,
            (unsigned long long)t->promotions, (unsigned long long)t->evictions,
            (unsigned long long)t->weight_bytes, (unsigned long long)t->act_bytes, tail);
}
