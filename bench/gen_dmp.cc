// gen_dmp: writes the reference workload (../shared/workload.md) as a DMP
// segment file, for `segctl load`: user i is bench::UserKey(i) with 1,000
// distinct segment IDs uniform in [0, 82000) and expiries on whole hours 1 to
// 720 hours ahead (absolute Unix seconds, so a re-run changes nothing), or
// with --ttl, TTLs in seconds. Deterministic in the user index.
//
//   gen_dmp --users 100000 --grouped > ref.grouped.tsv
//   gen_dmp --users 100000 --rows --shuffle --gzip -o ref.rows.csv.gz
//
// Row files come in user order unless --shuffle, which emits them in a random
// order (as DMP exports sorted by segment are, for a loader: not by user).
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/workload.h"

namespace {

struct Out {
  FILE* plain = nullptr;
  gzFile gz = nullptr;
  std::string buf;
  void Write(std::string_view s) {
    buf.append(s);
    if (buf.size() >= (1u << 20)) FlushBuf();
  }
  void FlushBuf() {
    if (buf.empty()) return;
    if (gz != nullptr) {
      gzwrite(gz, buf.data(), static_cast<unsigned>(buf.size()));
    } else {
      std::fwrite(buf.data(), 1, buf.size(), plain);
    }
    buf.clear();
  }
};

void AppendU64(std::string* s, uint64_t v) {
  char tmp[24];
  auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
  s->append(tmp, r.ptr);
}

struct Segments {
  std::vector<uint64_t> ids;
  std::vector<uint32_t> when;  // absolute expiry or TTL seconds
};

Segments For(uint64_t user, uint32_t now, bool ttl) {
  Segments s;
  for (const segstore::bench::ReferenceSegment& r : segstore::bench::ReferenceSegments(user)) {
    s.ids.push_back(r.id);
    s.when.push_back(ttl ? r.hours * 3600 : segstore::bench::WholeHourExpiry(now, r.hours));
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gen_dmp: the reference workload as a DMP segment file"};
  uint64_t users = 100000;
  bool grouped = false, rows = false, shuffle = false, gzip = false, ttl = false;
  std::string output = "-";
  uint32_t now = static_cast<uint32_t>(std::time(nullptr));
  app.add_option("--users", users, "users (reference: 100000)");
  app.add_flag("--grouped", grouped, "one user a line: user<TAB>seg:when,...");
  app.add_flag("--rows", rows, "one assignment a line: user,seg,when");
  app.add_flag("--shuffle", shuffle, "rows in random order instead of by user");
  app.add_flag("--gzip", gzip, "gzip the output");
  app.add_flag("--ttl", ttl, "TTLs in seconds instead of absolute expiries");
  app.add_option("--now", now, "Unix seconds to compute expiries from (default: now)");
  app.add_option("-o,--output", output, "output file (default: standard output)");
  CLI11_PARSE(app, argc, argv);
  if (grouped == rows) {
    std::fprintf(stderr, "gen_dmp: say --grouped or --rows\n");
    return 2;
  }
  Out out;
  if (gzip) {
    out.gz = output == "-" ? gzdopen(1, "wb6") : gzopen(output.c_str(), "wb6");
  } else {
    out.plain = output == "-" ? stdout : std::fopen(output.c_str(), "wb");
  }
  if (out.gz == nullptr && out.plain == nullptr) {
    std::fprintf(stderr, "gen_dmp: cannot open %s\n", output.c_str());
    return 1;
  }
  std::string line;
  if (grouped) {
    for (uint64_t u = 0; u < users; ++u) {
      const Segments s = For(u, now, ttl);
      line = segstore::bench::UserKey(u);
      line += '\t';
      for (size_t i = 0; i < s.ids.size(); ++i) {
        if (i > 0) line += ',';
        AppendU64(&line, s.ids[i]);
        line += ':';
        if (!ttl) line += '@';
        AppendU64(&line, s.when[i]);
      }
      line += '\n';
      out.Write(line);
    }
  } else if (!shuffle) {
    for (uint64_t u = 0; u < users; ++u) {
      const Segments s = For(u, now, ttl);
      const std::string key = segstore::bench::UserKey(u);
      for (size_t i = 0; i < s.ids.size(); ++i) {
        line = key;
        line += ',';
        AppendU64(&line, s.ids[i]);
        line += ',';
        if (!ttl) line += '@';
        AppendU64(&line, s.when[i]);
        line += '\n';
        out.Write(line);
      }
    }
  } else {
    // Every (user, segment index) pair in a random order: 100 M pairs for
    // the reference workload, 8 bytes each.
    std::vector<uint64_t> order(users * 1000);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
    // Users are regenerated on demand; a small cache keeps that cheap enough.
    std::vector<Segments> cache(users);
    std::vector<std::string> keys(users);
    for (uint64_t u = 0; u < users; ++u) {
      cache[u] = For(u, now, ttl);
      keys[u] = segstore::bench::UserKey(u);
    }
    for (uint64_t p : order) {
      const uint64_t u = p / 1000, i = p % 1000;
      line = keys[u];
      line += ',';
      AppendU64(&line, cache[u].ids[i]);
      line += ',';
      if (!ttl) line += '@';
      AppendU64(&line, cache[u].when[i]);
      line += '\n';
      out.Write(line);
    }
  }
  out.FlushBuf();
  if (out.gz != nullptr) {
    if (gzclose(out.gz) != Z_OK) {
      std::fprintf(stderr, "gen_dmp: gzip write failed\n");
      return 1;
    }
  } else if (out.plain != stdout) {
    std::fclose(out.plain);
  }
  return 0;
}
