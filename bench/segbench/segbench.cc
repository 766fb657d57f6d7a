// segbench: the reference workload (../shared/workload.md) against segstore,
// and against Redis beside it, measured the way the field measures.
//
//   segbench --segstore 127.0.0.1:7700 --users 100000 load get get-zipf
//   segbench --segstore 127.0.0.1:7700 --redis 127.0.0.1:6379 all
//   segbench --segstore 127.0.0.1:7700 --resp 127.0.0.1:6380 load get batch-get
//   segbench --segstore 127.0.0.1:7700 --rate 20000 get      (open loop)
//   segbench --segstore 127.0.0.1:7700 --json limits get
//   segbench --segstore 127.0.0.1:7700 --connections 16 load link get get-linked get-50
//            get-linked-50                                   (profile bridging, issue 20)
//   segbench --segstore 127.0.0.1:7700 --fields load get get-fields incr upsert-1
//                                                            (profile fields, issue 21)
//
// Workloads run in the order given; with both --segstore and --redis each
// runs on segstore, then on Redis, interleaved, and the report prints both
// rows and their ratio. --resp names segstored's RESP port (proto/RESP.md;
// `--resp-listen`): the same workloads through SEG.* commands, as the
// subject "segstore resp", run after segstore and compared with it, so the
// RESP front end's cost is a figure. When it is the same segstored as
// --segstore (same process and data file), `load` loads it once, through
// the binary protocol. The workloads:
//   load        every user's reference profile (1,000 segments, whole-hour
//               expiries); memory per user is the server's growth over it
//   get         one random user's live segments (Redis: HGETALL, and a Lua
//               script that keeps the live ones)
//   get-zipf    the same, users drawn by Zipf (--zipf, 0.99)
//   batch-get   --batch users (20) in one request
//   get-70      open loop at 70 % of the get rate just measured (or --rate)
//   get-80      the same at 80 %
//   upsert      1 to 10 segments into one random user, expiring 1 to 720
//               hours ahead, trimming expired ones on the way
//   mixed       90 % get, 9 % upsert, 1 % trim
//   trim        first makes --trim-expire (10 %) of every user's segments
//               expire, then drops a random user's expired segments
//   mixed-busy  first makes --busy-expire (50 %) expire, then gets beside a
//               background load rewriting whole profiles, with segstore's
//               sweeper and defragmentation running (the p99 bidders live with)
//   limits      the device's 4 KiB random-read rate at QD32 and a ping-pong
//               round trip (see limits.h)
//   all         limits load get get-zipf batch-get get-70 get-80 upsert mixed trim
//               mixed-busy
// Profile bridging (proto/PROTOCOL.md, "Linked profiles"), never in `all`:
//   link        links the first --linked-share (0.5) of the users into
//               groups of consecutive users, the first of each its master,
//               each group's size uniform in [--group-min, --group-max] (2,
//               10) or --group-size K; reports links a second, the groups,
//               and the server's DRAM per link as its index counts it
//               (storage.index_reference_bytes / storage.index_references).
//               segstore's binary protocol only: skipped, with a note, on
//               Redis and on --resp. From then on every other workload
//               draws its users from those left unlinked (the rest).
//   get-linked  get by a user drawn uniformly among the linked ones (master
//               or member): the group's merged view (segs/op: its size)
//   get-50      get (unlinked users) open loop at 50 % of the get rate
//               just measured (or --rate)
//   get-linked-50  get-linked, open loop at 50 % of the same get rate; with
//               get-50 the report gives their p99s' ratio (the goal: 2x)
// Profile fields (proto/PROTOCOL.md, "Profile fields"), never in `all`:
//   --fields    load also gives each user the workload's 25 fields
//               (workload.md, "Profile fields": 20 cap:<campaign> counters
//               expiring at the end of the UTC day, last_seen, country,
//               score, device, consent), one field_set a user after its
//               segments, the server's field name table given the 5,005
//               names first; per user, the report gives the records' bytes
//               on the device (storage.live_bytes' growth over the load) and
//               the string values' bytes
//   get-fields  get of one user asking also for its counters (field_prefix
//               "cap:", what a frequency-capping bidder asks)
//   incr        field_incr of one of a random user's 20 counters, no cap,
//               TTL to the end of the UTC day in a fixed window
//   upsert-1    upsert of exactly one segment into a random user, expiring 1
//               to 720 hours ahead (upsert sends 1 to 10): with incr, the
//               report gives their server CPU per request side by side
// The fields are segstore's binary protocol's to a single server: --fields
// loads the segments alone, and get-fields and incr are skipped with a
// note, on Redis, --resp and a cluster; upsert-1 runs everywhere.
//
// --segstore may name any node of a cluster: segbench then routes each
// request to a node holding its user (AsyncClusterClient; --connections
// each with one connection to every node), and says "cluster of N nodes,
// replication R" beside the address.
// --tls, --tls-ca, ... and --auth-secret-file (src/tools/client_flags.h) reach
// a segstored that serves TLS or requires a secret; they never apply to Redis,
// and --resp refuses them (its client speaks neither).
// A table for people on stdout, or --json for scripts (--json-file: both).
// Progress on stderr. Exits 1 when a run saw errors.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/segbench/driver.h"
#include "bench/segbench/limits.h"
#include "bench/segbench/redis_target.h"
#include "bench/segbench/segstore_target.h"
#include "tools/client_flags.h"

