// segctl: the operator's command line for a segstore server. One command per
// run, through the client library (include/segstore/client.h); tables for
// people, --json for scripts. `segctl --help` and `segctl <command> --help`
// list everything.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/field_parser.h"
#include "proto/protocol.h"
#include "segstore/client.h"
#include "segstore/cluster_client.h"
#include "tools/client_flags.h"
#include "tools/backup.h"
#include "tools/export.h"
#include "tools/load.h"
#include "tools/stats_table.h"

// Field names parsed here (field files, NAME=VALUE) go out on the wire: the
// loader's limit is the protocol's.
static_assert(segstore::loader::kMaxFieldNameBytes == segstore::proto::kMaxFieldNameBytes,
              "the loader and the wire agree on the longest field name");

namespace {

using json = nlohmann::ordered_json;
using segstore::Result;
using segstore::Status;
namespace client = segstore::client;

uint32_t Now() { return static_cast<uint32_t>(std::time(nullptr)); }

// "2026-12-01 00:00:00" (UTC), or "never".
std::string FormatTime(uint32_t t) {
  if (t == 0) return "never";
  const std::time_t tt = t;
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// "8d 3h", "4h 12m", "59s", "expired", "-".
std::string FormatLeft(uint32_t t, uint32_t now) {
  if (t == 0) return "-";
  if (t <= now) return "expired";
  uint64_t s = t - now;
  const uint64_t d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60;
  s %= 60;
  if (d > 0) return std::to_string(d) + "d " + std::to_string(h) + "h";
  if (h > 0) return std::to_string(h) + "h " + std::to_string(m) + "m";
  if (m > 0) return std::to_string(m) + "m " + std::to_string(s) + "s";
  return std::to_string(s) + "s";
}

// The whole of `text` as an integer of *v's type; `kind` names the type in
// the error ("an unsigned integer").
template <typename Int>
Status ParseInteger(std::string_view text, std::string_view what, std::string_view kind, Int* v) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(std::string(what) + " \"" + std::string(text) + "\" is not " +
                                   std::string(kind));
  }
  return Status::OK();
}

Status ParseU64(std::string_view text, std::string_view what, uint64_t* v) {
  return ParseInteger(text, what, "an unsigned integer", v);
}

Status ParseI64(std::string_view text, std::string_view what, int64_t* v) {
  return ParseInteger(text, what, "a 64-bit integer", v);
}

// A duration: "90", "90s", "15m", "5h", "30d".
Status ParseDuration(std::string_view text, uint32_t* seconds) {
  uint64_t mult = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 's':
        mult = 1;
        text.remove_suffix(1);
        break;
      case 'm':
        mult = 60;
        text.remove_suffix(1);
        break;
      case 'h':
        mult = 3600;
        text.remove_suffix(1);
        break;
      case 'd':
        mult = 86400;
        text.remove_suffix(1);
        break;
      default:
        break;
    }
  }
  uint64_t v = 0;
  SEGSTORE_RETURN_IF_ERROR(ParseU64(text, "duration", &v));
  if (v > UINT32_MAX / mult) return Status::InvalidArgument("duration is too long");
  *seconds = static_cast<uint32_t>(v * mult);
  return Status::OK();
}

// A point in time: "never", Unix seconds, or "YYYY-MM-DDTHH:MM:SSZ".
Status ParseTime(std::string_view text, uint32_t* t) {
  if (text == "never") {
    *t = 0;
    return Status::OK();
  }
  if (text.find('-') != std::string_view::npos) {
    std::tm tm{};
    const std::string s(text);
    const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == nullptr || (*end != '\0' && std::string_view(end) != "Z")) {
      return Status::InvalidArgument("time \"" + s + "\": expected YYYY-MM-DDTHH:MM:SSZ (UTC)");
    }
    const int64_t v = timegm(&tm);
    if (v <= 0 || v > UINT32_MAX)
      return Status::InvalidArgument("time \"" + s + "\" is out of range");
    *t = static_cast<uint32_t>(v);
    return Status::OK();
  }
  uint64_t v = 0;
  SEGSTORE_RETURN_IF_ERROR(ParseU64(text, "time", &v));
  if (v > UINT32_MAX) return Status::InvalidArgument("time is out of range");
  *t = static_cast<uint32_t>(v);
  return Status::OK();
}

// ID@WHEN[,a1=N][,a2=N]; WHEN is +DURATION (a TTL), a time, or "never".
Status ParseSegment(std::string_view text, segstore::SegmentUpdate* u) {
  const std::string whole(text);
  const size_t at = text.find('@');
  if (at == std::string_view::npos) {
    return Status::InvalidArgument("segment \"" + whole +
                                   "\": expected ID@WHEN, e.g. 5484@+5h or 5484@never");
  }
  SEGSTORE_RETURN_IF_ERROR(ParseU64(text.substr(0, at), "segment ID", &u->id));
  std::string_view rest = text.substr(at + 1);
  std::string_view when = rest.substr(0, rest.find(','));
  rest = when.size() < rest.size() ? rest.substr(when.size() + 1) : std::string_view();
  if (!when.empty() && when.front() == '+') {
    u->ttl = true;
    SEGSTORE_RETURN_IF_ERROR(ParseDuration(when.substr(1), &u->value));
  } else {
    u->ttl = false;
    SEGSTORE_RETURN_IF_ERROR(ParseTime(when, &u->value));
  }
  while (!rest.empty()) {
    std::string_view attr = rest.substr(0, rest.find(','));
    rest = attr.size() < rest.size() ? rest.substr(attr.size() + 1) : std::string_view();
    uint64_t v = 0;
    if (attr.starts_with("a1=")) {
      SEGSTORE_RETURN_IF_ERROR(ParseU64(attr.substr(3), "a1", &v));
      if (v > UINT32_MAX) return Status::InvalidArgument("a1 is over 2^32-1");
      u->attr1 = static_cast<uint32_t>(v);
    } else if (attr.starts_with("a2=")) {
      SEGSTORE_RETURN_IF_ERROR(ParseU64(attr.substr(3), "a2", &v));
      if (v > UINT32_MAX) return Status::InvalidArgument("a2 is over 2^32-1");
      u->attr2 = static_cast<uint32_t>(v);
    } else {
      return Status::InvalidArgument("segment \"" + whole + "\": unknown part \"" +
                                     std::string(attr) + "\" (a1=N or a2=N)");
    }
  }
  return Status::OK();
}

// expire's WHEN: +DURATION (a TTL: seconds from the server's now), a time,
// or "never"; and its --condition.
Status ParseExpiry(std::string_view when, std::string_view condition, segstore::ExpireSpec* spec) {
  if (!when.empty() && when.front() == '+') {
    spec->ttl = true;
    SEGSTORE_RETURN_IF_ERROR(ParseDuration(when.substr(1), &spec->value));
  } else {
    spec->ttl = false;
    SEGSTORE_RETURN_IF_ERROR(ParseTime(when, &spec->value));
  }
  using C = segstore::ExpireCondition;
  if (condition.empty()) {
    spec->condition = C::kNone;
  } else if (condition == "nx") {
    spec->condition = C::kNx;
  } else if (condition == "xx") {
    spec->condition = C::kXx;
  } else if (condition == "gt") {
    spec->condition = C::kGt;
  } else if (condition == "lt") {
    spec->condition = C::kLt;
  } else {
    return Status::InvalidArgument("--condition must be nx, xx, gt or lt");
  }
  return Status::OK();
}

// ---- profile fields ----

// NAME=VALUE (the name ends at the first '='). VALUE by the rule of field
// files (loader::ParseFieldValue, field_parser.h): TYPE:VALUE, or untyped a
// JSON number (int or double), else a str. Its size is the server's to judge
// (LimitExceeded past its max_field_bytes), not a limit guessed here.
Status ParseFieldArg(std::string_view text, segstore::FieldUpdate* u) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return Status::InvalidArgument("field \"" + std::string(text) +
                                   "\": expected NAME=VALUE, e.g. country=str:FR or visits=3");
  }
  u->name = std::string(text.substr(0, eq));
  Status s =
      segstore::loader::ParseFieldValue(text.substr(eq + 1), segstore::loader::FieldType::kAuto,
                                        std::numeric_limits<uint32_t>::max(), &u->value);
  if (!s.ok()) return Status::InvalidArgument("field " + u->name + ": " + std::string(s.message()));
  return Status::OK();
}

