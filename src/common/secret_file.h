// Shared-secret files: what segstored's server.auth_secret_file names and
// what clients (segctl, segbench) read their secret from. One format for
// both, so a file written for the server works for a client.
//
// One secret per line; spaces, tabs and a trailing CR around it are dropped;
// empty lines and lines starting with '#' are skipped. A secret is 16 to
// 1024 bytes: a shared secret is the one thing between the network and every
// profile.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "segstore/result.h"

namespace segstore {

inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretBytes = 1024;

// The secrets of `path`, in file order. InvalidArgument (naming the file and
// line) for a secret out of bounds or a file with none; NotFound or IOError
// when it cannot be read. Sets *loose (when given) when the group or others
// may read the file.
Result<std::vector<std::string>> ReadSecretFile(const std::string& path, bool* loose = nullptr);

// Whether `host` (a name or an address as written) stays on this machine:
// where a secret may travel without TLS. segstored warns when it listens
// beyond it unprotected, the tools when they would send a secret beyond it.
inline bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

}  // namespace segstore
