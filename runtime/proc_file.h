/* Internal: one figure of a Linux /proc file of "Key: value kB" lines (/proc/self/status,
 * /proc/meminfo), for the plan's probes and the memory checks of tests and benchmarks.
 *
 * Explained in docs/plan.md, "Memory: from the code that allocates". */
#ifndef ZOE_RUNTIME_PROC_FILE_H
#define ZOE_RUNTIME_PROC_FILE_H

/* The value of key ("VmRSS", "VmHWM", "MemAvailable") in file, in KiB; -1 when the file cannot
 * be read or has no such line. */
double zoe_proc_kib(const char *file, const char *key);

#endif
