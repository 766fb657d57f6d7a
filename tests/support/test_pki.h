// TestPki: a throwaway public-key infrastructure for TLS tests, written as PEM
// files into one directory: a CA with a server leaf, a client leaf and an
// expired server leaf, plus an unrelated CA with its own server and client
// leaves (for "wrong CA" tests). Every key is a fresh P-256 key; nothing is
// reused between calls.
//
// The files belong to the caller, who removes the directory when done.
// MakeTestPki is thread-safe as long as concurrent calls use different
// directories.
#pragma once

#include <string>

#include "segstore/result.h"

namespace segstore::testing {

// Paths of the files MakeTestPki wrote, all inside `dir`. Certificates are PEM
// X.509; keys are unencrypted PKCS#8 PEM ("BEGIN PRIVATE KEY") with mode 0600.
// Leaves are valid from one hour ago for two days unless said otherwise.
struct TestPki {
  std::string dir;
  std::string ca_cert;        // ca.pem: self-signed, CN "segstore test CA"
  std::string server_cert;    // server.pem: CN "localhost", SAN DNS:localhost, IP:127.0.0.1,
                              // IP:::1; EKU serverAuth; signed by ca_cert
  std::string server_key;     // server.key
  std::string client_cert;    // client.pem: CN "segstore-test-client", EKU clientAuth; by ca_cert
  std::string client_key;     // client.key
  std::string other_ca_cert;  // other_ca.pem: unrelated CA, CN "segstore other test CA"
  std::string other_server_cert;    // other_server.pem: names as server_cert, by other_ca_cert
  std::string other_server_key;     // other_server.key
  std::string other_client_cert;    // other_client.pem: names as client_cert, by other_ca_cert
  std::string other_client_key;     // other_client.key
  std::string expired_server_cert;  // expired_server.pem: as server_cert, by ca_cert, but valid
                                    // only from two days ago to one day ago
  std::string expired_server_key;   // expired_server.key
};

// Creates `dir` if missing (like mkdir -p), then generates the keys and
// certificates described above and writes them there, replacing files of the
// same names. CA certificates carry basicConstraints critical CA:TRUE and
// keyUsage keyCertSign, cRLSign; leaves carry CA:FALSE, keyUsage
// digitalSignature, and subject/authority key identifiers. Serials are random
// 128-bit numbers; signatures are ECDSA with SHA-256.
// Returns Internal, with OpenSSL's error strings, if OpenSSL fails, and
// IOError, naming the path, if the directory or a file cannot be written.
[[nodiscard]] Result<TestPki> MakeTestPki(const std::string& dir);

}  // namespace segstore::testing
