// A real etcd cluster for tests (Debian's etcd-server, /usr/bin/etcd 3.4):
// one or more members on ephemeral loopback ports, each in its own data
// directory under a fresh temp directory, started (fork/execv) and stopped by
// their owner. Only PIDs this harness started are ever signalled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace segstore::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (connection refused, timeout, cut short)
  std::string body;
};

// One HTTP/1.1 request to 127.0.0.1:port (Connection: close, so the response
// ends when the server closes), over a non-blocking socket bounded by
// `timeout`. A non-empty `body` is sent as application/json.
HttpResponse HttpRequest(uint16_t port, std::string_view method, const std::string& path,
                         const std::string& body, std::chrono::milliseconds timeout);

// One etcd cluster of `members` members (1 or 3), all on 127.0.0.1 ephemeral
// ports, in a fresh temp directory removed at the end. Member i is named m<i>,
// keeps its data in <dir>/m<i> and writes its log to <dir>/m<i>.log.
class EtcdCluster {
 public:
  explicit EtcdCluster(int members = 1);
  // Stops every member still running (SIGTERM, then SIGKILL after 5 s), reaps
  // them and removes the directory.
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // Starts all members and waits (bounded) until each answers GET /health
  // with {"health":"true"}. If a member could not bind a port (taken in
  // between), starts the whole cluster again on new ports, up to 3 times.
  bool Start(std::string* why);

  // "http://127.0.0.1:PORT": the client URL of every member / of member i.
  std::vector<std::string> endpoints() const;
  std::string endpoint(int i) const;
  uint16_t client_port(int i) const;

  // SIGKILL member i and reap it: it disappears at once, sockets and all.
  void Kill(int i);
  // SIGTERM member i (after SIGCONT, if paused), SIGKILL after 5 s; reaps it.
  void Stop(int i);
  // Starts member i again, on its same ports and data dir (after Kill/Stop),
  // and waits until it is healthy (which needs a quorum of running members).
  bool Restart(int i, std::string* why);
  // SIGSTOP / SIGCONT member i.
  // Pause returns once every thread of the member stopped (false if that
  // did not happen within 10 s: stop_process.h).
  [[nodiscard]] bool Pause(int i);
  void Resume(int i);

  // Member i's PID, -1 when it is not running.
  pid_t pid(int i) const;
  int size() const { return static_cast<int>(members_.size()); }
  const std::string& dir() const { return dir_; }

 private:
  struct Member {
    uint16_t client_port = 0;
    uint16_t peer_port = 0;
    pid_t pid = -1;
    off_t log_offset = 0;  // the log's size when it was last spawned
  };

  bool Valid(int i) const { return i >= 0 && i < size(); }
  bool PickPorts();
  bool Spawn(int i);
  // Waits until every member in `which` is healthy; false (with `why`) if
  // one exits or the deadline passes. `port_clash`: a member's log since its
  // spawn says a port was taken.
  bool WaitHealthy(const std::vector<int>& which, std::string* why, bool* port_clash);
  // One member after the other: SIGTERM (after SIGCONT), SIGKILL if still
  // running after 5 s, and reap it.
  void End(const std::vector<int>& which);
  std::string LogPath(int i) const;
  std::string LogSinceSpawn(int i) const;

  std::vector<Member> members_;
  std::string dir_;
  std::string token_;
};

}  // namespace segstore::testing
