/* abi2.c — a test plugin built for a future ABI version: the worker must refuse it. */
#include "streambatch_plugin.h"

static const sb_plugin_v1 table = {
    STREAMBATCH_PLUGIN_ABI_VERSION + 1, "abi2", NULL, NULL, NULL, NULL};

const sb_plugin_v1 *streambatch_plugin_v1(void)
{
    return &table;
}
