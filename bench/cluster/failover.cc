// cluster_failover: what clients of a cluster see when a node dies. Writes a
// set of users whose partitions have the victim node as their first replica
// (the node a routing client asks first), then reads and writes them from
// reader and writer threads (one ClusterClient each, as a bidder would),
// sends SIGKILL to the victim's process after --before seconds, and goes on
// for --after seconds. Every request's start, end and outcome are kept; the
// report says, from the kill: how soon the first read and the first write
// of an affected partition succeeded, how many requests failed (what the
// caller got, after the client's own retries), the longest time without a
// successful write, and latency percentiles before and after.
//
//   cluster_failover --seed 127.0.0.1:7701 --victim 127.0.0.1:7703 --kill-pid 4242
//
// bench/cluster/failover.sh starts the cluster and runs it.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "segstore/cluster_client.h"
#include "segstore/routing.h"

namespace {

using Clock = std::chrono::steady_clock;
using segstore::Result;
using segstore::Status;

struct Event {
  Clock::time_point start, end;
  Status::Code code = Status::Code::kOk;  // what the caller got (NotFound counts as answered)
};

struct Options {
  std::string seed = "127.0.0.1:7700";
  std::string victim;
  int64_t kill_pid = 0;
  unsigned users = 2000;
  unsigned readers = 2;
  unsigned writers = 2;
  double before = 3;
  double after = 45;
  unsigned request_timeout_ms = 2000;
  std::string json_file;
};

std::unique_ptr<segstore::client::ClusterClient> Connect(const Options& o) {
  segstore::client::ClusterClientOptions c;
  if (Status s = segstore::client::ParseServerAddress(o.seed, &c.node); !s.ok()) {
    std::fprintf(stderr, "cluster_failover: --seed: %s\n", s.ToString().c_str());
    return nullptr;
  }
  c.node.connect_timeout = std::chrono::milliseconds(1000);
  c.node.request_timeout = std::chrono::milliseconds(o.request_timeout_ms);
  auto r = segstore::client::ClusterClient::Connect(c);
  if (!r.ok()) {
    std::fprintf(stderr, "cluster_failover: %s: %s\n", o.seed.c_str(),
                 r.status().ToString().c_str());
    return nullptr;
  }
  return std::move(r).value();
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Percentile q of the latencies (ms) of `events` started in [from, to).
double Percentile(const std::vector<Event>& events, Clock::time_point from, Clock::time_point to,
                  double q, size_t* n = nullptr) {
  std::vector<double> ms;
  for (const Event& e : events) {
    if (e.start >= from && e.start < to) ms.push_back(Ms(e.end - e.start));
  }
  if (n != nullptr) *n = ms.size();
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  return ms[std::min(ms.size() - 1, static_cast<size_t>(q * static_cast<double>(ms.size())))];
}

struct Summary {
  double first_ok_ms = -1;    // from the kill to the end of the first success started after it
  uint64_t after = 0;         // requests started after the kill
  uint64_t failed_after = 0;  // of those, the caller got an error
  std::map<std::string, uint64_t> failures;  // by status name
  double longest_gap_ms = 0;    // the longest time after the kill with no success ending
  double longest_gap_at_s = 0;  // when it began, from the kill
  double slowest_ms = 0;        // the slowest request started after the kill
  double slowest_at_s = 0;      // when it started, from the kill
  double max_ms_first_second = 0;
  nlohmann::ordered_json windows;
};

Summary Summarize(const std::vector<Event>& events, Clock::time_point kill, Clock::time_point end) {
  Summary s;
  std::vector<Clock::time_point> ok_ends;
  for (const Event& e : events) {
    if (e.start < kill) continue;
    ++s.after;
    if (Ms(e.end - e.start) > s.slowest_ms) {
      s.slowest_ms = Ms(e.end - e.start);
      s.slowest_at_s = Ms(e.start - kill) / 1e3;
    }
    if (e.code != Status::Code::kOk) {
      ++s.failed_after;
      ++s.failures[std::string(Status::CodeName(e.code))];
      continue;
    }
    ok_ends.push_back(e.end);
    const double from_kill = Ms(e.end - kill);
    if (s.first_ok_ms < 0 || from_kill < s.first_ok_ms) s.first_ok_ms = from_kill;
    if (e.start < kill + std::chrono::seconds(1)) {
      s.max_ms_first_second = std::max(s.max_ms_first_second, Ms(e.end - e.start));
    }
  }
  std::sort(ok_ends.begin(), ok_ends.end());
  Clock::time_point last = kill;
  ok_ends.push_back(end);
  for (Clock::time_point t : ok_ends) {
    if (Ms(t - last) > s.longest_gap_ms) {
      s.longest_gap_ms = Ms(t - last);
      s.longest_gap_at_s = Ms(last - kill) / 1e3;
    }
    last = t;
  }
  const auto window = [&](const char* name, Clock::time_point from, Clock::time_point to) {
    size_t n = 0;
    const double p50 = Percentile(events, from, to, 0.50, &n);
    s.windows[name] = {{"requests", n},
                       {"p50_ms", p50},
                       {"p99_ms", Percentile(events, from, to, 0.99)},
                       {"max_ms", Percentile(events, from, to, 1.0)}};
  };
  window("before", Clock::time_point::min(), kill);
  window("0-1s", kill, kill + std::chrono::seconds(1));
  window("1-10s", kill + std::chrono::seconds(1), kill + std::chrono::seconds(10));
  window("10s-end", kill + std::chrono::seconds(10), Clock::time_point::max());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cluster_failover: a node SIGKILLed under reads and writes of its partitions"};
  Options o;
  app.add_option("--seed", o.seed, "host:port of any node (not the victim)")->required();
  app.add_option("--victim", o.victim, "host:port of the node to kill, as the map names it")
      ->required();
  app.add_option("--kill-pid", o.kill_pid, "the victim's process ID")->required();
  app.add_option("--users", o.users, "users whose partitions the victim serves first");
  app.add_option("--readers", o.readers, "reader threads (one client each)");
  app.add_option("--writers", o.writers, "writer threads (one client each)");
  app.add_option("--before", o.before, "seconds of load before the kill");
  app.add_option("--after", o.after, "seconds of load after it");
  app.add_option("--request-timeout-ms", o.request_timeout_ms, "each request's timeout");
  app.add_option("--json-file", o.json_file, "also write the report here");
  CLI11_PARSE(app, argc, argv);

  auto setup = Connect(o);
  if (setup == nullptr) return 1;
  const segstore::ClusterMap& map = setup->map();
  if (!map.has_map()) {
    std::fprintf(stderr, "cluster_failover: %s gave no partition map\n", o.seed.c_str());
    return 1;
  }
  std::vector<std::string> users;
  for (uint64_t i = 0; users.size() < o.users && i < 100'000'000; ++i) {
    std::string u = "failover-" + std::to_string(i);
    const uint16_t first = map.ReplicasOf(segstore::PartitionOf(u))[0];
    if (map.nodes[first].address == o.victim) users.push_back(std::move(u));
  }
  if (users.size() < o.users) {
    std::fprintf(stderr, "cluster_failover: the map places nothing on %s first\n",
                 o.victim.c_str());
    return 1;
  }
  std::printf("map revision %llu, replication %u, %zu nodes; %zu users with %s first\n",
              static_cast<unsigned long long>(map.revision), map.replication, map.nodes.size(),
              users.size(), o.victim.c_str());
  const segstore::UnixSeconds far = 4'000'000'000u;
  for (const std::string& u : users) {
    const std::vector<segstore::SegmentUpdate> s = {{1, far, false, {}, {}},
                                                    {2, far, false, {}, {}}};
    if (Result<segstore::UpsertResult> r = setup->Upsert(u, s); !r.ok()) {
      std::fprintf(stderr, "cluster_failover: writing %s: %s\n", u.c_str(),
                   r.status().ToString().c_str());
      return 1;
    }
  }

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> retries{0};
  std::vector<std::vector<Event>> reads(o.readers), writes(o.writers);
  std::vector<std::thread> threads;
  std::atomic<unsigned> ready{0};
  std::atomic<unsigned> failed_connects{0};
  const auto run = [&](bool writer, unsigned t, std::vector<Event>* out) {
    auto c = Connect(o);
    if (c == nullptr) {
      failed_connects++;
      ++ready;
      return;
    }
    ++ready;
    uint64_t i = t * 7919;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::string& u = users[i++ % users.size()];
      Event e;
      e.start = Clock::now();
      Status s;
      if (writer) {
        const std::vector<segstore::SegmentUpdate> seg = {{3 + i % 100, far, false, {}, {}}};
        s = c->Upsert(u, seg).status();
      } else {
        Result<segstore::GetResult> g = c->Get(u);
        s = g.ok() || g.status().IsNotFound() ? Status::OK() : g.status();
      }
      e.end = Clock::now();
      e.code = s.code();
      out->push_back(e);
    }
    retries += c->retries();
  };
  for (unsigned t = 0; t < o.readers; ++t) threads.emplace_back(run, false, t, &reads[t]);
  for (unsigned t = 0; t < o.writers; ++t) threads.emplace_back(run, true, t, &writes[t]);
  while (ready.load() < threads.size()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (failed_connects.load() > 0) {
    stop = true;
    for (auto& th : threads) th.join();
    std::fprintf(stderr, "cluster_failover: %u clients could not connect\n",
                 failed_connects.load());
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.before));
  const Clock::time_point kill = Clock::now();
  if (::kill(static_cast<pid_t>(o.kill_pid), SIGKILL) != 0) {
    std::perror("cluster_failover: kill");
    stop = true;
    for (auto& th : threads) th.join();
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.after));
  stop = true;
  for (auto& th : threads) th.join();
  const Clock::time_point end = Clock::now();

