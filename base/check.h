// LC_CHECK: aborts on a broken programmer contract (a REQUIRES: violated by the caller, an
// internal invariant), never on request data, which gets an absl::Status instead. Abseil 20220623
// has no public CHECK (no absl/log) and nothing here pulls in glog for one macro.
#pragma once

#include <cstdio>
#include <cstdlib>

#define LC_CHECK(cond, msg)                                                                  \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #cond, msg); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
