/* libFuzzer target: the Kubernetes client's parsers on arbitrary bytes — kubeconfig loading
 * (YAML, base64 fields), the informer's incremental watch-event parser (the input fed in
 * chunks whose sizes come from the input) and Status-message extraction. Any crash, sanitizer
 * report, leak or timeout is a finding. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/informer.h"

static void on_add(const cJSON *o, void *a)
{
    (void)o;
    ++*(int *)a;
}
static void on_update(const cJSON *o, const cJSON *n, void *a)
{
    (void)o, (void)n;
    ++*(int *)a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    switch (data[0] % 3) {
    case 0: {
        sb_err err;
        /* No directory: file fields resolve relative to the cwd; they rarely exist. */
        sb_k8s_config *c =
            sb_k8s_config_parse_kubeconfig(text, len, "fuzz", "/nonexistent", NULL, &err);
        sb_k8s_config_free(c);
        size_t n;
        free(sb_k8s_base64_decode(text, len, &n));
        break;
    }
    case 1: {
        int count = 0;
        sb_k8s_informer_handlers h = {on_add, on_update, on_add, &count};
        sb_k8s_informer *inf = sb_k8s_informer_new(NULL, "/api/v1/pods", NULL, &h, NULL);
        if (inf == NULL)
            break;
        size_t off = 0, i = 0;
        while (off < len) {
            size_t chunk = 1 + (size_t)data[i++ % size] % 64;
            if (chunk > len - off)
                chunk = len - off;
            sb_k8s_informer_feed(inf, text + off, chunk);
            off += chunk;
        }
        cJSON_Delete(sb_k8s_informer_list(inf));
        sb_k8s_informer_free(inf);
        break;
    }
    default: {
        char *s = malloc(len + 1);
        if (s == NULL)
            break;
        memcpy(s, text, len);
        s[len] = '\0';
        char out[512];
        sb_k8s_describe_status(404, s, out, sizeof out);
        cJSON *j = cJSON_Parse(s);
        if (j != NULL) {
            sb_k8s_informer *inf = sb_k8s_informer_new(NULL, "/x", NULL, NULL, NULL);
            if (inf != NULL) {
                sb_k8s_informer_replace(inf, j, NULL);
                sb_k8s_informer_replace(inf, j, NULL);
                sb_k8s_informer_free(inf);
            }
            cJSON_Delete(j);
        }
        free(s);
        break;
    }
    }
    return 0;
}
