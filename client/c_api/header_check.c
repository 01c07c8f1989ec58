/* Compiled as C (C99, pedantic, warnings as errors): leapcache_c.h must stay a plain C header,
 * with no C++ construct reaching its callers. */
#include "client/c_api/leapcache_c.h"

/* A C translation unit must not be empty under -pedantic. */
__attribute__((visibility("hidden"))) uint32_t leapcache_c_header_is_c(void);
uint32_t leapcache_c_header_is_c(void) { return (uint32_t)sizeof(leapcache_stats); }