namespace segstore::bench {
namespace {

using nlohmann::json;

struct Options {
  std::string segstore;
  tools::ClientFlags security;  // segstore's --tls*, --auth-secret-file
  std::string resp;             // segstored's RESP port
  std::string redis;
  RunSpec spec;
  double zipf = 0.99;
  double trim_expire = 0.10;
  double busy_expire = 0.50;
  unsigned load_connections = 4;  // also link's
  // link: groups' sizes, uniform in [group_min, group_max]; the share of
  // the users (the first ones) linked.
  unsigned group_min = 2;
  unsigned group_max = 10;
  unsigned group_size = 0;  // > 0: every group this size (min = max)
  double linked_share = 0.5;
  bool ids_only = false;
  bool fields = false;        // load: the workload's profile fields too
  bool resp_hgetall = false;  // reads also through HGETALL on --resp
  std::string limits_dir;
  uint64_t limits_file_mib = 1024;
  bool json = false;
  std::string json_file;
  std::vector<std::string> workloads;
};

// One store under test, as a report row names it.
struct Subject {
  std::string label;  // "segstore", "segstore resp", "redis HGETALL", "redis Lua"
  std::unique_ptr<Target> target;
  bool segstore = false;  // segstored through the binary protocol
  bool resp = false;      // segstored through its RESP port
  bool whole = false;     // Redis's plain HGETALL reads
  std::string loaded_by;  // resp: the subject whose load filled the same server
  ServerSample first;     // when segbench started
  std::optional<LoadResult> load;
  std::optional<double> get_rate;     // the latest closed-loop get rate
  std::optional<LinkRunResult> link;  // its groups, when link ran on it
};

// One line of the report.
struct Row {
  std::string subject;
  std::string workload;
  RunResult run;
  double target_rate = 0;  // open loop: the rate asked for
  std::optional<ExpireResult> expired;
  double expire_share = 0;
  bool ranged = false;  // drew its users from part of them only (after link)
};

std::string Thousands(double v) {
  const auto n = static_cast<long long>(std::llround(v));
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

double Us(uint64_t ns) { return static_cast<double>(ns) / 1e3; }

std::optional<double> CpuUsPerOp(const RunResult& r) {
  if (!r.server_cpu_seconds || r.all.ops == 0) return std::nullopt;
  return *r.server_cpu_seconds * 1e6 / static_cast<double>(r.all.ops);
}

std::string Now() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

void Progress(const Row& row) {
  const RunResult& r = row.run;
  std::fprintf(stderr, "segbench: %-17s %-11s %9s/s p50 %s us p99 %s us, %llu errors%s%s\n",
               row.subject.c_str(), row.workload.c_str(), Thousands(r.ops_per_second()).c_str(),
               Thousands(Us(r.all.latency.Percentile(0.50))).c_str(),
               Thousands(Us(r.all.latency.Percentile(0.99))).c_str(),
               static_cast<unsigned long long>(r.all.errors), r.first_error.empty() ? "" : ": ",
               r.first_error.c_str());
}

json HistogramJson(const Histogram& h) {
  return {{"count", h.count()},
          {"p50_us", Us(h.Percentile(0.50))},
          {"p99_us", Us(h.Percentile(0.99))},
          {"p999_us", Us(h.Percentile(0.999))},
          {"max_us", Us(h.max())}};
}

json SampleJson(const ServerSample& s) {
  return {{"pid", s.pid},
          {"memory_bytes", s.memory_bytes},
          {"device_bytes_used", s.device_bytes_used},
          {"records", s.records},
          {"sweeper_segments_removed", s.sweeper_segments_removed},
          {"sweeper_records_rewritten", s.sweeper_records_rewritten},
          {"defrag_blocks", s.defrag_blocks}};
}

json RowJson(const Row& row) {
  const RunResult& r = row.run;
  json j = {{"target", row.subject},
            {"workload", row.workload},
            {"seconds", r.seconds},
            {"ops", r.all.ops},
            {"ops_per_second", r.ops_per_second()},
            {"latency", HistogramJson(r.all.latency)},
            {"errors", r.all.errors},
            {"missing", r.all.missing},
            {"requests_measured", r.all.latency.count()},
            {"segments_per_op", r.all.segments_per_request()},
            {"client_cpu_seconds", r.client_cpu_seconds},
            {"before", SampleJson(r.before)},
            {"after", SampleJson(r.after)}};
  j["mode"] = r.spec.rate > 0 ? "open" : "closed";
  if (row.ranged) {
    j["users_first"] = r.spec.first_user;
    j["users_count"] = r.spec.users;
  }
  if (r.all.profiles > 0 || row.workload.rfind("get-linked", 0) == 0) {
    j["profiles_per_op"] = r.all.profiles_per_request();
  }
  if (r.all.fields > 0 || r.spec.workload == Workload::kGetFields) {
    j["fields_per_op"] = r.all.fields_per_request();
  }
  if (r.spec.rate > 0) {
    j["target_rate"] = r.spec.rate;
    j["backlog_max"] = r.backlog_max;
  }
  if (auto cpu = CpuUsPerOp(r)) {
    j["server_cpu_seconds"] = *r.server_cpu_seconds;
    j["server_cpu_us_per_op"] = *cpu;
  } else {
    j["server_cpu_us_per_op"] = nullptr;
  }
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  json kinds = json::object();
  for (size_t k = 0; k < r.by_kind.size(); ++k) {
    const KindFigures& f = r.by_kind[k];
    if (f.ops == 0) continue;
    kinds[OpKindName(static_cast<OpKind>(k))] = {{"ops", f.ops},
                                                 {"latency", HistogramJson(f.latency)},
                                                 {"errors", f.errors},
                                                 {"segments_per_op", f.segments_per_request()}};
  }
  j["by_kind"] = kinds;
  if (row.expired) {
    j["expired_share"] = row.expire_share;
    j["expired_segments"] = row.expired->segments;
  }
  if (r.spec.workload == Workload::kMixedBusy) {
    j["background_users_per_second"] = static_cast<double>(r.background_users) / r.seconds;
    j["background_errors"] = r.background_errors;
    j["sweeper_segments_removed_per_second"] =
        static_cast<double>(r.after.sweeper_segments_removed - r.before.sweeper_segments_removed) /
        r.seconds;
    j["sweeper_records_rewritten"] =
        r.after.sweeper_records_rewritten - r.before.sweeper_records_rewritten;
    j["sweeper_segments_removed"] =
        r.after.sweeper_segments_removed - r.before.sweeper_segments_removed;
    j["defrag_blocks"] = r.after.defrag_blocks - r.before.defrag_blocks;
  }
  return j;
}

// Memory and disk per user from a subject's load.
struct PerUser {
  std::optional<double> memory;  // growth over the load / users
  std::optional<double> disk;    // device bytes in use / records, after the load
  // The records' bytes on the device (storage.live_bytes, garbage not
  // included): their growth over the load / users.
  std::optional<double> live;
  // A load with fields: the bytes of the string values set / users (in `live`).
  std::optional<double> field_strings;
  std::string note;
};

PerUser PerUserOf(const Subject& s) {
  PerUser p;
  if (!s.load) return p;
  const LoadResult& l = *s.load;
  const auto add_note = [&p](const std::string& n) { p.note += (p.note.empty() ? "" : "; ") + n; };
  if (!s.target->topology().empty()) {
    add_note("summed over the cluster's nodes: each user is on every replica of its partition");
  }
  // A load with fields had the server number their names first: those
  // records are its field name table's, not users'.
  const uint64_t table = l.fields ? std::min(l.before.records, l.field_names_registered) : 0;
  if (l.before.records > table) {
    add_note("the server held " + std::to_string(l.before.records - table) +
             " records before the load: memory growth not per user");
  } else if (l.after.memory_bytes >= l.before.memory_bytes) {
    p.memory = static_cast<double>(l.after.memory_bytes - l.before.memory_bytes) /
               static_cast<double>(l.users);
  } else {
    // The allocator gave back more than the load took (a small load, or pages
    // freed by what ran before it): no growth to divide.
    add_note("the server's memory shrank over the load (" + std::to_string(l.before.memory_bytes) +
             " to " + std::to_string(l.after.memory_bytes) + " bytes): memory growth not per user");
  }
  if (l.after.device_bytes_used > 0 && l.after.records > table) {
    p.disk = static_cast<double>(l.after.device_bytes_used) /
             static_cast<double>(l.after.records - table);
  }
  if (l.fields) {
    add_note(
        "each user's fields were set after its segments: the write blocks in use hold its record "
        "before them too, until defragmented; the records' own bytes are the live bytes");
  }
  if (l.after.live_bytes > 0 && l.after.live_bytes >= l.before.live_bytes) {
    p.live = static_cast<double>(l.after.live_bytes - l.before.live_bytes) /
             static_cast<double>(l.users);
  }
  if (l.fields) {
    p.field_strings = static_cast<double>(l.field_string_bytes) / static_cast<double>(l.users);
  }
  return p;
}

// A link run's DRAM figures, as the server's index counts them after it.
struct LinkFigures {
  // storage.index_reference_bytes / storage.index_references (none when the
  // server does not report them, or holds no reference).
  std::optional<double> bytes_per_link;
  // storage.index_bytes / storage.index_entries.
  std::optional<double> index_bytes_per_record;
  // The index's growth over the link / links made (allocation steps
  // included: a rough figure beside bytes_per_link).
  std::optional<double> index_growth_per_link;
};

LinkFigures LinkFiguresOf(const LinkRunResult& l) {
  LinkFigures f;
  const ServerSample& a = l.after;
  if (a.index_references_known && a.index_references > 0) {
    f.bytes_per_link =
        static_cast<double>(a.index_reference_bytes) / static_cast<double>(a.index_references);
  }
  if (a.records > 0 && a.index_bytes > 0) {
    f.index_bytes_per_record = static_cast<double>(a.index_bytes) / static_cast<double>(a.records);
  }
  if (l.links > 0 && a.index_bytes > 0) {
    f.index_growth_per_link =
        (static_cast<double>(a.index_bytes) - static_cast<double>(l.before.index_bytes)) /
        static_cast<double>(l.links);
  }
  return f;
}

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)) {}

