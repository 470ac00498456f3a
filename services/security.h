// Transport security settings of mnemo's gRPC servers and clients: TLS,
// mutual TLS and a shared bearer token. Plain structs (no gRPC here);
// grpc_util.h turns them into credentials, security_flags.h into flags.
#ifndef MNEMO_SERVICES_SECURITY_H_
#define MNEMO_SERVICES_SECURITY_H_

#include <string>

namespace mnemo::services {

// Security of a gRPC server. Default: plaintext, no token.
struct ServerSecurity {
  // PEM certificate chain and private key: the server speaks TLS only.
  std::string cert_file, key_file;
  // Mutual TLS: clients must present a certificate signed by this CA.
  std::string client_ca_file;
  // Every call must carry "authorization: Bearer TOKEN" with the token in
  // this file (surrounding whitespace ignored), else UNAUTHENTICATED.
  // Requires TLS: a token on a plaintext connection is readable by anyone
  // on the path. The gRPC health service is exempt, for probes.
  std::string token_file;
  bool tls() const { return !cert_file.empty() || !key_file.empty(); }
};

// Security of a gRPC client. Default: plaintext, no token.
struct ClientSecurity {
  // PEM CA that signed the servers' certificates: the client speaks TLS
  // and checks the server's certificate (name = the dialled host).
  std::string ca_file;
  // Mutual TLS: this client's certificate chain and key.
  std::string cert_file, key_file;
  // The bearer token to send (requires TLS, see ServerSecurity).
  std::string token_file;
  bool tls() const { return !ca_file.empty(); }
};

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_SECURITY_H_