  std::vector<Event> all_reads, all_writes;
  for (auto& v : reads) all_reads.insert(all_reads.end(), v.begin(), v.end());
  for (auto& v : writes) all_writes.insert(all_writes.end(), v.begin(), v.end());
  nlohmann::ordered_json report;
  report["users"] = users.size();
  report["client_retries"] = retries.load();
  for (auto [name, events] : {std::pair{"reads", &all_reads}, std::pair{"writes", &all_writes}}) {
    const Summary s = Summarize(*events, kill, end);
    report[name] = {{"first_ok_after_kill_ms", s.first_ok_ms},
                    {"requests_after_kill", s.after},
                    {"failed_after_kill", s.failed_after},
                    {"failures", s.failures},
                    {"longest_gap_without_success_ms", s.longest_gap_ms},
                    {"longest_gap_began_s", s.longest_gap_at_s},
                    {"slowest_ms", s.slowest_ms},
                    {"slowest_started_s", s.slowest_at_s},
                    {"max_latency_started_in_first_second_ms", s.max_ms_first_second},
                    {"latency", s.windows}};
    std::printf(
        "%s: first success %.1f ms after the kill; %llu after it, %llu failed; longest gap "
        "without a success %.1f ms (from %.1f s); slowest started in the first second %.1f ms; "
        "slowest of all %.1f ms (started at %.1f s)\n",
        name, s.first_ok_ms, static_cast<unsigned long long>(s.after),
        static_cast<unsigned long long>(s.failed_after), s.longest_gap_ms, s.longest_gap_at_s,
        s.max_ms_first_second, s.slowest_ms, s.slowest_at_s);
    for (const auto& [window, w] : s.windows.items()) {
      std::printf("  %-8s %7llu requests  p50 %7.2f ms  p99 %7.2f ms  max %8.2f ms\n",
                  window.c_str(), static_cast<unsigned long long>(w["requests"].get<uint64_t>()),
                  w["p50_ms"].get<double>(), w["p99_ms"].get<double>(), w["max_ms"].get<double>());
    }
    for (const auto& [status, n] : s.failures) {
      std::printf("  failed: %s x %llu\n", status.c_str(), static_cast<unsigned long long>(n));
    }
  }
  std::printf("client retries: %llu\n", static_cast<unsigned long long>(retries.load()));
  if (!o.json_file.empty()) std::ofstream(o.json_file) << report.dump(2) << "\n";
  return 0;
}
