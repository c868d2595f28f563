/* A shared library that is not a flashbench plugin: it exports no flashbench_plugin(). flashbench
 * must refuse it at load in one line (exit 2). */
int flashbench_plugin_misspelt(void);
int flashbench_plugin_misspelt(void) { return 1; }
