// The connection-security flags every tool that talks to segstored shares
// (segctl, segbench): TLS (--tls, --tls-ca, --tls-cert, --tls-key,
// --tls-server-name, --tls-insecure) and the shared secret
// (--auth-secret-file, or the SEGSTORE_AUTH_SECRET_FILE environment
// variable). One definition, so every tool spells and documents them alike.
//
// Use: AddClientFlags before parsing, ApplyClientFlags after, on each
// client::ClientOptions the tool connects with. Not thread-safe; call from
// main's thread.
#pragma once

#include <string>

#include "segstore/client.h"
#include "segstore/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace segstore::tools {

// Read from the environment when --auth-secret-file is not given.
inline constexpr const char* kAuthSecretFileEnv = "SEGSTORE_AUTH_SECRET_FILE";

// The flags as parsed; AddClientFlags fills it.
struct ClientFlags {
  bool tls = false;              // --tls
  std::string tls_ca;            // --tls-ca: PEM CAs to trust instead of the system's
  std::string tls_cert;          // --tls-cert: PEM client certificate (mutual TLS)
  std::string tls_key;           // --tls-key: its private key
  std::string tls_server_name;   // --tls-server-name: the name to verify instead of the host
  bool tls_insecure = false;     // --tls-insecure: no certificate verification
  std::string auth_secret_file;  // --auth-secret-file: the first secret is sent in hello
};

// Adds the flags to `app`, in a "Connection security" group, storing into
// *flags. `flags` must outlive the parsing of `app`.
void AddClientFlags(CLI::App* app, ClientFlags* flags);

// Applies `flags` (and SEGSTORE_AUTH_SECRET_FILE when --auth-secret-file is
// not given) to options->tls and options->auth_secret. Any --tls-* flag
// implies --tls. Returns InvalidArgument for --tls-cert without --tls-key (or
// the reverse), for --tls-insecure with --tls-ca or --tls-server-name, and for
// a secret file that holds no valid secret; NotFound or IOError for a file
// that cannot be read. Each error names the flag (or the variable). On an
// error *options may be partly changed. When the secret file may be read by
// group or others, sets *warning (when given) to say so; else clears it.
[[nodiscard]] Status ApplyClientFlags(const ClientFlags& flags, client::ClientOptions* options,
                                      std::string* warning = nullptr);

// A hint to print after `failure`, a call's error on a client made with
// `options`: for a connection without TLS that the server closed (what a
// server serving TLS does to plain TCP), one saying to try --tls; else "".
std::string ClientFlagsHint(const client::ClientOptions& options, const Status& failure);

}  // namespace segstore::tools
