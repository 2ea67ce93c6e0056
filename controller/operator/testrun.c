/* testrun.c — `streambatch-controller --test-pipeline FILE` (see testrun.h): creates the Pipeline
 * FILE describes, follows its phase and progress until it ends, and deletes it when it
 * Succeeded. Owns only the Pipeline it created. */

#include "controller/operator/testrun.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"
#include "core/clock.h"
#include "k8s/client.h"
#include "k8s/config.h"

#define PIPELINES "/apis/streambatch.dev/v1alpha1/namespaces/%s/pipelines"

/* The one Pipeline of the file, as a new cJSON tree (the caller's). */
static cJSON *read_manifest(const char *path, sb_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return sb_err_set(err, "%s: cannot open: %s", path, strerror(errno)), NULL;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    int big = !feof(f);
    fclose(f);
    if (big)
        return sb_err_set(err, "%s: larger than %zu bytes", path, sizeof buf), NULL;
    sb_doc *doc = sb_doc_parse_yaml(buf, n, NULL);
    if (doc == NULL)
        return sb_err_set(err, "%s: out of memory", path), NULL;
    int line, col;
    const char *perr = sb_doc_error(doc, &line, &col);
    cJSON *obj = NULL;
    if (perr != NULL) {
        sb_err_set(err, "%s:%d:%d: %s", path, line, col, perr);
    } else if (sb_doc_count(doc) != 1 || sb_doc_root(doc, 0) == NULL) {
        sb_err_set(err, "%s: want exactly one Pipeline, found %zu documents", path,
                   sb_doc_count(doc));
    } else {
        char *json = sb_node_to_json(sb_doc_root(doc, 0));
        obj = json ? cJSON_Parse(json) : NULL;
        if (obj != NULL)
            sb_doc_cjson_keep_ints(obj, json);
        free(json);
        if (obj == NULL)
            sb_err_set(err, "%s: out of memory", path);
    }
    sb_doc_free(doc);
    if (obj == NULL)
        return NULL;
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(obj, "kind"));
    const char *api = cJSON_GetStringValue(cJSON_GetObjectItem(obj, "apiVersion"));
    if (kind == NULL || strcmp(kind, "Pipeline") != 0 || api == NULL ||
        strcmp(api, "streambatch.dev/v1alpha1") != 0) {
        sb_err_set(err, "%s: want apiVersion streambatch.dev/v1alpha1, kind Pipeline (got %s %s)",
                   path, api ? api : "no apiVersion", kind ? kind : "no kind");
        cJSON_Delete(obj);
        return NULL;
    }
    const char *name =
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(obj, "metadata"), "name"));
    if (name == NULL || name[0] == '\0') {
        sb_err_set(err, "%s: metadata.name is missing", path);
        cJSON_Delete(obj);
        return NULL;
    }
    return obj;
}

/* DELETE path, then wait (at most wait_ms) until a GET answers 404. 0, or -1 with err set. */
static int delete_and_wait(sb_k8s_client *c, const char *path, long wait_ms, sb_err *err)
{
    long status = 0;
    sb_err derr = {0};
    if (sb_k8s_delete(c, path, &status, &derr) != 0 && status != 404)
        return sb_err_set(err, "%s", derr.msg);
    for (long end = (long)sb_clock_mono_ms() + wait_ms;;) {
        cJSON *o = sb_k8s_get(c, path, &status, &derr);
        cJSON_Delete(o);
        if (status == 404)
            return 0;
        if ((long)sb_clock_mono_ms() >= end)
            return sb_err_set(err, "%s: still there %ld ms after the DELETE", path, wait_ms);
        sb_clock_sleep_ms(500);
    }
}

static const char *status_str(const cJSON *obj, const char *field)
{
    return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(obj, "status"), field));
}