const char* FieldTypeName(segstore::FieldValue::Type t) {
  switch (t) {
    case segstore::FieldValue::Type::kInt:
      return "int";
    case segstore::FieldValue::Type::kDouble:
      return "double";
    case segstore::FieldValue::Type::kString:
      return "str";
    case segstore::FieldValue::Type::kBytes:
      return "bytes";
    case segstore::FieldValue::Type::kTime:
      return "time";
  }
  return "unknown";
}

std::string Hex(std::string_view bytes) {
  std::string out;
  char buf[3];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

// A value for people: bytes in hex, a time in UTC.
std::string FieldText(const segstore::FieldValue& v) {
  switch (v.type) {
    case segstore::FieldValue::Type::kInt:
      return std::to_string(v.i);
    case segstore::FieldValue::Type::kDouble: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.d);
      return buf;
    }
    case segstore::FieldValue::Type::kString:
      return v.s;
    case segstore::FieldValue::Type::kBytes:
      return Hex(v.s);
    case segstore::FieldValue::Type::kTime:
      return FormatTime(static_cast<uint32_t>(v.i));
  }
  return "";
}

// A value for scripts: ints, doubles and times (Unix seconds) as numbers,
// strings as strings, bytes as hex.
json FieldValueJson(const segstore::FieldValue& v) {
  switch (v.type) {
    case segstore::FieldValue::Type::kInt:
    case segstore::FieldValue::Type::kTime:
      return v.i;
    case segstore::FieldValue::Type::kDouble:
      return v.d;
    case segstore::FieldValue::Type::kString:
      return v.s;
    case segstore::FieldValue::Type::kBytes:
      return Hex(v.s);
  }
  return nullptr;
}

const char* OutcomeName(segstore::ExpireOutcome o) {
  switch (o) {
    case segstore::ExpireOutcome::kMissing:
      return "missing";
    case segstore::ExpireOutcome::kSet:
      return "set";
    case segstore::ExpireOutcome::kRemoved:
      return "removed";
    case segstore::ExpireOutcome::kUnchanged:
      return "unchanged";
  }
  return "unknown";
}

json StatusJson(const Status& s) {
  return json{
      {"error",
       {{"code", std::string(Status::CodeName(s.code()))}, {"message", std::string(s.message())}}}};
}

json GetJson(const segstore::GetResult& r, bool ids_only) {
  json out{{"count", r.count}};
  if (!r.master.empty()) {
    out["master"] = r.master;
    out["profiles"] = r.profiles;
  }
  if (ids_only) {
    out["ids"] = r.ids;
    return out;
  }
  json segs = json::array();
  for (size_t i = 0; i < r.size(); ++i) {
    const segstore::Segment s = r.At(i);
    json e{{"id", s.id}, {"expires_at", s.expires_at}};
    if (s.attr1) e["attr1"] = *s.attr1;
    if (s.attr2) e["attr2"] = *s.attr2;
    segs.push_back(std::move(e));
  }
  out["segments"] = std::move(segs);
  return out;
}

// {"fields": {name: {"type", "value", "expires_at"}...}} beside a get's answer.
void AddFieldsJson(const segstore::GetResult& r, json* out) {
  if (!r.fields_asked) return;
  json fields = json::object();
  for (const segstore::Field& f : r.fields) {
    fields[f.name] = json{{"type", FieldTypeName(f.value.type)},
                          {"value", FieldValueJson(f.value)},
                          {"expires_at", f.expires_at}};
  }
  (*out)["fields"] = std::move(fields);
}

void PrintFields(const segstore::GetResult& r) {
  if (!r.fields_asked) return;
  std::printf("%zu fields\n", r.fields.size());
  if (r.fields.empty()) return;
  const uint32_t now = Now();
  std::printf("%-24s  %-6s  %-24s  %-19s  %-9s\n", "FIELD", "TYPE", "VALUE", "EXPIRES (UTC)",
              "LEFT");
  for (const segstore::Field& f : r.fields) {
    std::printf("%-24s  %-6s  %-24s  %-19s  %-9s\n", f.name.c_str(), FieldTypeName(f.value.type),
                FieldText(f.value).c_str(), FormatTime(f.expires_at).c_str(),
                FormatLeft(f.expires_at, now).c_str());
  }
}

void PrintGet(const std::string& user, const segstore::GetResult& r, bool ids_only,
              bool count_only) {
  if (count_only) {
    std::printf("%s: %u matching live segments\n", user.c_str(), r.count);
    return;
  }
  std::printf("%s: %u matching live segments%s\n", user.c_str(), r.count,
              r.size() < r.count ? (", showing " + std::to_string(r.size())).c_str() : "");
  if (!r.master.empty()) {
    std::printf("(the merged view of %u linked profiles, master %s)\n", r.profiles,
                r.master.c_str());
  }
  if (ids_only) {
    for (size_t i = 0; i < r.size(); ++i)
      std::printf("%llu\n", static_cast<unsigned long long>(r.ids[i]));
    return;
  }
  const uint32_t now = Now();
  std::printf("%-20s  %-19s  %-9s  %-10s  %-10s\n", "SEGMENT", "EXPIRES (UTC)", "LEFT", "ATTR1",
              "ATTR2");
  for (size_t i = 0; i < r.size(); ++i) {
    const segstore::Segment s = r.At(i);
    std::printf("%-20llu  %-19s  %-9s  %-10s  %-10s\n", static_cast<unsigned long long>(s.id),
                FormatTime(s.expires_at).c_str(), FormatLeft(s.expires_at, now).c_str(),
                s.attr1 ? std::to_string(*s.attr1).c_str() : "-",
                s.attr2 ? std::to_string(*s.attr2).c_str() : "-");
  }
}

struct Args {
  std::string server = "127.0.0.1:7700";
  uint32_t timeout_ms = 5000;
  bool json = false;
  segstore::tools::ClientFlags security;  // --tls*, --auth-secret-file
  std::string user;
  bool ids_only = false;
  bool count_only = false;
  std::string id_from, id_to, expiring_from, expiring_to, before;
  bool outside = false;
  uint32_t limit = 0;
  std::string mode = "set";
  std::string when;                // expire: the new expiry
  std::string condition;           // expire: nx, xx, gt or lt
  std::vector<std::string> items;  // segments or IDs
  // profile bridging
  bool own = false;    // get: the user's own profile only
  std::string master;  // link: the master; connected: the other user
  std::string ttl;     // link: how long it lasts (empty: never)
  std::string cursor;  // links: start after this user
  bool all = false;    // links: every page
  // profile fields
  bool fields_given = false;  // get: --fields was given (with names or not)
  std::string fields;         // get: comma-separated names (empty: all)
  std::string field_prefix;   // get: names starting with this
  std::string field_ttl;      // field-set, field-max: --ttl
  std::string field_expiry;   // field-set, field-max: --expiry
  std::string name;           // incr: the counter
  std::string by = "1";       // incr: the delta
  std::string cap;            // incr: the cap (empty: none)
  bool sliding = false;       // incr: every increment restarts the TTL
  // load
  std::vector<std::string> files;
  std::string format = "auto";
  std::string delimiter = "auto";
  std::string default_ttl;
  bool dry_run = false;
  uint64_t max_errors = 0;
  unsigned connections = 4;
  uint32_t batch_users = 100;
  uint64_t memory_mib = 1024;
  bool no_progress = false;
  bool links_files = false;   // load --links
  bool fields_files = false;  // load --fields
  std::string field_type;     // load --fields: the type of values without a TYPE: prefix
  unsigned in_flight = 0;     // load: per connection (0: 4 batches, 16 links or field sets)
  // export
  std::string out_dir;
  std::string export_format = "rows";
  bool live_only = false;
  std::string partitions;  // "A-B" or "P"
  std::string prefix;
  uint32_t page_bytes = 0;
  // backup, restore
  std::string backup_file;
  bool resume = false;
  double rate_users = 0;
  double rate_mb = 0;
};

// Applies a.security to `options`; a loose secret file is warned about on stderr.
Status ApplySecurity(const Args& a, client::ClientOptions* options) {
  std::string warning;
  SEGSTORE_RETURN_IF_ERROR(segstore::tools::ApplyClientFlags(a.security, options, &warning));
  if (!warning.empty()) std::fprintf(stderr, "segctl: warning: %s\n", warning.c_str());
  return Status::OK();
}

