#include "tests/integration/service/tls_test_pki.h"

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/service/process.h"

namespace leapcache::testing {
namespace {

absl::Status Openssl(std::vector<std::string> args) {
  args.insert(args.begin(), "openssl");
  // RunProgram spawns by path; openssl is found through the shell's PATH lookup.
  std::string command;
  for (const std::string& a : args) absl::StrAppend(&command, "'", a, "' ");
  absl::StatusOr<RunResult> r =
      RunProgram({"/bin/sh", "-c", absl::StrCat(command, "2>/dev/null")}, {}, absl::Seconds(60));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("`", command, "` exited with ", r->exit_code));
  }
  return absl::OkStatus();
}

// A P-256 key and a certificate for `subject` signed by (ca_cert, ca_key); self-signed CA when
// ca_cert is empty. `san`: subjectAltName extension value, or empty.
absl::Status MakeCert(const std::string& dir, const std::string& name, const std::string& subject,
                      const std::string& ca_cert, const std::string& ca_key,
                      const std::string& san) {
  const std::string key = absl::StrCat(dir, "/", name, ".key");
  const std::string cert = absl::StrCat(dir, "/", name, ".pem");
  if (ca_cert.empty()) {
    return Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", subject});
  }
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  const std::string ext = absl::StrCat(dir, "/", name, ".ext");
  if (absl::Status st = Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                 "-nodes", "-keyout", key, "-out", csr, "-subj", subject});
      !st.ok()) {
    return st;
  }
  std::ofstream(ext) << (san.empty() ? "basicConstraints=CA:FALSE\n"
                                     : absl::StrCat("basicConstraints=CA:FALSE\nsubjectAltName=",
                                                    san, "\n"));
  return Openssl({"x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
                  "-CAcreateserial", "-out", cert, "-days", "1", "-extfile", ext});
}

}  // namespace

absl::StatusOr<TestPki> MakeTestPki(const std::string& name) {
  TestPki p;
  p.dir = MakeTempDir(name);
  auto path = [&](const std::string& file) { return absl::StrCat(p.dir, "/", file); };
  p.ca_cert = path("ca.pem");
  p.server_cert = path("server.pem");
  p.server_key = path("server.key");
  p.client_cert = path("client.pem");
  p.client_key = path("client.key");
  p.rogue_ca_cert = path("rogue-ca.pem");
  p.rogue_client_cert = path("rogue-client.pem");
  p.rogue_client_key = path("rogue-client.key");
  struct Step {
    const char* name;
    const char* subject;
    std::string ca_cert, ca_key;
    const char* san;
  };
  const std::vector<Step> steps = {
      {"ca", "/CN=leapcache test CA", "", "", ""},
      {"server", "/CN=localhost", p.ca_cert, path("ca.key"), "IP:127.0.0.1,DNS:localhost"},
      {"client", "/CN=leapcache test client", p.ca_cert, path("ca.key"), ""},
      {"rogue-ca", "/CN=untrusted CA", "", "", ""},
      {"rogue-client", "/CN=untrusted client", p.rogue_ca_cert, path("rogue-ca.key"), ""},
  };
  for (const Step& s : steps) {
    if (absl::Status st = MakeCert(p.dir, s.name, s.subject, s.ca_cert, s.ca_key, s.san);
        !st.ok()) {
      return st;
    }
  }
  return p;
}

}  // namespace leapcache::testing