  int Main() {
    static const std::vector<std::string> kAll = {"limits",    "load",   "get",       "get-zipf",
                                                  "batch-get", "get-70", "get-80",    "upsert",
                                                  "mixed",     "trim",   "mixed-busy"};
    // Profile bridging's and profile fields', never in `all`.
    static const std::vector<std::string> kApart = {
        "link", "get-linked", "get-50", "get-linked-50", "get-fields", "incr", "upsert-1"};
    std::vector<std::string> names;
    for (const std::string& w : o_.workloads) {
      if (w == "all") {
        names.insert(names.end(), kAll.begin(), kAll.end());
      } else if (std::find(kAll.begin(), kAll.end(), w) != kAll.end() ||
                 std::find(kApart.begin(), kApart.end(), w) != kApart.end()) {
        names.push_back(w);
      } else {
        return Fail(Status::InvalidArgument(
            "no workload \"" + w +
            "\" (limits load get get-zipf batch-get get-70 get-80 upsert mixed trim mixed-busy "
            "all; link get-linked get-50 get-linked-50; get-fields incr upsert-1)"));
      }
    }
    if (o_.group_size > 0) o_.group_min = o_.group_max = o_.group_size;
    if (o_.group_max < o_.group_min) {
      return Fail(Status::InvalidArgument("--group-max is less than --group-min"));
    }
    if (Status s = Connect(); !s.ok()) return Fail(s);
    machine_ = DescribeMachine(DataPath());
    Status failure = Status::OK();
    for (const std::string& w : names) {
      failure = Workload(w);
      if (!failure.ok()) break;  // report what was measured, then the failure
    }
    if (int rc = Report(); rc != 0) return rc;
    if (!failure.ok()) return Fail(failure);
    for (const Row& r : rows_) {
      if (r.run.all.errors > 0 || r.run.background_errors > 0) return 1;
    }
    return 0;
  }

 private:
  int Report() {
    if (o_.json) {
      std::printf("%s\n", Json().dump(2).c_str());
    } else {
      PrintTable();
    }
    if (!o_.json_file.empty()) {
      std::FILE* f = std::fopen(o_.json_file.c_str(), "w");
      if (f == nullptr || std::fprintf(f, "%s\n", Json().dump(2).c_str()) < 0 ||
          std::fclose(f) != 0) {
        return Fail(Status::IOError("cannot write " + o_.json_file));
      }
    }
    return 0;
  }

  int Fail(const Status& s) {
    std::fprintf(stderr, "segbench: %s\n", s.ToString().c_str());
    return 1;
  }

  Status Connect() {
    if (o_.segstore.empty() && o_.resp.empty() && o_.redis.empty()) {
      o_.segstore = "127.0.0.1:7700";
    }
    if (!o_.segstore.empty()) {
      SegstoreOptions so;
      if (Status s = client::ParseServerAddress(o_.segstore, &so.client); !s.ok()) return s;
      so.client.connect_timeout = std::chrono::milliseconds(10000);
      so.client.request_timeout = std::chrono::milliseconds(30000);
      so.client.client_name = "segbench";
      if (Status s = ApplySecurity(&so.client); !s.ok()) return s;
      so.ids_only = o_.ids_only;
      auto t = NewSegstoreTarget(so);
      if (!t.ok()) return t.status().WithContext("segstore at " + o_.segstore);
      Add(o_.ids_only ? "segstore ids" : "segstore", std::move(*t), true, false);
    }
    if (!o_.resp.empty()) {
      client::ClientOptions parsed;
      if (Status s = client::ParseServerAddress(o_.resp, &parsed); !s.ok()) return s;
      if (Status s = ApplySecurity(&parsed); !s.ok()) return s;
      if (parsed.tls.enabled || !parsed.auth_secret.empty()) {
        return Status::InvalidArgument(
            "--resp speaks neither TLS nor the shared secret (--tls*, --auth-secret-file, "
            "SEGSTORE_AUTH_SECRET_FILE); measure a RESP port served in plain TCP without one");
      }
      RedisOptions ro;
      ro.host = parsed.host;
      ro.port = parsed.port;
      ro.dialect = RedisOptions::Dialect::kSegstore;
      ro.ids_only = o_.ids_only;
      auto t = NewRedisTarget(ro);
      if (!t.ok()) return t.status();  // its messages name "segstore resp at host:port"
      Add(o_.ids_only ? "segstore resp ids" : "segstore resp", std::move(*t), false, false);
      subjects_.back().resp = true;
      if (o_.resp_hgetall) {
        ro.ids_only = false;
        ro.whole_profiles = true;
        auto h = NewRedisTarget(ro);
        if (!h.ok()) return h.status();
        Add("segstore HGETALL", std::move(*h), false, true);
        subjects_.back().resp = true;
      }
    } else if (o_.resp_hgetall) {
      return Status::InvalidArgument("--resp-hgetall reads through --resp: give it");
    }
    if (!o_.redis.empty()) {
      client::ClientOptions parsed;
      if (Status s = client::ParseServerAddress(o_.redis, &parsed); !s.ok()) return s;
      for (bool whole : {false, true}) {
        RedisOptions ro;
        ro.host = parsed.host;
        ro.port = parsed.port;
        ro.whole_profiles = whole;
        auto t = NewRedisTarget(ro);
        if (!t.ok()) return t.status().WithContext("redis at " + o_.redis);
        Add(whole ? "redis HGETALL" : "redis Lua", std::move(*t), false, whole);
      }
    }
    return Status::OK();
  }

  // Applies segstore's --tls* and --auth-secret-file to `options`; a loose
  // secret file is warned about once, on stderr.
  Status ApplySecurity(client::ClientOptions* options) {
    std::string warning;
    SEGSTORE_RETURN_IF_ERROR(tools::ApplyClientFlags(o_.security, options, &warning));
    if (!warning.empty() && !warned_) {
      std::fprintf(stderr, "segbench: warning: %s\n", warning.c_str());
      warned_ = true;
    }
    return Status::OK();
  }

  void Add(std::string label, std::unique_ptr<Target> t, bool segstore, bool whole) {
    Subject s;
    s.label = std::move(label);
    s.target = std::move(t);
    s.segstore = segstore;
    s.whole = whole;
    if (auto sample = s.target->Sample(); sample.ok()) s.first = *sample;
    subjects_.push_back(std::move(s));
  }

  std::string DataPath() const {
    for (const Subject& s : subjects_) {
      if ((s.segstore || s.resp) && !s.first.device.empty()) return s.first.device;
    }
    return "";
  }

  // The subjects a workload runs on: every store once; reads also on
  // Redis's plain HGETALL.
  std::vector<Subject*> SubjectsFor(bool reads) {
    std::vector<Subject*> out;
    for (Subject& s : subjects_) {
      if (!s.whole || reads) out.push_back(&s);
    }
    return out;
  }

  // For a RESP subject: the binary subject that has loaded the same
  // segstored (same process, same data file), if any.
  const Subject* LoadedSameServer(const Subject& s) const {
    if (!s.resp || s.first.pid == 0) return nullptr;
    for (const Subject& t : subjects_) {
      if (t.segstore && t.load && t.first.pid == s.first.pid && t.first.device == s.first.device) {
        return &t;
      }
    }
    return nullptr;
  }

