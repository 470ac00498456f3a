// The TLS and token flags every gRPC server and client command takes
// (grpc_util.h ServerSecurity / ClientSecurity).
#ifndef MNEMO_SERVICES_CLI_SECURITY_FLAGS_H_
#define MNEMO_SERVICES_CLI_SECURITY_FLAGS_H_

#include "services/cli/flags.h"
#include "services/security.h"

namespace mnemo::services {

inline void AddServerSecurityFlags(FlagSet* flags, ServerSecurity* s) {
  flags->String("tls-cert", &s->cert_file,
                "PEM certificate chain: serve gRPC over TLS only (with "
                "--tls-key)");
  flags->String("tls-key", &s->key_file, "PEM private key of --tls-cert");
  flags->String("tls-client-ca", &s->client_ca_file,
                "mutual TLS: refuse clients without a certificate signed by "
                "this PEM CA");
  flags->String("auth-token-file", &s->token_file,
                "refuse calls without this shared bearer token "
                "(UNAUTHENTICATED; needs TLS; health checks are exempt)");
}

// `what` names the servers the client talks to, for the help text;
// `prefix` goes before every flag's name (a process that is a server too
// names its client's flags apart, e.g. "memstore-": --memstore-tls-ca).
inline void AddClientSecurityFlags(FlagSet* flags, ClientSecurity* s,
                                   const std::string& what,
                                   const std::string& prefix = "") {
  flags->String(prefix + "tls-ca", &s->ca_file,
                "talk TLS to the " + what +
                    ", checking their certificates against this PEM CA");
  flags->String(prefix + "tls-cert", &s->cert_file,
                "mutual TLS: this client's PEM certificate (with --" + prefix +
                    "tls-key and --" + prefix + "tls-ca)");
  flags->String(prefix + "tls-key", &s->key_file,
                "PEM private key of --" + prefix + "tls-cert");
  flags->String(prefix + "auth-token-file", &s->token_file,
                "send this shared bearer token to the " + what + " (needs --" +
                    prefix + "tls-ca)");
}

}  // namespace mnemo::services

#endif  // MNEMO_SERVICES_CLI_SECURITY_FLAGS_H_
