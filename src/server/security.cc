#include "server/security.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "common/secret_file.h"

namespace segstore::server {

namespace ssl = boost::asio::ssl;

namespace {

// The reasons OpenSSL queued, oldest first; clears the queue.
std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("unknown OpenSSL error") : out;
}

// OK when `path` can be opened for reading; else why not, naming the setting.
Status Readable(const std::string& path, std::string_view setting) {
  std::ifstream in(path, std::ios::binary);
  if (in) return Status::OK();
  const int err = errno;
  const std::string why = std::string(setting) + " " + path + ": " + std::strerror(err);
  return err == ENOENT ? Status::NotFound(why) : Status::IOError(why);
}

std::array<unsigned char, 32> Sha256(std::string_view data) {
  std::array<unsigned char, 32> md{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr);
  return md;
}

Status LoadTls(const TlsOptions& o, std::unique_ptr<ssl::context>* out, int64_t* not_after) {
  if (o.key_file.empty()) return Status::InvalidArgument("tls.key_file is not set");
  // Readable files first, for a plain "No such file" rather than OpenSSL's.
  for (auto [setting, path] : {std::pair{"tls.cert_file", &o.cert_file},
                               std::pair{"tls.key_file", &o.key_file},
                               std::pair{"tls.client_ca_file", &o.client_ca_file}}) {
    if (!path->empty()) SEGSTORE_RETURN_IF_ERROR(Readable(*path, setting));
  }
  ERR_clear_error();
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  const int min = o.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION;
  SSL_CTX_set_min_proto_version(native, min);
  // No compression (CRIME) and no renegotiation (a client-driven CPU sink).
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                  SSL_OP_CIPHER_SERVER_PREFERENCE);
  // An idle connection gives its 34 KiB of record buffers back.
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_use_certificate_chain_file(native, o.cert_file.c_str()) != 1) {
    return Status::InvalidArgument("tls.cert_file " + o.cert_file +
                                   ": not a usable PEM certificate chain: " + OpenSslErrors());
  }
  if (SSL_CTX_use_PrivateKey_file(native, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return Status::InvalidArgument("tls.key_file " + o.key_file +
                                     " is not the key of the certificate in " + o.cert_file);
    }
    return Status::InvalidArgument("tls.key_file " + o.key_file +
                                   ": not a usable PEM private key (it must not be encrypted): " +
                                   OpenSslErrors());
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return Status::InvalidArgument("tls.key_file " + o.key_file +
                                   " is not the key of the certificate in " + o.cert_file + ": " +
                                   OpenSslErrors());
  }
  if (!o.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(native, o.client_ca_file.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("tls.client_ca_file " + o.client_ca_file +
                                     ": not usable PEM CA certificates: " + OpenSslErrors());
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.client_ca_file.c_str());
    if (names == nullptr) {
      return Status::InvalidArgument("tls.client_ca_file " + o.client_ca_file +
                                     ": no CA certificate in it: " + OpenSslErrors());
    }
    SSL_CTX_set_client_CA_list(native, names);  // takes ownership
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    // Sessions resumed under client verification need an ID context.
    static const unsigned char kContext[] = "segstored";
    SSL_CTX_set_session_id_context(native, kContext, sizeof kContext - 1);
  }

  X509* cert = SSL_CTX_get0_certificate(native);
  std::tm tm{};
  if (cert != nullptr && ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) == 1) {
    *not_after = static_cast<int64_t>(timegm(&tm));
    const int64_t left = *not_after - static_cast<int64_t>(std::time(nullptr));
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (left <= 0) {
      spdlog::error("tls.cert_file {}: the certificate expired at {}; clients that verify it "
                    "will refuse the connection",
                    o.cert_file, when);
    } else if (left < 14 * 86400) {
      spdlog::warn("tls.cert_file {}: the certificate expires at {}, in {:.1f} days",
                   o.cert_file, when, static_cast<double>(left) / 86400);
    }
  }
  *out = std::move(ctx);
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<const Credentials>> Credentials::Load(const ServerOptions& options) {
  std::shared_ptr<Credentials> c(new Credentials());
  if (options.tls.enabled()) {
    SEGSTORE_RETURN_IF_ERROR(LoadTls(options.tls, &c->tls_, &c->not_after_));
    c->client_certificates_ = !options.tls.client_ca_file.empty();
    c->min_version_ = options.tls.min_version;
  }
  if (!options.auth_secret_file.empty()) {
    bool loose = false;
    auto secrets = ReadSecretFile(options.auth_secret_file, &loose);
    if (!secrets.ok()) return secrets.status();
    if (loose) {
      spdlog::warn("auth secret file {} can be read by its group or others; chmod 600 it",
                   options.auth_secret_file);
    }
    for (const std::string& s : *secrets) c->secrets_.push_back(Sha256(s));
  }
  return std::shared_ptr<const Credentials>(std::move(c));
}

bool Credentials::Authenticate(std::string_view secret) const {
  const auto digest = Sha256(secret);
  bool match = false;
  for (const auto& s : secrets_) {
    match |= CRYPTO_memcmp(digest.data(), s.data(), digest.size()) == 0;
  }
  return match;
}

std::string Credentials::Describe() const {
  std::string out = tls_ ? "TLS " + min_version_ + "+" : std::string("plain TCP");
  if (client_certificates_) out += ", client certificates required";
  if (auth_required()) out += ", shared secret required";
  return out;
}

}  // namespace segstore::server
