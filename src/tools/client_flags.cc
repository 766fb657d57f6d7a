#include "tools/client_flags.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/secret_file.h"
#include "segstore/result.h"

namespace segstore::tools {
namespace {

constexpr const char* kGroup = "Connection security";

// OK when `path` (given by `flag`) can be read; else NotFound or IOError
// naming both, before any connection is tried.
Status CheckReadable(const char* flag, const std::string& path) {
  if (path.empty()) return Status::InvalidArgument(std::string(flag) + ": empty file name");
  if (::access(path.c_str(), R_OK) == 0) return Status::OK();
  const int err = errno;
  const std::string why = std::string(flag) + " " + path + ": " + std::strerror(err);
  return err == ENOENT ? Status::NotFound(why) : Status::IOError(why);
}

}  // namespace

void AddClientFlags(CLI::App* app, ClientFlags* flags) {
  app->add_flag("--tls", flags->tls,
                "connect with TLS, verifying the server's certificate against the system's "
                "trust store (or --tls-ca); implied by every --tls-* flag")
      ->group(kGroup);
  app->add_option("--tls-ca", flags->tls_ca, "PEM file of the CAs to trust instead of the system's")
      ->type_name("FILE")
      ->group(kGroup);
  app->add_option("--tls-cert", flags->tls_cert,
                  "PEM client certificate, for a server that requires one (mutual TLS; with "
                  "--tls-key)")
      ->type_name("FILE")
      ->group(kGroup);
  app->add_option("--tls-key", flags->tls_key, "PEM private key of --tls-cert (unencrypted)")
      ->type_name("FILE")
      ->group(kGroup);
  app->add_option("--tls-server-name", flags->tls_server_name,
                  "the name the server's certificate must carry (and SNI), instead of the host")
      ->type_name("NAME")
      ->group(kGroup);
  app->add_flag("--tls-insecure", flags->tls_insecure,
                "for testing only: accept any server certificate (encrypts, but proves nothing "
                "about the server)")
      ->group(kGroup);
  app->add_option("--auth-secret-file", flags->auth_secret_file,
                  std::string("file of shared secrets, one per line (the server's format): the "
                              "first is sent in hello (default: the file $") +
                      kAuthSecretFileEnv + " names, if set)")
      ->type_name("FILE")
      ->group(kGroup);
}

Status ApplyClientFlags(const ClientFlags& flags, client::ClientOptions* options,
                        std::string* warning) {
  if (warning != nullptr) warning->clear();
  client::TlsClientOptions& tls = options->tls;
  if (flags.tls || !flags.tls_ca.empty() || !flags.tls_cert.empty() || !flags.tls_key.empty() ||
      !flags.tls_server_name.empty() || flags.tls_insecure) {
    tls.enabled = true;
  }
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return Status::InvalidArgument(flags.tls_cert.empty() ? "--tls-key needs --tls-cert"
                                                          : "--tls-cert needs --tls-key");
  }
  if (flags.tls_insecure && (!flags.tls_ca.empty() || !flags.tls_server_name.empty())) {
    return Status::InvalidArgument(
        std::string("--tls-insecure verifies nothing: it cannot be used with ") +
        (flags.tls_ca.empty() ? "--tls-server-name" : "--tls-ca"));
  }
  if (!flags.tls_ca.empty()) {
    SEGSTORE_RETURN_IF_ERROR(CheckReadable("--tls-ca", flags.tls_ca));
    tls.ca_file = flags.tls_ca;
  }
  if (!flags.tls_cert.empty()) {
    SEGSTORE_RETURN_IF_ERROR(CheckReadable("--tls-cert", flags.tls_cert));
    SEGSTORE_RETURN_IF_ERROR(CheckReadable("--tls-key", flags.tls_key));
    tls.cert_file = flags.tls_cert;
    tls.key_file = flags.tls_key;
  }
  if (!flags.tls_server_name.empty()) tls.server_name = flags.tls_server_name;
  if (flags.tls_insecure) tls.verify = false;

  std::string path = flags.auth_secret_file;
  std::string source = "--auth-secret-file";
  if (path.empty()) {
    const char* env = std::getenv(kAuthSecretFileEnv);
    if (env == nullptr || *env == '\0') return Status::OK();
    path = env;
    source = kAuthSecretFileEnv;
  }
  bool loose = false;
  Result<std::vector<std::string>> secrets = ReadSecretFile(path, &loose);
  if (!secrets.ok()) return secrets.status().WithContext(source);
  options->auth_secret = secrets->front();  // ReadSecretFile returns at least one
  if (warning == nullptr) return Status::OK();
  if (loose) {
    *warning = source + ": " + path +
               " may be read by group or others; chmod 600 it to keep the secret secret";
  }
  const std::string& host = options->host;
  if (!IsLoopbackHost(host) && (!tls.enabled || !tls.verify)) {
    if (!warning->empty()) *warning += "\n";
    *warning += "the shared secret goes to " + host +
                (tls.enabled ? " over TLS without certificate verification"
                             : " without TLS, in clear") +
                ": anyone on the path can read it";
  }
  return Status::OK();
}

std::string ClientFlagsHint(const client::ClientOptions& options, const Status& failure) {
  if (options.tls.enabled || failure.code() != Status::Code::kUnavailable ||
      failure.message().find("closed by the server") == std::string_view::npos) {
    return "";
  }
  return "the server closed the connection: if it serves TLS, add --tls (and --tls-ca FILE "
         "unless its certificate is in the system's trust store)";
}

}  // namespace segstore::tools
