// Test certificates made by the openssl command for each run (no key is
// kept in the repository).
#ifndef MNEMO_TESTS_UNIT_SERVICES_CERTIFICATES_H_
#define MNEMO_TESTS_UNIT_SERVICES_CERTIFICATES_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace mnemo::test_support {

// A CA, a server certificate for 127.0.0.1/localhost and a client
// certificate signed by it, and a second CA that signed neither.
class Certificates {
 public:
  explicit Certificates(const std::filesystem::path& dir) : dir_(dir) {
    std::filesystem::create_directories(dir);
    ok_ = MakeCa("ca") && MakeCa("other-ca") &&
          MakeSigned("server", "subjectAltName=IP:127.0.0.1,DNS:localhost") &&
          MakeSigned("client", "extendedKeyUsage=clientAuth");
    std::ofstream(dir / "token") << "s3cret-token\n";
    std::ofstream(dir / "wrong-token") << "not-the-token\n";
  }
  bool ok() const { return ok_; }
  std::string operator()(const std::string& name) const {
    return (dir_ / name).string();
  }

 private:
  bool Run(const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  bool MakeCa(const std::string& name) {
    return Run(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2",
                            " -subj /CN=mnemo-test-", name, " -keyout ",
                            (*this)(name + ".key"), " -out ",
                            (*this)(name + ".pem")));
  }
  bool MakeSigned(const std::string& name, const std::string& ext) {
    std::ofstream((dir_ / (name + ".ext"))) << ext << "\n";
    return Run(absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj /CN=",
                            name, " -keyout ", (*this)(name + ".key"), " -out ",
                            (*this)(name + ".csr"))) &&
           Run(absl::StrCat(
               "openssl x509 -req -days 2 -in ", (*this)(name + ".csr"),
               " -CA ", (*this)("ca.pem"), " -CAkey ", (*this)("ca.key"),
               " -CAcreateserial -extfile ", (*this)(name + ".ext"), " -out ",
               (*this)(name + ".pem")));
  }

  std::filesystem::path dir_;
  bool ok_ = false;
};

}  // namespace mnemo::test_support

#endif  // MNEMO_TESTS_UNIT_SERVICES_CERTIFICATES_H_
