/* A plugin built against an ABI version flashbench does not know: refused at load in one line
 * (exit 2), before any of its structures is read past the version. */
#include <flashbench/plugin.h>

static const flashbench_plugin_info info = {FLASHBENCH_PLUGIN_ABI_VERSION + 1, "from-the-future", 0, NULL};

const flashbench_plugin_info* flashbench_plugin(void) { return &info; }
