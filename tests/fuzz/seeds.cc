// fuzz_seeds: writes the seed corpus of every fuzz target but fuzz_recovery
// (recovery_seeds.cc, which needs the storage engine), one directory per
// target named as the target without its "fuzz_" prefix:
//
//   fuzz_seeds <proto/examples dir> <output dir>
//
// - frame: every example frame of proto/examples (*.hex to bytes), and two
//   requests pipelined in one input;
// - hello, get, ..., expire, link, ..., connected, field: the bodies of that
//   operation's example requests, and an empty body;
// - get_reader: the bodies of the get and batch_get example answers (a merged
//   view's, get_linked, and those with fields too);
// - copy_partition: the bodies of its example requests (behind a 0 byte) and
//   of its OK answers (behind a 1 byte), and both selectors alone;
// - record_codec: the codec's encodings of a few profiles of every shape;
// - log_entry: log entries of every write, and checkpoint records;
// - resp: RESP streams behind fuzz_resp's two header bytes (limit and read
//   size, cut points): multibulk and inline commands, quoting, pipelining,
//   empty commands, every SEG.* command with its options, and a few errors.
//
// scripts/fuzz.sh runs it before the fuzzers; seeds are never committed.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "profile/codec.h"
#include "profile/field_codec.h"
#include "proto/protocol.h"
#include "replica/checkpoint.h"
#include "replica/entry.h"

namespace fs = std::filesystem;

namespace segstore::fuzz {
namespace {

fs::path g_out;
int g_written = 0;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FUZZ_CHECK(f.good());
  ++g_written;
}

// The frame in an example file: every line not starting with '#' holds hex pairs.
std::string ReadHexFrame(const fs::path& path) {
  std::ifstream in(path);
  FUZZ_CHECK(in.good());
  std::string out, line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string pair;
    while (words >> pair) {
      FUZZ_CHECK(pair.size() == 2);
      out.push_back(static_cast<char>(std::stoi(pair, nullptr, 16)));
    }
  }
  FUZZ_CHECK(out.size() >= proto::kHeaderSize);
  return out;
}

void ProtoSeeds(const fs::path& examples) {
  const char* kBodyTargets[] = {"hello",  "get",  "batch_get", "count",        "upsert",
                                "remove", "trim", "delete",    "batch_upsert", "expire"};
  for (const char* t : kBodyTargets) Write(t, "empty", "");
  // fuzz_link: the first byte picks the request (its index here, modulo 7).
  const char* kLinkOps[] = {"link",      "unlink",    "master_of",   "links",
                            "connected", "link_step", "read_records"};
  for (int i = 0; i < 7; ++i)
    Write("link", std::string(kLinkOps[i]) + ".empty", std::string(1, static_cast<char>(i)));
  // fuzz_field: the first byte picks the request (its index here, modulo 4).
  const char* kFieldOps[] = {"field_set", "field_del", "field_incr", "field_max"};
  for (int i = 0; i < 4; ++i)
    Write("field", std::string(kFieldOps[i]) + ".empty", std::string(1, static_cast<char>(i)));
  Write("copy_partition", "empty-request", std::string(1, '\0'));
  Write("copy_partition", "empty-response", "\x01");
  std::string get_request, ping_request;
  for (const auto& entry : fs::directory_iterator(examples)) {
    const std::string file = entry.path().filename().string();
    const std::string suffix = ".hex";
    if (file.size() <= suffix.size() || file.substr(file.size() - suffix.size()) != suffix) {
      continue;
    }
    const std::string name = file.substr(0, file.size() - suffix.size());  // "get.request"
    const std::string frame = ReadHexFrame(entry.path());
    const std::string body = frame.substr(proto::kHeaderSize);
    Write("frame", name, frame);
    if (name == "get.request") get_request = frame;
    if (name == "ping.request") ping_request = frame;
    const size_t dot = name.find('.');
    const std::string op = name.substr(0, dot), direction = name.substr(dot + 1);
    for (int i = 0; i < 7; ++i) {
      if (direction == "request" && op == kLinkOps[i])
        Write("link", name, std::string(1, static_cast<char>(i)) + body);
    }
    for (int i = 0; i < 4; ++i) {  // field_incr_capped feeds field_incr
      if (direction == "request" && op.rfind(kFieldOps[i], 0) == 0)
        Write("field", name, std::string(1, static_cast<char>(i)) + body);
    }
    if (direction == "request") {
      for (const char* t : kBodyTargets) {
        // get_full feeds get, upsert_add feeds upsert.
        if (op == t || (op.rfind(t, 0) == 0 && op[std::string(t).size()] == '_')) {
          Write(t, name, body);
        }
      }
    } else if (op == "get" || op == "get_full" || op == "get_linked" || op == "get_own" ||
               op == "get_fields" || op == "get_field_prefix" || op == "batch_get") {
      Write("get_reader", name, body);
    }
    // copy_partition and copy_partition_*: requests, and answers with status 0.
    if (op.rfind("copy_partition", 0) == 0) {
      if (direction == "request") {
        Write("copy_partition", name, std::string(1, '\0') + body);
      } else if (frame[4] == 0) {
        Write("copy_partition", name, "\x01" + body);
      }
    }
  }
  FUZZ_CHECK(!get_request.empty() && !ping_request.empty());
  Write("frame", "pipelined", get_request + ping_request + get_request);
}

