// The run loop of segbench: drives a Target with the reference workload
// (../shared/workload.md) over many connections from a few client threads,
// and measures it.
//
// Closed loop (rate 0): every connection keeps `depth` requests in flight and
// sends the next as one completes; latency runs from the send to the answer.
// Open loop (rate > 0): requests are due at fixed intervals whatever the
// server does; one waits in the client when every connection has `depth` in
// flight, and its latency runs from when it was due, not from when it could
// be sent, so a stall shows in the percentiles instead of thinning the
// sample (no coordinated omission).
//
// Every run has a warm-up, then a measured window (see KindFigures for what
// counts). A request that fails retires its connection for the rest of the
// run. The server's CPU time over the window comes from /proc/<pid>/stat
// when the server runs on this machine. kMixedBusy's background load runs on
// a thread of its own.
//
// All functions block the calling thread until done; they start and join
// their own client threads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/segbench/target.h"
#include "common/histogram.h"
#include "segstore/result.h"

namespace segstore::bench {

enum class Workload {
  kGet,        // one user's live segments
  kBatchGet,   // `batch` users in one request
  kUpsert,     // 1 to 10 segments into one user, trimming on the way
  kTrim,       // drop one user's expired segments
  kMixed,      // 90 % get, 9 % upsert, 1 % trim
  kMixedBusy,  // get, beside a background load (whole profiles rewritten)
  // Profile fields (issue 21):
  kGetFields,  // get of one user asking for its cap counters too (prefix "cap:")
  kIncrement,  // field_incr of one of a user's cap counters, to the end of the UTC day
  kUpsertOne,  // upsert of exactly one segment (what an increment is held against)
};
const char* WorkloadName(Workload w);

// What one request was, for per-kind figures in mixed runs.
enum class OpKind { kGet, kBatchGet, kUpsert, kTrim, kGetFields, kIncrement, kCount };
const char* OpKindName(OpKind k);

struct RunSpec {
  Workload workload = Workload::kGet;
  uint64_t users = 100000;  // the data set: users [first_user, first_user + users)
  uint64_t first_user = 0;  // every request draws its users from that range
  double zipf = 0;          // > 0: gets pick users by Zipf with this exponent
  unsigned connections = 32;
  unsigned depth = 1;    // requests in flight per connection (the most, open loop)
  unsigned threads = 1;  // client threads; connections are spread over them
  double warmup_seconds = 3;
  double seconds = 20;
  double rate = 0;      // requests a second over all connections; 0: closed loop
  unsigned batch = 20;  // users per batch get
  uint64_t seed = 42;
  // kMixedBusy: users per background Replace (whole profiles rewritten, one
  // request in flight on one extra connection, as fast as it goes).
  unsigned background_batch = 20;
};

// Throughput counts answers received inside the measured window; latency,
// errors, segments and missing count the requests sent (closed loop) or due
// (open loop) inside it, whenever they were answered, so the slowest ones are
// never dropped at the window's end.
struct KindFigures {
  uint64_t ops = 0;       // answers received in the window (successes)
  uint64_t errors = 0;    // requests of the window that failed
  uint64_t segments = 0;  // returned (reads) or removed as expired (writes)
  uint64_t missing = 0;   // users without a profile
  uint64_t profiles = 0;  // profiles merged into linked users' answers (Outcome::profiles)
  uint64_t fields = 0;    // profile fields returned (Outcome::fields)
  Histogram latency;      // nanoseconds, one sample per successful request of the window

