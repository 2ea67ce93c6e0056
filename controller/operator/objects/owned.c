/* owned.c — the controller's objects in a Pipeline's namespace (owned.h): their metadata, and
 * creating one or settling a name already taken (keep, replace, or refuse what is not ours). */
#include "controller/operator/objects/owned.h"

#include <stdio.h>
#include <string.h>

const char *sb_owned_str(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    v = b != NULL ? cJSON_GetObjectItemCaseSensitive(v, b) : v;
    return cJSON_IsString(v) && v->valuestring[0] != '\0' ? v->valuestring : NULL;
}

void sb_owned_metadata(cJSON *o, const char *name, const char *ns, const char *pipeline,
                       const char *uid)
{
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", ns);
    cJSON *labels = cJSON_AddObjectToObject(md, "labels");
    cJSON_AddStringToObject(labels, "streambatch.dev/pipeline", pipeline);
    cJSON_AddStringToObject(labels, "app.kubernetes.io/managed-by", SB_OWNED_MANAGED_BY);
    if (uid == NULL)
        return;
    cJSON *ref = cJSON_CreateObject();
    cJSON_AddStringToObject(ref, "apiVersion", "streambatch.dev/v1alpha1");
    cJSON_AddStringToObject(ref, "kind", "Pipeline");
    cJSON_AddStringToObject(ref, "name", pipeline);
    cJSON_AddStringToObject(ref, "uid", uid);
    cJSON_AddBoolToObject(ref, "controller", 1);
    cJSON_AddBoolToObject(ref, "blockOwnerDeletion", 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"), ref);
}

/* Whether the existing object is ours to keep (1), ours to replace (0), or not ours (-1). */
static int judge_existing(const cJSON *got, const cJSON *want, const char *const *fields)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(got, "metadata");
    const char *by = sb_owned_str(md, "labels", "app.kubernetes.io/managed-by");
    if (by == NULL || strcmp(by, SB_OWNED_MANAGED_BY) != 0)
        return -1;
    const cJSON *want_refs = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(want, "metadata"), "ownerReferences");
    const cJSON *want_uid =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(want_refs, 0), "uid");
    int same = want_uid == NULL;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(md, "ownerReferences"))
    {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "uid");
        if (want_uid != NULL && cJSON_IsString(u) &&
            strcmp(u->valuestring, want_uid->valuestring) == 0)
            same = 1;
    }
    for (size_t i = 0; same && fields[i] != NULL; i++)
        same = cJSON_Compare(cJSON_GetObjectItemCaseSensitive(got, fields[i]),
                             cJSON_GetObjectItemCaseSensitive(want, fields[i]), 1);
    return same;
}

/* After a 409 on create: keep, or delete and create again, or refuse. */
static int on_conflict(sb_k8s_client *c, const char *coll, const char *name, const cJSON *want,
                       const char *const *fields, sb_err *err)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", coll, name);
    long st = 0;
    sb_err e = {0};
    cJSON *got = sb_k8s_get(c, path, &st, &e);
    if (got == NULL)
        return sb_err_set(err, "%s", e.msg);
    int verdict = judge_existing(got, want, fields);
    cJSON_Delete(got);
    if (verdict == 1)
        return 0;
    if (verdict < 0)
        return sb_err_set(err, "exists and is not the controller's (no label "
                               "app.kubernetes.io/managed-by=" SB_OWNED_MANAGED_BY
                               "): rename or delete it");
    if (sb_k8s_delete(c, path, &st, &e) != 0 && st != 404)
        return sb_err_set(err, "deleting the stale one: %s", e.msg);
    cJSON *made = sb_k8s_create(c, coll, want, &st, &e);
    if (made == NULL)
        return sb_err_set(err, "creating it again: %s", e.msg);
    cJSON_Delete(made);
    return 0;
}

int sb_owned_ensure(sb_k8s_client *c, const char *coll, const cJSON *want,
                    const char *const *fields, sb_err *err)
{
    const char *name = sb_owned_str(want, "metadata", "name");
    long st = 0;
    sb_err e = {0};
    cJSON *made = sb_k8s_create(c, coll, want, &st, &e);
    if (made != NULL) {
        cJSON_Delete(made);
        return 0;
    }
    if (st == 409 && name != NULL)
        return on_conflict(c, coll, name, want, fields, err);
    return sb_err_set(err, "%s", e.msg);
}