// Parses --partitions A-B (or P) into *from and *to.
Status ParsePartitions(const std::string& text, uint32_t* from, uint32_t* to) {
  if (text.empty()) return Status::OK();
  const size_t dash = text.find('-');
  const std::string a = text.substr(0, dash);
  const std::string b = dash == std::string::npos ? a : text.substr(dash + 1);
  auto number = [](const std::string& t, uint32_t* v) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
    return ec == std::errc() && end == t.data() + t.size() && !t.empty();
  };
  if (!number(a, from) || !number(b, to) || *from > *to || *to >= segstore::kPartitions) {
    return Status::InvalidArgument("--partitions " + text +
                                   ": give A-B (or one partition), 0 <= A <= B <= 4095");
  }
  return Status::OK();
}

// `segctl export`: exit status 0 when everything was written, 1 when some
// users, fields or links could not be (left out and counted), 2 when it
// stopped (a partition no server answered, a file not written).
int RunExportCommand(const Args& a) {
  segstore::tools::ExportOptions o;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "segctl export: %s\n", s.ToString().c_str());
    return 2;
  };
  if (Status s = client::ParseServerAddress(a.server, &o.client); !s.ok()) return fail(s);
  o.client.connect_timeout = std::chrono::milliseconds(a.timeout_ms);
  o.client.request_timeout = std::chrono::milliseconds(std::max<uint32_t>(a.timeout_ms, 30000));
  o.client.client_name = "segctl export";
  if (Status s = ApplySecurity(a, &o.client); !s.ok()) return fail(s);
  o.out_dir = a.out_dir;
  if (a.export_format != "rows" && a.export_format != "grouped") {
    return fail(Status::InvalidArgument("--format must be rows or grouped"));
  }
  o.grouped = a.export_format == "grouped";
  if (Status s = ParsePartitions(a.partitions, &o.partition_from, &o.partition_to); !s.ok()) {
    return fail(s);
  }
  o.prefix = a.prefix;
  o.page_bytes = a.page_bytes;
  o.progress = !a.no_progress;
  segstore::tools::ExportStats stats;
  const Status s = segstore::tools::RunExport(o, &stats);
  if (!s.ok() && s.code() != Status::Code::kInvalidArgument) return fail(s);
  const double mb = static_cast<double>(stats.bytes_read) / 1e6;
  const double secs = std::max(stats.seconds, 1e-9);
  if (a.json) {
    nlohmann::json j = {{"partitions", stats.partitions}, {"users", stats.users},
                        {"segments", stats.segments},     {"fields", stats.fields},
                        {"links", stats.links},           {"bytes_read", stats.bytes_read},
                        {"unwritable", stats.unwritable}, {"attributes_dropped", stats.attributes_dropped},
                        {"seconds", stats.seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "exported %llu users (%llu segments, %llu fields, %llu links) of %llu partitions to %s "
        "in %.1f s: %.0f users/s, %.1f MB/s\n",
        static_cast<unsigned long long>(stats.users),
        static_cast<unsigned long long>(stats.segments),
        static_cast<unsigned long long>(stats.fields), static_cast<unsigned long long>(stats.links),
        static_cast<unsigned long long>(stats.partitions), o.out_dir.c_str(), stats.seconds,
        static_cast<double>(stats.users) / secs, mb / secs);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "segctl export: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

// `segctl backup` and `segctl restore`: exit status 0 when done, 1 when a
// restore ran to the end but the store refused some users or links, 2
// when they stopped (a damaged, newer or incomplete file, a partition no
// server answered, a file not written).
int RunBackupCommand(const Args& a, bool restore) {
  const char* name = restore ? "restore" : "backup";
  auto fail = [name](const Status& s) {
    std::fprintf(stderr, "segctl %s: %s\n", name, s.ToString().c_str());
    return 2;
  };
  client::ClientOptions co;
  if (Status s = client::ParseServerAddress(a.server, &co); !s.ok()) return fail(s);
  co.connect_timeout = std::chrono::milliseconds(a.timeout_ms);
  co.request_timeout = std::chrono::milliseconds(std::max<uint32_t>(a.timeout_ms, 30000));
  co.client_name = std::string("segctl ") + name;
  if (Status s = ApplySecurity(a, &co); !s.ok()) return fail(s);
  if (restore) {
    segstore::tools::RestoreOptions o;
    o.client = co;
    o.path = a.backup_file;
    o.progress = !a.no_progress;
    segstore::tools::RestoreStats st;
    const Status s = segstore::tools::RunRestore(o, &st);
    if (!s.ok() && (st.users == 0 || s.code() != Status::Code::kInvalidArgument)) return fail(s);
    const double secs = std::max(st.seconds, 1e-9);
    if (a.json) {
      nlohmann::json j = {{"users", st.users},
                          {"segments", st.segments},
                          {"fields", st.fields},
                          {"links", st.links},
                          {"expired", st.expired},
                          {"failed", st.failed},
                          {"member_fields_skipped", st.member_fields_skipped},
                          {"bytes", st.file_bytes},
                          {"seconds", st.seconds}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("restored %llu users (%llu segments, %llu fields, %llu links; %llu expired "
                  "since the backup) in %.1f s: %.0f users/s, %.1f MB/s of backup\n",
                  static_cast<unsigned long long>(st.users),
                  static_cast<unsigned long long>(st.segments),
                  static_cast<unsigned long long>(st.fields),
                  static_cast<unsigned long long>(st.links),
                  static_cast<unsigned long long>(st.expired), st.seconds,
                  static_cast<double>(st.users) / secs,
                  static_cast<double>(st.file_bytes) / 1e6 / secs);
      if (st.member_fields_skipped > 0) {
        std::printf(
            "left out %llu fields of users the store has as linked members (a field "
            "write of a member changes its master's)\n",
            static_cast<unsigned long long>(st.member_fields_skipped));
      }
    }
    if (!s.ok()) {
      std::fprintf(stderr, "segctl restore: %s\n", s.ToString().c_str());
      return 1;
    }
    return 0;
  }
  segstore::tools::BackupOptions o;
  o.client = co;
  o.path = a.backup_file;
  o.resume = a.resume;
  if (Status s = ParsePartitions(a.partitions, &o.partition_from, &o.partition_to); !s.ok()) {
    return fail(s);
  }
  if (a.resume && !a.partitions.empty()) {
    return fail(Status::InvalidArgument("--resume takes the file's partitions; leave out "
                                        "--partitions"));
  }
  o.users_per_second = a.rate_users;
  o.mb_per_second = a.rate_mb;
  o.page_bytes = a.page_bytes;
  o.progress = !a.no_progress;
  segstore::tools::BackupStats st;
  if (Status s = segstore::tools::RunBackup(o, &st); !s.ok()) return fail(s);
  if (st.already_complete) {
    std::printf("%s is a complete backup already: nothing to do\n", o.path.c_str());
    return 0;
  }
  const double secs = std::max(st.seconds, 1e-9);
  if (a.json) {
    nlohmann::json j = {{"partitions", st.partitions}, {"users", st.users},
                        {"raw_bytes", st.raw_bytes},   {"file_bytes", st.file_bytes},
                        {"resumed_at", st.resumed_at}, {"seconds", st.seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("backed up %llu users of %llu partitions (from partition %u) to %s in %.1f s: "
                "%.0f users/s, %.1f MB/s (%.1f MB compressed to %.1f MB)\n",
                static_cast<unsigned long long>(st.users),
                static_cast<unsigned long long>(st.partitions), st.resumed_at, o.path.c_str(),
                st.seconds, static_cast<double>(st.users) / secs,
                static_cast<double>(st.raw_bytes) / 1e6 / secs,
                static_cast<double>(st.raw_bytes) / 1e6, static_cast<double>(st.file_bytes) / 1e6);
  }
  return 0;
}

// `mode_given`: --mode was on the command line (it does not apply to links
// or fields).
int RunLoadCommand(const Args& a, bool mode_given) {
  segstore::tools::LoadOptions o;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "segctl load: %s\n", s.ToString().c_str());
    return 2;
  };
  if (Status s = client::ParseServerAddress(a.server, &o.client); !s.ok()) return fail(s);
  o.client.connect_timeout = std::chrono::milliseconds(a.timeout_ms);
  o.client.request_timeout = std::chrono::milliseconds(std::max<uint32_t>(a.timeout_ms, 30000));
  o.client.client_name = "segctl load";
  if (Status s = ApplySecurity(a, &o.client); !s.ok()) return fail(s);
  o.files = a.files;
  o.links = a.links_files;
  o.fields = a.fields_files;
  if (!a.field_type.empty() && !o.fields) {
    return fail(Status::InvalidArgument("--field-type is for --fields files"));
  }
  if (o.fields) {
    if (o.links) return fail(Status::InvalidArgument("--links and --fields: give one of them"));
    if (a.format != "auto") {
      return fail(Status::InvalidArgument(
          "--format does not apply to --fields (one field a row; --delimiter says comma or tab)"));
    }
    if (mode_given) return fail(Status::InvalidArgument("--mode does not apply to --fields"));
    if (!a.field_type.empty() &&
        !segstore::loader::ParseFieldTypeName(a.field_type, &o.field_parse.untyped)) {
      return fail(
          Status::InvalidArgument("--field-type must be auto, int, double, str, bytes or time"));
    }
  } else if (o.links) {
    if (a.format == "rows") {
      o.link_parse.format = segstore::loader::LinkFormat::kRows;
    } else if (a.format == "components") {
      o.link_parse.format = segstore::loader::LinkFormat::kComponents;
    } else if (a.format != "auto") {
      return fail(
          Status::InvalidArgument("--format with --links must be auto, rows or components"));
    }
    if (mode_given) return fail(Status::InvalidArgument("--mode does not apply to --links"));
  } else if (a.format == "rows") {
    o.parse.format = segstore::loader::Format::kRows;
  } else if (a.format == "grouped") {
    o.parse.format = segstore::loader::Format::kGrouped;
  } else if (a.format != "auto") {
    return fail(Status::InvalidArgument(a.format == "components"
                                            ? "--format components is for --links files"
                                            : "--format must be auto, rows or grouped"));
  }
  if (a.delimiter == "comma" || a.delimiter == ",") {
    o.parse.delimiter = ',';
  } else if (a.delimiter == "tab" || a.delimiter == "\\t") {
    o.parse.delimiter = '\t';
  } else if (a.delimiter != "auto") {
    return fail(Status::InvalidArgument("--delimiter must be auto, comma or tab"));
  }
  o.link_parse.delimiter = o.parse.delimiter;
  o.field_parse.delimiter = o.parse.delimiter;
  if (!a.default_ttl.empty()) {
    uint32_t ttl = 0;
    if (Status s = ParseDuration(a.default_ttl, &ttl); !s.ok()) return fail(s);
    if (ttl == 0) return fail(Status::InvalidArgument("--default-ttl must be positive"));
    o.parse.default_ttl = ttl;
    o.link_parse.default_ttl = ttl;
    o.field_parse.default_ttl = ttl;
  }
  o.parse.now = Now();
  o.link_parse.now = o.parse.now;
  o.field_parse.now = o.parse.now;
  if (a.mode == "extend") {
    o.mode = segstore::UpsertMode::kExtend;
  } else if (a.mode != "set") {
    return fail(Status::InvalidArgument("--mode for load must be set or extend"));
  }
  o.dry_run = a.dry_run;
  o.max_errors = a.max_errors;
  o.connections = std::max(1u, a.connections);
  o.in_flight = a.in_flight != 0 ? a.in_flight : o.links || o.fields ? 16 : 4;
  o.batch_users = std::max<uint32_t>(1, a.batch_users);
  o.memory_bytes = std::max<uint64_t>(1, a.memory_mib) << 20;
  o.json = a.json;
  o.progress = !a.no_progress;
  return segstore::tools::RunLoad(o);
}

// One node's part in a cluster with a log, from its stats: whether it caught
// up with the log, how many log partitions it marks stale, and how far
// behind it is (entries, summed over log partitions; seconds, the most).
struct NodeReplica {
  bool reached = false;
  std::string error;  // when not reached
  bool caught_up = false;
  uint64_t stale = 0;
  uint64_t lag_entries = 0;
  double lag_seconds = 0;
};

NodeReplica AskReplica(const std::string& address, client::ClientOptions options) {
  NodeReplica r;
  if (Status s = client::ParseServerAddress(address, &options); !s.ok()) {
    r.error = s.ToString();
    return r;
  }
  options.hello = false;
  auto c = client::Client::Connect(options);
  Result<segstore::Stats> stats = c.ok() ? (*c)->Stats() : Result<segstore::Stats>(c.status());
  if (!stats.ok()) {
    r.error = stats.status().ToString();
    return r;
  }
  r.reached = true;
  auto number = [](const segstore::StatEntry& e) -> double {
    if (const auto* u = std::get_if<uint64_t>(&e.value)) return static_cast<double>(*u);
    if (const auto* d = std::get_if<double>(&e.value)) return *d;
    return 0;
  };
  for (const segstore::StatEntry& e : stats->entries) {
    if (e.name == "replica.caught_up") r.caught_up = number(e) != 0;
    if (e.name == "replica.log_partitions_stale") r.stale = static_cast<uint64_t>(number(e));
    if (e.name.rfind("replica.lag_entries.", 0) == 0)
      r.lag_entries += static_cast<uint64_t>(number(e));
    if (e.name.rfind("replica.lag_seconds.", 0) == 0)
      r.lag_seconds = std::max(r.lag_seconds, number(e));
  }
  return r;
}

// The cluster's nodes, racks and partitions per node, as the node asked sees
// them; with a log, each node's replication state too (asked of each node).
void PrintCluster(const segstore::ClusterMap& m, bool as_json,
                  const std::vector<NodeReplica>& replicas) {
  std::vector<uint32_t> held(m.nodes.size(), 0), incoming(m.nodes.size(), 0);
  for (uint16_t i : m.replicas) ++held[i];
  for (const segstore::IncomingReplica& in : m.incoming) ++incoming[in.node];
  if (as_json) {
    json nodes = json::array();
    for (size_t i = 0; i < m.nodes.size(); ++i) {
      json n{{"id", m.nodes[i].id},
             {"address", m.nodes[i].address},
             {"rack", m.nodes[i].rack},
             {"partitions", held[i]},
             {"incoming", incoming[i]}};
      if (i < replicas.size()) {
        const NodeReplica& r = replicas[i];
        n["replica"] = r.reached ? json{{"caught_up", r.caught_up},
                                        {"log_partitions_stale", r.stale},
                                        {"lag_entries", r.lag_entries},
                                        {"lag_seconds", r.lag_seconds}}
                                 : json{{"error", r.error}};
      }
      nodes.push_back(std::move(n));
    }
    std::cout
        << json{{"cluster", m.cluster},         {"revision", m.revision}, {"self", m.self},
                {"replication", m.replication}, {"log", m.log},           {"passive", m.passive},
                {"moves", m.incoming.size()},   {"nodes", nodes}}
               .dump()
        << "\n";
    return;
  }
  if (!m.cluster) {
    std::printf("not a cluster: a single server, holding every partition\n");
    return;
  }
  if (!m.has_map()) {
    std::printf("a cluster with no partition map yet (forming); asked node %s\n", m.self.c_str());
    return;
  }
  std::printf("partition map revision %llu, replication %u, %zu nodes%s; asked node %s\n",
              static_cast<unsigned long long>(m.revision), m.replication, m.nodes.size(),
              m.passive ? ", passive: applies another cluster's log, takes no writes"
              : m.log   ? ", writes through a log"
                        : "",
              m.self.c_str());
  if (!m.incoming.empty()) {
    std::printf("%zu moves in progress (replicas being copied to the nodes under incoming)\n",
                m.incoming.size());
  }
  size_t id_width = 4, address_width = 7, rack_width = 4;
  for (const segstore::ClusterNode& n : m.nodes) {
    id_width = std::max(id_width, n.id.size());
    address_width = std::max(address_width, n.address.size());
    rack_width = std::max(rack_width, n.rack.size());
  }
  std::printf("%-*s  %-*s  %-*s  %10s  %8s%s\n", static_cast<int>(id_width), "node",
              static_cast<int>(address_width), "address", static_cast<int>(rack_width), "rack",
              "partitions", "incoming",
              replicas.empty() ? "" : "  log (caught up; stale log partitions; lag)");
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    std::string log;
    if (i < replicas.size()) {
      const NodeReplica& r = replicas[i];
      char buf[160];
      if (!r.reached) {
        std::snprintf(buf, sizeof buf, "  unreachable: %s", r.error.c_str());
      } else {
        std::snprintf(buf, sizeof buf, "  %s; %llu stale; %llu entries, %.1f s",
                      r.caught_up ? "caught up" : "catching up",
                      static_cast<unsigned long long>(r.stale),
                      static_cast<unsigned long long>(r.lag_entries), r.lag_seconds);
      }
      log = buf;
    }
    std::printf(
        "%-*s  %-*s  %-*s  %10u  %8u%s\n", static_cast<int>(id_width), m.nodes[i].id.c_str(),
        static_cast<int>(address_width), m.nodes[i].address.c_str(), static_cast<int>(rack_width),
        m.nodes[i].rack.empty() ? "-" : m.nodes[i].rack.c_str(), held[i], incoming[i], log.c_str());
  }
}

// ping, info, stats and cluster: about the node named by --server.
template <typename Fail>
int RunNodeCommand(const std::string& command, const Args& a, client::Client& c,
                   const client::ClientOptions& options, Fail fail) {
  if (command == "ping") {
    const auto start = std::chrono::steady_clock::now();
    if (Status s = c.Ping(); !s.ok()) return fail(s);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (a.json) {
      std::cout << json{{"ok", true}, {"round_trip_us", us}}.dump() << "\n";
    } else {
      std::printf("pong from %s in %.0f us\n", a.server.c_str(), us);
    }
    return 0;
  }
  if (command == "info") {
    const segstore::ServerInfo& i = c.server_info();
    if (a.json) {
      std::cout << json{{"server", i.server},
                        {"protocol", i.protocol},
                        {"max_frame_bytes", i.max_frame_bytes},
                        {"max_batch", i.max_batch},
                        {"max_key_bytes", i.max_key_bytes},
                        {"max_segments", i.max_segments},
                        {"max_in_flight", i.max_in_flight}}
                       .dump()
                << "\n";
    } else {
      std::printf(
          "%s, protocol %u\nmax_frame_bytes %u\nmax_batch %u\nmax_key_bytes %u\n"
          "max_segments %u\nmax_in_flight %u\n",
          i.server.c_str(), i.protocol, i.max_frame_bytes, i.max_batch, i.max_key_bytes,
          i.max_segments, i.max_in_flight);
    }
    return 0;
  }
  if (command == "stats") {
    auto r = c.Stats();
    if (!r.ok()) return fail(r.status());
    json out = json::object();
    for (const segstore::StatEntry& e : r->entries) {
      std::visit([&](const auto& v) { out[e.name] = v; }, e.value);
    }
    if (a.json) {
      std::cout << out.dump() << "\n";
    } else {
      std::fputs(segstore::tools::FormatStatsTable(*r).c_str(), stdout);
    }
    return 0;
  }
  if (command == "cluster") {
    auto r = c.ClusterMap();
    if (!r.ok()) return fail(r.status());
    std::vector<NodeReplica> replicas;
    if (r->log && r->has_map()) {
      for (const segstore::ClusterNode& n : r->nodes)
        replicas.push_back(AskReplica(n.address, options));
    }
    PrintCluster(*r, a.json, replicas);
    return 0;
  }
  return fail(Status::InvalidArgument("unknown command " + command));
}

// Exit status of get, count, remove, trim, expire and field-del for a user with no profile.
constexpr int kExitNoProfile = 3;

// Runs `command`; returns the exit code.
// Profile bridging's commands. NotFound from master-of and links (a user
// in no group) exits with kExitNoProfile, as a user without a profile does.
template <typename Fail>
int RunLinkCommand(const std::string& command, const Args& a, uint32_t ttl, client::Client& c,
                   Fail fail) {
  auto not_in_group = [&](const Status& s) {
    if (!s.IsNotFound()) return fail(s);
    if (a.json) {
      std::cout << StatusJson(s).dump() << "\n";
    } else {
      std::fprintf(stderr, "segctl: %s is in no group\n", a.user.c_str());
    }
    return kExitNoProfile;
  };
  if (command == "link") {
    auto r = c.Link(a.user, a.master, ttl);
    if (!r.ok()) return fail(r.status());
    if (a.json) {
      std::cout << json{{"master", r->master}, {"members", r->members}, {"moved", r->moved}}.dump()
                << "\n";
    } else {
      std::printf("%s linked to master %s (%u linked users%s)\n", a.user.c_str(), r->master.c_str(),
                  r->members,
                  r->moved > 0 ? (", " + std::to_string(r->moved) + " moved with it").c_str() : "");
    }
    return 0;
  }
  if (command == "unlink") {
    auto r = c.Unlink(a.user);
    if (!r.ok()) return fail(r.status());
    if (a.json) {
      std::cout << json{{"unlinked", *r}}.dump() << "\n";
    } else {
      std::printf(*r ? "%s unlinked\n" : "%s was in no group\n", a.user.c_str());
    }
    return 0;
  }
  if (command == "master-of") {
    auto r = c.MasterOf(a.user);
    if (!r.ok()) return not_in_group(r.status());
    if (a.json) {
      std::cout << json{{"master", *r}}.dump() << "\n";
    } else {
      std::printf("%s\n", r->c_str());
    }
    return 0;
  }
  if (command == "connected") {
    auto r = c.Connected(a.user, a.master);
    if (!r.ok()) return fail(r.status());
    if (a.json) {
      std::cout << json{{"connected", *r}}.dump() << "\n";
    } else {
      std::printf("%s\n", *r ? "connected" : "not connected");
    }
    return 0;
  }
  // links: one page, or with --all every page.
  std::string cursor = a.cursor;
  json rows = json::array();
  std::string master, next;
  const uint32_t now = Now();
  bool header = false;
  do {
    auto r = c.Links(a.user, cursor, a.limit);
    if (!r.ok()) return not_in_group(r.status());
    master = r->master;
    next = r->next;
    for (const segstore::LinkedUser& l : r->links) {
      if (a.json) {
        rows.push_back(json{{"user", l.user}, {"expires_at", l.expires_at}});
        continue;
      }
      if (!header) {
        std::printf("master %s\n%-40s  %-19s  %-9s\n", master.c_str(), "LINKED USER",
                    "EXPIRES (UTC)", "LEFT");
        header = true;
      }
      std::printf("%-40s  %-19s  %-9s\n", l.user.c_str(), FormatTime(l.expires_at).c_str(),
                  FormatLeft(l.expires_at, now).c_str());
    }
    cursor = next;
  } while (a.all && !next.empty());
  if (a.json) {
    json out{{"master", master}, {"links", rows}};
    if (!next.empty()) out["next"] = next;
    std::cout << out.dump() << "\n";
  } else if (!next.empty()) {
    std::printf("more: --cursor %s\n", next.c_str());
  }
  return 0;
}

// --ttl DURATION or --expiry TIME of field-set and field-max, onto each field.
Status ApplyFieldExpiry(const Args& a, segstore::FieldUpdate* u) {
  if (!a.field_ttl.empty() && !a.field_expiry.empty()) {
    return Status::InvalidArgument("--ttl and --expiry: give one or the other");
  }
  if (!a.field_ttl.empty()) {
    u->ttl = true;
    return ParseDuration(a.field_ttl, &u->expiry);
  }
  if (!a.field_expiry.empty()) return ParseTime(a.field_expiry, &u->expiry);
  return Status::OK();
}

// Profile fields' writes, through the cluster client as upsert's: to the
// node holding the user (a single server holds every user), retried as
// every write, with one write ID in a cluster with a log. Everything is
// parsed before connecting.
template <typename Fail, typename FailOrAbsent>
int RunFieldCommand(const std::string& command, const Args& a, const client::ClientOptions& options,
                    Fail fail, FailOrAbsent fail_or_absent) {
  std::vector<segstore::FieldUpdate> updates;
  if (command == "field-set" || command == "field-max") {
    for (const std::string& item : a.items) {
      segstore::FieldUpdate u;
      if (Status s = ParseFieldArg(item, &u); !s.ok()) return fail(s);
      if (Status s = ApplyFieldExpiry(a, &u); !s.ok()) return fail(s);
      updates.push_back(std::move(u));
    }
    if (command == "field-max" && updates.size() != 1) {
      return fail(Status::InvalidArgument("field-max takes one NAME=VALUE"));
    }
  }
  segstore::FieldIncrement inc;
  if (command == "incr") {
    inc.name = a.name;
    if (Status s = ParseI64(a.by, "--by", &inc.delta); !s.ok()) return fail(s);
    if (!a.field_ttl.empty()) {
      if (Status s = ParseDuration(a.field_ttl, &inc.ttl); !s.ok()) return fail(s);
    }
    if (a.sliding) inc.window = segstore::FieldIncrement::Window::kSliding;
    if (!a.cap.empty()) {
      int64_t cap = 0;
      if (Status s = ParseI64(a.cap, "--cap", &cap); !s.ok()) return fail(s);
      inc.cap = cap;
    }
  }
  client::ClusterClientOptions routed_options;
  routed_options.node = options;
  auto routed = client::ClusterClient::Connect(routed_options);
  if (!routed.ok()) return fail(routed.status());
  client::ClusterClient& c = **routed;

  if (command == "field-set" || command == "field-del") {
    const bool set = command == "field-set";
    auto r = set ? c.FieldSet(a.user, updates) : c.FieldDelete(a.user, a.items);
    if (!r.ok()) return fail_or_absent(r.status());
    if (a.json) {
      std::cout << json{{"changed", r->changed}, {"count", r->count}}.dump() << "\n";
    } else {
      std::printf("%u fields %s, %u live fields now\n", r->changed, set ? "set" : "deleted",
                  r->count);
    }
    return 0;
  }
  if (command == "incr") {
    auto r = c.FieldIncrement(a.user, inc);
    if (!r.ok()) return fail(r.status());
    if (a.json) {
      std::cout << json{{"value", r->value}, {"capped", r->capped}}.dump() << "\n";
    } else if (r->capped) {
      std::printf("%s = %lld (capped: %+lld would pass the cap %lld; nothing written)\n",
                  inc.name.c_str(), static_cast<long long>(r->value),
                  static_cast<long long>(inc.delta), static_cast<long long>(*inc.cap));
    } else {
      std::printf("%s = %lld\n", inc.name.c_str(), static_cast<long long>(r->value));
    }
    return 0;
  }
  // field-max
  auto r = c.FieldMax(a.user, updates.front());
  if (!r.ok()) return fail(r.status());
  if (a.json) {
    std::cout << json{{"type", FieldTypeName(r->value.type)},
                      {"value", FieldValueJson(r->value)},
                      {"replaced", r->replaced}}
                     .dump()
              << "\n";
  } else {
    std::printf("%s = %s (%s)\n", updates.front().name.c_str(), FieldText(r->value).c_str(),
                r->replaced ? "replaced" : "kept: the field's value is not smaller");
  }
  return 0;
}

int Run(const std::string& command, const Args& a) {
  client::ClientOptions options;
  auto fail = [&](const Status& s) {
    if (a.json) {
      std::cout << StatusJson(s).dump() << "\n";
    } else {
      std::fprintf(stderr, "segctl: %s\n", s.ToString().c_str());
    }
    if (const std::string hint = segstore::tools::ClientFlagsHint(options, s); !hint.empty()) {
      std::fprintf(stderr, "segctl: hint: %s\n", hint.c_str());
    }
    return 1;
  };
  // get, count, remove, trim and expire of a user with no live segment: not a
  // failure of the tool, but a different answer (exit status 3).
  auto fail_or_absent = [&](const Status& s) {
    if (!s.IsNotFound()) return fail(s);
    if (a.json) {
      std::cout << StatusJson(s).dump() << "\n";
    } else {
      std::fprintf(stderr, "segctl: %s has no profile\n", a.user.c_str());
    }
    return kExitNoProfile;
  };

  if (Status s = client::ParseServerAddress(a.server, &options); !s.ok()) return fail(s);
  options.connect_timeout = std::chrono::milliseconds(a.timeout_ms);
  options.request_timeout = std::chrono::milliseconds(a.timeout_ms);
  options.client_name = "segctl";
  options.hello = command == "info";
  if (Status s = ApplySecurity(a, &options); !s.ok()) return fail(s);
  if (command == "field-set" || command == "field-del" || command == "incr" ||
      command == "field-max") {
    return RunFieldCommand(command, a, options, fail, fail_or_absent);
  }

  // Everything is parsed before connecting: bad input never reaches the server.
  segstore::GetOptions get;
  get.ids_only = a.ids_only;
  get.count_only = a.count_only;
  get.outside_expiry_window = a.outside;
  get.limit = a.limit;
  get.own_only = a.own;
  if (a.fields_given && !a.field_prefix.empty()) {
    return fail(Status::InvalidArgument("--fields and --field-prefix: give one or the other"));
  }
  if (!a.field_prefix.empty()) {
    get.fields.mode = segstore::FieldSelection::Mode::kPrefix;
    get.fields.prefix = a.field_prefix;
  } else if (a.fields_given && a.fields.empty()) {
    get.fields.mode = segstore::FieldSelection::Mode::kAll;
  } else if (a.fields_given) {
    get.fields.mode = segstore::FieldSelection::Mode::kNames;
    std::string_view rest = a.fields;
    while (!rest.empty()) {
      const std::string_view name = rest.substr(0, rest.find(','));
      if (!name.empty()) get.fields.names.emplace_back(name);
      rest = name.size() < rest.size() ? rest.substr(name.size() + 1) : std::string_view();
    }
  }
  uint64_t id_from = 0, id_to = UINT64_MAX;
  if (!a.id_from.empty()) {
    if (Status s = ParseU64(a.id_from, "--id-from", &id_from); !s.ok()) return fail(s);
  }
  if (!a.id_to.empty()) {
    if (Status s = ParseU64(a.id_to, "--id-to", &id_to); !s.ok()) return fail(s);
  }
  get.id_from = id_from;
  get.id_to = id_to;
  if (!a.expiring_from.empty()) {
    if (Status s = ParseTime(a.expiring_from, &get.expiry_from); !s.ok()) return fail(s);
  }
  if (!a.expiring_to.empty()) {
    if (Status s = ParseTime(a.expiring_to, &get.expiry_to); !s.ok()) return fail(s);
  }
  uint32_t before = 0;
  if (!a.before.empty()) {
    if (Status s = ParseTime(a.before, &before); !s.ok()) return fail(s);
  }
  segstore::ExpireSpec expiry;
  if (command == "expire") {
    if (Status s = ParseExpiry(a.when, a.condition, &expiry); !s.ok()) return fail(s);
  }
  segstore::UpsertMode mode = segstore::UpsertMode::kSet;
  if (a.mode == "extend") {
    mode = segstore::UpsertMode::kExtend;
  } else if (a.mode == "add") {
    mode = segstore::UpsertMode::kAdd;
  } else if (a.mode != "set") {
    return fail(Status::InvalidArgument("--mode must be set, extend or add"));
  }
  std::vector<segstore::SegmentUpdate> updates;
  std::vector<uint64_t> ids;
  for (const std::string& item : a.items) {
    if (command == "upsert") {
      segstore::SegmentUpdate u;
      if (Status s = ParseSegment(item, &u); !s.ok()) return fail(s);
      updates.push_back(u);
    } else {
      uint64_t id = 0;
      if (Status s = ParseU64(item, "segment ID", &id); !s.ok()) return fail(s);
      ids.push_back(id);
    }
  }

  uint32_t link_ttl = 0;
  if (!a.ttl.empty()) {
    if (Status s = ParseDuration(a.ttl, &link_ttl); !s.ok()) return fail(s);
  }
  if (command == "link" || command == "unlink" || command == "master-of" || command == "links" ||
      command == "connected") {
    // To the node holding the user (for connected: the first user), which
    // reaches the others' nodes itself; a single server holds every user.
    client::ClusterClientOptions routed_options;
    routed_options.node = options;
    auto routed = client::ClusterClient::Connect(routed_options);
    if (!routed.ok()) return fail(routed.status());
    auto node = (*routed)->NodeClient((*routed)->NodeOf(a.user));
    if (!node.ok()) return fail(node.status());
    return RunLinkCommand(command, a, link_ttl, **node, fail);
  }

  // Node commands talk to the server named; data commands to the node that
  // holds the user, in a cluster (a single server holds every user).
  if (command == "ping" || command == "info" || command == "stats" || command == "cluster") {
    auto connected = client::Client::Connect(options);
    if (!connected.ok()) return fail(connected.status());
    return RunNodeCommand(command, a, **connected, options, fail);
  }
  client::ClusterClientOptions routed_options;
  routed_options.node = options;
  auto routed = client::ClusterClient::Connect(routed_options);
  if (!routed.ok()) return fail(routed.status());
  client::ClusterClient& c = **routed;

  if (command == "get") {
    auto r = c.Get(a.user, get);
    if (!r.ok()) return fail_or_absent(r.status());
    if (a.json) {
      json out = GetJson(*r, a.ids_only);
      AddFieldsJson(*r, &out);
      std::cout << out.dump() << "\n";
    } else {
      PrintGet(a.user, *r, a.ids_only, a.count_only);
      PrintFields(*r);
    }
    return 0;
  }
  if (command == "upsert") {
    auto r = c.Upsert(a.user, updates, mode);
    if (!r.ok()) return fail(r.status());
    if (a.json) {
      std::cout << json{{"inserted", r->inserted},
                        {"updated", r->updated},
                        {"trimmed", r->trimmed},
                        {"count", r->count}}
                       .dump()
                << "\n";
    } else {
      std::printf("%u inserted, %u updated, %u expired trimmed, %u live segments now\n",
                  r->inserted, r->updated, r->trimmed, r->count);
    }
    return 0;
  }
  if (command == "remove") {
    auto r = c.Remove(a.user, ids);
    if (!r.ok()) return fail_or_absent(r.status());
    if (a.json) {
      std::cout << json{{"removed", *r}}.dump() << "\n";
    } else {
      std::printf("%u segments removed\n", *r);
    }
    return 0;
  }
  if (command == "trim") {
    auto r = c.Trim(a.user, before);
    if (!r.ok()) return fail_or_absent(r.status());
    if (a.json) {
      std::cout << json{{"trimmed", r->trimmed}, {"remaining", r->remaining}}.dump() << "\n";
    } else {
      std::printf("%u stale segments trimmed, %u remaining\n", r->trimmed, r->remaining);
    }
    return 0;
  }
  if (command == "expire") {
    auto r = c.Expire(a.user, ids, expiry);
    if (!r.ok()) return fail_or_absent(r.status());
    if (r->results.size() != ids.size()) {
      return fail(Status::Corruption("expire: " + std::to_string(r->results.size()) +
                                     " outcomes for " + std::to_string(ids.size()) + " IDs"));
    }
    if (a.json) {
      json results = json::array();
      for (segstore::ExpireOutcome o : r->results) results.push_back(OutcomeName(o));
      std::cout << json{{"ids", ids}, {"results", results}, {"count", r->count}}.dump() << "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) {
        std::printf("%llu %s\n", static_cast<unsigned long long>(ids[i]),
                    OutcomeName(r->results[i]));
      }
      std::printf("%u live segments now\n", r->count);
    }
    return 0;
  }
  if (command == "count") {
    auto r = c.Count(a.user, id_from, id_to);
    if (!r.ok()) return fail_or_absent(r.status());
    if (a.json) {
      std::cout << json{{"count", *r}}.dump() << "\n";
    } else {
      std::printf("segments in %s-%s: %u\n", a.id_from.empty() ? "0" : a.id_from.c_str(),
                  a.id_to.empty() ? "max" : a.id_to.c_str(), *r);
    }
    return 0;
  }
  if (command == "delete") {
    auto r = c.Delete(a.user);
    if (!r.ok()) return fail(r.status());
    if (a.json) {
      std::cout << json{{"deleted", *r}}.dump() << "\n";
    } else {
      std::printf(*r ? "profile of %s deleted\n" : "%s had no profile\n", a.user.c_str());
    }
    return 0;
  }
  return fail(Status::InvalidArgument("unknown command " + command));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"segctl: talk to a segstore server"};
  app.footer(
      "Exit status: 0 success; 1 an error (bad arguments, the server unreachable or answering\n"
      "an error); 3 get, count, remove, trim, expire or field-del of a user who has no\n"
      "profile (no live segment or field), and master-of or links of a user in no group.\n"
      "segctl load has its own (segctl load --help).");
  app.require_subcommand(1);
  app.fallthrough();  // --server, --json, --timeout may come after the command too
  Args a;
  app.add_option("-s,--server", a.server, "server address host:port (default 127.0.0.1:7700)");
  app.add_option("--timeout", a.timeout_ms, "connect and request timeout in ms (default 5000)");
  app.add_flag("--json", a.json, "print JSON instead of tables");
  segstore::tools::AddClientFlags(&app, &a.security);

  auto user = [&](CLI::App* cmd) { cmd->add_option("user", a.user, "user ID")->required(); };
  auto id_range = [&](CLI::App* cmd) {
    cmd->add_option("--id-from", a.id_from, "lowest segment ID");
    cmd->add_option("--id-to", a.id_to, "highest segment ID");
  };

  app.add_subcommand("ping", "check the server answers; print the round trip");
  app.add_subcommand("info", "the server's version and limits (hello)");
  app.add_subcommand("stats", "the server's statistics");
  app.add_subcommand("cluster",
                     "the cluster as the server sees it: map revision, nodes, racks, partitions "
                     "per node");
  CLI::App* get = app.add_subcommand("get", "list a user's live segments");
  user(get);
  id_range(get);
  get->add_flag("--ids-only", a.ids_only, "segment IDs only");
  get->add_flag("--count-only", a.count_only, "count the matches, list none");
  get->add_option("--expiring-from", a.expiring_from, "expiry window start (Unix s or ISO UTC)");
  get->add_option("--expiring-to", a.expiring_to, "expiry window end (Unix s or ISO UTC)");
  get->add_flag("--outside", a.outside, "segments expiring outside the window instead");
  get->add_option("--limit", a.limit, "list at most this many (lowest IDs)");
  get->add_flag("--own", a.own, "a linked user's own profile only, not its group's merged view");
  get->add_option("--fields", a.fields,
                  "profile fields too: every live one, or those NAME,NAME,... named")
      ->expected(0, 1);
  get->add_option("--field-prefix", a.field_prefix, "profile fields whose name starts so too");
  CLI::App* upsert = app.add_subcommand(
      "upsert",
      "insert or update segments: ID@WHEN[,a1=N][,a2=N], WHEN = +DURATION (90s, 15m, 5h, 30d), "
      "Unix seconds, YYYY-MM-DDTHH:MM:SSZ or never; with --mode add, +DURATION is added");
  user(upsert);
  upsert->add_option("segments", a.items, "segments")->required();
  upsert->add_option("--mode", a.mode, "set (default), extend (keep the later) or add");
  CLI::App* remove = app.add_subcommand("remove", "remove segments by ID");
  user(remove);
  remove->add_option("ids", a.items, "segment IDs")->required();
  CLI::App* trim = app.add_subcommand(
      "trim", "remove expired segments (or, with --before, every segment expiring by then)");
  user(trim);
  trim->add_option("--before", a.before,
                   "remove every segment not live at this time, live ones included: those "
                   "expiring at or before it (default and any earlier time: now)");
  CLI::App* expire = app.add_subcommand(
      "expire",
      "set segments' expiry: WHEN = +DURATION (90s, 15m, 5h, 30d; +0 removes), Unix seconds, "
      "YYYY-MM-DDTHH:MM:SSZ (a past time removes) or never; prints each ID's outcome (set, "
      "removed, unchanged: the condition did not hold, missing)");
  user(expire);
  expire->add_option("when", a.when, "the new expiry")->required();
  expire->add_option("ids", a.items, "segment IDs")->required();
  expire->add_option("--condition", a.condition,
                     "only where it holds: nx (the segment never expires), xx (it does), gt (the "
                     "new expiry is later), lt (earlier); never counts as the latest");
  CLI::App* count = app.add_subcommand("count", "count live segments with IDs in a range");
  user(count);
  id_range(count);
  CLI::App* del = app.add_subcommand(
      "delete", "delete a user's whole profile, durably (a group's master: the whole group)");
  user(del);
  CLI::App* link = app.add_subcommand(
      "link",
      "link USER to MASTER's group (MASTER's master when MASTER is linked; USER's own group "
      "moves with it)");
  user(link);
  link->add_option("master", a.master, "the master (or any user of its group)")->required();
  link->add_option("--ttl", a.ttl, "how long the link lasts: 90s, 15m, 12h, 90d (default: never)");
  CLI::App* unlink = app.add_subcommand(
      "unlink", "take USER out of its group (a master's group dissolves); its profile stays");
  user(unlink);
  CLI::App* master_of = app.add_subcommand("master-of", "the master of USER's group");
  user(master_of);
  CLI::App* links = app.add_subcommand("links", "the users linked to the master of USER's group");
  user(links);
  links->add_option("--cursor", a.cursor, "start after this user (a previous page's next)");
  links->add_option("--limit", a.limit, "at most this many a page (default 100)");
  links->add_flag("--all", a.all, "every page");
  CLI::App* connected = app.add_subcommand("connected", "whether USER and OTHER share a master");
  user(connected);
  connected->add_option("other", a.master, "the other user")->required();

  CLI::App* field_set = app.add_subcommand(
      "field-set",
      "set profile fields: NAME=VALUE, VALUE = int:N, double:X, str:TEXT (UTF-8; str: is the "
      "empty string), bytes:HEX, time:WHEN (Unix seconds or ISO-8601 with Z or an offset), or "
      "untyped: a JSON number is an int (42) or a double (0.5, 1e3), anything else a str "
      "(the rule of `load --fields` files)");
  user(field_set);
  field_set->add_option("fields", a.items, "NAME=VALUE")->required();
  field_set->add_option("--ttl", a.field_ttl, "the fields expire after 90s, 15m, 12h, 30d");
  field_set->add_option("--expiry", a.field_expiry,
                        "the fields expire at this time (Unix s or ISO UTC; default never)");
  CLI::App* field_del = app.add_subcommand("field-del", "delete profile fields by name");
  user(field_del);
  field_del->add_option("names", a.items, "field names")->required();
  CLI::App* incr = app.add_subcommand(
      "incr", "add to a counter (an int field; absent or expired: 0), atomically; print it");
  user(incr);
  incr->add_option("name", a.name, "the counter's field name")->required();
  incr->add_option("--by", a.by, "the delta, may be negative: --by=-1 (default 1)");
  incr->add_option("--ttl", a.field_ttl,
                   "a new counter expires after 90s, 15m, 12h, 30d (default never)");
  incr->add_flag("--sliding", a.sliding,
                 "every increment restarts the TTL (default: fixed window)");
  incr->add_option("--cap", a.cap,
                   "refuse (write nothing, say capped) an increment that would pass this value");
  CLI::App* field_max = app.add_subcommand(
      "field-max",
      "keep the larger of a field's value and NAME=VALUE (int, double or time, as field-set)");
  user(field_max);
  field_max->add_option("field", a.items, "NAME=VALUE")->required()->expected(1);
  field_max->add_option("--ttl", a.field_ttl, "a value kept expires after 90s, 15m, 12h, 30d");
  field_max->add_option("--expiry", a.field_expiry,
                        "a value kept expires at this time (Unix s or ISO UTC; default never)");

  CLI::App* load = app.add_subcommand(
      "load",
      "bulk-load DMP segment files (rows: user,segment[,ttl|expiry[,a1[,a2]]]; grouped: "
      "user<TAB>seg[:ttl|expiry],...), with --links identity-graph link files, or with --fields "
      "profile field files (user,name,value[,ttl]); plain or gzip, '-' for stdin; exit status 0, "
      "1 or 2");
  load->footer(segstore::tools::kLoadHelp);
  load->add_option("files", a.files, "files to load ('-': standard input)")->required();
  load->add_flag("--links", a.links_files,
                 "the files are link files (rows: id,master[,ttl]; components: "
                 "master<TAB>id,id,...): each ID is linked to its master");
  load->add_flag("--fields", a.fields_files,
                 "the files are profile field files (user,name,value[,ttl]): each row sets "
                 "one field of one user");
  load->add_option("--field-type", a.field_type,
                   "with --fields: the type of a value without a TYPE: prefix: auto (default: "
                   "a JSON number is an int or a double, else a str), int, double, str, bytes "
                   "(hex) or time");
  load->add_option("--format", a.format,
                   "auto (default), rows or grouped; with --links: auto, rows or components");
  load->add_option("--delimiter", a.delimiter,
                   "row, link and field files: auto (default), comma or tab");
  load->add_option("--default-ttl", a.default_ttl,
                   "TTL for a segment (or link, or field) given without one: 86400 (seconds), "
                   "90s, 15m, 12h, 30d; without it such a segment row is bad, and such a link "
                   "or field never expires");
  load->add_option("--mode", a.mode, "set (default) or extend (keep later expiries)");
  load->add_flag("--dry-run", a.dry_run, "parse and validate, write nothing");
  load->add_option("--max-errors", a.max_errors,
                   "stop (exit status 2) after this many bad rows (default: never)");
  load->add_option("--connections", a.connections, "connections to the server (default 4)");
  load->add_option("--in-flight", a.in_flight,
                   "requests in flight per connection (default 4 batches, or 16 links or "
                   "field sets)");
  load->add_option("--batch-users", a.batch_users, "users in one batch upsert (default 100)");
  load->add_option("--memory-mib", a.memory_mib,
                   "memory for grouping rows (segments or fields) by user (default 1024)");
  load->add_flag("--no-progress", a.no_progress, "no progress output");

  CLI::App* export_cmd = app.add_subcommand(
      "export",
      "write every live profile (a cluster's: each partition from any replica) as files segctl "
      "load reads back: DIR/segments.tsv, DIR/fields.tsv and DIR/links.tsv; load them in that "
      "order (segctl load DIR/segments.tsv; segctl load --fields DIR/fields.tsv; segctl load "
      "--links DIR/links.tsv); exit status 0, 1 (something could not be written) or 2");
  export_cmd->add_option("--out", a.out_dir, "the directory to write (made if missing)")->required();
  export_cmd->add_option("--format", a.export_format,
                  "rows (default: user<TAB>segment<TAB>expiry[<TAB>attr1<TAB>attr2]) or grouped "
                  "(user<TAB>segment:expiry,...; no attributes)");
  export_cmd->add_flag("--live-only", a.live_only,
                "only live segments, fields and links (always so: expired data cannot be "
                "loaded)");
  export_cmd->add_option("--partitions", a.partitions, "only partitions A-B (or one, P); default 0-4095");
  export_cmd->add_option("--prefix", a.prefix, "only users whose ID starts with this");
  export_cmd->add_option("--page-bytes", a.page_bytes,
                  "bytes of one scan page (default: the server's, 1 MiB)");
  export_cmd->add_flag("--no-progress", a.no_progress, "no progress output");

  CLI::App* backup = app.add_subcommand(
      "backup",
      "stream every live profile (its segments, fields and links) to FILE: zstd chunks, each "
      "checksummed, one section a partition (a cluster's: each from any replica); --resume "
      "continues an interrupted one from its last complete partition; exit status 0 or 2");
  backup->add_option("file", a.backup_file, "the backup file")->required();
  backup->add_flag("--resume", a.resume,
                   "continue FILE, cut after its last complete partition (its partitions)");
  backup->add_option("--partitions", a.partitions, "only partitions A-B (or one, P)");
  backup->add_option("--rate-users", a.rate_users, "at most this many users a second (pacing)");
  backup->add_option("--rate-mb", a.rate_mb, "at most this many MB a second (pacing)");
  backup->add_option("--page-bytes", a.page_bytes, "bytes of one scan page and chunk");
  backup->add_flag("--no-progress", a.no_progress, "no progress output");
  CLI::App* restore = app.add_subcommand(
      "restore",
      "load a backup FILE into the server (empty or live; a cluster's: each write to its node). "
      "The file is checked whole first: nothing is written from a damaged, newer or incomplete "
      "one. Conflicts merge, nothing is deleted: a segment in both keeps the later expiry, the "
      "backup's attributes set; a field in both takes the backup's value and expiry; the "
      "backup's links are made. Exit status 0, 1 (some users or links refused) or 2");
  restore->add_option("file", a.backup_file, "the backup file")->required();
  restore->add_flag("--no-progress", a.no_progress, "no progress output");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the error, or the help (rc 0)
    // A usage error is an error like any other: exit status 1, and 2 for
    // load, whose fatal errors are 2.
    if (rc == 0) return 0;
    return load->parsed() || export_cmd->parsed() || backup->parsed() || restore->parsed() ? 2 : 1;
  }
  const std::string command = app.get_subcommands().front()->get_name();
  a.fields_given = get->count("--fields") > 0;
  if (command == "load") return RunLoadCommand(a, load->count("--mode") > 0);
  if (command == "export") return RunExportCommand(a);
  if (command == "backup" || command == "restore") return RunBackupCommand(a, command == "restore");
  return Run(command, a);
}