  Status Workload(const std::string& w) {
    if (w == "limits") return Limits();
    if (w == "load") {
      for (Subject* s : SubjectsFor(false)) {
        if (const Subject* same = LoadedSameServer(*s)) {
          std::fprintf(stderr, "segbench: %s is the segstored %s loaded (pid %lld): loaded once\n",
                       s->label.c_str(), same->label.c_str(), static_cast<long long>(s->first.pid));
          s->loaded_by = same->label;
          continue;
        }
        const bool fields = o_.fields && s->target->fields_supported();
        if (o_.fields && !fields) {
          Note(s->label +
               " load: segments only (profile fields are measured through segstore's "
               "binary protocol to a single server only)");
        }
        std::fprintf(stderr, "segbench: loading %s users into %s%s\n",
                     Thousands(static_cast<double>(o_.spec.users)).c_str(), s->label.c_str(),
                     fields ? ", with their fields" : "");
        auto l = Load(*s->target, o_.spec.users, o_.load_connections, fields);
        if (!l.ok()) return l.status().WithContext(s->label);
        std::fprintf(stderr, "segbench: loaded in %.1f s (%s users/s)\n", l->seconds,
                     Thousands(static_cast<double>(l->users) / l->seconds).c_str());
        if (fields) {
          std::fprintf(stderr, "segbench: %s field names newly numbered before the load\n",
                       Thousands(static_cast<double>(l->field_names_registered)).c_str());
        }
        s->load = *l;
      }
      return Status::OK();
    }
    if (w == "link") return Link();
    RunSpec spec = o_.spec;
    bool reads = false;
    double expire = 0;
    // get-70, get-80, get-50 and get-linked-50: open loop at that share of
    // the closed-loop get rate.
    const double open_share = w == "get-70"                           ? 0.7
                              : w == "get-80"                         ? 0.8
                              : w == "get-50" || w == "get-linked-50" ? 0.5
                                                                      : 0;
    // get-linked and get-linked-50 read the linked users; after link, every
    // other workload the users left unlinked.
    const bool linked = w == "get-linked" || w == "get-linked-50";
    if (linked) {
      if (!link_asked_) return Status::InvalidArgument(w + " needs a link run before it");
      spec.first_user = 0;
      spec.users = linked_users_;
    } else if (linked_users_ > 0) {
      if (linked_users_ >= o_.spec.users) {
        return Status::InvalidArgument(w + ": link left no user unlinked (--linked-share)");
      }
      spec.first_user = linked_users_;
      spec.users = o_.spec.users - linked_users_;
    }
    if (w == "get" || w == "get-zipf" || open_share > 0 || linked) {
      spec.workload = Workload::kGet;
      reads = true;
      if (w == "get-zipf") spec.zipf = o_.zipf;
    } else if (w == "batch-get") {
      spec.workload = Workload::kBatchGet;
      reads = true;
    } else if (w == "upsert") {
      spec.workload = Workload::kUpsert;
    } else if (w == "upsert-1") {
      spec.workload = Workload::kUpsertOne;
    } else if (w == "get-fields") {
      spec.workload = Workload::kGetFields;
      reads = true;
    } else if (w == "incr") {
      spec.workload = Workload::kIncrement;
    } else if (w == "mixed") {
      spec.workload = Workload::kMixed;
    } else if (w == "trim") {
      spec.workload = Workload::kTrim;
      expire = o_.trim_expire;
    } else if (w == "mixed-busy") {
      spec.workload = Workload::kMixedBusy;
      expire = o_.busy_expire;
    } else {
      return Status::Internal("workload \"" + w + "\" slipped past the check");
    }
    for (Subject* s : SubjectsFor(reads)) {
      if (linked && !s->link) {
        Note(s->label + " " + w +
             ": skipped (nothing linked through it: link runs on segstore's binary protocol "
             "only)");
        continue;
      }
      if ((w == "get-fields" || w == "incr") && !s->target->fields_supported()) {
        if (!s->whole) {
          Note(s->label + " " + w +
               ": skipped (profile fields are measured through segstore's binary protocol to a "
               "single server only)");
        }
        continue;
      }
      Row row;
      row.subject = s->label;
      row.workload = w == "get-zipf" ? "get zipf " + Trim(o_.zipf) : w;
      row.ranged = linked_users_ > 0;
      RunSpec one = spec;
      if (open_share > 0) {
        if (o_.spec.rate > 0) {
          one.rate = o_.spec.rate;
        } else if (s->get_rate) {
          one.rate = open_share * *s->get_rate;
        } else {
          return Status::InvalidArgument(w + " needs a get run before it, or --rate");
        }
        row.target_rate = one.rate;
      }
      if (expire > 0) {
        std::fprintf(stderr, "segbench: making %.0f %% of %s's segments expire\n", expire * 100,
                     s->label.c_str());
        auto e = Expire(*s->target, spec.users, expire, o_.load_connections, spec.first_user);
        if (!e.ok()) return e.status().WithContext(s->label);
        row.expired = *e;
        row.expire_share = expire;
      }
      auto r = Run(*s->target, one);
      if (!r.ok()) return r.status().WithContext(s->label + " " + w);
      row.run = std::move(*r);
      if (w == "get" && one.rate == 0) s->get_rate = row.run.ops_per_second();
      Progress(row);
      rows_.push_back(std::move(row));
    }
    return Status::OK();
  }

  // link: the first --linked-share of the users into groups, on each
  // segstore subject (binary protocol); skipped with a note on the others.
  Status Link() {
    link_asked_ = true;
    const auto share = static_cast<uint64_t>(o_.linked_share * static_cast<double>(o_.spec.users));
    GroupPlan plan = PlanGroups(share, o_.group_min, o_.group_max);
    if (plan.sizes.empty()) {
      return Status::InvalidArgument("link: " + std::to_string(share) +
                                     " users to link (--linked-share of --users), fewer than a "
                                     "group's --group-min " +
                                     std::to_string(o_.group_min));
    }
    bool linked = false;
    for (Subject* s : SubjectsFor(false)) {
      if (!s->segstore) {
        Note(s->label +
             " link: skipped (profile bridging is measured through segstore's binary protocol "
             "only); its later workloads draw from the unlinked users too");
        continue;
      }
      std::fprintf(stderr, "segbench: linking %s users of %s into %s groups\n",
                   Thousands(static_cast<double>(plan.linked_users())).c_str(), s->label.c_str(),
                   Thousands(static_cast<double>(plan.sizes.size())).c_str());
      auto l = LinkGroups(*s->target, plan, o_.load_connections);
      if (!l.ok()) return l.status().WithContext(s->label);
      std::fprintf(stderr, "segbench: linked in %.1f s (%s links/s)\n", l->seconds,
                   Thousands(static_cast<double>(l->links) / l->seconds).c_str());
      s->link = *l;
      linked = true;
    }
    if (linked) {
      linked_users_ = plan.linked_users();
      plan_ = std::move(plan);
    }
    return Status::OK();
  }

  // A line for the report's notes (and stderr now).
  void Note(const std::string& note) {
    std::fprintf(stderr, "segbench: %s\n", note.c_str());
    notes_.push_back(note);
  }

  static std::string Trim(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }

  Status Limits() {
    std::string dir = o_.limits_dir;
    if (dir.empty()) {
      const std::string data = DataPath();
      std::error_code ec;
      if (!data.empty() && std::filesystem::exists(data, ec)) {
        dir = std::filesystem::path(data).parent_path().string();
      }
    }
    if (dir.empty()) {
      return Status::InvalidArgument(
          "limits: no data file of segstore's on this machine; give --limits-dir on the device");
    }
    std::fprintf(stderr, "segbench: measuring the device under %s\n", dir.c_str());
    auto d = MeasureDevice(dir, o_.limits_file_mib << 20, 32, std::min(o_.spec.seconds, 10.0));
    if (!d.ok()) return d.status().WithContext("limits");
    device_ = std::move(*d);
    machine_ = DescribeMachine(dir);
    if (!o_.segstore.empty()) {
      client::ClientOptions co;
      if (Status s = client::ParseServerAddress(o_.segstore, &co); !s.ok()) return s;
      co.client_name = "segbench";
      if (Status s = ApplySecurity(&co); !s.ok()) return s;
      auto p = MeasurePing(co, o_.spec.connections, std::min(o_.spec.seconds, 5.0));
      if (!p.ok()) return p.status().WithContext("limits: ping");
      ping_ = std::move(*p);
    }
    return Status::OK();
  }

  const Row* Find(const std::string& subject, const std::string& workload) const {
    for (const Row& r : rows_) {
      if (r.subject == subject && r.workload == workload) return &r;
    }
    return nullptr;
  }

