// A throw-away PKI for the TLS and authentication tests, made at test time with the openssl
// command-line tool (no private key is ever committed): a CA, a server certificate for
// 127.0.0.1 / localhost signed by it, a client certificate signed by it, and a second, untrusted
// CA with a client certificate of its own. Keys are P-256, valid for one day.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace leapcache::testing {

struct TestPki {
  std::string dir;
  std::string ca_cert;          // trusted CA
  std::string server_cert;      // SAN IP:127.0.0.1, DNS:localhost; signed by ca_cert
  std::string server_key;
  std::string client_cert;      // signed by ca_cert
  std::string client_key;
  std::string rogue_ca_cert;    // a CA nobody trusts
  std::string rogue_client_cert;  // signed by rogue_ca_cert
  std::string rogue_client_key;
};

// Creates the files in a fresh directory named after `name`. INTERNAL with openssl's exit
// status if a step fails.
absl::StatusOr<TestPki> MakeTestPki(const std::string& name);

}  // namespace leapcache::testing
