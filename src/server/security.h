// Security of the client port: the TLS context and the shared secrets that
// authenticate a hello, loaded from the files ServerOptions names. Internal
// to the front end (server.cc, connection.cc); only this header and those
// two files see OpenSSL.
//
// A Credentials is immutable once loaded and shared (shared_ptr) by the
// server and every connection accepted while it was in force: a reload
// (SIGHUP) makes a new one for new connections, and each connection keeps
// the one it started with. Thread-safe: OpenSSL allows one SSL_CTX to make
// SSL objects on many threads at once.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio/ssl/context.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/result.h"
#include "server/server.h"

namespace segstore::server {

class Credentials {
 public:
  // Loads what `options` names (tls.*, auth_secret_file); with neither, a
  // Credentials for plain TCP without authentication.
  static Result<std::shared_ptr<const Credentials>> Load(const ServerOptions& options);

  // The context new TLS connections use; null for plain TCP.
  boost::asio::ssl::context* tls() const { return tls_.get(); }
  bool auth_required() const { return !secrets_.empty(); }
  // Whether `secret` is one of the secrets. Compares SHA-256 digests in
  // constant time, against every secret whatever matches.
  bool Authenticate(std::string_view secret) const;
  // The certificate's notAfter in Unix seconds; 0 without TLS.
  int64_t certificate_not_after() const { return not_after_; }
  // "TLS 1.2+, client certificates required, shared secret required".
  std::string Describe() const;

 private:
  Credentials() = default;

  std::unique_ptr<boost::asio::ssl::context> tls_;
  bool client_certificates_ = false;
  std::string min_version_;
  int64_t not_after_ = 0;
  std::vector<std::array<unsigned char, 32>> secrets_;  // SHA-256 of each
};

}  // namespace segstore::server
