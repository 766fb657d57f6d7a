#include "tools/export.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "proto/wire.h"
#include "segstore/routing.h"
#include "tools/scan_source.h"

namespace segstore::tools {
namespace {

using Clock = std::chrono::steady_clock;

// A file written whole, or an error naming it.
class OutFile {
 public:
  Status Open(const std::string& path) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "wb");
    if (f_ == nullptr) return Status::IOError(path + ": " + std::strerror(errno));
    return Status::OK();
  }
  ~OutFile() {
    if (f_ != nullptr) std::fclose(f_);
  }
  void Write(std::string_view s) {
    if (f_ != nullptr && !s.empty() && std::fwrite(s.data(), 1, s.size(), f_) != s.size()) {
      failed_ = true;
    }
  }
  Status Close() {
    if (f_ == nullptr) return Status::OK();
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (failed_ || !closed) return Status::IOError(path_ + ": write failed: " + std::strerror(errno));
    return Status::OK();
  }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  bool failed_ = false;
};

// A user ID as it may stand unquoted in a row of the segment and link
// files: no tab, no line break, not a comment, no carriage return at the end.
bool PlainId(std::string_view id) {
  return !id.empty() && id.find_first_of("\t\n") == std::string_view::npos && id.front() != '#' &&
         id.back() != '\r';
}

// A field of fields.tsv: quoted (RFC 4180) when it holds a tab or a quote or
// starts with a quote or '#'; false for one holding a line break (no line
// of a file can).
bool CsvField(std::string_view text, std::string* out) {
  if (text.find_first_of("\n\r") != std::string_view::npos) return false;
  const bool quote = text.find_first_of("\t\"") != std::string_view::npos ||
                     (!text.empty() && text.front() == '#');
  if (!quote) {
    out->append(text);
    return true;
  }
  out->push_back('"');
  for (const char c : text) {
    if (c == '"') out->push_back('"');
    out->push_back(c);
  }
  out->push_back('"');
  return true;
}

std::string When(UnixSeconds expires_at) {
  return expires_at == kNever ? std::string("never") : "@" + std::to_string(expires_at);
}

// A value as TYPE:text; false when the file cannot hold it.
bool ValueText(const FieldValue& v, std::string* out) {
  switch (v.type) {
    case FieldValue::Type::kInt:
      *out += "int:" + std::to_string(v.i);
      return true;
    case FieldValue::Type::kDouble:
      if (!std::isfinite(v.d)) return false;
      *out += fmt::format("double:{}", v.d);  // the shortest text that reads back exactly
      return true;
    case FieldValue::Type::kString:
      return CsvField("str:" + v.s, out);
    case FieldValue::Type::kBytes: {
      *out += "bytes:";
      for (const char c : v.s) *out += fmt::format("{:02x}", static_cast<unsigned char>(c));
      return true;
    }
    case FieldValue::Type::kTime:
      *out += "time:" + std::to_string(v.i);
      return true;
  }
  return false;
}