static int follow(sb_k8s_client *c, const sb_testrun_opts *o, const char *path, const char *name,
                  sb_err *err)
{
    long timeout = o->timeout_ms > 0 ? o->timeout_ms : 300000;
    long poll = o->poll_ms > 0 ? o->poll_ms : 1000;
    long t0 = (long)sb_clock_mono_ms();
    char last[256] = "";
    for (;;) {
        long status = 0;
        sb_err gerr = {0};
        cJSON *p = sb_k8s_get(c, path, &status, &gerr);
        int read = p != NULL;
        if (p == NULL && status == 404)
            return sb_err_set(err, "Pipeline %s was deleted before it ended", name);
        if (p != NULL) {
            const char *phase = status_str(p, "phase");
            const char *progress = status_str(p, "progress");
            char line[256];
            snprintf(line, sizeof line, "%s %s", phase ? phase : "Pending",
                     progress ? progress : "");
            if (o->out != NULL && strcmp(line, last) != 0) {
                fprintf(o->out, "%s: %s (%.1f s)\n", name, line,
                        (double)((long)sb_clock_mono_ms() - t0) / 1000);
                fflush(o->out);
            }
            snprintf(last, sizeof last, "%s", line);
            int done = phase != NULL && strcmp(phase, "Succeeded") == 0;
            int failed = phase != NULL && strcmp(phase, "Failed") == 0;
            if (failed) {
                const char *msg = status_str(p, "message");
                sb_err_set(err, "Pipeline %s Failed: %s", name, msg ? msg : "(no message)");
            }
            cJSON_Delete(p);
            if (done)
                return 0;
            if (failed)
                return 1;
        }
        if ((long)sb_clock_mono_ms() - t0 >= timeout)
            return sb_err_set(err, "Pipeline %s did not end within %.0f s (last: %s%s%s)", name,
                              (double)timeout / 1000, last[0] ? last : "no status",
                              read ? "" : "; ", read ? "" : gerr.msg),
                   1;
        if (o->stop != NULL && *o->stop)
            return sb_err_set(err, "Pipeline %s: stopped while %s", name, last), 1;
        sb_clock_sleep_ms((uint64_t)poll);
    }
}

int sb_testrun_run(const sb_testrun_opts *o, sb_err *err)
{
    cJSON *obj = read_manifest(o->path, err);
    if (obj == NULL)
        return -1;
    sb_k8s_config *cfg = o->kubeconfig != NULL || o->context != NULL
                             ? sb_k8s_config_load_kubeconfig(o->kubeconfig, o->context, err)
                             : sb_k8s_config_load_default(err);
    if (cfg == NULL) {
        cJSON_Delete(obj);
        return sb_err_wrap(err, "--test-pipeline: no cluster configuration");
    }
    sb_k8s_client *c = sb_k8s_client_new(cfg, err);
    if (c == NULL) {
        sb_k8s_config_free(cfg);
        cJSON_Delete(obj);
        return -1;
    }
    cJSON *meta = cJSON_GetObjectItem(obj, "metadata");
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(meta, "name"));
    const char *ns = cJSON_GetStringValue(cJSON_GetObjectItem(meta, "namespace"));
    if (ns == NULL || ns[0] == '\0')
        ns = sb_k8s_config_namespace(cfg) ? sb_k8s_config_namespace(cfg) : "default";
    char coll[512], path[768];
    snprintf(coll, sizeof coll, PIPELINES, ns);
    snprintf(path, sizeof path, "%s/%s", coll, name);
    int rc = -1;
    long status = 0;
    /* a Pipeline of an earlier test (left because it failed) goes first */
    if (delete_and_wait(c, path, 60000, err) != 0) {
        sb_err_wrap(err, "removing the Pipeline of an earlier test");
        goto out;
    }
    cJSON *made = sb_k8s_create(c, coll, obj, &status, err);
    if (made == NULL) {
        sb_err_wrap(err, "creating Pipeline %s/%s", ns, name);
        goto out;
    }
    cJSON_Delete(made);
    if (o->out != NULL)
        fprintf(o->out, "created Pipeline %s/%s\n", ns, name);
    rc = follow(c, o, path, name, err);
    if (rc == 0) {
        if (delete_and_wait(c, path, 60000, err) != 0) {
            sb_err_wrap(err, "Pipeline %s Succeeded, but deleting it failed", name);
            rc = -1;
        } else if (o->out != NULL) {
            fprintf(o->out, "Pipeline %s/%s Succeeded and was deleted\n", ns, name);
        }
    } else if (rc > 0) {
        char why[SB_ERR_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        sb_err_set(err, "%s (left for inspection: kubectl -n %s describe pipeline %s)", why, ns,
                   name);
    }
out:
    sb_k8s_client_free(c);
    sb_k8s_config_free(cfg);
    cJSON_Delete(obj);
    return rc;
}
