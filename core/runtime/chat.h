/* Chat templates: a model's template (tide_model_info.chat_template or the
 * model ops' chat_template slot) with one "{prompt}" placeholder. */
#ifndef TIDE_CHAT_H
#define TIDE_CHAT_H

#include <stddef.h>

/* Replace the first "{prompt}" of tmpl with prompt[0..len). On success *out
 * is malloc'd, NUL-terminated and *out_len bytes long; the caller frees it.
 * Returns TIDE_OK, TIDE_E_UNSUPPORTED (no template, or no placeholder:
 * logged) or TIDE_E_NOMEM. */
int tide_chat_apply(const char *tmpl, const char *prompt, size_t len, char **out, size_t *out_len);

#endif
