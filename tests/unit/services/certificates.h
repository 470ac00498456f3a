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
  // A server certificate for 127.0.0.1 signed by the CA, valid from `start`
  // to `end` (YYYYMMDDHHMMSSZ): an expired or a not yet valid one. Its key
  // is NAME.key.
  bool MakeDated(const std::string& name, const std::string& start,
                 const std::string& end) {
    const std::filesystem::path db = dir_ / (name + "-db");
    std::filesystem::create_directories(db);
    std::ofstream(db / "index");
    std::ofstream(db / "serial") << "1000\n";
    std::ofstream(dir_ / (name + ".cnf"))
        << "[ca]\ndefault_ca = d\n[d]\ndatabase = " << (db / "index").string()
        << "\nnew_certs_dir = " << db.string()
        << "\nserial = " << (db / "serial").string()
        << "\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n";
    std::ofstream(dir_ / (name + ".ext")) << "subjectAltName=IP:127.0.0.1\n";
    return Run(absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj /CN=",
                            name, " -keyout ", (*this)(name + ".key"), " -out ",
                            (*this)(name + ".csr"))) &&
           Run(absl::StrCat(
               "openssl ca -batch -notext -config ", (*this)(name + ".cnf"),
               " -cert ", (*this)("ca.pem"), " -keyfile ", (*this)("ca.key"),
               " -in ", (*this)(name + ".csr"), " -startdate ", start,
               " -enddate ", end, " -extfile ", (*this)(name + ".ext"),
               " -out ", (*this)(name + ".pem")));
  }
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
