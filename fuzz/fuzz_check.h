// FUZZ_CHECK: the invariant assertion of the fuzz targets. A violated invariant prints what was
// expected and aborts, which libFuzzer reports as a crash and saves the input that caused it.
// (assert() would vanish under NDEBUG, and the fuzz build is optimised.)
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, \
                   #cond);                                                        \
      std::fprintf(stderr, "  " __VA_ARGS__);                                     \
      std::fprintf(stderr, "\n");                                                 \
      std::abort();                                                               \
    }                                                                             \
  } while (0)