// log_entry: the first byte picks (even: an entry, odd: a checkpoint).
void LogEntrySeeds() {
  replica::WriteEntry e;
  e.now = 1'800'000'000;
  e.write_id = WriteId{0x0102030405060708ull, 42};
  e.origin = 0xabcdef;
  e.ticket = 7;
  std::vector<decltype(e.request)> requests;
  proto::UpsertRequest u;
  u.user = "user-42";
  u.mode = UpsertMode::kAdd;
  u.segments.push_back(SegmentUpdate{101, 3600, true, 7u, {}});
  u.segments.push_back(SegmentUpdate{UINT64_MAX, UINT32_MAX, false, {}, 9u});
  requests.push_back(u);
  requests.push_back(proto::RemoveRequest{"user-43", {1, 2, UINT64_MAX}, {}});
  requests.push_back(proto::TrimRequest{"user-44", 1'900'000'000, {}});
  requests.push_back(
      proto::ExpireRequest{"user-45", {7, 7, UINT64_MAX}, 3600, true, ExpireCondition::kGt, {}});
  requests.push_back(proto::DeleteRequest{std::string("\xff\x80"
                                                      "bin",
                                                      5),
                                          {}});
  proto::FieldSetRequest field_set;
  field_set.user = "user-46";
  field_set.fields = {FieldUpdate{"cap:77", FieldValue::Int(-3), 0, false},
                      FieldUpdate{"score", FieldValue::Double(0.5), 600, true},
                      FieldUpdate{"country", FieldValue::String("FR"), 1'900'000'000, false},
                      FieldUpdate{std::string("\xff\x00", 2), FieldValue::Bytes("raw"), 0, false},
                      FieldUpdate{"seen", FieldValue::Time(1'800'000'000), 0, false}};
  requests.push_back(field_set);
  requests.push_back(proto::FieldDeleteRequest{"user-47", {"cap:77", "score"}, {}});
  proto::FieldIncrementRequest fi;
  fi.user = "user-48";
  fi.increment.name = "cap:9";
  fi.increment.delta = -2;
  fi.increment.ttl = 86400;
  fi.increment.window = FieldIncrement::Window::kSliding;
  fi.increment.cap = 3;
  requests.push_back(fi);
  requests.push_back(proto::FieldMaxRequest{
      "user-49", FieldUpdate{"seen", FieldValue::Time(1'800'000'001), 30, true}, {}});
  for (size_t i = 0; i < requests.size(); ++i) {
    e.request = requests[i];
    std::string bytes(1, '\0');
    replica::EncodeEntry(e, &bytes);
    Write("log_entry", "entry-" + std::to_string(i), bytes);
  }
  const replica::Checkpoint checkpoints[] = {
      {}, {5, 0, {}}, {123456789, 120000, {{7, 123456800}, {4095, 1}}}};
  for (size_t i = 0; i < std::size(checkpoints); ++i) {
    Write("log_entry", "checkpoint-" + std::to_string(i),
          "\x01" + replica::EncodeCheckpoint(checkpoints[i]));
  }
}

void CodecSeeds() {
  constexpr UnixSeconds kHour = 3600;
  const UnixSeconds t = 1'800'000'000 - 1'800'000'000 % kHour;
  const std::vector<std::vector<Segment>> profiles = {
      {},
      {{42, kNever, {}, {}}},
      {{5, t + 1, {}, {}}, {6, t + 2, {}, {}}},
      // whole hours, consecutive and spread ids
      {{100, t, {}, {}},
       {101, t + kHour, {}, {}},
       {130, t + 5 * kHour, {}, {}},
       {4000, t + 24 * kHour, {}, {}}},
      // whole days, a never among them
      {{1, kNever, {}, {}}, {2, 86400 * 20000, {}, {}}, {9, 86400 * 20001, {}, {}}},
      // a gap past the escape, ids at the top of the range
      {{0, t + 60, {}, {}},
       {uint64_t{1} << 40, t + 120, {}, {}},
       {UINT64_MAX - 1, t + 180, {}, {}},
       {UINT64_MAX, UINT32_MAX, {}, {}}},
      // attributes on some segments
      {{7, t + 86400, 1u, {}},
       {9, t + 3600, {}, 0xffffffffu},
       {12, kNever, 0u, 5u},
       {15, t + 120, {}, {}}},
  };
  // Version 1 (no log position) and version 2 (positions of every varint
  // length from 1 to 10 bytes).
  const uint64_t positions[] = {1, 127, 128, uint64_t{1} << 32, UINT64_MAX};
  for (size_t i = 0; i < profiles.size(); ++i) {
    std::string body;
    profile::EncodeSegments(profiles[i], &body);
    Write("record_codec", "profile-" + std::to_string(i), body);
    profile::EncodeSegments(profiles[i], positions[i % std::size(positions)], &body);
    Write("record_codec", "profile-" + std::to_string(i) + "-position", body);
  }
  std::vector<Segment> many;
  for (uint64_t i = 0; i < 300; ++i) {
    many.push_back(
        Segment{1000 + i * (1 + i % 17),
                t + static_cast<UnixSeconds>(i % 9) * kHour,
                i % 4 == 0 ? std::optional<uint32_t>(static_cast<uint32_t>(i)) : std::nullopt,
                {}});
  }
  std::string body;
  profile::EncodeSegments(many, &body);
  Write("record_codec", "profile-many", body);
  profile::EncodeSegments(many, 1'000'000'007, &body);
  Write("record_codec", "profile-many-position", body);
  // Version 4: fields of every type, numbered and inline, with and without
  // a group section.
  const std::vector<profile::StoredField> fields = {
      {3, {}, FieldValue::Int(-7), t + kHour},
      {40, {}, FieldValue::Double(0.5), kNever},
      {41, {}, FieldValue::Time(t), t + 24 * kHour},
      {0, "country", FieldValue::String("FR"), kNever},
      {0, "raw", FieldValue::Bytes(std::string("\0\xff", 2)), t + kHour}};
  profile::EncodeProfile(profiles[0], 0, profile::Group(), fields, &body);
  Write("record_codec", "profile-fields", body);
  profile::Group group;
  group.members = {{"cookie-1", kNever}, {"cookie-2", t + kHour}};
  profile::EncodeProfile(many, 77, group, fields, &body);
  Write("record_codec", "profile-fields-group", body);
}

// A multibulk of `args`.
std::string Multibulk(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

void RespSeeds() {
  const std::string id = "0123456789abcdef0123456789abcdef";
  const std::vector<std::vector<std::string>> commands = {
      {"PING"},
      {"SEG.GET", "user-1", "WINDOW", "100", "200", "IDS", "1", "99", "LIMIT", "10", "IDSONLY"},
      {"seg.get", "u", "NOTEXPIRING", "0", "4294967295", "COUNT"},
      {"SEG.MGET", "2", "a", "b", "IDS", "5", "18446744073709551615"},
      {"SEG.COUNT", "u", "IDS", "1", "2"},
      {"SEG.UPSERT", "u", "ADD", "TTL", "WRITEID", id, "5", "3600", "ATTR1", "7", "ATTR2", "9", "6",
       "0"},
      {"SEG.REMOVE", "u", "WRITEID", id, "1", "2", "3"},
      {"SEG.TRIM", "u", "BEFORE", "1800000000", "WRITEID", id},
      {"SEG.DEL", "u", "WRITEID", id},
      {"SEG.FIELDSET",
       "u",
       "WRITEID",
       id,
       "TYPE",
       "int",
       "EX",
       "60",
       "FIELDS",
       "2",
       "a",
       "1",
       "b",
       "-2",
       "TYPE",
       "double",
       "FIELDS",
       "1",
       "c",
       "0.5",
       "TYPE",
       "time",
       "EXAT",
       "1800000000",
       "FIELDS",
       "1",
       "d",
       "1790000000",
       "TYPE",
       "bytes",
       "FIELDS",
       "1",
       "e",
       std::string("\0\xff", 2),
       "FIELDS",
       "1",
       "f",
       "text"},
      {"SEG.FIELDDEL", "u", "WRITEID", id, "FIELDS", "2", "a", "b"},
      {"SEG.INCR", "u", "cap:77", "1", "TTL", "86400", "SLIDING", "CAP", "3", "WRITEID", id},
      {"SEG.FIELDMAX", "u", "seen", "1790000000", "TYPE", "time", "EX", "3600", "WRITEID", id},
      {"SEG.GET", "u", "IDSONLY", "FIELDS", "2", "a", "b"},
      {"SEG.MGET", "2", "a", "b", "ALLFIELDS"},
      {"SEG.GET", "u", "FIELDPREFIX", "cap:"},
      {"DEL", "a", "b"},
      {"ECHO", std::string("bin\r\n\0ary", 9)},
  };
  // Byte 0: limit 4096 (index 4 of 6) and reads of 16 (index 2 of 4): 4 + 6 * 2;
  // byte 1: the cut points.
  const std::string header = "\x10\x01";
  std::string all;
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::string bytes = Multibulk(commands[i]);
    Write("resp", "command-" + std::to_string(i), header + bytes);
    all += bytes;
  }
  Write("resp", "pipelined", header + all + "*0\r\n*-1\r\n\r\n" + all);
  Write("resp", "inline",
        header + "PING\r\nSEG.GET u IDS 1 2\n  ECHO \"a\\x41\\n\\\"b\" 'c\\'d' e\"f g\"\r\n\r\n");
  Write("resp", "unbalanced", header + "ECHO \"abc\r\n");
  // The smallest limit (16 bytes), one byte a read: the size refusals.
  Write("resp", "over-limit", std::string("\x00\x02", 2) + Multibulk({"ECHO", "0123456789"}));
  Write("resp", "bad-length", header + "*1\r\n$-5\r\n");
  Write("resp", "bad-count", header + "*x\r\n");
}

}  // namespace
}  // namespace segstore::fuzz

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <proto/examples dir> <output dir>\n", argv[0]);
    return 2;
  }
  segstore::fuzz::g_out = argv[2];
  segstore::fuzz::ProtoSeeds(argv[1]);
  segstore::fuzz::CodecSeeds();
  segstore::fuzz::LogEntrySeeds();
  segstore::fuzz::RespSeeds();
  std::printf("fuzz_seeds: wrote %d seeds under %s\n", segstore::fuzz::g_written, argv[2]);
  return 0;
}