  double segments_per_request() const {
    return latency.count() ? static_cast<double>(segments) / static_cast<double>(latency.count())
                           : 0;
  }
  double profiles_per_request() const {
    if (latency.count() == 0) return 0;
    return static_cast<double>(profiles) / static_cast<double>(latency.count());
  }
  double fields_per_request() const {
    if (latency.count() == 0) return 0;
    return static_cast<double>(fields) / static_cast<double>(latency.count());
  }
};

struct RunResult {
  RunSpec spec;
  double seconds = 0;  // the measured window, as it ran
  KindFigures all;     // every foreground request
  std::array<KindFigures, static_cast<size_t>(OpKind::kCount)> by_kind;
  std::string first_error;   // the first error seen, if any
  uint64_t backlog_max = 0;  // open loop: most requests waiting for a slot
  // kMixedBusy's background load, over the window.
  uint64_t background_users = 0;
  uint64_t background_errors = 0;
  // The server at the window's edges, and its CPU time over the window.
  ServerSample before;
  ServerSample after;
  std::optional<double> server_cpu_seconds;  // none when its process is not visible here
  double client_cpu_seconds = 0;             // this process, over the window

  double ops_per_second() const { return seconds > 0 ? static_cast<double>(all.ops) / seconds : 0; }
};

Result<RunResult> Run(Target& target, const RunSpec& spec);

// Loading the data set: every user's reference profile (1,000 segments,
// whole-hour expiries), written with Replace over `connections`. With
// `fields`, each user also gets its 25 reference fields (ReferenceFields:
// one SetFields a user after its Replace), the server's field name table
// first given every name they use (Target::RegisterFieldNames, before the
// `before` sample, so the table's records are not the load's); Unsupported
// where !target.fields_supported().
struct LoadResult {
  uint64_t users = 0;
  double seconds = 0;
  ServerSample before;
  ServerSample after;
  std::optional<double> server_cpu_seconds;
  bool fields = false;
  uint64_t field_names_registered = 0;  // name records that appeared (RegisterFieldNames)
  uint64_t field_string_bytes = 0;      // bytes of the string values set, over every user
};
Result<LoadResult> Load(Target& target, uint64_t users, unsigned connections, bool fields = false);

// Makes `share` (0..1) of every user's reference segments expire, users
// [first_user, first_user + users): upserts them with an expiry three
// seconds ahead, then waits until it has passed. Which segments is
// deterministic in the user, so two stores given the same share expire the
// same segments.
struct ExpireResult {
  uint64_t segments = 0;  // segments given the short expiry
  double seconds = 0;     // writing them and waiting them out
};
Result<ExpireResult> Expire(Target& target, uint64_t users, double share, unsigned connections,
                            uint64_t first_user = 0);

// Profile bridging: users [0, linked_users()) in consecutive groups (a
// star each: its first user the master, the others its members), each
// group's size drawn uniformly from [min_size, max_size] by a generator
// seeded with `seed`, so two runs given the same figures make the same
// groups. Groups are made while they fit in `users`; the last takes what is
// left when that is at least min_size, else those users stay out of every
// group.
struct GroupPlan {
  std::vector<uint32_t> sizes;  // each group's, in user order from user 0

  uint64_t linked_users() const;  // the sum of the sizes
  uint64_t links() const { return linked_users() - sizes.size(); }
  // Profiles merged into the answer to a get by a user drawn uniformly
  // among the linked ones: a user is in a group of k with a chance
  // proportional to k (sum of k^2 / sum of k).
  double profiles_per_get() const;
};
// min_size >= 2 and max_size >= min_size (else no groups).
GroupPlan PlanGroups(uint64_t users, unsigned min_size, unsigned max_size, uint64_t seed = 42);

// Makes the plan's links (Connection::Link, no expiry) over `connections`,
// members of different groups side by side rather than one group's at once
// (each link rewrites its master's record).
struct LinkRunResult {
  uint64_t groups = 0;
  uint64_t linked_users = 0;
  uint64_t links = 0;
  double seconds = 0;  // making the links
  ServerSample before;
  ServerSample after;
  std::optional<double> server_cpu_seconds;
};
Result<LinkRunResult> LinkGroups(Target& target, const GroupPlan& plan, unsigned connections);

// The CPU time (user + system, seconds) of process `pid` from
// /proc/<pid>/stat, if that process is visible here and its name starts
// with one of "segstored" or "redis" (a PID from another machine or
// namespace must not be read as ours).
std::optional<double> ProcessCpuSeconds(int64_t pid);

}  // namespace segstore::bench
