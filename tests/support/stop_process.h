// StopProcess: SIGSTOP to a process, returning only once every one of its
// threads has stopped. kill() merely queues the signal: until one of the
// target's threads runs and starts the group stop, the others go on, and on a
// busy machine a request sent after kill() can still be answered. A test that
// means "it no longer answers" needs the stop to have happened.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <string>

#include "support/wait_for.h"

namespace segstore::testing {

// The state letter of /proc/<pid>/task/<tid>/stat (after the command's ")").
inline char ThreadState(pid_t pid, const std::string& tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + tid + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '?';
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

// True once every thread of `pid` is stopped ('T') or gone; false if some
// thread is still not stopped after 10 s.
inline bool StopProcess(pid_t pid) {
  if (pid <= 0 || ::kill(pid, SIGSTOP) != 0) return false;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  return WaitFor(
      [&] {
        DIR* dir = ::opendir(tasks.c_str());
        if (dir == nullptr) return true;  // exited
        bool all = true;
        while (const dirent* e = ::readdir(dir)) {
          if (e->d_name[0] == '.') continue;
          const char s = ThreadState(pid, e->d_name);
          if (s != 'T' && s != 't' && s != '?' && s != 'Z' && s != 'X') all = false;
        }
        ::closedir(dir);
        return all;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(1));
}

}  // namespace segstore::testing
