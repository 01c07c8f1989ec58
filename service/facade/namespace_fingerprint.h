// The fingerprint RegisterNamespace returns: SHA-256 over a namespace's identity without its
// tenant (model shape and storage format), as 64 lowercase hex digits. Two namespaces with equal
// fingerprints hold interchangeable checkpoints; the canonical text hashed is versioned so that
// the fingerprint stays stable across releases of this API.
#pragma once

#include <string>

#include "service/core/namespace_registry.h"

namespace leapcache::server {

// "leapcache.v1 model=<layers>,<heads>,<dk>,<dv>,<kind> format=<codec>,<bits>,<p>,<r>,<smooth>",
// then " conv=<channels>,<width>,<dtype>" and " extra=<bytes>" where the model has them.
std::string CanonicalModelFormat(const core::NamespaceSpec& spec);
std::string NamespaceFingerprint(const core::NamespaceSpec& spec);

}  // namespace leapcache::server
