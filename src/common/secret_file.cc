#include "common/secret_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace segstore {

Result<std::vector<std::string>> ReadSecretFile(const std::string& path, bool* loose) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string why = "secret file " + path + ": " + std::strerror(err);
    return err == ENOENT ? Status::NotFound(why) : Status::IOError(why);
  }
  if (loose != nullptr) {
    struct stat st {};
    *loose = ::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> secrets;
  std::string line;
  for (int number = 1; std::getline(text, line); ++number) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    std::string secret = line.substr(b, e - b + 1);
    if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
      return Status::InvalidArgument("secret file " + path + ": line " + std::to_string(number) +
                                     ": a secret must be " + std::to_string(kMinSecretBytes) +
                                     " to " + std::to_string(kMaxSecretBytes) + " bytes, not " +
                                     std::to_string(secret.size()));
    }
    secrets.push_back(std::move(secret));
  }
  if (secrets.empty()) return Status::InvalidArgument("secret file " + path + " holds no secret");
  return secrets;
}

}  // namespace segstore
