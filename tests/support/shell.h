// Runs a shell command line for a test and returns its exit status and what
// it printed (stdout and stderr together): for tests that drive the real
// tools (redis-cli, python3) as a user would.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>

namespace segstore::testing {

inline std::pair<int, std::string> Shell(const std::string& command) {
  std::string out;
  FILE* f = ::popen((command + " 2>&1").c_str(), "r");
  if (f == nullptr) return {-1, "popen failed"};
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace segstore::testing