// A user ID for a message: printable ASCII as is, other bytes as \xNN.
std::string Printable(std::string_view id) {
  std::string out;
  for (const char ch : id.substr(0, 64)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(ch);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

class Exporter {
 public:
  Exporter(const ExportOptions& o, ExportStats* stats) : o_(o), stats_(stats) {}

  Status Run() {
    const auto start = Clock::now();
    SEGSTORE_RETURN_IF_ERROR(Setup());
    for (uint32_t p = o_.partition_from; p <= o_.partition_to; ++p) {
      std::vector<ScannedProfile> profiles;
      SEGSTORE_RETURN_IF_ERROR(ReadPartition(p, &profiles));
      std::sort(profiles.begin(), profiles.end(),
                [](const ScannedProfile& a, const ScannedProfile& b) { return a.user < b.user; });
      for (const ScannedProfile& profile : profiles) Write(profile);
      ++stats_->partitions;
      Progress(p, start);
    }
    SEGSTORE_RETURN_IF_ERROR(WriteLinks());
    SEGSTORE_RETURN_IF_ERROR(segments_.Close());
    SEGSTORE_RETURN_IF_ERROR(fields_.Close());
    SEGSTORE_RETURN_IF_ERROR(links_.Close());
    stats_->seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (stats_->unwritable > 0) {
      return Status::InvalidArgument(fmt::format(
          "{} users, fields or links could not be written in these files and were left out; "
          "the first: {}",
          stats_->unwritable, stats_->first_unwritable));
    }
    if (stats_->attributes_dropped > 0) {
      return Status::InvalidArgument(
          fmt::format("grouped files carry no segment attributes: {} segments' attributes were "
                      "left out (export --format rows keeps them)",
                      stats_->attributes_dropped));
    }
    return Status::OK();
  }

 private:
  Status Setup() {
    if (::mkdir(o_.out_dir.c_str(), 0777) != 0 && errno != EEXIST) {
      return Status::IOError(o_.out_dir + ": " + std::strerror(errno));
    }
    SEGSTORE_RETURN_IF_ERROR(segments_.Open(o_.out_dir + "/segments.tsv"));
    SEGSTORE_RETURN_IF_ERROR(fields_.Open(o_.out_dir + "/fields.tsv"));
    SEGSTORE_RETURN_IF_ERROR(links_.Open(o_.out_dir + "/links.tsv"));
    segments_.Write(o_.grouped ? "# segctl export: user<TAB>segment:expiry,... (segctl load)\n"
                               : "# segctl export: user<TAB>segment<TAB>expiry[<TAB>attr1<TAB>"
                                 "attr2] (segctl load)\n");
    fields_.Write("# segctl export: user<TAB>name<TAB>TYPE:value<TAB>expiry (segctl load --fields)\n");
    links_.Write("# segctl export: member<TAB>master<TAB>ttl (segctl load --links)\n");
    Result<std::unique_ptr<ScanSource>> source = ScanSource::Connect(o_.client, o_.retries);
    if (!source.ok()) return source.status();
    source_ = std::move(*source);
    return Status::OK();
  }

  // Every profile of partition p matching the prefix, into *out.
  Status ReadPartition(uint32_t p, std::vector<ScannedProfile>* out) {
    return source_->ReadPartition(
        p, o_.page_bytes,
        [out] {
          out->clear();
          return Status::OK();
        },
        [this, out](ScanResponse& page) {
          for (ScannedProfile& profile : page.profiles) {
            stats_->bytes_read += proto::ScannedProfileBytes(profile);
            // Masters' sides of links whatever the prefix: a member's link
            // is written only when its master lists it.
            for (const LinkedUser& m : profile.members) listed_.insert({profile.user, m.user});
            if (profile.user.starts_with(o_.prefix)) out->push_back(std::move(profile));
          }
          return Status::OK();
        });
  }

  void Unwritable(std::string what) {
    if (stats_->unwritable++ == 0) stats_->first_unwritable = std::move(what);
  }

  void Write(const ScannedProfile& p) {
    ++stats_->users;
    const bool plain = PlainId(p.user);
    if (!p.segments.empty()) {
      if (!plain) {
        Unwritable("user '" + Printable(p.user) +
                   "': its ID cannot stand in a segment row (a tab, a line break, a leading # "
                   "or a trailing carriage return)");
      } else {
        WriteSegments(p);
      }
    }
    for (const Field& f : p.fields) {
      std::string line;
      bool ok = CsvField(p.user, &line);
      line.push_back('\t');
      ok = ok && CsvField(f.name, &line);
      line.push_back('\t');
      ok = ok && ValueText(f.value, &line);
      line += "\t" + When(f.expires_at) + "\n";
      if (!ok) {
        Unwritable("field '" + Printable(f.name) + "' of user '" + Printable(p.user) +
                   "': a line break in it, or a double that is not finite");
        continue;
      }
      fields_.Write(line);
      ++stats_->fields;
    }
    if (!p.master.empty()) claims_.push_back({p.user, p.master, p.link_expires});
  }

  void WriteSegments(const ScannedProfile& p) {
    std::string line;
    if (o_.grouped) {
      line = p.user + "\t";
      for (size_t i = 0; i < p.segments.size(); ++i) {
        const Segment& s = p.segments[i];
        if (s.attr1 || s.attr2) ++stats_->attributes_dropped;
        line += (i > 0 ? "," : "") + std::to_string(s.id) + ":" + When(s.expires_at);
      }
      line += "\n";
    } else {
      for (const Segment& s : p.segments) {
        line += p.user + "\t" + std::to_string(s.id) + "\t" + When(s.expires_at);
        if (s.attr1 || s.attr2) line += "\t" + (s.attr1 ? std::to_string(*s.attr1) : "");
        if (s.attr2) line += "\t" + std::to_string(*s.attr2);
        line += "\n";
      }
    }
    segments_.Write(line);
    stats_->segments += p.segments.size();
  }

  // The links both records agree on, sorted by member.
  Status WriteLinks() {
    std::sort(claims_.begin(), claims_.end(),
              [](const Claim& a, const Claim& b) { return a.member < b.member; });
    const auto now = static_cast<UnixSeconds>(std::time(nullptr));
    for (const Claim& c : claims_) {
      if (!listed_.contains({c.master, c.member})) {
        const uint32_t master_partition = PartitionOf(c.master);
        if (master_partition >= o_.partition_from && master_partition <= o_.partition_to) {
          continue;  // its master was read and does not list it: the link does not count
        }
        // Its master's partition was not read: ask whether the link counts.
        Result<client::Client*> cl = source_->ClientOf(PartitionOf(c.member));
        if (!cl.ok()) return cl.status();
        Result<std::string> m = (*cl)->MasterOf(c.member);
        if (!m.ok() && !m.status().IsNotFound()) return m.status().WithContext("master_of");
        if (!m.ok() || *m != c.master) continue;
      }
      if (!PlainId(c.member) || !PlainId(c.master)) {
        Unwritable("link of '" + Printable(c.member) + "' to '" + Printable(c.master) +
                   "': an ID cannot stand in a link row");
        continue;
      }
      std::string ttl = "never";
      if (c.expires != kNever) {
        if (c.expires <= now) continue;  // expired meanwhile
        ttl = std::to_string(c.expires - now);
      }
      links_.Write(c.member + "\t" + c.master + "\t" + ttl + "\n");
      ++stats_->links;
    }
    return Status::OK();
  }

  void Progress(uint32_t p, Clock::time_point start) {
    if (!o_.progress) return;
    const auto now = Clock::now();
    if (now - last_progress_ < std::chrono::seconds(5) && p != o_.partition_to) return;
    last_progress_ = now;
    const double s = std::chrono::duration<double>(now - start).count();
    std::fprintf(stderr, "segctl export: partition %u of %u-%u, %llu users, %.0f users/s\n", p,
                 o_.partition_from, o_.partition_to,
                 static_cast<unsigned long long>(stats_->users),
                 s > 0 ? static_cast<double>(stats_->users) / s : 0.0);
  }

  struct Claim {
    std::string member;
    std::string master;
    UnixSeconds expires = kNever;
  };

  const ExportOptions& o_;
  ExportStats* stats_;
  std::unique_ptr<ScanSource> source_;
  OutFile segments_, fields_, links_;
  std::vector<Claim> claims_;                             // members' sides of links
  std::set<std::pair<std::string, std::string>> listed_;  // masters' sides: (master, member)
  Clock::time_point last_progress_{};
};

}  // namespace

Status RunExport(const ExportOptions& options, ExportStats* stats) {
  *stats = ExportStats{};
  if (options.partition_from > options.partition_to || options.partition_to >= kPartitions) {
    return Status::InvalidArgument(fmt::format("partitions {}-{}: a range within 0-4095",
                                               options.partition_from, options.partition_to));
  }
  Exporter e(options, stats);
  return e.Run();
}

}  // namespace segstore::tools