  std::string Header() const {
    const RunSpec& s = o_.spec;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s users of 1,000 segments%s (the reference workload%s), %u connections x "
                  "depth %u, %u client thread%s, %g s measured after %g s warm-up",
                  Thousands(static_cast<double>(s.users)).c_str(),
                  o_.fields ? " and 25 profile fields" : "",
                  s.users < 500000 ? "; its full size is 500,000 users" : "", s.connections,
                  s.depth, s.threads, s.threads == 1 ? "" : "s", s.seconds, s.warmup_seconds);
    return buf;
  }

  json Json() const {
    json j;
    j["date"] = Now();
    j["setup"] = Header();
    j["users"] = o_.spec.users;
    j["connections"] = o_.spec.connections;
    j["depth"] = o_.spec.depth;
    j["client_threads"] = o_.spec.threads;
    j["seconds"] = o_.spec.seconds;
    j["warmup_seconds"] = o_.spec.warmup_seconds;
    j["machine"] = {{"cores", machine_.cores},
                    {"cpu", machine_.cpu},
                    {"memory_bytes", machine_.memory_bytes},
                    {"kernel", machine_.kernel},
                    {"storage", machine_.storage}};
    json servers = json::array();
    for (const Subject& s : subjects_) {
      if (s.whole) continue;
      json one = {{"name", s.target->name()},
                  {"address", s.target->address()},
                  {"durability", s.first.durability},
                  {"data", s.first.device}};
      if (const std::string t = s.target->topology(); !t.empty()) one["topology"] = t;
      if (!s.loaded_by.empty()) one["loaded_by"] = s.loaded_by;
      const PerUser p = PerUserOf(s);
      if (s.load) {
        one["load"] = {{"users", s.load->users},
                       {"seconds", s.load->seconds},
                       {"users_per_second", static_cast<double>(s.load->users) / s.load->seconds},
                       {"before", SampleJson(s.load->before)},
                       {"after", SampleJson(s.load->after)}};
      }
      one["memory_bytes_per_user"] = p.memory ? json(*p.memory) : json(nullptr);
      one["disk_bytes_per_user"] = p.disk ? json(*p.disk) : json(nullptr);
      one["live_bytes_per_user"] = p.live ? json(*p.live) : json(nullptr);
      if (s.load) {
        one["load"]["live_bytes_before"] = s.load->before.live_bytes;
        one["load"]["live_bytes_after"] = s.load->after.live_bytes;
        one["load"]["fields"] = s.load->fields;
        if (s.load->fields) {
          one["load"]["field_names_registered"] = s.load->field_names_registered;
          one["load"]["field_string_bytes"] = s.load->field_string_bytes;
          one["field_string_bytes_per_user"] = *p.field_strings;
        }
      }
      if (!p.note.empty()) one["note"] = p.note;
      if (s.link) {
        const LinkRunResult& l = *s.link;
        const LinkFigures f = LinkFiguresOf(l);
        auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
        one["link"] = {{"links", l.links},
                       {"seconds", l.seconds},
                       {"links_per_second", static_cast<double>(l.links) / l.seconds},
                       {"index_references", l.after.index_references},
                       {"index_reference_bytes", l.after.index_reference_bytes},
                       {"index_references_reported", l.after.index_references_known},
                       {"dram_bytes_per_link", opt(f.bytes_per_link)},
                       {"index_bytes", l.after.index_bytes},
                       {"index_bytes_per_record", opt(f.index_bytes_per_record)},
                       {"index_growth_bytes_per_link", opt(f.index_growth_per_link)}};
        if (l.server_cpu_seconds && l.links > 0) {
          one["link"]["server_cpu_us_per_link"] =
              *l.server_cpu_seconds * 1e6 / static_cast<double>(l.links);
        }
      }
      servers.push_back(one);
    }
    j["servers"] = servers;
    if (plan_) {
      j["link"] = {
          {"group_min", o_.group_min},
          {"group_max", o_.group_max},
          {"linked_share", o_.linked_share},
          {"groups", plan_->sizes.size()},
          {"mean_group_size", MeanGroupSize()},
          {"linked_users", plan_->linked_users()},
          {"links", plan_->links()},
          {"profiles_per_linked_get", plan_->profiles_per_get()},
          {"unlinked_users_first", linked_users_},
          {"unlinked_users_count", o_.spec.users - std::min(o_.spec.users, linked_users_)}};
    }
    json goals = json::array();
    for (const LinkedGoal& g : LinkedGoals()) {
      goals.push_back({{"target", g.label},
                       {"get_50_p99_us", g.p99},
                       {"get_linked_50_p99_us", g.linked_p99},
                       {"ratio", g.p99 > 0 ? json(g.linked_p99 / g.p99) : json(nullptr)},
                       {"goal_at_most", 2.0}});
    }
    if (!goals.empty()) j["linked_p99_goal"] = goals;
    json field_goals = json::array();
    for (const FieldGoal& g : FieldGoals()) {
      auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
      field_goals.push_back({{"target", g.label},
                             {"incr_ops_per_second", g.incr->run.ops_per_second()},
                             {"upsert_1_ops_per_second", g.upsert->run.ops_per_second()},
                             {"incr_server_cpu_us_per_op", opt(CpuUsPerOp(g.incr->run))},
                             {"upsert_1_server_cpu_us_per_op", opt(CpuUsPerOp(g.upsert->run))},
                             {"incr_p50_us", Us(g.incr->run.all.latency.Percentile(0.5))},
                             {"upsert_1_p50_us", Us(g.upsert->run.all.latency.Percentile(0.5))},
                             {"incr_p99_us", Us(g.incr->run.all.latency.Percentile(0.99))},
                             {"upsert_1_p99_us", Us(g.upsert->run.all.latency.Percentile(0.99))}});
    }
    if (!field_goals.empty()) j["incr_vs_upsert_1"] = field_goals;
    if (!notes_.empty()) j["notes"] = notes_;
    json rows = json::array();
    for (const Row& r : rows_) rows.push_back(RowJson(r));
    j["runs"] = rows;
    if (device_) {
      j["limits"]["device"] = {{"file", device_->file},
                               {"file_bytes", device_->file_bytes},
                               {"queue_depth", device_->queue_depth},
                               {"reads_per_second", device_->reads_per_second},
                               {"latency", HistogramJson(device_->latency)},
                               {"latency_depth1", HistogramJson(device_->latency_depth1)}};
    }
    if (ping_) {
      j["limits"]["ping"] = {{"round_trip", HistogramJson(ping_->round_trip)},
                             {"round_trips_per_second", ping_->round_trips_per_second},
                             {"connections", ping_->connections},
                             {"pings_per_second", ping_->pings_per_second}};
    }
    return j;
  }

  void PrintTable() const {
    std::printf("segbench, %s\n%s\n", Now().c_str(), Header().c_str());
    std::printf("machine: %u cores (%s), %s GiB, kernel %s; data on %s\n", machine_.cores,
                machine_.cpu.c_str(),
                Thousands(static_cast<double>(machine_.memory_bytes) / (1u << 30)).c_str(),
                machine_.kernel.c_str(), machine_.storage.empty() ? "?" : machine_.storage.c_str());
    for (const Subject& s : subjects_) {
      if (s.whole) continue;
      const std::string topology = s.target->topology();
      if (topology.empty()) {
        std::printf("%s at %s: durability %s; data %s\n", s.target->name().c_str(),
                    s.target->address().c_str(), s.first.durability.c_str(),
                    s.first.device.c_str());
      } else {
        // Each connection routes each user to its node, over one connection
        // to every node.
        std::printf(
            "%s at %s: %s (each connection one to every node, routed by the map); "
            "durability %s; data %s (the node asked's)\n",
            s.target->name().c_str(), s.target->address().c_str(), topology.c_str(),
            s.first.durability.c_str(), s.first.device.c_str());
      }
    }
    if (!rows_.empty()) {
      std::printf("\n%-17s %-13s %10s %8s %8s %8s %8s %9s %8s %6s\n", "target", "workload", "ops/s",
                  "p50 us", "p99 us", "p99.9 us", "max us", "CPU us/op", "segs/op", "errors");
      for (const Row& row : rows_) {
        const RunResult& r = row.run;
        const auto cpu = CpuUsPerOp(r);
        std::printf("%-17s %-13s %10s %8s %8s %8s %8s %9s %8.1f %6llu\n", row.subject.c_str(),
                    row.workload.c_str(), Thousands(r.ops_per_second()).c_str(),
                    Thousands(Us(r.all.latency.Percentile(0.50))).c_str(),
                    Thousands(Us(r.all.latency.Percentile(0.99))).c_str(),
                    Thousands(Us(r.all.latency.Percentile(0.999))).c_str(),
                    Thousands(Us(r.all.latency.max())).c_str(), cpu ? Thousands(*cpu).c_str() : "?",
                    r.all.segments_per_request(), static_cast<unsigned long long>(r.all.errors));
      }
      std::printf(
          "ops/s: requests answered a second in the window (batch-get: requests of %u users); "
          "latency: of every request sent (open loop: due) in the window, from then to its "
          "answer; CPU: the server's user+system time per request answered, from /proc "
          "(mixed-busy: the background load's included); segs/op: segments returned (reads) or "
          "removed as expired (upsert, trim)\n",
          o_.spec.batch);
      PrintNotes();
      PrintLinkedGoal();
      PrintFieldGoal();
      PrintRespRatios();
      PrintHgetallRatios();
      PrintRatios();
    } else {
      for (const std::string& n : notes_) std::printf("%s\n", n.c_str());
    }
    PrintPerUser();
    PrintLinks();
    PrintLimits();
  }

  double MeanGroupSize() const {
    if (!plan_ || plan_->sizes.empty()) return 0;
    return static_cast<double>(plan_->linked_users()) / static_cast<double>(plan_->sizes.size());
  }

  // Issue 20's goal: each subject's get-50 and get-linked-50 p99, when both ran.
  struct LinkedGoal {
    std::string label;
    double p99 = 0;
    double linked_p99 = 0;
  };
  std::vector<LinkedGoal> LinkedGoals() const {
    std::vector<LinkedGoal> out;
    for (const Subject& s : subjects_) {
      const Row* plain = Find(s.label, "get-50");
      const Row* linked = Find(s.label, "get-linked-50");
      if (plain == nullptr || linked == nullptr) continue;
      out.push_back({s.label, Us(plain->run.all.latency.Percentile(0.99)),
                     Us(linked->run.all.latency.Percentile(0.99))});
    }
    return out;
  }

  // Issue 20's goal beside the rows it compares.
  void PrintLinkedGoal() const {
    for (const LinkedGoal& g : LinkedGoals()) {
      if (g.p99 <= 0) continue;
      std::printf(
          "%s get-linked-50 p99 / get-50 p99 = %.2fx (goal: at most 2x); %s us against "
          "%s us, groups of %u to %u, %u connections\n",
          g.label.c_str(), g.linked_p99 / g.p99, Thousands(g.linked_p99).c_str(),
          Thousands(g.p99).c_str(), o_.group_min, o_.group_max, o_.spec.connections);
    }
  }

  // Issue 21's goal: an increment costs no more than an upsert of one
  // segment; each subject's incr and upsert-1 rows, when both ran.
  struct FieldGoal {
    std::string label;
    const Row* incr = nullptr;
    const Row* upsert = nullptr;
  };
  std::vector<FieldGoal> FieldGoals() const {
    std::vector<FieldGoal> out;
    for (const Subject& s : subjects_) {
      const Row* incr = Find(s.label, "incr");
      const Row* upsert = Find(s.label, "upsert-1");
      if (incr != nullptr && upsert != nullptr) out.push_back({s.label, incr, upsert});
    }
    return out;
  }

  void PrintFieldGoal() const {
    for (const FieldGoal& g : FieldGoals()) {
      const RunResult& i = g.incr->run;
      const RunResult& u = g.upsert->run;
      std::printf(
          "%s incr against upsert-1 (goal: an increment costs no more than an upsert of "
          "one segment): ",
          g.label.c_str());
      const auto ci = CpuUsPerOp(i), cu = CpuUsPerOp(u);
      if (ci && cu && *cu > 0) {
        std::printf("server CPU %.2fx (%s us against %s us a request), ", *ci / *cu,
                    Thousands(*ci).c_str(), Thousands(*cu).c_str());
      }
      std::printf("%s requests/s against %s, p50 %s us against %s us, p99 %s us against %s us\n",
                  Thousands(i.ops_per_second()).c_str(), Thousands(u.ops_per_second()).c_str(),
                  Thousands(Us(i.all.latency.Percentile(0.5))).c_str(),
                  Thousands(Us(u.all.latency.Percentile(0.5))).c_str(),
                  Thousands(Us(i.all.latency.Percentile(0.99))).c_str(),
                  Thousands(Us(u.all.latency.Percentile(0.99))).c_str());
    }
  }

  // link's figures: links a second, the groups, DRAM per link.
  void PrintLinks() const {
    if (!plan_) return;
    std::printf("\nlinked profiles (link)\n");
    std::printf(
        "%s groups of %u to %u users (mean %.1f), users 0 to %s (the first %.0f %% of them): "
        "%s links; a get by a linked user merges %.1f profiles on average",
        Thousands(static_cast<double>(plan_->sizes.size())).c_str(), o_.group_min, o_.group_max,
        MeanGroupSize(), Thousands(static_cast<double>(linked_users_ - 1)).c_str(),
        o_.linked_share * 100, Thousands(static_cast<double>(plan_->links())).c_str(),
        plan_->profiles_per_get());
    if (linked_users_ < o_.spec.users) {
      std::printf("; every other workload after link drew from users %s to %s, left unlinked",
                  Thousands(static_cast<double>(linked_users_)).c_str(),
                  Thousands(static_cast<double>(o_.spec.users - 1)).c_str());
    }
    std::printf("\n");
    for (const Subject& s : subjects_) {
      if (!s.link) continue;
      const LinkRunResult& l = *s.link;
      const LinkFigures f = LinkFiguresOf(l);
      std::printf("%-17s linked %s links/s", s.label.c_str(),
                  Thousands(static_cast<double>(l.links) / l.seconds).c_str());
      if (l.server_cpu_seconds && l.links > 0) {
        std::printf(" (server CPU %s us/link)",
                    Thousands(*l.server_cpu_seconds * 1e6 / static_cast<double>(l.links)).c_str());
      }
      if (f.bytes_per_link) {
        std::printf("; DRAM %.1f B/link (index_reference_bytes / index_references: %s B / %s)",
                    *f.bytes_per_link,
                    Thousands(static_cast<double>(l.after.index_reference_bytes)).c_str(),
                    Thousands(static_cast<double>(l.after.index_references)).c_str());
      } else if (!l.after.index_references_known) {
        std::printf(
            "; DRAM per link ? (the server's stats have no storage.index_references "
            "and storage.index_reference_bytes)");
      } else {
        std::printf("; DRAM per link ? (the index holds no reference)");
      }
      if (f.index_growth_per_link) {
        std::printf("; the index grew %.1f B/link over the link", *f.index_growth_per_link);
      }
      if (f.index_bytes_per_record) {
        std::printf("; index %.1f B/record (index_bytes / index_entries)",
                    *f.index_bytes_per_record);
      }
      std::printf("\n");
    }
  }

  void PrintNotes() const {
    for (const std::string& n : notes_) std::printf("%s\n", n.c_str());
    for (const Row& row : rows_) {
      const RunResult& r = row.run;
      if (row.workload.rfind("get-linked", 0) == 0) {
        std::printf(
            "%s %s: users 0 to %s (linked); merged answers of %.1f profiles and %.0f "
            "segments on average\n",
            row.subject.c_str(), row.workload.c_str(),
            Thousands(static_cast<double>(r.spec.users - 1)).c_str(), r.all.profiles_per_request(),
            r.all.segments_per_request());
      }
      if (r.spec.workload == Workload::kGetFields) {
        std::printf("%s %s: answers of %.1f fields (prefix \"%s\") and %.0f segments on average\n",
                    row.subject.c_str(), row.workload.c_str(), r.all.fields_per_request(),
                    kCapPrefix, r.all.segments_per_request());
      }
      if (r.spec.rate > 0) {
        std::printf("%s %s: open loop at %s/s asked; at most %s requests waited for a free slot\n",
                    row.subject.c_str(), row.workload.c_str(), Thousands(r.spec.rate).c_str(),
                    Thousands(static_cast<double>(r.backlog_max)).c_str());
      }
      if (row.expired) {
        std::printf("%s %s: %.0f %% of segments made to expire first (%s segments)\n",
                    row.subject.c_str(), row.workload.c_str(), row.expire_share * 100,
                    Thousands(static_cast<double>(row.expired->segments)).c_str());
      }
      if (r.spec.workload == Workload::kMixed) {
        for (size_t k = 0; k < r.by_kind.size(); ++k) {
          const KindFigures& f = r.by_kind[k];
          if (f.ops == 0) continue;
          std::printf("%s mixed, %s: %s ops, p50 %s us, p99 %s us\n", row.subject.c_str(),
                      OpKindName(static_cast<OpKind>(k)),
                      Thousands(static_cast<double>(f.ops)).c_str(),
                      Thousands(Us(f.latency.Percentile(0.5))).c_str(),
                      Thousands(Us(f.latency.Percentile(0.99))).c_str());
        }
      }
      if (r.spec.workload == Workload::kMixedBusy && row.subject.rfind("segstore", 0) != 0) {
        std::printf("%s mixed-busy: background load %s users/s\n", row.subject.c_str(),
                    Thousands(static_cast<double>(r.background_users) / r.seconds).c_str());
      } else if (r.spec.workload == Workload::kMixedBusy) {
        const auto removed = static_cast<double>(r.after.sweeper_segments_removed -
                                                 r.before.sweeper_segments_removed);
        const auto rewritten = static_cast<double>(r.after.sweeper_records_rewritten -
                                                   r.before.sweeper_records_rewritten);
        std::printf(
            "%s mixed-busy: background load %s users/s; sweeper removed %s segments/s "
            "(%s records rewritten, %s segments each); %s write blocks defragmented\n",
            row.subject.c_str(),
            Thousands(static_cast<double>(r.background_users) / r.seconds).c_str(),
            Thousands(removed / r.seconds).c_str(), Thousands(rewritten).c_str(),
            rewritten > 0 ? Thousands(removed / rewritten).c_str() : "0",
            Thousands(static_cast<double>(r.after.defrag_blocks - r.before.defrag_blocks)).c_str());
      }
    }
  }

  void PrintRatios() const {
    const Subject* seg = nullptr;
    for (const Subject& s : subjects_) {
      if (s.segstore) seg = &s;
    }
    if (seg == nullptr) return;
    bool header = false;
    for (const Row& row : rows_) {
      if (row.subject == seg->label || IsResp(row.subject)) continue;
      const Row* ours = Find(seg->label, row.workload);
      if (ours == nullptr || row.run.ops_per_second() <= 0) continue;
      if (!header) {
        std::printf("\nsegstore against Redis, same run\n");
        header = true;
      }
      const auto c1 = CpuUsPerOp(ours->run), c2 = CpuUsPerOp(row.run);
      std::printf("%-13s vs %-14s %6.1fx the requests/s", row.workload.c_str(), row.subject.c_str(),
                  ours->run.ops_per_second() / row.run.ops_per_second());
      if (c1 && c2 && *c1 > 0) std::printf(", %6.1fx less server CPU per request", *c2 / *c1);
      std::printf(", p99 %s us against %s us\n",
                  Thousands(Us(ours->run.all.latency.Percentile(0.99))).c_str(),
                  Thousands(Us(row.run.all.latency.Percentile(0.99))).c_str());
    }
  }

  bool IsResp(const std::string& label) const {
    for (const Subject& s : subjects_) {
      if (s.resp && s.label == label) return true;
    }
    return false;
  }

  // Each RESP row beside the binary protocol's row of the same workload.
  void PrintRespRatios() const {
    const Subject* seg = nullptr;
    const Subject* resp = nullptr;
    for (const Subject& s : subjects_) {
      if (s.segstore) seg = &s;
      if (s.resp && !s.whole && resp == nullptr) resp = &s;
    }
    if (seg == nullptr || resp == nullptr) return;
    bool header = false;
    for (const Row& row : rows_) {
      if (row.subject != resp->label) continue;
      const Row* binary = Find(seg->label, row.workload);
      if (binary == nullptr || binary->run.ops_per_second() <= 0) continue;
      if (!header) {
        std::printf("\n%s against %s (the binary protocol), same run\n", resp->label.c_str(),
                    seg->label.c_str());
        header = true;
      }
      const auto c_resp = CpuUsPerOp(row.run), c_binary = CpuUsPerOp(binary->run);
      std::printf("%-13s %5.1f %% of the requests/s", row.workload.c_str(),
                  100 * row.run.ops_per_second() / binary->run.ops_per_second());
      if (c_resp && c_binary && *c_binary > 0) {
        std::printf(", %5.2fx the server CPU per request (%s us against %s us)",
                    *c_resp / *c_binary, Thousands(*c_resp).c_str(), Thousands(*c_binary).c_str());
      }
      std::printf(", p99 %s us against %s us\n",
                  Thousands(Us(row.run.all.latency.Percentile(0.99))).c_str(),
                  Thousands(Us(binary->run.all.latency.Percentile(0.99))).c_str());
    }
  }

  // segstore's HGETALL (--resp-hgetall) beside Redis's, workload by workload.
  void PrintHgetallRatios() const {
    bool header = false;
    for (const Row& row : rows_) {
      if (row.subject != "segstore HGETALL") continue;
      const Row* redis = Find("redis HGETALL", row.workload);
      if (redis == nullptr || redis->run.ops_per_second() <= 0) continue;
      if (!header) {
        std::printf("\nsegstore HGETALL (its RESP port) against redis HGETALL, same run\n");
        header = true;
      }
      const auto c_ours = CpuUsPerOp(row.run), c_redis = CpuUsPerOp(redis->run);
      std::printf("%-13s %6.2fx the requests/s", row.workload.c_str(),
                  row.run.ops_per_second() / redis->run.ops_per_second());
      if (c_ours && c_redis && *c_ours > 0) {
        std::printf(", %5.2fx less server CPU per request (%s us against %s us)",
                    *c_redis / *c_ours, Thousands(*c_ours).c_str(), Thousands(*c_redis).c_str());
      }
      std::printf(", p99 %s us against %s us\n",
                  Thousands(Us(row.run.all.latency.Percentile(0.99))).c_str(),
                  Thousands(Us(redis->run.all.latency.Percentile(0.99))).c_str());
    }
  }

  void PrintPerUser() const {
    std::optional<double> seg_total, redis_memory;
    bool header = false;
    for (const Subject& s : subjects_) {
      if (s.whole || (!s.load && s.loaded_by.empty())) continue;
      if (!header) {
        std::printf("\nper user, after the load\n");
        header = true;
      }
      if (!s.load) {
        std::printf("%-17s the same segstored as %s: loaded once, through it\n", s.label.c_str(),
                    s.loaded_by.c_str());
        continue;
      }
      const PerUser p = PerUserOf(s);
      std::printf("%-17s loaded %s users/s%s; memory %s B/user%s", s.label.c_str(),
                  Thousands(static_cast<double>(s.load->users) / s.load->seconds).c_str(),
                  s.load->fields ? " with their 25 fields" : "",
                  p.memory ? Thousands(*p.memory).c_str() : "?",
                  s.segstore || s.resp ? " (resident set growth)" : " (used_memory growth)");
      if (p.disk) std::printf(", disk %s B/user (write blocks in use)", Thousands(*p.disk).c_str());
      if (p.live) {
        std::printf(", records %.1f B/user on the device (live bytes' growth)", *p.live);
      }
      if (p.field_strings) {
        std::printf(", of which %.1f B/user string values of fields", *p.field_strings);
      }
      if (!p.note.empty()) std::printf(" [%s]", p.note.c_str());
      std::printf("\n");
      if (s.segstore && p.memory && p.disk) seg_total = *p.memory + *p.disk;
      if (!s.segstore && !s.resp && p.memory) redis_memory = *p.memory;
    }
    if (seg_total && redis_memory && *seg_total > 0) {
      std::printf("Redis memory per user / segstore memory + disk per user: %.1fx\n",
                  *redis_memory / *seg_total);
    }
  }

  void PrintLimits() const {
    if (!device_ && !ping_) return;
    std::printf("\nlimits\n");
    if (device_) {
      std::printf(
          "device: 4 KiB O_DIRECT random reads through io_uring: %s/s at QD%u (p50 %s us, p99 %s "
          "us); one at a time: p50 %s us (a %s MiB scratch file)\n",
          Thousands(device_->reads_per_second).c_str(), device_->queue_depth,
          Thousands(Us(device_->latency.Percentile(0.5))).c_str(),
          Thousands(Us(device_->latency.Percentile(0.99))).c_str(),
          Thousands(Us(device_->latency_depth1.Percentile(0.5))).c_str(),
          Thousands(static_cast<double>(device_->file_bytes >> 20)).c_str());
    }
    if (ping_) {
      std::printf(
          "ping: round trip p50 %s us (%s/s on one connection); %s pings/s on %u connections\n",
          Thousands(Us(ping_->round_trip.Percentile(0.5))).c_str(),
          Thousands(ping_->round_trips_per_second).c_str(),
          Thousands(ping_->pings_per_second).c_str(), ping_->connections);
    }
    for (const Row& row : rows_) {
      if (row.subject.rfind("segstore", 0) != 0) continue;
      if (row.run.spec.workload != Workload::kGet && row.run.spec.workload != Workload::kBatchGet) {
        continue;
      }
      if (row.workload.rfind("get-linked", 0) == 0) continue;  // k profiles a get
      const double users_per_s =
          row.run.ops_per_second() *
          (row.run.spec.workload == Workload::kBatchGet ? row.run.spec.batch : 1);
      std::printf("%s %s: %s users/s", row.subject.c_str(), row.workload.c_str(),
                  Thousands(users_per_s).c_str());
      if (device_ && device_->reads_per_second > 0) {
        std::printf(" = %.0f %% of the device's QD32 reads",
                    100 * users_per_s / device_->reads_per_second);
      }
      if (ping_ && ping_->pings_per_second > 0) {
        std::printf(", requests at %.0f %% of the ping rate",
                    100 * row.run.ops_per_second() / ping_->pings_per_second);
      }
      std::printf("\n");
    }
  }

  Options o_;
  std::vector<Subject> subjects_;
  std::vector<Row> rows_;
  Machine machine_;
  std::optional<DeviceLimit> device_;
  std::optional<PingLimit> ping_;
  bool warned_ = false;  // about a loose secret file
  // After link: its groups, and users [0, linked_users_) are linked.
  std::optional<GroupPlan> plan_;
  uint64_t linked_users_ = 0;
  bool link_asked_ = false;         // link ran (on a segstore subject or none)
  std::vector<std::string> notes_;  // workloads skipped, and why
};

}  // namespace
}  // namespace segstore::bench

