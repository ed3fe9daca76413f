#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "tide/log.h"
#include "tide/status.h"

int tide_chat_apply(const char *tmpl, const char *prompt, size_t len, char **out, size_t *out_len)
{
    if (!tmpl) {
        tide_error("chat: the model has no chat template");
        return TIDE_E_UNSUPPORTED;
    }
    const char *ph = strstr(tmpl, "{prompt}");
    if (!ph) {
        tide_error("chat: the model's chat template has no {prompt}");
        return TIDE_E_UNSUPPORTED;
    }
    const size_t lt = strlen(tmpl), pre = (size_t)(ph - tmpl), post = lt - pre - 8;
    char *buf = malloc(pre + len + post + 1);
    if (!buf)
        return TIDE_E_NOMEM;
    memcpy(buf, tmpl, pre);
    if (len)
        memcpy(buf + pre, prompt, len);
    memcpy(buf + pre + len, ph + 8, post + 1);
    *out = buf;
    *out_len = pre + len + post;
    return TIDE_OK;
}