int main(int argc, char** argv) {
  using segstore::bench::Options;
  CLI::App app{"segbench: the reference workload against segstore (and Redis), measured"};
  Options o;
  app.add_option("workloads", o.workloads,
                 "limits load get get-zipf batch-get get-70 get-80 upsert mixed trim mixed-busy, "
                 "or all; and profile bridging's (never in all): link get-linked get-50 "
                 "get-linked-50; and profile fields' (never in all): get-fields incr upsert-1")
      ->required();
  app.add_option("--segstore", o.segstore, "host:port of segstored (default 127.0.0.1:7700)");
  segstore::tools::AddClientFlags(&app, &o.security);
  app.add_option("--resp", o.resp,
                 "host:port of segstored's RESP port (--resp-listen) to run the same workloads "
                 "on, through SEG.* commands");
  app.add_option("--redis", o.redis, "host:port of a Redis to run the same workloads on");
  app.add_flag("--resp-hgetall", o.resp_hgetall,
               "reads also through HGETALL on --resp (\"segstore HGETALL\"), beside "
               "Redis's plain HGETALL when --redis is given");
  app.add_option("--users", o.spec.users,
                 "users in the data set (default 100000; full size 500000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  app.add_option("--connections", o.spec.connections, "connections (default 32)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--depth", o.spec.depth, "requests in flight per connection (default 1)")
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--threads", o.spec.threads, "client threads (default 1)")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--seconds", o.spec.seconds, "measured seconds per run (default 20)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.spec.warmup_seconds,
                 "unmeasured seconds before each run (default 3)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rate", o.spec.rate,
                 "open loop: requests a second over all connections (default: closed loop; "
                 "get-70, get-80, get-50 and get-linked-50 use it instead of their share of get)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", o.spec.batch, "users per batch get (default 20)")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--zipf", o.zipf, "get-zipf's exponent (default 0.99)")
      ->check(CLI::Range(0.01, 10.0));
  app.add_option("--trim-expire", o.trim_expire,
                 "share of segments made to expire before trim (0.10)")
      ->check(CLI::Range(0.001, 1.0));
  app.add_option("--busy-expire", o.busy_expire,
                 "share of segments made to expire before mixed-busy (0.50)")
      ->check(CLI::Range(0.001, 1.0));
  app.add_option("--load-connections", o.load_connections,
                 "connections for load and link (default 4)")
      ->check(CLI::Range(1u, 256u));
  auto* group_min =
      app.add_option("--group-min", o.group_min,
                     "link: the smallest group, master included (default 2); sizes are uniform "
                     "in [--group-min, --group-max]")
          ->check(CLI::Range(2u, 1u << 20));
  auto* group_max =
      app.add_option("--group-max", o.group_max,
                     "link: the largest group, master included (default 10; at most the "
                     "server's profile.max_links + 1)")
          ->check(CLI::Range(2u, 1u << 20));
  app.add_option("--group-size", o.group_size,
                 "link: every group this size (--group-min = --group-max = K)")
      ->check(CLI::Range(2u, 1u << 20))
      ->excludes(group_min)
      ->excludes(group_max);
  app.add_option("--linked-share", o.linked_share,
                 "link: the share of the users linked, the first ones (default 0.5); every "
                 "other workload after link draws from the rest")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--fields", o.fields,
               "load also gives each user the workload's 25 profile fields (segstore's binary "
               "protocol to a single server)");
  app.add_flag("--ids-only", o.ids_only,
               "segstore gets ask for segment IDs only (binary protocol and RESP)");
  app.add_option("--limits-dir", o.limits_dir,
                 "where limits writes its scratch file (default: the data file's directory)");
  app.add_option("--limits-file-mib", o.limits_file_mib, "the scratch file's size (default 1024)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  app.add_flag("--json", o.json, "print JSON instead of the table");
  app.add_option("--json-file", o.json_file, "also write the JSON report to this file");
  CLI11_PARSE(app, argc, argv);
  return segstore::bench::Bench(std::move(o)).Main();
}
