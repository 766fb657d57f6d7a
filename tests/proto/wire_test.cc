#include "proto/wire.h"

#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <bit>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <msgpack.hpp>
#include <new>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/utf8.h"
#include "proto/node_example_frames.h"
#include "proto/protocol.h"
#include "support/example_frames.h"
#include "support/msgpack_builder.h"

#ifndef SEGSTORE_PROTO_EXAMPLES
#error "SEGSTORE_PROTO_EXAMPLES must name the proto/examples directory"
#endif

// ---- allocation watch ----
// Every operator new of this binary reports its size while a watch is on, so
// a test can show a decoder never asked for a huge block (std::vector::reserve
// on an element count read from the input, say). msgpack's own zone allocates
// with malloc and is bounded by the shape check (at most one object a body byte).

namespace {
std::atomic<bool> g_watching{false};
std::atomic<size_t> g_largest_allocation{0};

void* Allocate(size_t n) {
  if (g_watching.load(std::memory_order_relaxed)) {
    size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return Allocate(n); }
void* operator new[](size_t n) { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace segstore::proto {

// gtest prints a failing example by its file name.
namespace examples {
void PrintTo(const Example& e, std::ostream* os) { *os << e.file; }
void PrintTo(const NodeExample& e, std::ostream* os) { *os << e.file; }
}  // namespace examples

namespace {

using examples::Example;
using examples::NodeExample;

class AllocationWatch {
 public:
  AllocationWatch() {
    g_largest_allocation = 0;
    g_watching = true;
  }
  ~AllocationWatch() { g_watching = false; }
  size_t largest() const { return g_largest_allocation.load(); }
};

using segstore::testing::Mp;

// ---- the messages as text, for comparisons with readable diffs ----

std::string Opt(const std::optional<uint32_t>& v) { return v ? std::to_string(*v) : "nil"; }

template <typename T, typename F>
std::string List(const std::vector<T>& v, F f) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + f(v[i]);
  return out + "]";
}

std::string U(uint64_t v) { return std::to_string(v); }
std::string Q(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Text(const FieldSelection& f) {
  switch (f.mode) {
    case FieldSelection::Mode::kNone:
      return "none";
    case FieldSelection::Mode::kAll:
      return "all";
    case FieldSelection::Mode::kNames:
      return "names " + List(f.names, Q);
    case FieldSelection::Mode::kPrefix:
      return "prefix " + Q(f.prefix);
  }
  return "?";
}
std::string Text(const GetOptions& o) {
  std::ostringstream s;
  s << "expiry=[" << o.expiry_from << "," << o.expiry_to << "]"
    << (o.outside_expiry_window ? " outside" : "") << " id=[" << o.id_from << "," << o.id_to
    << "] count_only=" << o.count_only << " limit=" << o.limit << " ids_only=" << o.ids_only
    << " own_only=" << o.own_only << " fields=" << Text(o.fields);
  return s.str();
}
std::string Text(const FieldValue& v) {
  switch (v.type) {
    case FieldValue::Type::kInt:
      return "int " + std::to_string(v.i);
    case FieldValue::Type::kDouble:
      return "double " + U(std::bit_cast<uint64_t>(v.d));  // exact, NaN included
    case FieldValue::Type::kString:
      return "str " + Q(v.s);
    case FieldValue::Type::kBytes:
      return "bytes " + Q(v.s);
    case FieldValue::Type::kTime:
      return "time " + std::to_string(v.i);
  }
  return "?";
}
std::string Text(const Field& f) { return Q(f.name) + "=" + Text(f.value) + "@" + U(f.expires_at); }
std::string Text(const FieldUpdate& u) {
  return Q(u.name) + "=" + Text(u.value) + (u.ttl ? " ttl " : " at ") + U(u.expiry);
}
std::string Text(const SegmentUpdate& u) {
  return "[" + U(u.id) + " " + U(u.value) + (u.ttl ? " ttl" : " abs") + " " + Opt(u.attr1) + " " +
         Opt(u.attr2) + "]";
}
std::string ModeText(UpsertMode m) { return std::to_string(static_cast<int>(m)); }
std::string Text(const examples::EmptyBody&) { return "(no body)"; }
std::string Text(const examples::ErrorBody& m) { return "error " + Q(m.message); }
std::string Text(const examples::WrongNodeBody& m) {
  return "wrong_node " + Q(m.message) + " revision " + U(m.revision);
}
std::string Text(const examples::RawBody& m) { return "raw " + Q(m.bytes); }
std::string Text(const HelloRequest& m) { return "hello " + Q(m.client) + " auth " + Q(m.auth); }
std::string Text(const GetRequest& m) { return "get " + Q(m.user) + " " + Text(m.options); }
std::string Text(const BatchGetRequest& m) {
  return "batch_get " + List(m.users, Q) + " " + Text(m.options);
}
std::string Text(const CountRequest& m) {
  return "count " + Q(m.user) + " " + U(m.id_from) + ".." + U(m.id_to);
}
std::string Text(const WriteId& id) {
  return id.empty() ? "" : " write_id " + U(id.hi) + ":" + U(id.lo);
}
std::string Text(const UpsertRequest& m) {
  return "upsert " + Q(m.user) + " mode " + ModeText(m.mode) +
         (m.replace_attrs ? " replace_attrs " : " ") +
         List(m.segments, [](const SegmentUpdate& u) { return Text(u); }) + Text(m.write_id);
}
std::string Text(const BatchUpsertRequest& m) {
  return "batch_upsert " + List(m.items, [](const UpsertRequest& i) { return Text(i); });
}
std::string Text(const RemoveRequest& m) {
  return "remove " + Q(m.user) + " " + List(m.ids, U) + Text(m.write_id);
}
std::string Text(const TrimRequest& m) {
  return "trim " + Q(m.user) + " " + U(m.before) + Text(m.write_id);
}
std::string Text(const DeleteRequest& m) { return "delete " + Q(m.user) + Text(m.write_id); }
std::string Text(const ExpireRequest& m) {
  return "expire " + Q(m.user) + " " + List(m.ids, U) + " value " + U(m.value) +
         (m.ttl ? " ttl" : " abs") + " condition " + U(static_cast<uint64_t>(m.condition)) +
         Text(m.write_id);
}
std::string Text(const ExpireResponse& m) {
  return "expire_result " +
         List(m.results, [](ExpireOutcome o) { return U(static_cast<uint64_t>(o)); }) + " count " +
         U(m.count) + (m.duplicate ? " duplicate" : "");
}
std::string Text(const HelloResponse& m) {
  std::ostringstream s;
  s << "server_info " << m.protocol << " " << Q(m.server) << " " << m.max_frame_bytes << " "
    << m.max_batch << " " << m.max_key_bytes << " " << m.max_segments << " " << m.max_in_flight;
  return s.str();
}
std::string Text(const GetResult& m) {
  return "get_result count " + U(m.count) + " ids " + List(m.ids, U) + " expires " +
         List(m.expires, [](UnixSeconds e) { return U(e); }) + " attr1 " + List(m.attr1, Opt) +
         " attr2 " + List(m.attr2, Opt) + " master " + Q(m.master) + " profiles " + U(m.profiles) +
         (m.fields_asked ? " fields " + List(m.fields, [](const Field& f) { return Text(f); })
                         : "");
}
std::string Text(const UpsertResult& m) {
  return "upsert_result " + U(m.inserted) + " " + U(m.updated) + " " + U(m.trimmed) + " " +
         U(m.count) + (m.duplicate ? " duplicate" : "");
}
template <typename T>
std::string Text(const Result<T>& r) {
  if (r.ok()) return Text(*r);
  return std::string(Status::CodeName(r.status().code())) + " " + Q(r.status().message());
}
std::string Text(const BatchGetResponse& m) {
  return "batch_get_results " + List(m, [](const Result<GetResult>& r) { return Text(r); });
}
std::string Text(const BatchUpsertResponse& m) {
  return "batch_upsert_results " + List(m, [](const Result<UpsertResult>& r) { return Text(r); });
}
std::string Text(const RemoveResponse& m) {
  return "removed " + U(m.removed) + (m.duplicate ? " duplicate" : "");
}
std::string Text(const TrimResult& m) {
  return "trim_result " + U(m.trimmed) + " " + U(m.remaining) + (m.duplicate ? " duplicate" : "");
}
std::string Text(const CountResponse& m) { return "count_result " + U(m.count); }
std::string Text(const DeleteResponse& m) {
  return std::string("deleted ") + (m.deleted ? "1" : "0") + (m.duplicate ? " duplicate" : "");
}
std::string Text(const StatsResponse& m) {
  return "stats " + List(m.entries, [](const StatEntry& e) {
           std::string v;
           if (const auto* u = std::get_if<uint64_t>(&e.value)) {
             v = "u" + U(*u);
           } else if (const auto* d = std::get_if<double>(&e.value)) {
             v = "d" + U(std::bit_cast<uint64_t>(*d));  // exact, NaN included
           } else {
             v = "s" + Q(std::get<std::string>(e.value));
           }
           return Q(e.name) + "=" + v;
         });
}
std::string Text(const ClusterNode& n) {
  return "{" + Q(n.id) + " " + Q(n.address) + " " + Q(n.rack) + "}";
}
std::string Text(const ClusterMap& m) {
  std::string replicas;
  if (m.replication > 0) {
    for (size_t p = 0; p * m.replication < m.replicas.size(); ++p) {
      replicas += p ? " " : "";
      for (size_t k = 0; k < m.replication && p * m.replication + k < m.replicas.size(); ++k) {
        replicas += (k ? "," : "") + U(m.replicas[p * m.replication + k]);
      }
    }
  }
  return std::string("cluster_map ") + (m.cluster ? "cluster" : "single") + " revision " +
         U(m.revision) + " self " + Q(m.self) + " replication " + U(m.replication) + " nodes " +
         List(m.nodes, [](const ClusterNode& n) { return Text(n); }) + " replicas [" + replicas +
         "] incoming " +
         List(m.incoming,
              [](const IncomingReplica& in) { return U(in.partition) + "<-" + U(in.node); }) +
         (m.log ? " log" : "");
}
std::string Text(const CopyPartitionRequest& m) {
  return "copy_partition " + U(m.partition) + " cursor " + U(m.cursor) + " min_next " +
         U(m.min_next) + " max_bytes " + U(m.max_bytes);
}
std::string Text(const CopiedRecord& r) {
  return "[" + Q(r.key) + " " + Q(r.body) + " " + U(r.sweep_at) + " " + U(r.void_at) + " " +
         Q(r.reference) + "]";
}
std::string Text(const CopyPartitionResponse& m) {
  return "copy_page next " + U(m.next) + " cursor " + U(m.cursor) + " " +
         List(m.records, [](const CopiedRecord& r) { return Text(r); });
}
std::string Text(const LinkRequest& m) {
  return "link " + Q(m.user) + " to " + Q(m.master) + " ttl " + U(m.ttl) + Text(m.write_id);
}
std::string Text(const UnlinkRequest& m) { return "unlink " + Q(m.user) + Text(m.write_id); }
std::string Text(const MasterOfRequest& m) { return "master_of " + Q(m.user); }
std::string Text(const LinksRequest& m) {
  return "links " + Q(m.user) + " cursor " + Q(m.cursor) + " limit " + U(m.limit);
}
std::string Text(const ConnectedRequest& m) { return "connected " + Q(m.a) + " " + Q(m.b); }
std::string Text(const LinkResponse& m) {
  return "link_result master " + Q(m.master) + " members " + U(m.members) + " moved " + U(m.moved);
}
std::string Text(const UnlinkResponse& m) {
  return std::string("unlinked ") + (m.unlinked ? "1" : "0");
}
std::string Text(const MasterOfResponse& m) { return "master " + Q(m.master); }
std::string Text(const LinksResponse& m) {
  return "links_page master " + Q(m.master) + " " +
         List(m.links, [](const LinkedUser& l) { return Q(l.user) + "@" + U(l.expires_at); }) +
         " next " + Q(m.next);
}
std::string Text(const ConnectedResponse& m) {
  return std::string("connected ") + (m.connected ? "1" : "0");
}
std::string Text(const LinkStepRequest& m) {
  const LinkStep& s = m.step;
  return "link_step " + U(static_cast<int>(s.kind)) + " " + Q(s.user) + " master " + Q(s.master) +
         " member " + Q(s.member) + " expect " + Q(s.expect) + " expires " + U(s.expires) +
         " moving " +
         List(s.moving, [](const LinkedUser& l) { return Q(l.user) + "@" + U(l.expires_at); }) +
         " listed " + List(s.listed, [](const std::string& u) { return Q(u); }) +
         (s.stale ? " stale" : "") + (s.members_too ? " members_too" : "") + " max_links " +
         U(s.max_links) + Text(m.write_id);
}
std::string Text(const LinkStepResponse& m) {
  return std::string("step applied ") + (m.applied ? "1" : "0") + " changed " +
         (m.changed ? "1" : "0") + " members " + U(m.members) + (m.duplicate ? " duplicate" : "");
}
std::string Text(const ReadRecordsRequest& m) {
  return "read_records " + List(m.users, [](const std::string& u) { return Q(u); });
}
std::string Text(const ReadRecordsResponse& m) {
  return "records " + List(m, [](const Result<StoredRecord>& r) {
           return r.ok() ? "[" + Q(r->body) + " " + Q(r->reference) + "]" : r.status().ToString();
         });
}
std::string Text(const FieldSetRequest& m) {
  return "field_set " + Q(m.user) + " " +
         List(m.fields, [](const FieldUpdate& u) { return Text(u); }) + Text(m.write_id);
}
std::string Text(const FieldDeleteRequest& m) {
  return "field_del " + Q(m.user) + " " + List(m.names, Q) + Text(m.write_id);
}
std::string Text(const FieldIncrementRequest& m) {
  const FieldIncrement& i = m.increment;
  return "field_incr " + Q(m.user) + " " + Q(i.name) + " delta " + std::to_string(i.delta) +
         " ttl " + U(i.ttl) +
         (i.window == FieldIncrement::Window::kSliding ? " sliding" : " fixed") +
         (i.cap ? " cap " + std::to_string(*i.cap) : "") + Text(m.write_id);
}
std::string Text(const FieldMaxRequest& m) {
  return "field_max " + Q(m.user) + " " + Text(m.field) + Text(m.write_id);
}
std::string Text(const FieldWriteResponse& m) {
  return "field_write changed " + U(m.changed) + " count " + U(m.count) +
         (m.duplicate ? " duplicate" : "");
}
std::string Text(const FieldIncrementResponse& m) {
  return "field_incr_result " + std::to_string(m.value) + (m.capped ? " capped" : "") +
         (m.duplicate ? " duplicate" : "");
}
std::string Text(const FieldMaxResponse& m) {
  return "field_max_result " + Text(m.value) + (m.replaced ? " replaced" : "") +
         (m.duplicate ? " duplicate" : "");
}
std::string Text(const ScanRequest& m) {
  return "scan " + U(m.partition) + " cursor " + U(m.cursor) + " max_bytes " + U(m.max_bytes);
}
std::string Text(const Segment& s) {
  return U(s.id) + "@" + U(s.expires_at) + (s.attr1 ? " a1=" + U(*s.attr1) : "") +
         (s.attr2 ? " a2=" + U(*s.attr2) : "");
}
std::string Text(const ScannedProfile& p) {
  return "{" + Q(p.user) + " " + List(p.segments, [](const Segment& s) { return Text(s); }) + " " +
         List(p.fields, [](const Field& f) { return Text(f); }) + " master " + Q(p.master) + "@" +
         U(p.link_expires) + " members " +
         List(p.members, [](const LinkedUser& l) { return Q(l.user) + "@" + U(l.expires_at); }) +
         "}";
}
std::string Text(const ScanResponse& m) {
  return "scan_page cursor " + U(m.cursor) + " " +
         List(m.profiles, [](const ScannedProfile& p) { return Text(p); });
}
std::string Text(const examples::Body& b) {
  return std::visit([](const auto& m) { return Text(m); }, b);
}
std::string Text(const examples::NodeBody& b) {
  return std::visit([](const auto& m) { return Text(m); }, b);
}

// ---- helpers ----

template <typename T>
std::string EncodeToString(const T& m) {
  std::string out;
  Encode(m, &out);
  return out;
}

// Encodes `in`, decodes it, and expects the same message back.
template <typename T>
void ExpectRoundTrip(const T& in, const DecodeLimits& lim = {}) {
  SCOPED_TRACE(Text(in));
  std::string body;
  Encode(in, &body);
  T out{};
  Status s = Decode(body, lim, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Text(out), Text(in));
  // And what came back encodes to the same bytes.
  std::string again;
  Encode(out, &again);
  EXPECT_EQ(again, body);
}

template <typename T>
Status DecodeAs(std::string_view body, const DecodeLimits& lim = {}) {
  T m{};
  return Decode(body, lim, &m);
}

// Decodes a batch request, which must succeed as a whole, and gives entry
// `i`'s own status: OK when it decoded, its error when it fails alone.
template <typename T>
Status EntryStatus(std::string_view body, size_t i, const DecodeLimits& lim = {}) {
  T m{};
  const Status s = Decode(body, lim, &m);
  EXPECT_TRUE(s.ok()) << "the batch failed as a whole: " << s.ToString();
  if (!s.ok()) return Status::Internal("the batch failed as a whole");
  return m.rejected.empty() ? Status::OK() : m.rejected.at(i);
}

// The body decoded as the example's body type (Body or NodeBody).
template <typename AnyBody>
Status DecodeBody(std::string_view body, const AnyBody& like, AnyBody* out) {
  return std::visit(
      [&](const auto& proto) -> Status {
        using T = std::decay_t<decltype(proto)>;
        T m{};
        Status s;
        if constexpr (std::is_same_v<T, examples::EmptyBody>) {
          if (!body.empty()) s = Status::InvalidArgument("a body where none belongs");
        } else if constexpr (std::is_same_v<T, examples::ErrorBody>) {
          m.message = DecodeError(body);
        } else if constexpr (std::is_same_v<T, examples::WrongNodeBody>) {
          m.message = DecodeError(body);
          m.revision = DecodeErrorRevision(body);
        } else if constexpr (std::is_same_v<T, examples::RawBody>) {
          m.bytes = std::string(body);  // refused by the server: compared as bytes
        } else {
          s = Decode(body, DecodeLimits{}, &m);
        }
        *out = std::move(m);
        return s;
      },
      like);
}

using AnyDecoder = std::function<Status(std::string_view)>;

template <typename T>
std::pair<std::string, AnyDecoder> DecoderOf(std::string name, DecodeLimits lim = {}) {
  return {std::move(name), [lim](std::string_view b) { return DecodeAs<T>(b, lim); }};
}

std::vector<std::pair<std::string, AnyDecoder>> AllDecoders(DecodeLimits lim = {}) {
  return {
      DecoderOf<HelloRequest>("HelloRequest", lim),
      DecoderOf<GetRequest>("GetRequest", lim),
      DecoderOf<BatchGetRequest>("BatchGetRequest", lim),
      DecoderOf<CountRequest>("CountRequest", lim),
      DecoderOf<UpsertRequest>("UpsertRequest", lim),
      DecoderOf<BatchUpsertRequest>("BatchUpsertRequest", lim),
      DecoderOf<RemoveRequest>("RemoveRequest", lim),
      DecoderOf<TrimRequest>("TrimRequest", lim),
      DecoderOf<DeleteRequest>("DeleteRequest", lim),
      DecoderOf<ExpireRequest>("ExpireRequest", lim),
      DecoderOf<HelloResponse>("HelloResponse", lim),
      DecoderOf<GetResult>("GetResult", lim),
      DecoderOf<BatchGetResponse>("BatchGetResponse", lim),
      DecoderOf<UpsertResult>("UpsertResult", lim),
      DecoderOf<BatchUpsertResponse>("BatchUpsertResponse", lim),
      DecoderOf<RemoveResponse>("RemoveResponse", lim),
      DecoderOf<TrimResult>("TrimResult", lim),
      DecoderOf<CountResponse>("CountResponse", lim),
      DecoderOf<DeleteResponse>("DeleteResponse", lim),
      DecoderOf<ExpireResponse>("ExpireResponse", lim),
      DecoderOf<StatsResponse>("StatsResponse", lim),
      DecoderOf<ClusterMap>("ClusterMap", lim),
      DecoderOf<ScanRequest>("ScanRequest", lim),
      DecoderOf<ScanResponse>("ScanResponse", lim),
      DecoderOf<CopyPartitionRequest>("CopyPartitionRequest", lim),
      DecoderOf<CopyPartitionResponse>("CopyPartitionResponse", lim),
      DecoderOf<LinkRequest>("LinkRequest", lim),
      DecoderOf<UnlinkRequest>("UnlinkRequest", lim),
      DecoderOf<MasterOfRequest>("MasterOfRequest", lim),
      DecoderOf<LinksRequest>("LinksRequest", lim),
      DecoderOf<ConnectedRequest>("ConnectedRequest", lim),
      DecoderOf<LinkResponse>("LinkResponse", lim),
      DecoderOf<UnlinkResponse>("UnlinkResponse", lim),
      DecoderOf<MasterOfResponse>("MasterOfResponse", lim),
      DecoderOf<LinksResponse>("LinksResponse", lim),
      DecoderOf<ConnectedResponse>("ConnectedResponse", lim),
      DecoderOf<LinkStepRequest>("LinkStepRequest", lim),
      DecoderOf<LinkStepResponse>("LinkStepResponse", lim),
      DecoderOf<ReadRecordsRequest>("ReadRecordsRequest", lim),
      DecoderOf<ReadRecordsResponse>("ReadRecordsResponse", lim),
      DecoderOf<FieldSetRequest>("FieldSetRequest", lim),
      DecoderOf<FieldDeleteRequest>("FieldDeleteRequest", lim),
      DecoderOf<FieldIncrementRequest>("FieldIncrementRequest", lim),
      DecoderOf<FieldMaxRequest>("FieldMaxRequest", lim),
      DecoderOf<FieldWriteResponse>("FieldWriteResponse", lim),
      DecoderOf<FieldIncrementResponse>("FieldIncrementResponse", lim),
      DecoderOf<FieldMaxResponse>("FieldMaxResponse", lim),
      {"DecodeError",
       [](std::string_view b) {
         (void)DecodeError(b);
         (void)DecodeErrorRevision(b);
         return Status::OK();
       }},
  };
}

// Expects `s` to fail with `code` and a message containing each of `parts`.
void ExpectError(const Status& s, Status::Code code,
                 std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (std::string_view p : parts) {
    EXPECT_NE(s.message().find(p), std::string_view::npos)
        << "\"" << p << "\" not in: " << s.ToString();
  }
}

void ExpectInvalid(const Status& s, std::initializer_list<std::string_view> parts) {
  ExpectError(s, Status::Code::kInvalidArgument, parts);
}

// ---- the example files ----

std::string ExamplePath(const std::string& file) {
  return std::string(SEGSTORE_PROTO_EXAMPLES) + "/" + file;
}

// The bytes of a .hex file: comment lines skipped, the rest hex pairs.
std::string ReadHexFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::string bytes;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line[0] == '#') continue;
    std::istringstream tokens(line);
    std::string tok;
    while (tokens >> tok) {
      const bool hex = tok.size() == 2 && std::isxdigit(static_cast<unsigned char>(tok[0])) &&
                       std::isxdigit(static_cast<unsigned char>(tok[1]));
      if (!hex) {
        ADD_FAILURE() << path << ":" << line_no << ": \"" << tok << "\" is not a hex byte";
        return bytes;
      }
      bytes.push_back(static_cast<char>(std::stoul(tok, nullptr, 16)));
    }
  }
  return bytes;
}

// Bytes as hex, 16 a line: comparisons of frames then diff readably.
std::string HexDump(std::string_view bytes) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<uint8_t>(bytes[i]));
    out += buf;
    out += (i % 16 == 15 || i + 1 == bytes.size()) ? '\n' : ' ';
  }
  return out;
}

template <typename AnyExample>
bool IsRequest(const AnyExample& e) {
  return e.file.find(".request.") != std::string::npos;
}
bool IsRaw(const examples::Body& b) { return std::holds_alternative<examples::RawBody>(b); }
bool IsRaw(const examples::NodeBody&) { return false; }
template <typename AnyBody>
bool IsErrorBody(const AnyBody& b) {
  return std::holds_alternative<examples::ErrorBody>(b) ||
         std::holds_alternative<examples::WrongNodeBody>(b);
}

// The checks of one example file, for either table (Example, NodeExample).

template <typename AnyExample>
void ExpectFileDecodesToTheExpectedMessage(const AnyExample& e) {
  const std::string frame = ReadHexFile(ExamplePath(e.file));
  ASSERT_GE(frame.size(), kHeaderSize);
  const auto* p = reinterpret_cast<const uint8_t*>(frame.data());
  FrameHeader h;
  const uint32_t max_body = IsRequest(e) ? kDefaultMaxFrameBytes : kMaxResponseBytes;
  ASSERT_EQ(DecodeHeader(p, max_body, &h), HeaderCheck::kOk);
  EXPECT_EQ(h.version, kVersion);
  EXPECT_EQ(h.op, static_cast<uint8_t>(e.op));
  EXPECT_EQ(h.status, static_cast<uint8_t>(e.status));
  EXPECT_EQ(h.flags, e.flags);
  EXPECT_EQ(p[6], 0);
  EXPECT_EQ(p[7], 0);
  EXPECT_EQ(h.request_id, e.request_id);
  ASSERT_EQ(h.body_length, frame.size() - kHeaderSize);
  if (IsRequest(e)) {
    EXPECT_EQ(h.status, 0);
  }

  decltype(e.body) got;
  Status s = DecodeBody(std::string_view(frame).substr(kHeaderSize), e.body, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Text(got), Text(e.body));
}

template <typename AnyExample>
void ExpectMessageEncodesToTheFileByteForByte(const AnyExample& e) {
  std::string frame;
  ASSERT_TRUE(AppendFrame(&frame, static_cast<uint8_t>(e.op), e.request_id,
                          static_cast<uint8_t>(e.status), kMaxResponseBytes,
                          [&](std::string* out) { examples::EncodeBody(e.body, out); }));
  frame[5] = static_cast<char>(e.flags);
  const std::string file = ReadHexFile(ExamplePath(e.file));
  EXPECT_EQ(HexDump(frame), HexDump(file))
      << "regenerate: make proto_examples_gen && ./tests/proto/proto_examples_gen "
         "../proto/examples";
  if (std::holds_alternative<examples::ErrorBody>(e.body)) {
    // An error frame is what AppendErrorFrame makes.
    std::string error_frame;
    AppendErrorFrame(&error_frame, static_cast<uint8_t>(e.op), e.request_id,
                     Status::FromCode(static_cast<uint8_t>(e.status),
                                      std::get<examples::ErrorBody>(e.body).message));
    EXPECT_EQ(error_frame, file);
  }
  if (const auto* w = std::get_if<examples::WrongNodeBody>(&e.body)) {
    // A WrongNode frame is what AppendWrongNodeFrame makes.
    ASSERT_EQ(e.status, Status::Code::kWrongNode);
    std::string wrong_node_frame;
    AppendWrongNodeFrame(&wrong_node_frame, static_cast<uint8_t>(e.op), e.request_id, w->message,
                         w->revision);
    EXPECT_EQ(wrong_node_frame, file);
  }
}

template <typename AnyExample>
void ExpectEveryTruncatedBodyFails(const AnyExample& e) {
  const std::string frame = ReadHexFile(ExamplePath(e.file));
  ASSERT_GE(frame.size(), kHeaderSize);
  const std::string_view body = std::string_view(frame).substr(kHeaderSize);
  if (body.empty()) return;   // nothing to truncate
  if (IsRaw(e.body)) return;  // not meant to decode
  for (size_t n = 1; n < body.size(); ++n) {
    decltype(e.body) got;
    const std::string_view prefix = body.substr(0, n);
    if (IsErrorBody(e.body)) {
      // DecodeError never fails; it says it could not read the body.
      EXPECT_EQ(DecodeError(prefix).rfind("(unreadable error body", 0), 0u) << n << " bytes";
      EXPECT_EQ(DecodeErrorRevision(prefix), 0u) << n << " bytes";
      continue;
    }
    Status s = DecodeBody(prefix, e.body, &got);
    EXPECT_FALSE(s.ok()) << n << " of " << body.size() << " bytes decoded as " << Text(got);
  }
}

template <typename AnyExample>
void ExpectMutatedBodiesNeverCrashAnyDecoder(const AnyExample& e) {
  const std::string frame = ReadHexFile(ExamplePath(e.file));
  ASSERT_GE(frame.size(), kHeaderSize);
  const std::string body = frame.substr(kHeaderSize);
  if (body.empty()) return;
  const auto decoders = AllDecoders();
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 300; ++iter) {
    std::string m = body;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % m.size();
      switch (rng() % 4) {
        case 0:
          m[at] = static_cast<char>(rng());
          break;
        case 1:
          m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8)));
          break;
        case 2:
          m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(rng()));
          break;
        default:
          if (m.size() > 1) m.erase(m.begin() + static_cast<std::ptrdiff_t>(at));
          break;
      }
    }
    for (const auto& [name, decode] : decoders) (void)decode(m);
  }
}

template <typename AnyExample>
std::string ExampleName(const ::testing::TestParamInfo<AnyExample>& info) {
  std::string name = info.param.file.substr(0, info.param.file.size() - 4);  // no ".hex"
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return name;
}

// The client's operations (tests/support/example_frames.h).
class ExampleFrameTest : public ::testing::TestWithParam<Example> {};

TEST_P(ExampleFrameTest, FileDecodesToTheExpectedMessage) {
  ExpectFileDecodesToTheExpectedMessage(GetParam());
}
TEST_P(ExampleFrameTest, ExpectedMessageEncodesToTheFileByteForByte) {
  ExpectMessageEncodesToTheFileByteForByte(GetParam());
}
TEST_P(ExampleFrameTest, EveryTruncatedBodyFails) { ExpectEveryTruncatedBodyFails(GetParam()); }
TEST_P(ExampleFrameTest, MutatedBodiesNeverCrashAnyDecoder) {
  ExpectMutatedBodiesNeverCrashAnyDecoder(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleFrameTest, ::testing::ValuesIn(examples::All()),
                         ExampleName<Example>);

// Node to node (tests/proto/node_example_frames.h).
class NodeExampleFrameTest : public ::testing::TestWithParam<NodeExample> {};

TEST_P(NodeExampleFrameTest, FileDecodesToTheExpectedMessage) {
  ExpectFileDecodesToTheExpectedMessage(GetParam());
}
TEST_P(NodeExampleFrameTest, ExpectedMessageEncodesToTheFileByteForByte) {
  ExpectMessageEncodesToTheFileByteForByte(GetParam());
}
TEST_P(NodeExampleFrameTest, EveryTruncatedBodyFails) { ExpectEveryTruncatedBodyFails(GetParam()); }
TEST_P(NodeExampleFrameTest, MutatedBodiesNeverCrashAnyDecoder) {
  ExpectMutatedBodiesNeverCrashAnyDecoder(GetParam());
}

INSTANTIATE_TEST_SUITE_P(NodeExamples, NodeExampleFrameTest,
                         ::testing::ValuesIn(examples::NodeToNode()), ExampleName<NodeExample>);

// What the file tests need of an example, from either table.
struct ExampleEntry {
  std::string file;
  Op op;
  uint32_t request_id;
  Status::Code status;
};

std::vector<ExampleEntry> EveryExample() {
  std::vector<ExampleEntry> all;
  for (const Example& e : examples::All()) all.push_back({e.file, e.op, e.request_id, e.status});
  for (const NodeExample& e : examples::NodeToNode()) {
    all.push_back({e.file, e.op, e.request_id, e.status});
  }
  return all;
}

TEST(ExampleFilesTest, DirectoryHoldsExactlyTheTablesFiles) {
  std::set<std::string> in_table;
  for (const ExampleEntry& e : EveryExample()) {
    EXPECT_TRUE(in_table.insert(e.file).second) << "duplicate " << e.file;
  }
  std::set<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(SEGSTORE_PROTO_EXAMPLES)) {
    if (entry.path().extension() == ".hex") on_disk.insert(entry.path().filename().string());
  }
  EXPECT_EQ(on_disk, in_table);
}

TEST(ExampleFilesTest, EveryOperationHasARequestAndAResponse) {
  const std::vector<ExampleEntry> all = EveryExample();
  std::set<std::pair<uint8_t, bool>> seen;  // (op, is request)
  bool error = false;
  for (const ExampleEntry& e : all) {
    seen.insert({static_cast<uint8_t>(e.op), IsRequest(e)});
    error |= e.status != Status::Code::kOk;
    // A response echoes its request's id.
    if (!IsRequest(e) && e.status == Status::Code::kOk) {
      const std::string request = e.file.substr(0, e.file.find(".response.")) + ".request.hex";
      bool found = false;
      for (const ExampleEntry& r : all) {
        if (r.file == request) {
          found = true;
          EXPECT_EQ(r.request_id, e.request_id) << e.file;
          EXPECT_EQ(r.op, e.op) << e.file;
        }
      }
      EXPECT_TRUE(found) << e.file << " has no " << request;
    }
  }
  for (uint8_t op = 0; op < 0xff; ++op) {
    if (!IsKnownOp(op)) continue;
    EXPECT_TRUE(seen.count({op, true})) << OpName(op) << " request";
    EXPECT_TRUE(seen.count({op, false})) << OpName(op) << " response";
  }
  EXPECT_TRUE(error) << "no error response example";
}

// ---- round trips ----

TEST(WireTest, HelloRequestRoundTrips) {
  ExpectRoundTrip(HelloRequest{"", ""});
  ExpectRoundTrip(HelloRequest{"segstore-py 0.1.0", ""});
  ExpectRoundTrip(HelloRequest{std::string(70000, 'x'), ""});  // str32
  ExpectRoundTrip(HelloRequest{"loader", "a shared secret of 32 bytes here"});
  ExpectRoundTrip(HelloRequest{"", std::string("\0\xff binary", 9)});
  // The secret may come as a bin too; nil is no secret.
  HelloRequest bin;
  ASSERT_TRUE(Decode(Mp().Map(1).Str("auth").Bin("s3cret"), DecodeLimits{}, &bin).ok());
  EXPECT_EQ(bin.auth, "s3cret");
  ASSERT_TRUE(Decode(Mp().Map(1).Str("auth").Nil(), DecodeLimits{}, &bin).ok());
  EXPECT_EQ(bin.auth, "");
  // An empty body is an empty map: no client name, no secret.
  HelloRequest m{"old", "secret of sixteen"};
  ASSERT_TRUE(Decode("", DecodeLimits{}, &m).ok());
  EXPECT_EQ(m.client, "");
  EXPECT_EQ(m.auth, "");
}

TEST(WireTest, GetRequestRoundTripsEveryOptionAtItsEdges) {
  std::vector<GetOptions> cases(1);  // the defaults: no option sent
  auto with = [&](auto set) {
    GetOptions o;
    set(o);
    cases.push_back(o);
  };
  with([](GetOptions& o) { o.ids_only = true; });
  with([](GetOptions& o) { o.expiry_from = UINT32_MAX; });
  with([](GetOptions& o) { o.expiry_to = 0; });
  with([](GetOptions& o) { o.outside_expiry_window = true; });
  with([](GetOptions& o) { o.id_from = UINT64_MAX; });
  with([](GetOptions& o) { o.id_to = 0; });
  with([](GetOptions& o) { o.id_to = UINT64_MAX - 1; });
  with([](GetOptions& o) { o.count_only = true; });
  with([](GetOptions& o) { o.limit = UINT32_MAX; });
  with([](GetOptions& o) { o.own_only = true; });
  with([](GetOptions& o) {
    o.ids_only = true;
    o.expiry_from = 1;
    o.expiry_to = UINT32_MAX - 1;
    o.outside_expiry_window = true;
    o.id_from = 1ull << 63;
    o.id_to = UINT64_MAX;
    o.count_only = true;
    o.limit = 1;
    o.own_only = true;
  });
  for (const GetOptions& o : cases) {
    ExpectRoundTrip(GetRequest{"user-42", o});
  }
  // A user of exactly max_key_bytes, and a one-byte user.
  ExpectRoundTrip(GetRequest{std::string(kDefaultMaxKeyBytes, 'u'), {}});
  ExpectRoundTrip(GetRequest{"u", {}});
  // Default options are not sent at all.
  EXPECT_EQ(EncodeToString(GetRequest{"u", {}}), Mp().Map(1).Str("user").Str("u").str());
}

TEST(WireTest, BatchGetRequestRoundTripsUsersAndOptions) {
  GetOptions o;
  o.ids_only = true;
  o.limit = 10;
  ExpectRoundTrip(BatchGetRequest{{}, {}});  // an empty list is valid
  ExpectRoundTrip(BatchGetRequest{{"a"}, o});
  ExpectRoundTrip(BatchGetRequest{{"a", std::string("b\0c", 3), "a"}, o});  // NUL, repeats
  ExpectRoundTrip(BatchGetRequest{std::vector<std::string>(kDefaultMaxBatch, "user"), o});
}

// Check (a read's request arriving as a value: the RESP port's) refuses and
// marks exactly what Decode of the same request encoded would.
TEST(WireTest, CheckOfAReadAgreesWithDecode) {
  DecodeLimits lim;
  lim.max_key_bytes = 8;
  lim.max_batch = 3;
  const auto same = [&](const Status& checked, const Status& decoded, const std::string& what) {
    EXPECT_EQ(checked.code(), decoded.code()) << what;
    EXPECT_EQ(checked.message(), decoded.message()) << what;
  };
  for (const std::string& user : {std::string("u"), std::string(), std::string(8, 'k'),
                                  std::string(9, 'k'), std::string("a\0b", 3)}) {
    const GetRequest m{user, {}};
    std::string body;
    Encode(m, &body);
    GetRequest decoded;
    same(Check(lim, m), Decode(body, lim, &decoded), "user of " + std::to_string(user.size()));
  }
  const std::vector<std::vector<std::string>> batches = {
      {}, {"a", "b"}, {"a", "", "toolong-k", "b"}, {"", "toolong-k", "c"}, {"ok", "", "ok"}};
  for (const auto& users : batches) {
    BatchGetRequest m{users, {}};
    std::string body;
    Encode(m, &body);
    BatchGetRequest decoded;
    const Status d = Decode(body, lim, &decoded);
    same(Check(lim, &m), d, std::to_string(users.size()) + " users");
    if (!d.ok()) continue;
    EXPECT_EQ(m.users, decoded.users);
    ASSERT_EQ(m.rejected.size(), decoded.rejected.size());
    for (size_t i = 0; i < m.rejected.size(); ++i)
      same(m.rejected[i], decoded.rejected[i], "entry");
  }
  // A value checked twice is checked alike (the handler checks every request it is given).
  BatchGetRequest twice{{"", "ok"}, {}};
  ASSERT_TRUE(Check(lim, &twice).ok());
  ASSERT_TRUE(Check(lim, &twice).ok());
  EXPECT_FALSE(twice.rejected[0].ok());
  EXPECT_TRUE(twice.rejected[1].ok());
}

TEST(WireTest, CountRequestRoundTripsTheWholeIdRange) {
  ExpectRoundTrip(CountRequest{"u", 0, UINT64_MAX});
  ExpectRoundTrip(CountRequest{"u", UINT64_MAX, UINT64_MAX});
  ExpectRoundTrip(CountRequest{"u", 5, 4});  // an empty range is the caller's business
  // Absent bounds read as the whole range.
  CountRequest m;
  ASSERT_TRUE(Decode(Mp().Map(1).Str("user").Str("u"), DecodeLimits{}, &m).ok());
  EXPECT_EQ(m.id_from, 0u);
  EXPECT_EQ(m.id_to, UINT64_MAX);
}

std::vector<SegmentUpdate> EverySegmentShape() {
  using examples::Seg;
  return {
      Seg(0, 0),                                  // absolute, never expires
      Seg(1, 86400, true),                        // ttl
      Seg(UINT64_MAX, UINT32_MAX),                // the largest id and expiry
      Seg(2, UINT32_MAX, true),                   // the largest ttl
      Seg(3, 5, false, 0),                        // attr1 present and zero (not absent)
      Seg(4, 5, true, UINT32_MAX),                // attr1 only
      Seg(5, 5, false, std::nullopt, 0),          // attr2 only, zero
      Seg(6, 5, true, std::nullopt, UINT32_MAX),  // attr2 only, ttl
      Seg(7, 5, false, 1, 2),                     // both
      Seg(1ull << 32, 1),                         // an id over 32 bits
  };
}

TEST(WireTest, UpsertRoundTripsEveryMode) {
  for (UpsertMode mode : {UpsertMode::kSet, UpsertMode::kExtend, UpsertMode::kAdd}) {
    ExpectRoundTrip(UpsertRequest{"user-42", EverySegmentShape(), mode});
    ExpectRoundTrip(UpsertRequest{"user-42", {}, mode});  // an empty segment list
  }
}

TEST(WireTest, UpsertSegmentsOmitTrailingDefaults) {
  using examples::Seg;
  auto segment_bytes = [](const SegmentUpdate& s) {
    std::string body = EncodeToString(UpsertRequest{"u", {s}, UpsertMode::kSet});
    const std::string head =
        Mp().Map(3).Str("user").Str("u").Str("mode").Str("set").Str("segments").Arr(1).str();
    EXPECT_EQ(body.substr(0, head.size()), head);
    return body.substr(head.size());
  };
  EXPECT_EQ(segment_bytes(Seg(1, 2)), Mp().Arr(2).U(1).U(2).str());
  EXPECT_EQ(segment_bytes(Seg(1, 2, true)), Mp().Arr(3).U(1).U(2).Bool(true).str());
  EXPECT_EQ(segment_bytes(Seg(1, 2, false, 3)), Mp().Arr(4).U(1).U(2).Bool(false).U(3).str());
  EXPECT_EQ(segment_bytes(Seg(1, 2, false, std::nullopt, 4)),
            Mp().Arr(5).U(1).U(2).Bool(false).Nil().U(4).str());
}

TEST(WireTest, BatchUpsertRoundTripsItemsWithTheirOwnModes) {
  ExpectRoundTrip(BatchUpsertRequest{});  // no items
  BatchUpsertRequest m;
  m.items.push_back({"a", EverySegmentShape(), UpsertMode::kAdd});
  m.items.push_back({"b", {}, UpsertMode::kSet});
  m.items.push_back({"c", {examples::Seg(9, 9, true)}, UpsertMode::kExtend});
  ExpectRoundTrip(m);
}

TEST(WireTest, ReplaceAttrsRoundTripsAndIsSentOnlyWhenTrue) {
  UpsertRequest m{"u", {examples::Seg(1, 60, true, std::nullopt, 4)}, UpsertMode::kExtend};
  m.replace_attrs = true;
  ExpectRoundTrip(m);
  m.write_id = WriteId{1, 2};
  ExpectRoundTrip(m);
  // Sent after the segments, before the write ID; absent when false.
  const std::string head = Mp().Map(4)
                               .Str("user")
                               .Str("u")
                               .Str("mode")
                               .Str("set")
                               .Str("segments")
                               .Arr(0)
                               .Str("replace_attrs")
                               .Bool(true)
                               .str();
  UpsertRequest empty{"u", {}, UpsertMode::kSet};
  empty.replace_attrs = true;
  EXPECT_EQ(EncodeToString(empty), head);
  empty.replace_attrs = false;
  EXPECT_EQ(EncodeToString(empty).find("replace_attrs"), std::string::npos);
  // false and nil read as absent; anything else is refused, naming it.
  for (bool nil : {false, true}) {
    Mp body;
    body.Map(3).Str("user").Str("u").Str("segments").Arr(0).Str("replace_attrs");
    if (nil) {
      body.Nil();
    } else {
      body.Bool(false);
    }
    UpsertRequest got;
    ASSERT_TRUE(Decode(body.str(), {}, &got).ok());
    EXPECT_FALSE(got.replace_attrs);
  }
  ExpectInvalid(
      DecodeAs<UpsertRequest>(
          Mp().Map(3).Str("user").Str("u").Str("segments").Arr(0).Str("replace_attrs").U(1)),
      {"replace_attrs", "a boolean"});
  // Per batch item: each its own; a bad one fails its item alone.
  BatchUpsertRequest batch;
  batch.items.push_back(m);
  batch.items.push_back(UpsertRequest{"b", {}, UpsertMode::kSet});
  ExpectRoundTrip(batch);
  Mp bad;
  bad.Map(1).Str("items").Arr(2);
  bad.Map(3).Str("user").Str("a").Str("segments").Arr(0).Str("replace_attrs").Bool(true);
  bad.Map(3).Str("user").Str("b").Str("segments").Arr(0).Str("replace_attrs").Str("yes");
  BatchUpsertRequest b;
  ASSERT_TRUE(Decode(bad.str(), {}, &b).ok());
  ASSERT_EQ(b.rejected.size(), 2u);
  EXPECT_TRUE(b.rejected[0].ok());
  EXPECT_TRUE(b.items[0].replace_attrs);
  ExpectInvalid(b.rejected[1], {"items[1].replace_attrs", "a boolean"});
}

TEST(WireTest, BatchUpsertTopLevelModeAppliesToItemsWithout) {
  const std::string body = Mp().Map(2)
                               .Str("mode")
                               .Str("extend")
                               .Str("items")
                               .Arr(2)
                               .Map(2)
                               .Str("user")
                               .Str("a")
                               .Str("segments")
                               .Arr(0)
                               .Map(3)
                               .Str("user")
                               .Str("b")
                               .Str("mode")
                               .Str("add")
                               .Str("segments")
                               .Arr(0)
                               .str();
  BatchUpsertRequest m;
  ASSERT_TRUE(Decode(body, DecodeLimits{}, &m).ok());
  ASSERT_EQ(m.items.size(), 2u);
  EXPECT_EQ(m.items[0].mode, UpsertMode::kExtend);
  EXPECT_EQ(m.items[1].mode, UpsertMode::kAdd);
}

TEST(WireTest, RemoveTrimDeleteRequestsRoundTrip) {
  ExpectRoundTrip(RemoveRequest{"u", {}});
  ExpectRoundTrip(RemoveRequest{"u", {0, 1, UINT64_MAX, 1ull << 40}});
  ExpectRoundTrip(TrimRequest{"u", 0});  // 0: the server's now, not sent
  ExpectRoundTrip(TrimRequest{"u", 1});
  ExpectRoundTrip(TrimRequest{"u", UINT32_MAX});
  EXPECT_EQ(EncodeToString(TrimRequest{"u", 0}), Mp().Map(1).Str("user").Str("u").str());
  ExpectRoundTrip(DeleteRequest{"u"});
  ExpectRoundTrip(DeleteRequest{std::string(kDefaultMaxKeyBytes, '\xff')});
}

TEST(WireTest, ExpireRequestRoundTripsEveryConditionAndLeavesOutItsDefaults) {
  ExpectRoundTrip(ExpireRequest{"u", {}, 0});  // no IDs, persist
  ExpectRoundTrip(ExpireRequest{"u", {0, 1, UINT64_MAX, 1ull << 40}, UINT32_MAX});
  for (ExpireCondition c : {ExpireCondition::kNone, ExpireCondition::kNx, ExpireCondition::kXx,
                            ExpireCondition::kGt, ExpireCondition::kLt}) {
    ExpectRoundTrip(ExpireRequest{"u", {5}, 3600, true, c});
    ExpectRoundTrip(ExpireRequest{"u", {5}, 1893456000, false, c, WriteId{1, 2}});
  }
  // ttl only when true, condition only when one is set; value always.
  EXPECT_EQ(EncodeToString(ExpireRequest{"u", {7}, 0}),
            Mp().Map(3).Str("user").Str("u").Str("ids").Arr(1).U(7).Str("value").U(0).str());
  EXPECT_EQ(EncodeToString(ExpireRequest{"u", {}, 60, true, ExpireCondition::kGt}),
            Mp().Map(5)
                .Str("user")
                .Str("u")
                .Str("ids")
                .Arr(0)
                .Str("value")
                .U(60)
                .Str("ttl")
                .Bool(true)
                .Str("condition")
                .Str("gt")
                .str());
  // nil reads as absent.
  ExpireRequest got;
  ASSERT_TRUE(Decode(Mp().Map(5)
                         .Str("user")
                         .Str("u")
                         .Str("ids")
                         .Arr(0)
                         .Str("value")
                         .U(1)
                         .Str("ttl")
                         .Nil()
                         .Str("condition")
                         .Nil()
                         .str(),
                     {}, &got)
                  .ok());
  EXPECT_FALSE(got.ttl);
  EXPECT_EQ(got.condition, ExpireCondition::kNone);
}

TEST(WireTest, ExpireRequestRefusalsNameTheField) {
  auto body = [](auto add) {
    Mp m;
    m.Map(3).Str("user").Str("u").Str("ids").Arr(1).U(1);
    add(m);
    return m.str();
  };
  // user, no IDs, value 1, and one more field: `key` with what `add` writes.
  auto with = [](const char* key, auto add) {
    Mp m;
    m.Map(4).Str("user").Str("u").Str("ids").Arr(0).Str("value").U(1).Str(key);
    add(m);
    return m.str();
  };
  ExpectInvalid(DecodeAs<ExpireRequest>(Mp().Map(2).Str("user").Str("u").Str("ids").Arr(0)),
                {"value", "missing"});
  ExpectInvalid(DecodeAs<ExpireRequest>(Mp().Map(2).Str("user").Str("u").Str("value").U(1)),
                {"ids", "missing"});
  ExpectInvalid(DecodeAs<ExpireRequest>(body([](Mp& m) { m.Str("value").U(1ull << 32); })),
                {"value", "out of range"});
  ExpectInvalid(DecodeAs<ExpireRequest>(body([](Mp& m) { m.Str("value").I(-1); })),
                {"value", "negative"});
  ExpectInvalid(DecodeAs<ExpireRequest>(
                    Mp().Map(3).Str("user").Str("u").Str("ids").Arr(1).Str("x").Str("value").U(1)),
                {"ids[0]", "a string"});
  for (const char* bad : {"NX", "", "gte", "none"}) {
    ExpectInvalid(DecodeAs<ExpireRequest>(with("condition", [&](Mp& m) { m.Str(bad); })),
                  {"condition", "is not one of nx, xx, gt, lt"});
  }
  ExpectInvalid(DecodeAs<ExpireRequest>(with("ttl", [](Mp& m) { m.U(1); })), {"ttl", "a boolean"});
  ExpectInvalid(DecodeAs<ExpireRequest>(with("condition", [](Mp& m) { m.U(1); })),
                {"condition", "a string"});
  // More IDs than max_list (the server's max_segments): LimitExceeded.
  DecodeLimits small;
  small.max_list = 2;
  Mp three;
  three.Map(3).Str("user").Str("u").Str("ids").Arr(3).U(1).U(2).U(3).Str("value").U(1);
  ExpectError(DecodeAs<ExpireRequest>(three.str(), small), Status::Code::kLimitExceeded, {"ids"});
}

TEST(WireTest, ExpireResponseRoundTripsAndRefusesAnUnknownOutcome) {
  using EO = ExpireOutcome;
  ExpectRoundTrip(ExpireResponse{});
  ExpectRoundTrip(
      ExpireResponse{{EO::kMissing, EO::kSet, EO::kRemoved, EO::kUnchanged, EO::kSet}, 4});
  ExpectRoundTrip(ExpireResponse{{EO::kSet}, 1, true});
  EXPECT_EQ(EncodeToString(ExpireResponse{{EO::kSet, EO::kUnchanged}, 7}),
            Mp().Map(2).Str("results").Arr(2).U(1).U(3).Str("count").U(7).str());
  EXPECT_EQ(EncodeToString(ExpireResponse{{}, 0, true}),
            Mp().Map(3).Str("results").Arr(0).Str("count").U(0).Str("duplicate").Bool(true).str());
  ExpectInvalid(
      DecodeAs<ExpireResponse>(Mp().Map(2).Str("results").Arr(2).U(1).U(4).Str("count").U(1).str()),
      {"results[1]", "4 is not an outcome"});
  ExpectInvalid(DecodeAs<ExpireResponse>(
                    Mp().Map(2).Str("results").Arr(1).Str("set").Str("count").U(1).str()),
                {"results[0]", "a string"});
  ExpectInvalid(DecodeAs<ExpireResponse>(Mp().Map(1).Str("results").Arr(0).str()),
                {"count", "missing"});
  ExpectInvalid(DecodeAs<ExpireResponse>(Mp().Map(1).Str("count").U(0).str()),
                {"results", "missing"});
}

TEST(WireTest, WriteIdsRoundTripOnEveryWrite) {
  const WriteId id{0x0102030405060708ull, 0x1112131415161718ull};
  ExpectRoundTrip(UpsertRequest{"u", {}, UpsertMode::kAdd, id});
  ExpectRoundTrip(RemoveRequest{"u", {1, 2}, id});
  ExpectRoundTrip(TrimRequest{"u", 5, id});
  ExpectRoundTrip(DeleteRequest{"u", id});
  ExpectRoundTrip(ExpireRequest{"u", {1}, 60, true, ExpireCondition::kNone, id});
  BatchUpsertRequest batch;
  batch.items.push_back(UpsertRequest{"a", {}, UpsertMode::kSet, id});
  batch.items.push_back(UpsertRequest{"b", {}, UpsertMode::kSet, {}});
  ExpectRoundTrip(batch);
  // A bin of 16 bytes, big-endian hi then lo.
  EXPECT_EQ(
      EncodeToString(DeleteRequest{"u", id}),
      Mp().Map(2)
          .Str("user")
          .Str("u")
          .Str("write_id")
          .Bin(std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x11\x12\x13\x14\x15\x16\x17\x18", 16))
          .str());
  // None: nothing sent.
  EXPECT_EQ(EncodeToString(DeleteRequest{"u", {}}), Mp().Map(1).Str("user").Str("u").str());
}

TEST(WireTest, AWriteIdMustBeSixteenBytesNotAllZero) {
  auto with_id = [](auto add_id) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str("write_id");
    add_id(m);
    return m.str();
  };
  ExpectInvalid(DecodeAs<DeleteRequest>(with_id([](Mp& m) { m.Str(std::string(16, 'x')); })),
                {"write_id", "bin"});
  ExpectInvalid(DecodeAs<DeleteRequest>(with_id([](Mp& m) { m.Bin(std::string(15, 'x')); })),
                {"write_id", "15 bytes"});
  ExpectInvalid(DecodeAs<RemoveRequest>(with_id([](Mp& m) { m.Bin(std::string(17, 'x')); })),
                {"write_id", "17 bytes"});
  ExpectInvalid(DecodeAs<TrimRequest>(with_id([](Mp& m) { m.Bin(std::string(16, '\0')); })),
                {"write_id", "all zeros"});
  ExpectInvalid(DecodeAs<UpsertRequest>(with_id([](Mp& m) { m.U(7); })), {"write_id"});
  // nil is the same as absent.
  DeleteRequest d;
  ASSERT_TRUE(Decode(with_id([](Mp& m) { m.Nil(); }), {}, &d).ok());
  EXPECT_TRUE(d.write_id.empty());
  // In a batch, a bad write_id fails its item alone.
  Mp batch;
  batch.Map(1).Str("items").Arr(2);
  batch.Map(2).Str("user").Str("a").Str("segments").Arr(0);
  batch.Map(3).Str("user").Str("b").Str("segments").Arr(0).Str("write_id").Bin("short");
  BatchUpsertRequest b;
  ASSERT_TRUE(Decode(batch.str(), {}, &b).ok());
  ASSERT_EQ(b.rejected.size(), 2u);
  EXPECT_TRUE(b.rejected[0].ok());
  ExpectInvalid(b.rejected[1], {"items[1].write_id", "5 bytes"});
}

TEST(WireTest, DuplicateFlagsRoundTripAndAreLeftOutWhenFalse) {
  ExpectRoundTrip(UpsertResult{1, 2, 3, 4, true});
  ExpectRoundTrip(RemoveResponse{3, true});
  ExpectRoundTrip(TrimResult{1, 2, true});
  ExpectRoundTrip(DeleteResponse{true, true});
  BatchUpsertResponse m;
  m.push_back(UpsertResult{1, 2, 3, 4, true});
  m.push_back(UpsertResult{1, 2, 3, 4, false});
  ExpectRoundTrip(m);
  EXPECT_EQ(EncodeToString(RemoveResponse{3, false}), Mp().Map(1).Str("removed").U(3).str());
  EXPECT_EQ(EncodeToString(RemoveResponse{3, true}),
            Mp().Map(2).Str("removed").U(3).Str("duplicate").Bool(true).str());
}

TEST(WireTest, UserMayBeBinaryInsteadOfString) {
  const std::string user("\x00\xff\x80user", 7);
  auto with_user = [&](auto add_rest, uint32_t fields) {
    Mp m;
    m.Map(fields).Str("user").Bin(user);
    add_rest(m);
    return m.str();
  };
  auto none = [](Mp&) {};
  {
    GetRequest m;
    ASSERT_TRUE(Decode(with_user(none, 1), DecodeLimits{}, &m).ok());
    EXPECT_EQ(m.user, user);
  }
  {
    CountRequest m;
    ASSERT_TRUE(Decode(with_user(none, 1), DecodeLimits{}, &m).ok());
    EXPECT_EQ(m.user, user);
  }
  {
    UpsertRequest m;
    ASSERT_TRUE(
        Decode(with_user([](Mp& b) { b.Str("segments").Arr(0); }, 2), DecodeLimits{}, &m).ok());
    EXPECT_EQ(m.user, user);
  }
  {
    RemoveRequest m;
    ASSERT_TRUE(
        Decode(with_user([](Mp& b) { b.Str("ids").Arr(1).U(5); }, 2), DecodeLimits{}, &m).ok());
    EXPECT_EQ(m.user, user);
  }
  {
    TrimRequest m;
    ASSERT_TRUE(Decode(with_user(none, 1), DecodeLimits{}, &m).ok());
    EXPECT_EQ(m.user, user);
  }
  {
    DeleteRequest m;
    ASSERT_TRUE(Decode(with_user(none, 1), DecodeLimits{}, &m).ok());
    EXPECT_EQ(m.user, user);
  }
  {
    BatchGetRequest m;
    ASSERT_TRUE(
        Decode(Mp().Map(1).Str("users").Arr(2).Bin(user).Str("b"), DecodeLimits{}, &m).ok());
    EXPECT_EQ(m.users, (std::vector<std::string>{user, "b"}));
  }
  {
    BatchUpsertRequest m;
    ASSERT_TRUE(
        Decode(Mp().Map(1).Str("items").Arr(1).Map(2).Str("user").Bin(user).Str("segments").Arr(0),
               DecodeLimits{}, &m)
            .ok());
    ASSERT_EQ(m.items.size(), 1u);
    EXPECT_EQ(m.items[0].user, user);
  }
}

TEST(WireTest, AnyValidEncodingOfAValueIsAccepted) {
  // Clients in other languages may pick wider forms than the shortest; keys
  // may come in any order.
  GetRequest m;
  ASSERT_TRUE(Decode(Mp().Raw({0xde, 0x00, 0x03})  // map16
                         .Str("limit")
                         .U64(7)
                         .Raw({0xda, 0x00, 0x04})  // str16 key
                         .Append("user")
                         .Raw({0xd9, 0x01, 'u'})  // str8 value
                         .Str("id_from")
                         .I8(5),  // a non-negative int8
                     DecodeLimits{}, &m)
                  .ok());
  EXPECT_EQ(m.user, "u");
  EXPECT_EQ(m.options.limit, 7u);
  EXPECT_EQ(m.options.id_from, 5u);

  RemoveRequest r;
  ASSERT_TRUE(Decode(Mp().Map(2).Str("ids").Raw({0xdc, 0x00, 0x01}).U64(1).Str("user").Str("u"),
                     DecodeLimits{}, &r)
                  .ok());
  EXPECT_EQ(r.ids, std::vector<uint64_t>{1});
}

TEST(WireTest, HelloResponseRoundTrips) {
  ExpectRoundTrip(HelloResponse{});
  ExpectRoundTrip(HelloResponse{1, "segstored 0.1.0", kDefaultMaxFrameBytes, kDefaultMaxBatch,
                                kDefaultMaxKeyBytes, 10000, kDefaultMaxInFlight});
  ExpectRoundTrip(
      HelloResponse{UINT32_MAX, "", UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX});
}

GetResult FullResult() {
  GetResult r;
  r.ids = {0, 7, UINT64_MAX};
  r.expires = {kNever, 1, UINT32_MAX};
  r.attr1 = {std::nullopt, 0u, UINT32_MAX};
  r.attr2 = {5u, std::nullopt, std::nullopt};
  r.count = UINT32_MAX;
  return r;
}

TEST(WireTest, GetResultRoundTripsEveryColumnShape) {
  ExpectRoundTrip(GetResult{});                            // nothing matched
  ExpectRoundTrip(examples::IdsOnly({1, UINT64_MAX}, 2));  // ids projection
  ExpectRoundTrip(FullResult());
  GetResult no_attrs = FullResult();
  no_attrs.attr1.clear();
  no_attrs.attr2.clear();
  ExpectRoundTrip(no_attrs);
  GetResult attr1_only = FullResult();
  attr1_only.attr2.clear();
  ExpectRoundTrip(attr1_only);
  GetResult attr2_only = FullResult();
  attr2_only.attr1.clear();
  ExpectRoundTrip(attr2_only);
  // A column present with every row absent stays present.
  GetResult all_nil = FullResult();
  all_nil.attr1.assign(3, std::nullopt);
  ExpectRoundTrip(all_nil);
  // count_only: a count and no rows.
  ExpectRoundTrip(examples::IdsOnly({}, 12345));
}

// Get answers write their integer columns by hand (the hot path): the bytes
// must be exactly msgpack's smallest forms, at every width boundary.
TEST(WireTest, GetResultIntegersAreMsgpacksSmallestForms) {
  GetResult r;
  r.ids = {0, 127, 128, 255, 256, 65535, 65536, 0xffffffffull, 0x100000000ull, UINT64_MAX};
  r.expires = {0, 127, 128, 255, 256, 65535, 65536, 0x7fffffff, 0xfffffffe, UINT32_MAX};
  r.count = 10;
  std::string ours;
  Encode(r, &ours);
  msgpack::sbuffer expected;
  msgpack::packer<msgpack::sbuffer> pk(expected);
  pk.pack_map(3);
  pk.pack(std::string("count"));
  pk.pack_uint32(10);
  pk.pack(std::string("ids"));
  pk.pack_array(10);
  for (uint64_t id : r.ids) pk.pack_uint64(id);
  pk.pack(std::string("expires"));
  pk.pack_array(10);
  for (uint32_t e : r.expires) pk.pack_uint32(e);
  EXPECT_EQ(ours, std::string(expected.data(), expected.size()));
  ExpectRoundTrip(r);
}

// The same for columns longer than the encoder's buffer (written a few KiB
// at a time), of values of every width mixed at random.
TEST(WireTest, LongGetResultColumnsAreMsgpacksSmallestForms) {
  std::mt19937_64 rng(20);
  for (const size_t n : {size_t{0}, size_t{1}, size_t{455}, size_t{456}, size_t{5000}}) {
    GetResult r;
    for (size_t i = 0; i < n; ++i) {
      r.ids.push_back(rng() >> (rng() % 64));
      r.expires.push_back(static_cast<uint32_t>(rng() >> (32 + rng() % 32)));
    }
    r.count = static_cast<uint32_t>(n);
    std::string ours;
    Encode(r, &ours);
    msgpack::sbuffer expected;
    msgpack::packer<msgpack::sbuffer> pk(expected);
    pk.pack_map(n == 0 ? 2 : 3);
    pk.pack(std::string("count"));
    pk.pack_uint32(r.count);
    pk.pack(std::string("ids"));
    pk.pack_array(static_cast<uint32_t>(n));
    for (uint64_t id : r.ids) pk.pack_uint64(id);
    if (n != 0) {
      pk.pack(std::string("expires"));
      pk.pack_array(static_cast<uint32_t>(n));
      for (uint32_t e : r.expires) pk.pack_uint32(e);
    }
    EXPECT_EQ(ours, std::string(expected.data(), expected.size())) << n << " rows";
    ExpectRoundTrip(r);
  }
}

TEST(WireTest, BatchGetResponseRoundTripsResultsAndErrors) {
  ExpectRoundTrip(BatchGetResponse{});
  BatchGetResponse m;
  m.push_back(FullResult());
  m.push_back(GetResult{});
  for (uint8_t c = 1; c <= Status::kMaxCode; ++c) {
    m.push_back(Status::FromCode(c, "error " + std::to_string(c)));
  }
  m.push_back(Status::NotFound(""));  // an empty message
  m.push_back(examples::IdsOnly({3}, 1));
  ExpectRoundTrip(m);
}

TEST(WireTest, UpsertResultsRoundTrip) {
  ExpectRoundTrip(UpsertResult{});
  ExpectRoundTrip(UpsertResult{UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX});
  ExpectRoundTrip(BatchUpsertResponse{});
  BatchUpsertResponse m;
  m.push_back(UpsertResult{1, 2, 3, 4});
  m.push_back(Status::LimitExceeded("too many segments"));
  m.push_back(Status::InvalidArgument("duplicate segment id 5"));
  m.push_back(UpsertResult{});
  ExpectRoundTrip(m);
}

TEST(WireTest, SmallResponsesRoundTrip) {
  ExpectRoundTrip(RemoveResponse{0});
  ExpectRoundTrip(RemoveResponse{UINT32_MAX});
  ExpectRoundTrip(TrimResult{0, 0});
  ExpectRoundTrip(TrimResult{UINT32_MAX, UINT32_MAX});
  ExpectRoundTrip(CountResponse{0});
  ExpectRoundTrip(CountResponse{UINT32_MAX});
  ExpectRoundTrip(DeleteResponse{false});
  ExpectRoundTrip(DeleteResponse{true});
}

TEST(WireTest, StatsRoundTripEveryValueKind) {
  ExpectRoundTrip(StatsResponse{});
  StatsResponse m;
  m.entries = {{"a.u64", uint64_t{0}},
               {"a.max", UINT64_MAX},
               {"b.double", 0.1},
               {"b.negative", -2.5},
               {"b.inf", std::numeric_limits<double>::infinity()},
               {"b.tiny", 5e-324},
               {"b.huge", 1.5e300},
               {"c.text", std::string("segstored 0.1.0")},
               {"c.empty", std::string()},
               {"", uint64_t{1}}};
  ExpectRoundTrip(m);
  // A float32 reads as a double.
  StatsResponse f;
  ASSERT_TRUE(
      Decode(Mp().Map(1).Str("x").Raw({0xca, 0x3f, 0xc0, 0x00, 0x00}), DecodeLimits{}, &f).ok());
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(std::get<double>(f.entries[0].value), 1.5);
}

// msgpack-c's pack_double writes a double holding an integral value as a
// MessagePack integer (0.0 would come back as uint64_t, -2.0 as a negative
// integer the decoder rejects); the stats encoder writes float64 (cb) itself.
TEST(WireTest, IntegralDoubleStatsKeepTheirType) {
  for (double d : {0.0, 1.0, -2.0, -0.0, 1e15}) {
    ExpectRoundTrip(StatsResponse{{{"gauge", d}}});
  }
}

TEST(WireTest, ErrorBodyRoundTripsAndUnreadableBodiesSaySo) {
  for (std::string message : {std::string(), std::string("get: limit: bad"),
                              std::string(100000, 'm'), std::string("\0\xff", 2)}) {
    std::string body;
    EncodeError(message, &body);
    EXPECT_EQ(DecodeError(body), message);
  }
  EXPECT_EQ(DecodeError("").rfind("(unreadable error body", 0), 0u);  // no message
  EXPECT_EQ(DecodeError("\xc1").rfind("(unreadable error body", 0), 0u);
  EXPECT_EQ(DecodeError(Mp().Map(1).Str("message").U(5)).rfind("(unreadable error body", 0), 0u);
}

TEST(WireTest, WrongNodeBodyCarriesTheMessageAndTheRevision) {
  for (uint64_t revision : {uint64_t{0}, uint64_t{1}, uint64_t{42}, UINT64_MAX}) {
    std::string body;
    EncodeWrongNode("get: partition 3045 is not held by this node", revision, &body);
    EXPECT_EQ(DecodeError(body), "get: partition 3045 is not held by this node");
    EXPECT_EQ(DecodeErrorRevision(body), revision);
  }
  // A plain error body has no revision: 0. So has an unreadable one.
  std::string plain;
  EncodeError("busy", &plain);
  EXPECT_EQ(DecodeErrorRevision(plain), 0u);
  EXPECT_EQ(DecodeErrorRevision(""), 0u);
  EXPECT_EQ(DecodeErrorRevision("\xc1"), 0u);
  EXPECT_EQ(DecodeErrorRevision(Mp().Map(2).Str("message").Str("m").Str("revision").Str("x")), 0u);
}

// The cluster_map answer of a single server, not in a cluster.
TEST(ClusterMapWireTest, SingleServerRoundTrips) {
  const ClusterMap single;
  ASSERT_TRUE(single.Check().ok());
  ExpectRoundTrip(single);
  std::string body;
  Encode(single, &body);
  EXPECT_EQ(body, Mp().Map(6)
                      .Str("cluster")
                      .Bool(false)
                      .Str("revision")
                      .U(0)
                      .Str("self")
                      .Str("")
                      .Str("replication")
                      .U(0)
                      .Str("nodes")
                      .Arr(0)
                      .Str("partitions")
                      .Arr(0)
                      .str());
  ClusterMap out;
  out.cluster = true;
  out.self = "x";
  ASSERT_TRUE(Decode(body, DecodeLimits{}, &out).ok());
  EXPECT_EQ(out, single);
}

// Three nodes, replication 2: partition p on nodes p % 3 and (p + 1) % 3.
ClusterMap ThreeNodes() {
  ClusterMap m;
  m.cluster = true;
  m.revision = 42;
  m.replication = 2;
  m.self = "node-b";
  m.nodes = {{"node-a", "10.0.0.1:7070", "rack-1"},
             {"node-b", "10.0.0.2:7070", "rack-2"},
             {"node-c", "10.0.0.3:7070", ""}};
  for (uint32_t p = 0; p < kPartitions; ++p) {
    m.replicas.push_back(static_cast<uint16_t>(p % 3));
    m.replicas.push_back(static_cast<uint16_t>((p + 1) % 3));
  }
  return m;
}

TEST(ClusterMapWireTest, ThreeNodeMapRoundTrips) {
  const ClusterMap in = ThreeNodes();
  ASSERT_TRUE(in.Check().ok()) << in.Check().ToString();
  ExpectRoundTrip(in);
  std::string body;
  Encode(in, &body);
  ClusterMap out;
  ASSERT_TRUE(Decode(body, DecodeLimits{}, &out).ok());
  EXPECT_EQ(out, in);
  EXPECT_TRUE(out.has_map());
  ASSERT_EQ(out.ReplicasOf(4095).size(), 2u);
  EXPECT_EQ(out.ReplicasOf(4095)[0], 4095 % 3);
  EXPECT_EQ(out.ReplicasOf(4095)[1], (4095 + 1) % 3);
  // A cluster writing through a log says so; others leave the key out.
  ClusterMap logged = in;
  logged.log = true;
  ExpectRoundTrip(logged);
  std::string with_log;
  Encode(logged, &with_log);
  EXPECT_EQ(with_log.size(), body.size() + 5);  // "log": true
  // A passive cluster says that too.
  ClusterMap passive = logged;
  passive.passive = true;
  ExpectRoundTrip(passive);
  std::string with_passive;
  Encode(passive, &with_passive);
  EXPECT_EQ(with_passive.size(), with_log.size() + 9);  // "passive": true
  ClusterMap read_back;
  ASSERT_TRUE(Decode(with_passive, DecodeLimits{}, &read_back).ok());
  EXPECT_TRUE(read_back.passive);
  // A forming cluster: no map yet.
  ClusterMap forming;
  forming.cluster = true;
  forming.self = "node-a";
  ExpectRoundTrip(forming);
}

// The body of a cluster map of `nodes` (maps built by the caller) and
// `partitions` lists, each of `per` indices computed by `index(p, k)`.
std::string MapBody(uint32_t replication, const std::function<void(Mp&)>& nodes,
                    uint32_t partitions, uint32_t per,
                    const std::function<uint64_t(uint32_t, uint32_t)>& index) {
  Mp m;
  m.Map(6).Str("cluster").Bool(true).Str("revision").U(7).Str("self").Str("a");
  m.Str("replication").U(replication).Str("nodes");
  nodes(m);
  m.Str("partitions").Arr(partitions);
  for (uint32_t p = 0; p < partitions; ++p) {
    m.Arr(per);
    for (uint32_t k = 0; k < per; ++k) m.U(index(p, k));
  }
  return m.str();
}

void ThreeNodeMaps(Mp& m) {
  m.Arr(3);
  for (const char* id : {"a", "b", "c"}) {
    m.Map(3).Str("id").Str(id).Str("address").Str("h:1").Str("rack").Str("");
  }
}

uint64_t Spread(uint32_t p, uint32_t k) { return (p + k) % 3; }

TEST(ClusterMapWireTest, DecodeRefusesABadMapNamingTheField) {
  // The helper makes a good map.
  ClusterMap good;
  ASSERT_TRUE(
      Decode(MapBody(2, ThreeNodeMaps, kPartitions, 2, Spread), DecodeLimits{}, &good).ok());
  EXPECT_EQ(good.nodes.size(), 3u);
  EXPECT_EQ(good.replicas.size(), 2u * kPartitions);

  // "partitions" holds 0 or 4096 lists.
  for (uint32_t count : {1u, 4095u, 4097u}) {
    SCOPED_TRACE(count);
    ExpectInvalid(DecodeAs<ClusterMap>(MapBody(2, ThreeNodeMaps, count, 2, Spread)),
                  {"partitions", std::to_string(count)});
  }
  // A replication above the node count is refused before anything is
  // reserved for it (a hostile 2^32-1 must not allocate).
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(0xFFFFFFFFu, ThreeNodeMaps, kPartitions, 0, Spread)),
                {"replication", "4294967295"});
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(4, ThreeNodeMaps, kPartitions, 4, Spread)),
                {"replication", "3 nodes"});
  // Each list holds `replication` node indices.
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(2, ThreeNodeMaps, kPartitions, 1, Spread)),
                {"partitions[0]", "replicas"});
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(2, ThreeNodeMaps, kPartitions, 3, Spread)),
                {"partitions[0]", "replicas"});
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(2, ThreeNodeMaps, kPartitions, 2,
                                             [](uint32_t p, uint32_t k) -> uint64_t {
                                               return p == 9 && k == 1 ? 7 : Spread(p, k);
                                             })),
                {"partition 9", "node 7"});  // ClusterMap::Check: an index past the nodes
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(2, ThreeNodeMaps, kPartitions, 2,
                                             [](uint32_t p, uint32_t k) -> uint64_t {
                                               return p == 5 && k == 1 ? 3 : Spread(p, k);
                                             })),
                {"partition 5", "node 3"});  // == nodes.size()
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(2, ThreeNodeMaps, kPartitions, 2,
                                             [](uint32_t p, uint32_t k) -> uint64_t {
                                               return p == 5 && k == 1 ? 65536 : Spread(p, k);
                                             })),
                {"partitions[5]"});  // not even a node index
  // A node without "id".
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(
                    2,
                    [](Mp& m) {
                      m.Arr(3);
                      m.Map(2).Str("id").Str("a").Str("address").Str("h:1");
                      m.Map(2).Str("address").Str("h:2").Str("rack").Str("r");
                      m.Map(2).Str("id").Str("c").Str("address").Str("h:3");
                    },
                    kPartitions, 2, Spread)),
                {"nodes[1].id", "missing"});
  // A node ID twice.
  ExpectInvalid(DecodeAs<ClusterMap>(MapBody(
                    2,
                    [](Mp& m) {
                      m.Arr(3);
                      for (const char* id : {"a", "b", "a"}) {
                        m.Map(2).Str("id").Str(id).Str("address").Str("h:1");
                      }
                    },
                    kPartitions, 2, Spread)),
                {"node a twice"});
}

// Moves in progress on ThreeNodes(): partition p is on nodes p % 3 and
// (p + 1) % 3, so (p + 2) % 3 may be coming.
TEST(ClusterMapWireTest, IncomingRoundTripsAndIsLeftOutWhenEmpty) {
  const ClusterMap without = ThreeNodes();
  std::string plain;
  Encode(without, &plain);
  EXPECT_EQ(plain.find("incoming"), std::string::npos);

  ClusterMap with = ThreeNodes();
  with.incoming = {{0, 2}, {5, 1}, {4095, 2}};
  ASSERT_TRUE(with.Check().ok()) << with.Check().ToString();
  ExpectRoundTrip(with);
  std::string body;
  Encode(with, &body);
  ClusterMap out;
  ASSERT_TRUE(Decode(body, DecodeLimits{}, &out).ok());
  EXPECT_EQ(out, with);
  // "incoming": [[0, 2], [5, 1], [4095, 2]]: its key, an array of 3, two
  // pairs of fixints and one with a uint16 partition.
  EXPECT_EQ(body.size(), plain.size() + 9 + 1 + 3 + 3 + 5);
  const std::string tail =
      Mp().Str("incoming").Arr(3).Arr(2).U(0).U(2).Arr(2).U(5).U(1).Arr(2).U(4095).U(2).str();
  EXPECT_EQ(body.substr(body.size() - tail.size()), tail);

  // With a log as well, and nil for "incoming" reads as none.
  with.log = true;
  ExpectRoundTrip(with);
  ClusterMap nil_incoming;
  ASSERT_TRUE(Decode(Mp().Map(2).Str("cluster").Bool(false).Str("incoming").Nil(), DecodeLimits{},
                     &nil_incoming)
                  .ok());
  EXPECT_TRUE(nil_incoming.incoming.empty());
}

// A good three-node map (MapBody's) with "incoming" as `incoming` writes it.
std::string MapBodyWithIncoming(const std::function<void(Mp&)>& incoming) {
  Mp m;
  m.Map(7).Str("cluster").Bool(true).Str("revision").U(7).Str("self").Str("a");
  m.Str("replication").U(2).Str("nodes");
  ThreeNodeMaps(m);
  m.Str("partitions").Arr(kPartitions);
  for (uint32_t p = 0; p < kPartitions; ++p) m.Arr(2).U(Spread(p, 0)).U(Spread(p, 1));
  m.Str("incoming");
  incoming(m);
  return m.str();
}

TEST(ClusterMapWireTest, DecodeRefusesBadIncomingNamingTheField) {
  // Partition 9 is on nodes 0 and 1; partition 10 on 1 and 2.
  ClusterMap good;
  ASSERT_TRUE(
      Decode(MapBodyWithIncoming([](Mp& m) { m.Arr(2).Arr(2).U(9).U(2).Arr(2).U(10).U(0); }),
             DecodeLimits{}, &good)
          .ok());
  EXPECT_EQ(good.incoming, (std::vector<IncomingReplica>{{9, 2}, {10, 0}}));

  auto refused = [](const std::function<void(Mp&)>& incoming) {
    return DecodeAs<ClusterMap>(MapBodyWithIncoming(incoming));
  };
  ExpectInvalid(refused([](Mp& m) { m.Str("9:2"); }), {"incoming", "an array", "a string"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).U(9); }), {"incoming[0]", "an array"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).Arr(3).U(9).U(2).U(0); }),
                {"incoming[0]", "3 elements"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).Arr(1).U(9); }), {"incoming[0]", "1 elements"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).Arr(2).U(kPartitions).U(2); }),
                {"incoming[0].partition", "4096", "out of range"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).Arr(2).I(-1).U(2); }),
                {"incoming[0].partition", "negative"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(2).Arr(2).U(9).U(2).Arr(2).U(10).Str("0"); }),
                {"incoming[1].node", "unsigned integer"});
  // A node index beyond "nodes" (and beyond any node index).
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).Arr(2).U(9).U(3); }),
                {"incoming[0].node", "3 is past the 3 nodes"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).Arr(2).U(9).U(65536); }), {"incoming[0].node"});
  // What ClusterMap::Check finds, named "incoming": unsorted, repeated, or a
  // node that already holds the partition.
  ExpectInvalid(refused([](Mp& m) { m.Arr(2).Arr(2).U(10).U(0).Arr(2).U(9).U(2); }),
                {"incoming", "incoming replica 1", "not sorted"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(2).Arr(2).U(9).U(2).Arr(2).U(9).U(2); }),
                {"incoming", "incoming replica 1", "repeated"});
  ExpectInvalid(refused([](Mp& m) { m.Arr(1).Arr(2).U(9).U(1); }),
                {"incoming", "already holds partition 9"});
  const Status holder = refused([](Mp& m) { m.Arr(1).Arr(2).U(9).U(0); });
  EXPECT_EQ(holder.message().rfind("incoming: ", 0), 0u) << holder.ToString();
  // Moves in a map without placement: a single server's.
  ExpectInvalid(DecodeAs<ClusterMap>(
                    Mp().Map(2).Str("cluster").Bool(false).Str("incoming").Arr(1).Arr(2).U(0).U(0)),
                {"incoming[0].node", "past the 0 nodes"});
  // And a map wrong elsewhere keeps Check's own message.
  Mp bad_nodes;
  bad_nodes.Map(7).Str("cluster").Bool(true).Str("revision").U(7).Str("self").Str("a");
  bad_nodes.Str("replication").U(2).Str("nodes").Arr(2);
  for (const char* id : {"a", "a"}) bad_nodes.Map(2).Str("id").Str(id).Str("address").Str("h:1");
  bad_nodes.Str("partitions").Arr(0).Str("incoming").Arr(1).Arr(2).U(0).U(1);
  const Status twice = DecodeAs<ClusterMap>(bad_nodes);
  ExpectInvalid(twice, {"node a twice"});
  EXPECT_EQ(twice.message().find("incoming"), std::string_view::npos) << twice.ToString();
}

// ---- scan ----

ScanResponse SampleScanPage() {
  ScanResponse m;
  m.cursor = 3000000000;
  ScannedProfile a;
  a.user = "user-42";
  a.segments = {Segment{5484, 0, {}, {}}, Segment{5485, 1896134400, 7u, {}},
                Segment{UINT64_MAX, UINT32_MAX, {}, 3u}, };
  a.fields = {{"cap:77", FieldValue::Int(-2), 1896134400},
              {"country", FieldValue::String("FR"), 0},
              {"seen", FieldValue::Time(1893456000), 0},
              {std::string("\xff\x01", 2), FieldValue::Bytes(std::string("\0", 1)), 0}};
  a.members = {{"cookie-77", 1896134400}, {"device-3", 0}};
  m.profiles.push_back(a);
  ScannedProfile b;
  b.user = std::string("\x00", 1) + "bin";
  b.master = "user-42";
  b.link_expires = 0;
  m.profiles.push_back(b);
  ScannedProfile c;
  c.user = "score-only";
  c.fields = {{"score", FieldValue::Double(2.0), 0}};
  c.master = "m";
  c.link_expires = 1896134400;
  m.profiles.push_back(c);
  return m;
}

TEST(ScanWireTest, RequestRoundTripsAndLeavesOutItsDefault) {
  ExpectRoundTrip(ScanRequest{});
  ExpectRoundTrip(ScanRequest{3045, 3000000000, 1u << 20});
  ExpectRoundTrip(ScanRequest{kPartitions - 1, kScanFinished, UINT32_MAX});
  EXPECT_EQ(EncodeToString(ScanRequest{7, 0, 0}),
            Mp().Map(2).Str("partition").U(7).Str("cursor").U(0).str());
  ScanRequest m{1, 2, 3};
  ASSERT_TRUE(Decode(Mp().Map(4).Str("cursor").U64(9).Str("max_bytes").Nil().Str("future").Arr(0)
                         .Str("partition").U(4095),
                     DecodeLimits{}, &m)
                  .ok());
  EXPECT_EQ(m, (ScanRequest{4095, 9, 0}));
}

TEST(ScanWireTest, RequestRefusalsNameTheField) {
  ExpectInvalid(DecodeAs<ScanRequest>(""), {"partition", "missing"});
  ExpectInvalid(DecodeAs<ScanRequest>(Mp().Map(1).Str("partition").U(1)), {"cursor", "missing"});
  ExpectInvalid(DecodeAs<ScanRequest>(Mp().Map(2).Str("partition").U(4096).Str("cursor").U(0)),
                {"partition", "4096 is not a partition (0 to 4095)"});
  ExpectInvalid(DecodeAs<ScanRequest>(Mp().Map(2).Str("partition").I(-1).Str("cursor").U(0)),
                {"partition", "negative"});
  ExpectInvalid(
      DecodeAs<ScanRequest>(Mp().Map(2).Str("partition").U(1).Str("cursor").U64(kScanFinished + 1)),
      {"cursor", "4294967297", "past the end"});
  ExpectInvalid(DecodeAs<ScanRequest>(Mp().Map(2).Str("partition").U(1).Str("cursor").F64(1)),
                {"cursor", "a float"});
  ExpectInvalid(DecodeAs<ScanRequest>(
                    Mp().Map(3).Str("partition").U(1).Str("cursor").U(0).Str("max_bytes").U64(
                        1ull << 32)),
                {"max_bytes", "out of range"});
  ExpectInvalid(DecodeAs<ScanRequest>(Mp().Map(2).Str("partition").U(1).Str("partition").U(0)),
                {"partition", "appears twice"});
}

TEST(ScanWireTest, ResponseRoundTripsWithSegmentsFieldsAndLinks) {
  ExpectRoundTrip(SampleScanPage());
  ExpectRoundTrip(ScanResponse{kScanFinished, {}});
  ExpectRoundTrip(ScanResponse{5, {}});  // an empty page before the last
  const ScanResponse page = SampleScanPage();
  ScanResponse back;
  ASSERT_TRUE(Decode(EncodeToString(page), DecodeLimits{}, &back).ok());
  EXPECT_EQ(back, page);
  // ScannedProfileBytes is exact; the page stays within the overhead.
  size_t sum = 0;
  for (const ScannedProfile& p : page.profiles) {
    ScanResponse one{0, {p}};
    sum += ScannedProfileBytes(p);
    EXPECT_EQ(EncodeToString(one).size(),
              EncodeToString(ScanResponse{0, {}}).size() + ScannedProfileBytes(p));
  }
  EXPECT_LE(EncodeToString(ScanResponse{kScanFinished, page.profiles}).size(),
            kScanPageOverhead + sum);
  // A profile with nothing but its user and no segments.
  EXPECT_EQ(EncodeToString(ScanResponse{kScanFinished, {ScannedProfile{"u"}}}),
            Mp().Map(2).Str("cursor").U64(kScanFinished).Str("profiles").Arr(1).Map(2).Str("user")
                .Bin("u").Str("segments").Arr(0).str());
}

TEST(ScanWireTest, ResponseRefusalsNameTheProfile) {
  auto page = [](const std::function<void(Mp&)>& profile) {
    Mp m;
    m.Map(2).Str("cursor").U(1).Str("profiles").Arr(1);
    profile(m);
    return DecodeAs<ScanResponse>(m);
  };
  ExpectInvalid(DecodeAs<ScanResponse>(Mp().Map(1).Str("cursor").U(1)), {"profiles", "missing"});
  ExpectInvalid(DecodeAs<ScanResponse>(Mp().Map(1).Str("profiles").Arr(0)), {"cursor", "missing"});
  ExpectInvalid(
      DecodeAs<ScanResponse>(Mp().Map(2).Str("cursor").U64(kScanFinished + 1).Str("profiles").Arr(0)),
      {"cursor", "past the end"});
  ExpectInvalid(page([](Mp& m) { m.Arr(0); }), {"profiles[0]", "a map"});
  ExpectInvalid(page([](Mp& m) { m.Map(1).Str("segments").Arr(0); }), {"profiles[0].user", "missing"});
  ExpectInvalid(page([](Mp& m) { m.Map(1).Str("user").Bin("u"); }),
                {"profiles[0].segments", "missing"});
  ExpectInvalid(page([](Mp& m) { m.Map(2).Str("user").Bin("").Str("segments").Arr(0); }),
                {"profiles[0].user", "empty"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(2).Str("user").Bin(std::string("\xff\x00x", 3)).Str("segments").Arr(0);
                }),
                {"profiles[0].user", "reserved"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(2).Str("user").Bin("u").Str("segments").Arr(2).Arr(2).U(5).U(0).Arr(2).U(5).U(0);
                }),
                {"profiles[0].segments[1].id", "out of order or twice"});
  ExpectInvalid(page([](Mp& m) { m.Map(2).Str("user").Bin("u").Str("segments").Arr(1).Arr(1).U(5); }),
                {"profiles[0].segments[0]", "expected 2 to 4"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(2).Str("user").Bin("u").Str("segments").Arr(1).Arr(2).U(5).U64(1ull << 32);
                }),
                {"profiles[0].segments[0].expires_at", "out of range"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(2).Str("user").Bin("u").Str("segments").Arr(1).Arr(4).U(5).U(0).Nil().Nil();
                }),
                {"profiles[0].segments[0].attr2", "nil"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(3).Str("user").Bin("u").Str("segments").Arr(0).Str("link_expires").U(5);
                }),
                {"profiles[0].link_expires", "without a master"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(3).Str("user").Bin("u").Str("segments").Arr(0).Str("master").Bin("m");
                }),
                {"profiles[0].link_expires", "missing"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(3).Str("user").Bin("u").Str("segments").Arr(0).Str("members").Arr(2)
                      .Arr(2).Bin("b").U(0).Arr(2).Bin("a").U(0);
                }),
                {"profiles[0].members[1].user", "out of order"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(3).Str("user").Bin("u").Str("segments").Arr(0).Str("fields").Map(2)
                      .Str("b").Arr(2).U(1).U(0).Str("a").Arr(2).U(1).U(0);
                }),
                {"profiles[0].fields[1].name", "out of order"});
  ExpectInvalid(page([](Mp& m) {
                  m.Map(3).Str("user").Bin("u").Str("segments").Arr(0).Str("fields").Map(1)
                      .Str("a").Arr(2).Nil().U(0);
                }),
                {"profiles[0].fields[0].value"});
}

// ---- copy_partition ----

TEST(CopyPartitionWireTest, RequestRoundTripsAndLeavesOutItsDefaults) {
  ExpectRoundTrip(CopyPartitionRequest{});
  ExpectRoundTrip(CopyPartitionRequest{
      .partition = 3045, .cursor = 3000000000, .min_next = 1234, .max_bytes = 1u << 20});
  ExpectRoundTrip(CopyPartitionRequest{.partition = kPartitions - 1,
                                       .cursor = kCopyFinished,
                                       .min_next = UINT64_MAX,
                                       .max_bytes = UINT32_MAX});
  EXPECT_EQ(EncodeToString(CopyPartitionRequest{.partition = 7, .cursor = 0}),
            Mp().Map(2).Str("partition").U(7).Str("cursor").U(0).str());
  EXPECT_EQ(EncodeToString(CopyPartitionRequest{
                .partition = 7, .cursor = 300, .min_next = 5, .max_bytes = 65536}),
            Mp().Map(4)
                .Str("partition")
                .U(7)
                .Str("cursor")
                .U(300)
                .Str("min_next")
                .U(5)
                .Str("max_bytes")
                .U(65536)
                .str());
  // Optional fields: absent or nil is the default; unknown keys are ignored.
  CopyPartitionRequest m{.partition = 1, .cursor = 2, .min_next = 3, .max_bytes = 4};
  ASSERT_TRUE(Decode(Mp().Map(5)
                         .Str("cursor")
                         .U64(9)
                         .Str("min_next")
                         .Nil()
                         .Str("max_bytes")
                         .Nil()
                         .Str("future")
                         .Arr(0)
                         .Str("partition")
                         .U(4095),
                     DecodeLimits{}, &m)
                  .ok());
  EXPECT_EQ(Text(m), Text(CopyPartitionRequest{.partition = 4095, .cursor = 9}));
}

TEST(CopyPartitionWireTest, RequestRefusalsNameTheField) {
  auto with = [](uint64_t partition, const std::function<void(Mp&)>& cursor) {
    Mp m;
    m.Map(2).Str("partition").U(partition).Str("cursor");
    cursor(m);
    return DecodeAs<CopyPartitionRequest>(m);
  };
  ExpectInvalid(DecodeAs<CopyPartitionRequest>(""), {"partition", "missing"});
  ExpectInvalid(DecodeAs<CopyPartitionRequest>(Mp().Map(1).Str("partition").U(1)),
                {"cursor", "missing"});
  ExpectInvalid(
      DecodeAs<CopyPartitionRequest>(Mp().Map(2).Str("partition").Nil().Str("cursor").U(0)),
      {"partition", "missing"});
  ExpectInvalid(with(kPartitions, [](Mp& m) { m.U(0); }),
                {"partition", "4096 is not a partition (0 to 4095)"});
  ExpectInvalid(with(1ull << 32, [](Mp& m) { m.U(0); }), {"partition", "4294967296"});
  ExpectInvalid(with(UINT64_MAX, [](Mp& m) { m.U(0); }), {"partition"});
  ExpectInvalid(
      DecodeAs<CopyPartitionRequest>(Mp().Map(2).Str("partition").I(-1).Str("cursor").U(0)),
      {"partition", "negative"});
  ExpectInvalid(
      DecodeAs<CopyPartitionRequest>(Mp().Map(2).Str("partition").Str("1").Str("cursor").U(0)),
      {"partition", "expected an unsigned integer, got a string"});
  EXPECT_TRUE(with(0, [](Mp& m) { m.U(kCopyFinished); }).ok());
  ExpectInvalid(with(0, [](Mp& m) { m.U(kCopyFinished + 1); }),
                {"cursor", "4294967297", "past the end"});
  ExpectInvalid(with(0, [](Mp& m) { m.U(UINT64_MAX); }), {"cursor"});
  ExpectInvalid(with(0, [](Mp& m) { m.I(-1); }), {"cursor", "negative"});
  ExpectInvalid(with(0, [](Mp& m) { m.F64(1); }), {"cursor", "a float"});
  auto optional = [](std::string_view key, const std::function<void(Mp&)>& value) {
    Mp m;
    m.Map(3).Str("partition").U(1).Str("cursor").U(0).Str(key);
    value(m);
    return DecodeAs<CopyPartitionRequest>(m);
  };
  ExpectInvalid(optional("min_next", [](Mp& m) { m.I(-5); }), {"min_next", "negative"});
  ExpectInvalid(optional("min_next", [](Mp& m) { m.Bool(true); }), {"min_next", "a boolean"});
  ExpectInvalid(optional("max_bytes", [](Mp& m) { m.U(1ull << 32); }),
                {"max_bytes", "out of range"});
  ExpectInvalid(optional("max_bytes", [](Mp& m) { m.Str("1MiB"); }), {"max_bytes"});
  ExpectInvalid(optional("cursor", [](Mp& m) { m.U(1); }), {"cursor", "appears twice"});
  ExpectInvalid(DecodeAs<CopyPartitionRequest>(Mp().Arr(2).U(1).U(0)), {"body", "a map"});
}

CopyPartitionResponse SamplePage() {
  CopyPartitionResponse m;
  m.next = 1234;
  m.cursor = 3000000000;
  m.records.push_back(CopiedRecord{"foo", std::string("\x02\xd1\x09\x00", 4), 1896134400, 0});
  m.records.push_back(CopiedRecord{std::string("\xff\x01\x00 any bytes", 13), "", 0, UINT32_MAX});
  m.records.push_back(CopiedRecord{"big", std::string(70000, '\xab'), 1, 2});
  // A linked profile's record names its master: a fifth element.
  m.records.push_back(CopiedRecord{"phone", std::string("\x03\x01", 2), 7, 0, "home-pc"});
  return m;
}

TEST(CopyPartitionWireTest, ResponseRoundTripsKeysAndBodiesAsBin) {
  ExpectRoundTrip(SamplePage());
  ExpectRoundTrip(CopyPartitionResponse{.next = 0, .cursor = kCopyFinished, .records = {}});
  ExpectRoundTrip(
      CopyPartitionResponse{.next = UINT64_MAX,
                            .cursor = 0,
                            .records = {{std::string(kDefaultMaxKeyBytes, 'k'), "b", 5, 6}}});
  CopyPartitionResponse out;
  ASSERT_TRUE(Decode(EncodeToString(SamplePage()), DecodeLimits{}, &out).ok());
  EXPECT_EQ(out, SamplePage());
  EXPECT_FALSE(out.finished());
  EXPECT_EQ(EncodeToString(
                CopyPartitionResponse{.next = 1, .cursor = 2, .records = {{"k", "body", 3, 400}}}),
            Mp().Map(3)
                .Str("next")
                .U(1)
                .Str("cursor")
                .U(2)
                .Str("records")
                .Arr(1)
                .Arr(4)
                .Bin("k")
                .Bin("body")
                .U(3)
                .U(400)
                .str());
  // The finished page: 2^32 takes the uint64 form.
  EXPECT_EQ(
      EncodeToString(CopyPartitionResponse{.next = 9, .cursor = kCopyFinished, .records = {}}),
      Mp().Map(3).Str("next").U(9).Str("cursor").U64(kCopyFinished).Str("records").Arr(0).str());
  CopyPartitionResponse done;
  ASSERT_TRUE(
      Decode(Mp().Map(3).Str("records").Arr(0).Str("cursor").U(kCopyFinished).Str("next").U(9),
             DecodeLimits{}, &done)
          .ok());
  EXPECT_TRUE(done.finished());
  EXPECT_EQ(done.next, 9u);
}

// A server sizes its pages by CopiedRecordBytes and kCopyPageOverhead.
TEST(CopyPartitionWireTest, RecordBytesAreExactAndTheOverheadABound) {
  const std::vector<CopiedRecord> records = {
      {"k", "", 0, 0},
      {std::string(31, 'k'), std::string(255, 'b'), 127, 128},
      {std::string(256, 'k'), std::string(256, 'b'), 255, 256},
      {"k", std::string(65535, 'b'), 65535, 65536},
      {"k", std::string(65536, 'b'), UINT32_MAX, 1},
  };
  const CopyPartitionResponse empty{.next = 1, .cursor = 2, .records = {}};
  const size_t base = EncodeToString(empty).size();
  for (const CopiedRecord& r : records) {
    SCOPED_TRACE(Text(r).substr(0, 80));
    CopyPartitionResponse one = empty;
    one.records = {r};
    EXPECT_EQ(EncodeToString(one).size(), base + CopiedRecordBytes(r));
  }
  // The most the rest takes: u64 "next" and "cursor", an array32 of records.
  CopyPartitionResponse many{.next = UINT64_MAX, .cursor = kCopyFinished, .records = {}};
  size_t sum = 0;
  for (uint32_t i = 0; i < 70000; ++i) {
    many.records.push_back({"u" + std::to_string(i), "b", i, 0});
    sum += CopiedRecordBytes(many.records.back());
  }
  EXPECT_EQ(EncodeToString(many).size(), kCopyPageOverhead + sum);
  size_t sample = kCopyPageOverhead;
  for (const CopiedRecord& r : SamplePage().records) sample += CopiedRecordBytes(r);
  EXPECT_LE(EncodeToString(SamplePage()).size(), sample);
}

TEST(CopyPartitionWireTest, ResponseRefusalsNameTheField) {
  // A page of one record, written by `record`.
  auto page = [](const std::function<void(Mp&)>& record, const DecodeLimits& lim = {}) {
    Mp m;
    m.Map(3).Str("next").U(1).Str("cursor").U(2).Str("records").Arr(2);
    m.Arr(4).Bin("good").Bin("body").U(0).U(0);
    record(m);
    return DecodeAs<CopyPartitionResponse>(m, lim);
  };
  EXPECT_TRUE(page([](Mp& m) { m.Arr(4).Bin("k").Bin("").U(0).U(UINT32_MAX); }).ok());
  ExpectInvalid(page([](Mp& m) { m.Map(0); }), {"records[1]", "an array", "a map"});
  ExpectInvalid(page([](Mp& m) { m.Arr(3).Bin("k").Bin("b").U(0); }),
                {"records[1]", "3 elements, expected 4"});
  ExpectInvalid(page([](Mp& m) { m.Arr(6).Bin("k").Bin("b").U(0).U(0).Bin("m").U(0); }),
                {"records[1]", "6 elements"});
  ExpectInvalid(page([](Mp& m) { m.Arr(5).Bin("k").Bin("b").U(0).U(0).U(0); }),
                {"records[1].reference", "binary"});
  ExpectInvalid(page([](Mp& m) { m.Arr(5).Bin("k").Bin("b").U(0).U(0).Bin(""); }),
                {"records[1].reference", "empty user ID"});
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Str("k").Bin("b").U(0).U(0); }),
                {"records[1].key", "expected binary, got a string"});
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin("").Bin("b").U(0).U(0); }),
                {"records[1].key", "empty"});
  ExpectInvalid(page([](Mp& m) {
                  m.Arr(4).Bin(std::string(kDefaultMaxKeyBytes + 1, 'k')).Bin("b").U(0).U(0);
                }),
                {"records[1].key", "257 bytes", "256"});
  DecodeLimits small;
  small.max_key_bytes = 4;
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin("abcde").Bin("b").U(0).U(0); }, small),
                {"records[1].key", "5 bytes"});
  ExpectInvalid(
      page([](Mp& m) { m.Arr(4).Bin(std::string("\xff\x00rest", 6)).Bin("b").U(0).U(0); }),
      {"records[1].key", "reserved", "FF 00"});
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin(std::string("\xff\x00", 2)).Bin("b").U(0).U(0); }),
                {"records[1].key", "reserved"});
  EXPECT_TRUE(page([](Mp& m) { m.Arr(4).Bin("\xff").Bin("b").U(0).U(0); }).ok());
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin("k").Str("b").U(0).U(0); }),
                {"records[1].body", "binary"});
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin("k").Nil().U(0).U(0); }),
                {"records[1].body", "binary", "nil"});
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin("k").Bin("b").I(-1).U(0); }),
                {"records[1].sweep_at", "negative"});
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin("k").Bin("b").U(0).U(1ull << 32); }),
                {"records[1].void_at", "out of range"});
  ExpectInvalid(page([](Mp& m) { m.Arr(4).Bin("k").Bin("b").Nil().U(0); }),
                {"records[1].sweep_at"});

  // The page's own fields.
  ExpectInvalid(DecodeAs<CopyPartitionResponse>(""), {"next", "missing"});
  ExpectInvalid(DecodeAs<CopyPartitionResponse>(Mp().Map(2).Str("next").U(1).Str("records").Arr(0)),
                {"cursor", "missing"});
  ExpectInvalid(
      DecodeAs<CopyPartitionResponse>(Mp().Map(2).Str("next").U(1).Str("cursor").U(kCopyFinished)),
      {"records", "missing"});
  ExpectInvalid(DecodeAs<CopyPartitionResponse>(
                    Mp().Map(3).Str("next").I(-1).Str("cursor").U(0).Str("records").Arr(0)),
                {"next", "negative"});
  ExpectInvalid(
      DecodeAs<CopyPartitionResponse>(
          Mp().Map(3).Str("next").U(1).Str("cursor").U(kCopyFinished + 1).Str("records").Arr(0)),
      {"cursor", "4294967297"});
  ExpectInvalid(DecodeAs<CopyPartitionResponse>(
                    Mp().Map(3).Str("next").U(1).Str("cursor").U(0).Str("records").Map(0)),
                {"records", "an array"});
  // Only the last page may be empty.
  ExpectInvalid(DecodeAs<CopyPartitionResponse>(
                    Mp().Map(3).Str("next").U(1).Str("cursor").U(77).Str("records").Arr(0)),
                {"records", "empty", "not finished", "77"});
}

// ---- profile bridging: link, unlink, master_of, links, connected; "own";
// a merged view's "master" and "profiles" ----

TEST(LinkWireTest, RequestsRoundTripAndLeaveOutTheirDefaults) {
  const WriteId id{0x0102030405060708ull, 0x1112131415161718ull};
  const std::string binary("\x00\xff\x80user", 7);
  ExpectRoundTrip(LinkRequest{"cookie-77", "user-42"});
  ExpectRoundTrip(LinkRequest{"cookie-77", "user-42", 2592000});
  ExpectRoundTrip(LinkRequest{"a", "b", UINT32_MAX, id});
  ExpectRoundTrip(LinkRequest{binary, std::string(kDefaultMaxKeyBytes, 'm'), 1});
  ExpectRoundTrip(UnlinkRequest{"cookie-77"});
  ExpectRoundTrip(UnlinkRequest{binary, id});
  ExpectRoundTrip(MasterOfRequest{"device-3"});
  ExpectRoundTrip(MasterOfRequest{std::string(kDefaultMaxKeyBytes, '\xff')});
  ExpectRoundTrip(LinksRequest{"cookie-77", "", 0});
  ExpectRoundTrip(LinksRequest{"cookie-77", "device-3", 2});
  ExpectRoundTrip(LinksRequest{"u", binary, UINT32_MAX});
  ExpectRoundTrip(ConnectedRequest{"cookie-77", "device-3"});
  ExpectRoundTrip(ConnectedRequest{"same", "same"});  // the server answers true
  ExpectRoundTrip(ConnectedRequest{binary, std::string(kDefaultMaxKeyBytes, 'b')});
  // User IDs go as str, as in every request; ttl only when not 0, the
  // cursor only when not empty, limit only when not 0, write_id only when set.
  EXPECT_EQ(EncodeToString(LinkRequest{"u", "m"}),
            Mp().Map(2).Str("user").Str("u").Str("master").Str("m").str());
  EXPECT_EQ(
      EncodeToString(LinkRequest{"u", "m", 60, id}),
      Mp().Map(4)
          .Str("user")
          .Str("u")
          .Str("master")
          .Str("m")
          .Str("ttl")
          .U(60)
          .Str("write_id")
          .Bin(std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x11\x12\x13\x14\x15\x16\x17\x18", 16))
          .str());
  EXPECT_EQ(EncodeToString(UnlinkRequest{"u"}), Mp().Map(1).Str("user").Str("u").str());
  EXPECT_EQ(EncodeToString(MasterOfRequest{"u"}), Mp().Map(1).Str("user").Str("u").str());
  EXPECT_EQ(EncodeToString(LinksRequest{"u", "", 0}), Mp().Map(1).Str("user").Str("u").str());
  EXPECT_EQ(EncodeToString(LinksRequest{"u", "c", 5}),
            Mp().Map(3).Str("user").Str("u").Str("cursor").Str("c").Str("limit").U(5).str());
  EXPECT_EQ(EncodeToString(ConnectedRequest{"x", "y"}),
            Mp().Map(2).Str("a").Str("x").Str("b").Str("y").str());
}

// Node to node: a link's steps and the records a node gathers a group from.
TEST(LinkWireTest, StepsAndRecordReadsRoundTrip) {
  const WriteId id{0x0102030405060708ull, 0x1112131415161718ull};
  const std::string binary("\x00\xff\x80user", 7);
  LinkStepRequest list;
  list.step.kind = LinkStep::Kind::kList;
  list.step.user = "home-pc";
  list.step.member = "phone";
  list.step.expect = "stale-master";
  list.step.expires = 1767225600;
  list.step.moving = {{"tablet", 0}, {binary, 1767225600}};
  list.step.max_links = 64;
  list.write_id = id;
  ExpectRoundTrip(list);
  LinkStepRequest name;
  name.step.kind = LinkStep::Kind::kName;
  name.step.user = "phone";
  name.step.master = "home-pc";
  name.step.moving = {{"tablet", 0}};
  name.step.listed = {"tablet", binary};
  name.step.stale = true;
  ExpectRoundTrip(name);
  LinkStepRequest clear;
  clear.step.kind = LinkStep::Kind::kClear;
  clear.step.user = "home-pc";
  clear.step.members_too = true;
  ExpectRoundTrip(clear);
  for (auto kind : {LinkStep::Kind::kNameMoved, LinkStep::Kind::kDeleteMember}) {
    LinkStepRequest r;
    r.step.kind = kind;
    r.step.user = "tablet";
    r.step.master = "home-pc";
    r.step.expect = "phone";
    ExpectRoundTrip(r);
  }
  LinkStepRequest drop;
  drop.step.kind = LinkStep::Kind::kDrop;
  drop.step.user = "home-pc";
  drop.step.member = "phone";
  ExpectRoundTrip(drop);
  LinkStepRequest del;
  del.step.kind = LinkStep::Kind::kDelete;
  del.step.user = "home-pc";
  ExpectRoundTrip(del);
  // The defaults are left out.
  EXPECT_EQ(EncodeToString(del),
            Mp().Map(2).Str("user").Str("home-pc").Str("kind").Str("delete").str());
  ExpectRoundTrip(LinkStepResponse{true, false, 3, false});
  ExpectRoundTrip(LinkStepResponse{false, true, 0, true});
  ExpectRoundTrip(ReadRecordsRequest{{"home-pc", binary}});
  ReadRecordsResponse records;
  records.push_back(StoredRecord{std::string("\x03body\x00", 6), "home-pc"});
  records.push_back(Status::NotFound("the user has no record"));
  records.push_back(StoredRecord{"b", ""});
  records.push_back(Status::WrongNode("partition 7 is not held by this node"));
  ExpectRoundTrip(records);
  ExpectRoundTrip(ReadRecordsResponse{});
}

TEST(LinkWireTest, StepAndRecordReadRefusalsNameTheField) {
  auto step = [](const char* kind, auto add, uint32_t fields) {
    Mp m;
    m.Map(2 + fields).Str("user").Str("u").Str("kind").Str(kind);
    add(m);
    return DecodeAs<LinkStepRequest>(m);
  };
  auto nothing = [](Mp&) {};
  ExpectInvalid(DecodeAs<LinkStepRequest>(Mp().Map(1).Str("kind").Str("delete")),
                {"user", "missing"});
  ExpectInvalid(DecodeAs<LinkStepRequest>(Mp().Map(1).Str("user").Str("u")), {"kind", "missing"});
  ExpectInvalid(step("merge", nothing, 0), {"kind", "merge", "not one of"});
  ExpectInvalid(step("list", nothing, 0), {"member", "missing", "list"});
  ExpectInvalid(step(
                    "list", [](Mp& m) { m.Str("member").Str("m"); }, 1),
                {"max_links", "missing"});
  ExpectInvalid(step("drop", nothing, 0), {"member", "missing", "drop"});
  for (const char* kind : {"name", "name_moved", "delete_member"}) {
    ExpectInvalid(step(kind, nothing, 0), {"master", "missing", kind});
  }
  ExpectInvalid(step(
                    "name", [](Mp& m) { m.Str("master").Str(std::string(257, 'm')); }, 1),
                {"master", "257 bytes"});
  ExpectInvalid(step(
                    "clear", [](Mp& m) { m.Str("moving").Arr(1).Arr(1).Str("x"); }, 1),
                {"moving[0]", "[user, expires_at]"});
  ExpectInvalid(step(
                    "clear", [](Mp& m) { m.Str("listed").Arr(1).Str(""); }, 1),
                {"listed[0]", "empty user ID"});
  DecodeLimits small;
  small.max_batch = 1;
  Mp two;
  two.Map(3).Str("user").Str("u").Str("kind").Str("clear").Str("listed").Arr(2).Str("a").Str("b");
  ExpectError(DecodeAs<LinkStepRequest>(two, small), Status::Code::kLimitExceeded,
              {"listed", "limit is 1"});
  ExpectInvalid(DecodeAs<ReadRecordsRequest>(Mp().Map(1).Str("users").Arr(0)), {"users", "empty"});
  ExpectInvalid(DecodeAs<ReadRecordsRequest>(Mp().Map(1).Str("users").Arr(1).Str("")),
                {"users[0]", "empty user ID"});
  ExpectInvalid(DecodeAs<ReadRecordsResponse>(Mp().Map(1).Str("results").Arr(1).U(1)),
                {"results[0]", "a map"});
  ExpectInvalid(
      DecodeAs<ReadRecordsResponse>(
          Mp().Map(1).Str("results").Arr(1).Map(2).Str("status").U(0).Str("body").Bin("")),
      {"results[0].reference", "missing"});
  ExpectInvalid(DecodeAs<ReadRecordsResponse>(Mp().Map(1)
                                                  .Str("results")
                                                  .Arr(1)
                                                  .Map(3)
                                                  .Str("status")
                                                  .U(0)
                                                  .Str("body")
                                                  .Str("b")
                                                  .Str("reference")
                                                  .Bin("")),
                {"results[0].body", "binary"});
}

TEST(LinkWireTest, RequestUsersMayBeBinary) {
  const std::string user("\x00\xff\x80user", 7);
  LinkRequest link;
  ASSERT_TRUE(
      Decode(Mp().Map(2).Str("user").Bin(user).Str("master").Bin(user + "m"), {}, &link).ok());
  EXPECT_EQ(link.user, user);
  EXPECT_EQ(link.master, user + "m");
  UnlinkRequest unlink;
  ASSERT_TRUE(Decode(Mp().Map(1).Str("user").Bin(user), {}, &unlink).ok());
  EXPECT_EQ(unlink.user, user);
  MasterOfRequest master_of;
  ASSERT_TRUE(Decode(Mp().Map(1).Str("user").Bin(user), {}, &master_of).ok());
  EXPECT_EQ(master_of.user, user);
  LinksRequest links;
  ASSERT_TRUE(Decode(Mp().Map(2).Str("user").Bin(user).Str("cursor").Bin(user), {}, &links).ok());
  EXPECT_EQ(links.user, user);
  EXPECT_EQ(links.cursor, user);
  ConnectedRequest connected;
  ASSERT_TRUE(Decode(Mp().Map(2).Str("a").Bin(user).Str("b").Str("b"), {}, &connected).ok());
  EXPECT_EQ(connected.a, user);
  EXPECT_EQ(connected.b, "b");
}

TEST(LinkWireTest, LinkRequestRefusalsNameTheField) {
  // user "u" and one more field: `key` with what `add` writes.
  auto link_with = [](const char* key, auto add) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str(key);
    add(m);
    return DecodeAs<LinkRequest>(m);
  };
  // user "u", master "m", and one more field.
  auto link_and = [](const char* key, auto add) {
    Mp m;
    m.Map(3).Str("user").Str("u").Str("master").Str("m").Str(key);
    add(m);
    return DecodeAs<LinkRequest>(m);
  };
  const std::string over(kDefaultMaxKeyBytes + 1, 'k');
  ExpectInvalid(DecodeAs<LinkRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<LinkRequest>(Mp().Map(1).Str("master").Str("m")), {"user", "missing"});
  ExpectInvalid(DecodeAs<LinkRequest>(Mp().Map(1).Str("user").Str("u")), {"master", "missing"});
  ExpectInvalid(link_with("master", [](Mp& m) { m.Nil(); }), {"master", "got nil"});
  ExpectInvalid(link_with("master", [](Mp& m) { m.Str(""); }), {"master", "empty user ID"});
  ExpectInvalid(link_with("master", [](Mp& m) { m.Bin(""); }), {"master", "empty user ID"});
  ExpectInvalid(link_with("master", [&](Mp& m) { m.Str(over); }),
                {"master", "257 bytes", "the limit is 256"});
  ExpectInvalid(link_with("master", [](Mp& m) { m.U(42); }),
                {"master", "a string or binary user ID", "an unsigned integer"});
  ExpectInvalid(link_with("master", [](Mp& m) { m.Arr(0); }), {"master", "an array"});
  ExpectInvalid(DecodeAs<LinkRequest>(Mp().Map(2).Str("user").Str("").Str("master").Str("m")),
                {"user", "empty user ID"});
  ExpectInvalid(DecodeAs<LinkRequest>(Mp().Map(2).Str("user").Str(over).Str("master").Str("m")),
                {"user", "257 bytes"});
  ExpectInvalid(DecodeAs<LinkRequest>(Mp().Map(2).Str("user").Bool(true).Str("master").Str("m")),
                {"user", "a boolean"});
  ExpectInvalid(link_and("ttl", [](Mp& m) { m.Str("30d"); }),
                {"ttl", "expected an unsigned integer, got a string"});
  ExpectInvalid(link_and("ttl", [](Mp& m) { m.I(-1); }), {"ttl", "negative"});
  ExpectInvalid(link_and("ttl", [](Mp& m) { m.U(1ull << 32); }), {"ttl", "out of range"});
  ExpectInvalid(link_and("ttl", [](Mp& m) { m.F64(60); }), {"ttl", "a float"});
  ExpectInvalid(link_and("write_id", [](Mp& m) { m.Bin("short"); }), {"write_id", "5 bytes"});
  ExpectInvalid(link_and("write_id", [](Mp& m) { m.Bin(std::string(16, '\0')); }),
                {"write_id", "all zeros"});
  // nil reads as absent; unknown keys are ignored; the same user twice is
  // the server's to refuse (InvalidArgument, from the profile layer).
  LinkRequest got;
  ASSERT_TRUE(Decode(Mp().Map(5)
                         .Str("user")
                         .Str("u")
                         .Str("master")
                         .Str("u")
                         .Str("ttl")
                         .Nil()
                         .Str("write_id")
                         .Nil()
                         .Str("later")
                         .Arr(1)
                         .U(1),
                     {}, &got)
                  .ok());
  EXPECT_EQ(Text(got), Text(LinkRequest{"u", "u"}));
  // The server's own max_key_bytes holds for master too.
  DecodeLimits small;
  small.max_key_bytes = 3;
  EXPECT_TRUE(
      DecodeAs<LinkRequest>(Mp().Map(2).Str("user").Str("abc").Str("master").Str("xyz"), small)
          .ok());
  ExpectInvalid(
      DecodeAs<LinkRequest>(Mp().Map(2).Str("user").Str("abc").Str("master").Str("wxyz"), small),
      {"master", "4 bytes", "the limit is 3"});
}

TEST(LinkWireTest, LookupAndUnlinkRequestRefusalsNameTheField) {
  const std::string over(kDefaultMaxKeyBytes + 1, 'k');
  // unlink and master_of: a user, as every request on one user.
  ExpectInvalid(DecodeAs<UnlinkRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<UnlinkRequest>(Mp().Map(1).Str("user").Str("")), {"user", "empty"});
  ExpectInvalid(DecodeAs<UnlinkRequest>(Mp().Map(1).Str("user").Bin(over)), {"user", "257 bytes"});
  ExpectInvalid(DecodeAs<UnlinkRequest>(Mp().Map(2).Str("user").Str("u").Str("write_id").Str("x")),
                {"write_id", "a bin of 16 bytes"});
  ExpectInvalid(DecodeAs<MasterOfRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<MasterOfRequest>(Mp().Map(1).Str("user").U(7)),
                {"user", "an unsigned integer"});
  ExpectInvalid(DecodeAs<MasterOfRequest>(Mp().Map(1).Str("user").Str(over)), {"user"});
  // links: the cursor, when not empty, is a user ID.
  ExpectInvalid(DecodeAs<LinksRequest>(Mp().Map(1).Str("cursor").Str("c")), {"user", "missing"});
  ExpectInvalid(DecodeAs<LinksRequest>(Mp().Map(2).Str("user").Str("u").Str("cursor").U(1)),
                {"cursor", "a string or binary user ID", "an unsigned integer"});
  ExpectInvalid(DecodeAs<LinksRequest>(Mp().Map(2).Str("user").Str("u").Str("cursor").Str(over)),
                {"cursor", "257 bytes"});
  ExpectInvalid(DecodeAs<LinksRequest>(Mp().Map(2).Str("user").Str("u").Str("limit").Str("10")),
                {"limit", "a string"});
  ExpectInvalid(DecodeAs<LinksRequest>(Mp().Map(2).Str("user").Str("u").Str("limit").I(-1)),
                {"limit", "negative"});
  ExpectInvalid(DecodeAs<LinksRequest>(Mp().Map(2).Str("user").Str("u").Str("limit").U(1ull << 32)),
                {"limit", "out of range"});
  // connected: both users required, each a user ID.
  ExpectInvalid(DecodeAs<ConnectedRequest>(""), {"a", "missing"});
  ExpectInvalid(DecodeAs<ConnectedRequest>(Mp().Map(1).Str("a").Str("x")), {"b", "missing"});
  ExpectInvalid(DecodeAs<ConnectedRequest>(Mp().Map(1).Str("b").Str("x")), {"a", "missing"});
  ExpectInvalid(DecodeAs<ConnectedRequest>(Mp().Map(2).Str("a").Str("x").Str("b").Str("")),
                {"b", "empty user ID"});
  ExpectInvalid(DecodeAs<ConnectedRequest>(Mp().Map(2).Str("a").Str(over).Str("b").Str("y")),
                {"a", "257 bytes"});
  ExpectInvalid(DecodeAs<ConnectedRequest>(Mp().Map(2).Str("a").Str("x").Str("b").Nil()),
                {"b", "got nil"});
  // "user" is not one of connected's keys.
  ExpectInvalid(DecodeAs<ConnectedRequest>(Mp().Map(2).Str("user").Str("x").Str("b").Str("y")),
                {"a", "missing"});
}

TEST(LinkWireTest, AnEmptyOrNilCursorReadsAsTheStart) {
  for (int form = 0; form < 3; ++form) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str("cursor");
    if (form == 0) m.Str("");
    if (form == 1) m.Bin("");
    if (form == 2) m.Nil();
    LinksRequest got{"old", "old", 9};
    ASSERT_TRUE(Decode(m.str(), {}, &got).ok()) << form;
    EXPECT_EQ(got.cursor, "") << form;
    EXPECT_EQ(got.limit, 0u) << form;
  }
}

LinksPage SampleLinksPage() {
  return LinksPage{.master = "user-42",
                   .links = {{"cookie-77", examples::kFeb2030}, {"device-3", kNever}},
                   .next = "device-3"};
}

TEST(LinkWireTest, ResponsesRoundTripWithUsersAsBin) {
  const std::string binary("\x00\xff\x80user", 7);
  ExpectRoundTrip(LinkResponse{"user-42", 3, 0});
  ExpectRoundTrip(LinkResponse{binary, UINT32_MAX, UINT32_MAX});
  ExpectRoundTrip(UnlinkResponse{true});
  ExpectRoundTrip(UnlinkResponse{false});
  ExpectRoundTrip(MasterOfResponse{"user-42"});
  ExpectRoundTrip(MasterOfResponse{binary});
  ExpectRoundTrip(SampleLinksPage());
  ExpectRoundTrip(LinksPage{.master = "m", .links = {}, .next = ""});  // an empty last page
  ExpectRoundTrip(LinksPage{
      .master = binary, .links = {{binary, UINT32_MAX}, {std::string(256, 'z'), 1}}, .next = ""});
  ExpectRoundTrip(ConnectedResponse{true});
  ExpectRoundTrip(ConnectedResponse{false});
  EXPECT_EQ(EncodeToString(LinkResponse{"m", 2, 1}),
            Mp().Map(3).Str("master").Bin("m").Str("members").U(2).Str("moved").U(1).str());
  EXPECT_EQ(EncodeToString(UnlinkResponse{false}), Mp().Map(1).Str("unlinked").Bool(false).str());
  EXPECT_EQ(EncodeToString(MasterOfResponse{"m"}), Mp().Map(1).Str("master").Bin("m").str());
  EXPECT_EQ(EncodeToString(ConnectedResponse{true}), Mp().Map(1).Str("connected").Bool(true).str());
  // "next" only when there are more.
  EXPECT_EQ(EncodeToString(LinksPage{.master = "m", .links = {{"a", 7}}, .next = ""}),
            Mp().Map(2).Str("master").Bin("m").Str("links").Arr(1).Arr(2).Bin("a").U(7).str());
  EXPECT_EQ(EncodeToString(LinksPage{.master = "m", .links = {{"a", 0}}, .next = "a"}),
            Mp().Map(3)
                .Str("master")
                .Bin("m")
                .Str("links")
                .Arr(1)
                .Arr(2)
                .Bin("a")
                .U(0)
                .Str("next")
                .Bin("a")
                .str());
  // Users sent as str are read alike.
  LinksPage page;
  ASSERT_TRUE(Decode(Mp().Map(3)
                         .Str("master")
                         .Str("m")
                         .Str("links")
                         .Arr(1)
                         .Arr(2)
                         .Str("a")
                         .U(5)
                         .Str("next")
                         .Str("a"),
                     {}, &page)
                  .ok());
  EXPECT_EQ(Text(page), Text(LinksPage{.master = "m", .links = {{"a", 5}}, .next = "a"}));
}

TEST(LinkWireTest, ResponseRefusalsNameTheField) {
  ExpectInvalid(DecodeAs<LinkResponse>(""), {"master", "missing"});
  ExpectInvalid(DecodeAs<LinkResponse>(
                    Mp().Map(3).Str("master").Bin("").Str("members").U(1).Str("moved").U(0)),
                {"master", "empty user ID"});
  ExpectInvalid(DecodeAs<LinkResponse>(Mp().Map(2).Str("master").Bin("m").Str("moved").U(0)),
                {"members", "missing"});
  ExpectInvalid(DecodeAs<LinkResponse>(Mp().Map(2).Str("master").Bin("m").Str("members").U(0)),
                {"moved", "missing"});
  ExpectInvalid(DecodeAs<LinkResponse>(
                    Mp().Map(3).Str("master").Bin("m").Str("members").U(1).Str("moved").Str("0")),
                {"moved", "a string"});
  ExpectInvalid(
      DecodeAs<LinkResponse>(Mp().Map(3).Str("master").U(1).Str("members").U(1).Str("moved").U(0)),
      {"master", "an unsigned integer"});
  ExpectInvalid(DecodeAs<UnlinkResponse>(""), {"unlinked", "missing"});
  ExpectInvalid(DecodeAs<UnlinkResponse>(Mp().Map(1).Str("unlinked").U(1)),
                {"unlinked", "a boolean"});
  ExpectInvalid(DecodeAs<MasterOfResponse>(""), {"master", "missing"});
  ExpectInvalid(DecodeAs<MasterOfResponse>(Mp().Map(1).Str("master").Bin("")), {"master", "empty"});
  ExpectInvalid(DecodeAs<MasterOfResponse>(Mp().Map(1).Str("master").Arr(0)),
                {"master", "an array"});
  ExpectInvalid(DecodeAs<ConnectedResponse>(""), {"connected", "missing"});
  ExpectInvalid(DecodeAs<ConnectedResponse>(Mp().Map(1).Str("connected").Str("yes")),
                {"connected", "a boolean"});
  // links: [user, expires_at] pairs.
  auto page = [](auto add_links) {
    Mp m;
    m.Map(2).Str("master").Bin("m").Str("links");
    add_links(m);
    return DecodeAs<LinksResponse>(m);
  };
  ExpectInvalid(DecodeAs<LinksResponse>(Mp().Map(1).Str("links").Arr(0)), {"master", "missing"});
  ExpectInvalid(DecodeAs<LinksResponse>(Mp().Map(1).Str("master").Bin("m")), {"links", "missing"});
  ExpectInvalid(page([](Mp& m) { m.Map(0); }), {"links", "an array", "a map"});
  ExpectInvalid(page([](Mp& m) { m.Arr(2).Arr(2).Bin("a").U(1).Bin("b"); }),
                {"links[1]", "an array [user, expires_at]", "binary"});
  ExpectInvalid(page([](Mp& m) { m.Arr(1).Arr(1).Bin("a"); }),
                {"links[0]", "has 1 elements, expected 2"});
  ExpectInvalid(page([](Mp& m) { m.Arr(1).Arr(3).Bin("a").U(1).U(2); }),
                {"links[0]", "has 3 elements, expected 2"});
  ExpectInvalid(page([](Mp& m) { m.Arr(1).Arr(2).Bin("").U(1); }),
                {"links[0].user", "empty user ID"});
  ExpectInvalid(page([](Mp& m) { m.Arr(1).Arr(2).U(1).U(1); }),
                {"links[0].user", "an unsigned integer"});
  ExpectInvalid(page([](Mp& m) { m.Arr(1).Arr(2).Bin("a").I(-1); }),
                {"links[0].expires_at", "negative"});
  ExpectInvalid(page([](Mp& m) { m.Arr(1).Arr(2).Bin("a").U(1ull << 32); }),
                {"links[0].expires_at", "out of range"});
  ExpectInvalid(page([](Mp& m) { m.Arr(1).Arr(2).Bin("a").Nil(); }),
                {"links[0].expires_at", "got nil"});
  ExpectInvalid(DecodeAs<LinksResponse>(
                    Mp().Map(3).Str("master").Bin("m").Str("links").Arr(0).Str("next").U(1)),
                {"next", "an unsigned integer"});
  // A user over the reader's limit is refused (the client reads answers
  // without limits of its own).
  DecodeLimits small;
  small.max_key_bytes = 2;
  ExpectInvalid(
      DecodeAs<LinksResponse>(
          Mp().Map(2).Str("master").Bin("m").Str("links").Arr(1).Arr(2).Bin("abc").U(1), small),
      {"links[0].user", "3 bytes"});
}

TEST(LinkWireTest, OwnIsAGetOptionSentOnlyWhenTrue) {
  GetOptions own;
  own.own_only = true;
  ExpectRoundTrip(GetRequest{"u", own});
  ExpectRoundTrip(BatchGetRequest{{"a", "b"}, own});
  GetOptions every = own;
  every.ids_only = true;
  every.count_only = true;
  every.limit = 3;
  ExpectRoundTrip(GetRequest{"u", every});
  ExpectRoundTrip(BatchGetRequest{{"a"}, every});
  // After the other options; absent when false.
  EXPECT_EQ(EncodeToString(GetRequest{"u", own}),
            Mp().Map(2).Str("user").Str("u").Str("own").Bool(true).str());
  EXPECT_EQ(EncodeToString(BatchGetRequest{{"u"}, own}),
            Mp().Map(2).Str("users").Arr(1).Str("u").Str("own").Bool(true).str());
  EXPECT_EQ(EncodeToString(GetRequest{"u", {}}), Mp().Map(1).Str("user").Str("u").str());
  // false and nil read as absent.
  for (bool nil : {false, true}) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str("own");
    if (nil) {
      m.Nil();
    } else {
      m.Bool(false);
    }
    GetRequest got;
    ASSERT_TRUE(Decode(m.str(), {}, &got).ok());
    EXPECT_FALSE(got.options.own_only);
  }
  GetRequest got;
  ASSERT_TRUE(Decode(Mp().Map(2).Str("own").Bool(true).Str("user").Str("u"), {}, &got).ok());
  EXPECT_TRUE(got.options.own_only);
  // Anything else is refused, naming it; in a batch, as a shared option, it fails the frame.
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("own").U(1)),
                {"own", "a boolean"});
  ExpectInvalid(
      DecodeAs<BatchGetRequest>(Mp().Map(2).Str("users").Arr(1).Str("u").Str("own").Str("true")),
      {"own", "a boolean"});
  // Check (a read arriving as a value) has nothing to say about it.
  EXPECT_TRUE(Check(DecodeLimits{}, GetRequest{"u", own}).ok());
}

GetResult MergedResult() {
  GetResult r = FullResult();
  r.master = "user-42";
  r.profiles = 4;
  return r;
}

TEST(LinkWireTest, AMergedViewCarriesMasterAndProfiles) {
  ExpectRoundTrip(MergedResult());
  GetResult ids_only = examples::IdsOnly({1, 2}, 2);
  ids_only.master = std::string("\x00\xff", 2);
  ids_only.profiles = UINT32_MAX;
  ExpectRoundTrip(ids_only);
  GetResult count_only = examples::IdsOnly({}, 9);
  count_only.master = "m";
  count_only.profiles = 2;
  ExpectRoundTrip(count_only);
  BatchGetResponse batch;
  batch.push_back(MergedResult());
  batch.push_back(FullResult());
  batch.push_back(Status::NotFound("no live segments in the group"));
  batch.push_back(count_only);
  ExpectRoundTrip(batch);
  // After the columns: "master" as bin, then "profiles".
  GetResult small = examples::IdsOnly({9}, 1);
  small.master = "m";
  small.profiles = 2;
  EXPECT_EQ(EncodeToString(small), Mp().Map(4)
                                       .Str("count")
                                       .U(1)
                                       .Str("ids")
                                       .Arr(1)
                                       .U(9)
                                       .Str("master")
                                       .Bin("m")
                                       .Str("profiles")
                                       .U(2)
                                       .str());
  BatchGetResponse one;
  one.push_back(small);
  EXPECT_EQ(EncodeToString(one), Mp().Map(1)
                                     .Str("results")
                                     .Arr(1)
                                     .Map(5)
                                     .Str("status")
                                     .U(0)
                                     .Str("count")
                                     .U(1)
                                     .Str("ids")
                                     .Arr(1)
                                     .U(9)
                                     .Str("master")
                                     .Bin("m")
                                     .Str("profiles")
                                     .U(2)
                                     .str());
  // A master sent as str is read alike (the general path).
  GetResult from_str;
  ASSERT_TRUE(Decode(Mp().Map(4)
                         .Str("count")
                         .U(1)
                         .Str("ids")
                         .Arr(1)
                         .U(9)
                         .Str("master")
                         .Str("m")
                         .Str("profiles")
                         .U(2),
                     {}, &from_str)
                  .ok());
  EXPECT_EQ(Text(from_str), Text(small));
}

// A user in no group gets exactly the answer it got before bridging: the
// example files written before it are the proof.
TEST(LinkWireTest, AnAnswerWithoutAMasterIsByteForByteTheOldOne) {
  for (const std::string file : {"get_full.response.hex", "get.response.hex"}) {
    SCOPED_TRACE(file);
    const std::string frame = ReadHexFile(ExamplePath(file));
    ASSERT_GT(frame.size(), kHeaderSize);
    const std::string body = frame.substr(kHeaderSize);
    GetResult r;
    ASSERT_TRUE(Decode(body, {}, &r).ok());
    EXPECT_TRUE(r.master.empty());
    EXPECT_EQ(r.profiles, 0u);
    EXPECT_EQ(HexDump(EncodeToString(r)), HexDump(body));
    // "profiles" without a master is not sent either (the server never sets it so).
    r.profiles = 3;
    EXPECT_EQ(HexDump(EncodeToString(r)), HexDump(body));
  }
  const std::string batch = ReadHexFile(ExamplePath("batch_get.response.hex")).substr(kHeaderSize);
  BatchGetResponse b;
  ASSERT_TRUE(Decode(batch, {}, &b).ok());
  EXPECT_EQ(HexDump(EncodeToString(b)), HexDump(batch));
}

TEST(LinkWireTest, AMergedViewsFieldsAreChecked) {
  auto with = [](const char* key, auto add) {
    Mp m;
    m.Map(3).Str("count").U(0).Str("ids").Arr(0).Str(key);
    add(m);
    return DecodeAs<GetResult>(m);
  };
  ExpectInvalid(with("master", [](Mp& m) { m.Bin(""); }), {"master", "empty user ID"});
  ExpectInvalid(with("master", [](Mp& m) { m.U(1); }), {"master", "a string or binary user ID"});
  ExpectInvalid(with("profiles", [](Mp& m) { m.Str("4"); }), {"profiles", "a string"});
  ExpectInvalid(with("profiles", [](Mp& m) { m.U(1ull << 32); }), {"profiles", "out of range"});
  ExpectInvalid(with("profiles", [](Mp& m) { m.I(-1); }), {"profiles", "negative"});
  EXPECT_TRUE(with("master", [](Mp& m) { m.Nil(); }).ok());
  // "profiles" counts only beside a master (the two are sent together).
  GetResult alone;
  ASSERT_TRUE(
      Decode(Mp().Map(3).Str("count").U(0).Str("ids").Arr(0).Str("profiles").U(4), {}, &alone)
          .ok());
  EXPECT_EQ(alone.profiles, 0u);
  GetResult no_profiles;
  ASSERT_TRUE(Decode(Mp().Map(3).Str("count").U(0).Str("ids").Arr(0).Str("master").Bin("m"), {},
                     &no_profiles)
                  .ok());
  EXPECT_EQ(no_profiles.master, "m");
  EXPECT_EQ(no_profiles.profiles, 0u);
  ExpectInvalid(DecodeAs<BatchGetResponse>(Mp().Map(1)
                                               .Str("results")
                                               .Arr(1)
                                               .Map(4)
                                               .Str("status")
                                               .U(0)
                                               .Str("count")
                                               .U(0)
                                               .Str("ids")
                                               .Arr(0)
                                               .Str("master")
                                               .Bool(true)),
                {"results[0].master", "a boolean"});
}

// ---- hostile input ----

// ---- profile fields ----

// The one UTF-8 check (src/common/utf8.h) the wire, the profile layer, the
// loader and the RESP port share: RFC 3629's well-formed sequences only.
TEST(Utf8Test, TakesWellFormedSequencesOnly) {
  for (std::string_view good :
       {std::string_view(""), std::string_view("plain ascii\x7f"), std::string_view("\0", 1),
        std::string_view("\xc2\x80"), std::string_view("\xdf\xbf"),          // 2 bytes, both ends
        std::string_view("\xe0\xa0\x80"), std::string_view("\xed\x9f\xbf"),  // U+0800, U+D7FF
        std::string_view("\xee\x80\x80"), std::string_view("\xef\xbf\xbf"),  // U+E000, U+FFFF
        std::string_view("\xf0\x90\x80\x80"),
        std::string_view("\xf4\x8f\xbf\xbf"),  // U+10000, U+10FFFF
        std::string_view("caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e")}) {
    EXPECT_TRUE(IsUtf8(good)) << ::testing::PrintToString(good);
  }
  for (std::string_view bad :
       {std::string_view("\x80"), std::string_view("\xbf"),                  // a continuation first
        std::string_view("\xc0\x80"), std::string_view("\xc1\xbf"),          // overlong 2 bytes
        std::string_view("\xe0\x9f\xbf"),                                    // overlong 3 bytes
        std::string_view("\xf0\x8f\xbf\xbf"),                                // overlong 4 bytes
        std::string_view("\xed\xa0\x80"), std::string_view("\xed\xbf\xbf"),  // surrogates
        std::string_view("\xf4\x90\x80\x80"),
        std::string_view("\xf5\x80\x80\x80"),  // past U+10FFFF
        std::string_view("\xfe"), std::string_view("\xff"), std::string_view("\xc3"),
        std::string_view("ok\xe2\x82"),
        std::string_view("\xf0\x9d\x84"),                                // cut short
        std::string_view("\xc3\x28"), std::string_view("\xe2\x28\xa1"),  // a bad continuation
        std::string_view("\xe2\x82\x28"), std::string_view("\xf0\x9d\x84\x28")}) {
    EXPECT_FALSE(IsUtf8(bad)) << ::testing::PrintToString(bad);
  }
}

FieldUpdate Upd(std::string name, FieldValue v, uint32_t expiry = kNever, bool ttl = false) {
  return FieldUpdate{std::move(name), std::move(v), expiry, ttl};
}

TEST(FieldWireTest, RequestsRoundTripEveryTypeAndLeaveOutTheirDefaults) {
  const std::string binary_name("\xff\x00name", 6);  // not UTF-8: sent as a bin
  ExpectRoundTrip(FieldSetRequest{
      "u",
      {Upd("i", FieldValue::Int(INT64_MIN)), Upd("j", FieldValue::Int(INT64_MAX), 90, true),
       Upd("d", FieldValue::Double(-0.0), 1'900'000'000), Upd("nan", FieldValue::Double(NAN)),
       Upd("s", FieldValue::String(std::string(300, 'x'))),
       Upd("b", FieldValue::Bytes(std::string("\0\xff", 2))), Upd("t", FieldValue::Time(0)),
       Upd("t2", FieldValue::Time(UINT32_MAX)), Upd(binary_name, FieldValue::Int(1)),
       Upd(std::string(kMaxFieldNameBytes, 'n'), FieldValue::Int(2))},
      WriteId{1, 2}});
  ExpectRoundTrip(FieldSetRequest{"u", {}, {}});
  ExpectRoundTrip(FieldDeleteRequest{"u", {"a", binary_name, "a"}, WriteId{3, 4}});
  ExpectRoundTrip(FieldDeleteRequest{"u", {}, {}});
  FieldIncrement inc;
  inc.name = "cap:77";
  ExpectRoundTrip(FieldIncrementRequest{"u", inc, {}});
  inc.delta = -5;
  inc.ttl = 86400;
  inc.window = FieldIncrement::Window::kSliding;
  inc.cap = INT64_MIN;
  ExpectRoundTrip(FieldIncrementRequest{"u", inc, WriteId{0, 9}});
  ExpectRoundTrip(FieldMaxRequest{"u", Upd("seen", FieldValue::Time(1'800'000'000)), {}});
  ExpectRoundTrip(FieldMaxRequest{"u", Upd("score", FieldValue::Double(2.5), 60, true), {}});
  ExpectRoundTrip(FieldMaxRequest{"u", Upd("n", FieldValue::Int(-3), 1'900'000'000), {1, 1}});
  // Defaults: a field without expiry is [name, value]; an increment without
  // TTL, window or cap sends user, name and delta alone.
  EXPECT_EQ(
      EncodeToString(FieldSetRequest{"u", {Upd("n", FieldValue::Int(1))}, {}}),
      std::string(Mp().Map(2).Str("user").Str("u").Str("fields").Arr(1).Arr(2).Str("n").U(1)));
  FieldIncrement plain;
  plain.name = "n";
  EXPECT_EQ(EncodeToString(FieldIncrementRequest{"u", plain, {}}),
            std::string(Mp().Map(3).Str("user").Str("u").Str("name").Str("n").Str("delta").U(1)));
  // A name that is not UTF-8 goes as a bin; one that is, as a str.
  EXPECT_EQ(
      EncodeToString(FieldDeleteRequest{"u", {binary_name, "é"}, {}}),
      std::string(Mp().Map(2).Str("user").Str("u").Str("names").Arr(2).Bin(binary_name).Str("é")));
}

TEST(FieldWireTest, OmittedOptionalsTakeTheirDefaults) {
  FieldIncrementRequest inc;
  ASSERT_TRUE(
      Decode(Mp().Map(3).Str("user").Str("u").Str("name").Bin("n").Str("window").Nil(), {}, &inc)
          .ok());
  EXPECT_EQ(inc.increment.delta, 1);
  EXPECT_EQ(inc.increment.ttl, 0u);
  EXPECT_EQ(inc.increment.window, FieldIncrement::Window::kFixed);
  EXPECT_FALSE(inc.increment.cap.has_value());
  ASSERT_TRUE(Decode(Mp().Map(4)
                         .Str("user")
                         .Str("u")
                         .Str("name")
                         .Str("n")
                         .Str("window")
                         .Str("fixed")
                         .Str("cap")
                         .Nil(),
                     {}, &inc)
                  .ok());
  EXPECT_EQ(inc.increment.window, FieldIncrement::Window::kFixed);
  FieldSetRequest set;
  ASSERT_TRUE(
      Decode(Mp().Map(2).Str("user").Str("u").Str("fields").Arr(1).Arr(4).Str("n").U(1).Nil().Nil(),
             {}, &set)
          .ok());
  ASSERT_EQ(set.fields.size(), 1u);
  EXPECT_EQ(set.fields[0].expiry, kNever);
  EXPECT_FALSE(set.fields[0].ttl);
  // Any integer form, and a float 32 (a double), are accepted.
  ASSERT_TRUE(Decode(Mp().Map(2)
                         .Str("user")
                         .Str("u")
                         .Str("fields")
                         .Arr(2)
                         .Arr(2)
                         .Str("a")
                         .U64(7)
                         .Arr(2)
                         .Str("b")
                         .F32(0.5f),
                     {}, &set)
                  .ok());
  EXPECT_EQ(set.fields[0].value, FieldValue::Int(7));
  EXPECT_EQ(set.fields[1].value, FieldValue::Double(0.5));
}

TEST(FieldWireTest, ValuesTakeTheirMessagePackForms) {
  // The bytes of `v` in a field_max answer: between "value" and "replaced".
  auto value_bytes = [](const FieldValue& v) {
    const std::string all = EncodeToString(FieldMaxResponse{v, false, false});
    const std::string head(Mp().Map(2).Str("value"));
    const std::string tail(Mp().Str("replaced").Bool(false));
    EXPECT_EQ(all.substr(0, head.size()), head);
    EXPECT_EQ(all.substr(all.size() - tail.size()), tail);
    return all.substr(head.size(), all.size() - head.size() - tail.size());
  };
  EXPECT_EQ(value_bytes(FieldValue::Int(2)), std::string(Mp().U(2)));
  EXPECT_EQ(value_bytes(FieldValue::Int(-1)), std::string("\xff", 1));
  EXPECT_EQ(value_bytes(FieldValue::Int(INT64_MIN)),
            std::string(Mp().Raw({0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0})));
  EXPECT_EQ(value_bytes(FieldValue::Double(1.0)),
            std::string(Mp().F64(1.0)));  // a float, whole or not
  EXPECT_EQ(value_bytes(FieldValue::String("FR")), std::string(Mp().Str("FR")));
  EXPECT_EQ(value_bytes(FieldValue::Bytes("FR")), std::string(Mp().Bin("FR")));
  EXPECT_EQ(value_bytes(FieldValue::Time(0x01020304)), std::string(Mp().Ts32(0x01020304)));
}

TEST(FieldWireTest, ResponsesRoundTrip) {
  ExpectRoundTrip(FieldWriteResponse{0, 0, false});
  ExpectRoundTrip(FieldWriteResponse{3, 256, true});
  ExpectRoundTrip(FieldIncrementResponse{INT64_MIN, false, false});
  ExpectRoundTrip(FieldIncrementResponse{3, true, true});
  ExpectRoundTrip(FieldMaxResponse{FieldValue::Time(UINT32_MAX), true, false});
  ExpectRoundTrip(FieldMaxResponse{FieldValue::Double(-1e300), false, true});
  ExpectRoundTrip(FieldMaxResponse{FieldValue::Int(42), false, false});
}

TEST(FieldWireTest, GetAsksForFieldsOnlyWhenTold) {
  GetRequest plain{"u", {}};
  const std::string before = EncodeToString(plain);
  EXPECT_EQ(before, std::string(Mp().Map(1).Str("user").Str("u")));  // as before fields
  GetRequest all{"u", {}};
  all.options.fields.mode = FieldSelection::Mode::kAll;
  EXPECT_EQ(EncodeToString(all),
            std::string(Mp().Map(2).Str("user").Str("u").Str("fields").Bool(true)));
  ExpectRoundTrip(all);
  GetRequest names{"u", {}};
  names.options.fields.mode = FieldSelection::Mode::kNames;
  names.options.fields.names = {"cap:1", std::string("\xc3\x28", 2), "cap:1"};
  ExpectRoundTrip(names);
  names.options.fields.names.clear();  // asks for none by name: an empty "fields" map
  ExpectRoundTrip(names);
  GetRequest prefix{"u", {}};
  prefix.options.fields.mode = FieldSelection::Mode::kPrefix;
  prefix.options.fields.prefix = "cap:";
  ExpectRoundTrip(prefix);
  prefix.options.fields.prefix = "";  // every field
  ExpectRoundTrip(prefix);
  BatchGetRequest batch{{"a", "b"}, prefix.options};
  ExpectRoundTrip(batch);
  // "fields": false and nil ask for none.
  GetRequest got;
  ASSERT_TRUE(Decode(Mp().Map(2).Str("user").Str("u").Str("fields").Bool(false), {}, &got).ok());
  EXPECT_EQ(got.options.fields.mode, FieldSelection::Mode::kNone);
  ASSERT_TRUE(
      Decode(Mp().Map(3).Str("user").Str("u").Str("fields").Nil().Str("field_prefix").Str("c"), {},
             &got)
          .ok());
  EXPECT_EQ(got.options.fields.mode, FieldSelection::Mode::kPrefix);
  // "fields": false is the default, none, as nil is: beside a prefix it asks
  // for nothing more, and the prefix stands.
  for (bool prefix_first : {false, true}) {
    Mp m;
    m.Map(3).Str("user").Str("u");
    if (prefix_first) m.Str("field_prefix").Str("c");
    m.Str("fields").Bool(false);
    if (!prefix_first) m.Str("field_prefix").Str("c");
    const Status s = Decode(m, {}, &got);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(got.options.fields.mode, FieldSelection::Mode::kPrefix);
    EXPECT_EQ(got.options.fields.prefix, "c");
  }
  BatchGetRequest batch_got;
  ASSERT_TRUE(Decode(Mp().Map(3)
                         .Str("users")
                         .Arr(1)
                         .Str("a")
                         .Str("fields")
                         .Bool(false)
                         .Str("field_prefix")
                         .Bin("cap:"),
                     {}, &batch_got)
                  .ok());
  EXPECT_EQ(batch_got.options.fields.mode, FieldSelection::Mode::kPrefix);
  EXPECT_EQ(batch_got.options.fields.prefix, "cap:");
}

TEST(FieldWireTest, GetFieldOptionRefusalsNameTheField) {
  auto get = [](std::string_view m) { return DecodeAs<GetRequest>(m); };
  ExpectInvalid(
      get(Mp().Map(3).Str("user").Str("u").Str("fields").Bool(true).Str("field_prefix").Str("c")),
      {"fields", "field_prefix"});
  // An array asks by name, an empty one too (for none): not with a prefix.
  ExpectInvalid(
      get(Mp().Map(3).Str("user").Str("u").Str("fields").Arr(0).Str("field_prefix").Str("c")),
      {"fields", "field_prefix"});
  ExpectInvalid(get(Mp().Map(3)
                        .Str("user")
                        .Str("u")
                        .Str("fields")
                        .Arr(1)
                        .Str("a")
                        .Str("field_prefix")
                        .Str("")),
                {"fields", "field_prefix"});
  ExpectInvalid(get(Mp().Map(2).Str("user").Str("u").Str("fields").Str("all")),
                {"fields", "true or an array"});
  ExpectInvalid(get(Mp().Map(2).Str("user").Str("u").Str("fields").Arr(1).Str("")),
                {"fields[0]", "empty field name"});
  ExpectInvalid(
      get(Mp().Map(2).Str("user").Str("u").Str("fields").Arr(2).Str("a").Str(std::string(65, 'n'))),
      {"fields[1]", "65 bytes"});
  ExpectInvalid(get(Mp().Map(2).Str("user").Str("u").Str("fields").Arr(1).U(5)), {"fields[0]"});
  ExpectInvalid(get(Mp().Map(2).Str("user").Str("u").Str("field_prefix").U(5)), {"field_prefix"});
  ExpectInvalid(get(Mp().Map(2).Str("user").Str("u").Str("field_prefix").Str(std::string(65, 'p'))),
                {"field_prefix", "65 bytes"});
  ExpectInvalid(get(Mp().Map(2).Str("user").Str("u").Str("field_prefix").Bin(std::string(65, 'p'))),
                {"field_prefix", "65 bytes"});
  EXPECT_TRUE(
      get(Mp().Map(2).Str("user").Str("u").Str("field_prefix").Str(std::string(64, 'p'))).ok());
  Mp many;
  many.Map(2).Str("user").Str("u").Str("fields").Arr(kMaxFieldNamesAsked + 1);
  for (size_t i = 0; i <= kMaxFieldNamesAsked; ++i) many.Str("n" + std::to_string(i));
  ExpectError(get(many), Status::Code::kLimitExceeded, {"fields", "257"});
  // In a batch get, the shared option fails the frame.
  ExpectInvalid(DecodeAs<BatchGetRequest>(
                    Mp().Map(2).Str("users").Arr(1).Str("a").Str("fields").Arr(1).Bin("")),
                {"fields[0]"});
  // A request that arrives as a value is held to the same rules.
  GetRequest value{"u", {}};
  value.options.fields.mode = FieldSelection::Mode::kNames;
  value.options.fields.names = {"ok", std::string(65, 'n')};
  ExpectInvalid(Check(DecodeLimits{}, value), {"fields[1]"});
  value.options.fields.names.assign(kMaxFieldNamesAsked + 1, "n");
  ExpectError(Check(DecodeLimits{}, value), Status::Code::kLimitExceeded, {"fields"});
  BatchGetRequest batch{{"a"}, value.options};
  ExpectError(Check(DecodeLimits{}, &batch), Status::Code::kLimitExceeded, {"fields"});
}

GetResult WithFields(std::vector<Field> fields) {
  GetResult r;
  r.ids = {5};
  r.count = 1;
  r.fields_asked = true;
  r.fields = std::move(fields);
  return r;
}

TEST(FieldWireTest, GetAnswersCarryFieldsOnlyWhenAsked) {
  GetResult plain;
  plain.ids = {5};
  plain.count = 1;
  const std::string before = EncodeToString(plain);
  EXPECT_EQ(before.find("fields"), std::string::npos);  // byte for byte the answer before fields
  GetResult none = WithFields({});
  EXPECT_EQ(EncodeToString(none),
            std::string(Mp().Map(3).Str("count").U(1).Str("ids").Arr(1).U(5).Str("fields").Map(0)));
  ExpectRoundTrip(none);
  GetResult every = WithFields({{"b", FieldValue::Bytes(std::string("\0", 1)), 7},
                                {"cap:1", FieldValue::Int(-2), 0},
                                {"d", FieldValue::Double(0.25), 0},
                                {"s", FieldValue::String(""), 9},
                                {"t", FieldValue::Time(1'800'000'000), UINT32_MAX},
                                {std::string("\xff", 1), FieldValue::Int(1), 0}});
  ExpectRoundTrip(every);
  every.master = "m";
  every.profiles = 2;
  ExpectRoundTrip(every);
  BatchGetResponse batch;
  batch.push_back(every);
  batch.push_back(Status::NotFound("no profile"));
  batch.push_back(none);
  ExpectRoundTrip(batch);
  // The one-pass reader falls back to the general path for these: same answers.
  GetResult fast;
  ASSERT_TRUE(Decode(EncodeToString(every), {}, &fast).ok());
  EXPECT_EQ(Text(fast), Text(every));
}

TEST(FieldWireTest, GetAnswerFieldRefusalsNameTheField) {
  auto answer = [](std::string_view m) { return DecodeAs<GetResult>(m); };
  auto head = [] { return Mp().Map(3).Str("count").U(0).Str("ids").Arr(0).Str("fields"); };
  ExpectInvalid(answer(head().Arr(0)), {"fields", "a map"});
  ExpectInvalid(answer(head().Map(1).Str("a").U(1)), {"fields[0]", "[value, expires_at]"});
  ExpectInvalid(answer(head().Map(1).Str("a").Arr(3).U(1).U(0).U(0)), {"fields[0]", "3 elements"});
  ExpectInvalid(answer(head().Map(2).Str("b").Arr(2).U(1).U(0).Str("a").Arr(2).U(1).U(0)),
                {"fields[1].name", "order"});
  ExpectInvalid(answer(head().Map(2).Str("a").Arr(2).U(1).U(0).Bin("a").Arr(2).U(1).U(0)),
                {"fields[1].name", "twice"});
  ExpectInvalid(answer(head().Map(1).Str("").Arr(2).U(1).U(0)), {"fields[0].name", "empty"});
  ExpectInvalid(answer(head().Map(1).U(1).Arr(2).U(1).U(0)), {"fields[0].name"});
  ExpectInvalid(answer(head().Map(1).Str("a").Arr(2).Nil().U(0)), {"fields[0].value"});
  ExpectInvalid(answer(head().Map(1).Str("a").Arr(2).Bool(true).U(0)), {"fields[0].value"});
  ExpectInvalid(answer(head().Map(1).Str("a").Arr(2).Arr(0).U(0)), {"fields[0].value"});
  ExpectInvalid(answer(head().Map(1).Str("a").Arr(2).U(1).U(uint64_t{1} << 32)),
                {"fields[0].expires_at"});
  ExpectInvalid(answer(head().Map(1).Str("a").Arr(2).U64(uint64_t{1} << 63).U(0)),
                {"fields[0].value", "64-bit signed"});
  // A str value is text: one that is not UTF-8 is refused (the one-pass
  // reader leaves it to the general path, which says why).
  ExpectInvalid(answer(head().Map(1).Str("a").Arr(2).Str("\xff").U(0)),
                {"fields[0].value", "not UTF-8"});
  ExpectInvalid(
      answer(head().Map(2).Str("a").Arr(2).Str("ok").U(0).Str("b").Arr(2).Str("\xc3\x28").U(0)),
      {"fields[1].value", "not UTF-8"});
  ExpectInvalid(DecodeAs<FieldMaxResponse>(
                    Mp().Map(2).Str("value").Str("\xed\xa0\x80").Str("replaced").Bool(false)),
                {"value", "not UTF-8"});
}

TEST(FieldWireTest, TimestampsAreAcceptedOnlyAsFieldValues) {
  auto set_one = [](auto&& value) {
    return Mp().Map(2).Str("user").Str("u").Str("fields").Arr(1).Arr(2).Str("t").Append(value);
  };
  FieldSetRequest m;
  ASSERT_TRUE(Decode(set_one(std::string(Mp().Ts32(1'800'000'000))), {}, &m).ok());
  EXPECT_EQ(m.fields[0].value, FieldValue::Time(1'800'000'000));
  // The 64-bit form with 0 nanoseconds is the same time.
  ASSERT_TRUE(Decode(set_one(std::string(Mp().Ts64(UINT32_MAX))), {}, &m).ok());
  EXPECT_EQ(m.fields[0].value, FieldValue::Time(UINT32_MAX));
  ExpectInvalid(DecodeAs<FieldSetRequest>(set_one(std::string(Mp().Ts64((uint64_t{1} << 34) | 5)))),
                {"fields[0].value", "nanoseconds"});
  ExpectInvalid(DecodeAs<FieldSetRequest>(set_one(std::string(Mp().Ts64(uint64_t{1} << 32)))),
                {"fields[0].value", "past 2^32-1"});
  // The 96-bit form, other extension types and sizes: refused.
  std::string ts96 = std::string(Mp().Raw({0xc7, 12, 0xff}));
  ts96.append(12, '\0');
  ExpectInvalid(DecodeAs<FieldSetRequest>(set_one(ts96)), {"extension"});
  ExpectInvalid(DecodeAs<FieldSetRequest>(set_one(std::string(Mp().Raw({0xd6, 0x01, 0, 0, 0, 1})))),
                {"extension"});
  ExpectInvalid(DecodeAs<FieldSetRequest>(set_one(std::string(Mp().Raw({0xd4, 0xff, 0})))),
                {"extension"});
  // A timestamp anywhere but a value: refused, even where nothing is read.
  ExpectInvalid(DecodeAs<FieldSetRequest>(Mp().Map(2).Str("user").Ts32(1).Str("fields").Arr(0)),
                {"user"});
  ExpectInvalid(
      DecodeAs<FieldSetRequest>(
          Mp().Map(2).Str("user").Str("u").Str("fields").Arr(1).Arr(3).Str("t").U(1).Ts32(5)),
      {"fields[0].expiry"});
  ExpectInvalid(DecodeAs<FieldSetRequest>(
                    Mp().Map(3).Str("user").Str("u").Str("fields").Arr(0).Str("later").Ts32(5)),
                {"timestamp", "field's value"});
  ExpectInvalid(DecodeAs<FieldMaxRequest>(Mp().Map(4)
                                              .Str("user")
                                              .Str("u")
                                              .Str("name")
                                              .Str("n")
                                              .Str("value")
                                              .Ts32(5)
                                              .Str("expiry")
                                              .Ts32(6)),
                {"expiry"});
  // Bodies that hold no field value refuse every extension, as before.
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("x").Ts32(1)),
                {"extension types"});
  ExpectInvalid(
      DecodeAs<FieldDeleteRequest>(Mp().Map(2).Str("user").Str("u").Str("names").Arr(1).Ts32(1)),
      {"extension types"});
  ExpectInvalid(DecodeAs<FieldIncrementRequest>(
                    Mp().Map(3).Str("user").Str("u").Str("name").Str("n").Str("cap").Ts32(1)),
                {"extension types"});
  ExpectInvalid(DecodeAs<UpsertRequest>(
                    Mp().Map(2).Str("user").Str("u").Str("segments").Arr(1).Arr(2).U(1).Ts32(1)),
                {"extension types"});
  ExpectInvalid(
      DecodeAs<FieldIncrementResponse>(Mp().Map(2).Str("value").Ts32(1).Str("capped").Bool(false)),
      {"extension types"});
  // In an answer, timestamps stand as values only.
  ExpectInvalid(DecodeAs<GetResult>(Mp().Map(2).Str("count").Ts32(0).Str("ids").Arr(0)), {"count"});
  ExpectInvalid(DecodeAs<GetResult>(Mp().Map(3)
                                        .Str("count")
                                        .U(0)
                                        .Str("ids")
                                        .Arr(0)
                                        .Str("fields")
                                        .Map(1)
                                        .Str("a")
                                        .Arr(2)
                                        .U(1)
                                        .Ts32(0)),
                {"fields[0].expires_at"});
}

TEST(FieldWireTest, FieldRequestRefusalsNameTheField) {
  DecodeLimits lim;
  lim.max_list = 2;
  auto set = [&](std::string_view fields) {
    return DecodeAs<FieldSetRequest>(Mp().Map(2).Str("user").Str("u").Str("fields").Append(fields),
                                     lim);
  };
  ExpectInvalid(DecodeAs<FieldSetRequest>(Mp().Map(1).Str("user").Str("u")), {"fields", "missing"});
  ExpectInvalid(DecodeAs<FieldSetRequest>(Mp().Map(1).Str("fields").Arr(0)), {"user", "missing"});
  ExpectInvalid(set(Mp().Map(0)), {"fields", "an array"});
  ExpectInvalid(set(Mp().Arr(1).Str("n")), {"fields[0]", "[name, value, expiry, ttl]"});
  ExpectInvalid(set(Mp().Arr(1).Arr(1).Str("n")), {"fields[0]", "1 elements"});
  ExpectInvalid(set(Mp().Arr(1).Arr(5).Str("n").U(1).U(0).Bool(false).U(0)),
                {"fields[0]", "5 elements"});
  ExpectInvalid(set(Mp().Arr(1).Arr(2).Str("").U(1)), {"fields[0].name", "empty"});
  ExpectInvalid(set(Mp().Arr(1).Arr(2).Str(std::string(65, 'n')).U(1)),
                {"fields[0].name", "65 bytes"});
  ExpectInvalid(set(Mp().Arr(1).Arr(2).U(7).U(1)), {"fields[0].name"});
  ExpectInvalid(set(Mp().Arr(2).Arr(2).Str("a").U(1).Arr(2).Str("b").Nil()), {"fields[1].value"});
  ExpectInvalid(set(Mp().Arr(1).Arr(2).Str("a").Map(0)), {"fields[0].value"});
  ExpectInvalid(set(Mp().Arr(1).Arr(2).Str("a").U64(uint64_t{1} << 63)), {"fields[0].value"});
  // A str value must be UTF-8 (bytes are a bin): not a lone byte past 0x7f,
  // an overlong form, a surrogate, a sequence cut short, past U+10FFFF.
  for (std::string_view bad :
       {std::string_view("\xff"), std::string_view("caf\xe9"), std::string_view("\xc0\xaf"),
        std::string_view("\xed\xa0\x80"), std::string_view("ok\xe2\x82"),
        std::string_view("\xf4\x90\x80\x80")}) {
    ExpectInvalid(set(Mp().Arr(2).Arr(2).Str("a").Str("fine").Arr(2).Str("b").Str(bad)),
                  {"fields[1].value", "not UTF-8", "bin"});
  }
  {
    FieldSetRequest text;
    const Status s = Decode(Mp().Map(2)
                                .Str("user")
                                .Str("u")
                                .Str("fields")
                                .Arr(2)
                                .Arr(2)
                                .Str("a")
                                .Str("")
                                .Arr(2)
                                .Str("b")
                                .Str("\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e"),
                            {}, &text);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(text.fields[1].value, FieldValue::String("\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e"));
    // The same bytes as a bin are a bytes value, whatever they are.
    ASSERT_TRUE(
        Decode(Mp().Map(2).Str("user").Str("u").Str("fields").Arr(1).Arr(2).Str("b").Bin("\xff"),
               {}, &text)
            .ok());
    EXPECT_EQ(text.fields[0].value, FieldValue::Bytes("\xff"));
  }
  ExpectInvalid(set(Mp().Arr(1).Arr(3).Str("a").U(1).I(-1)), {"fields[0].expiry", "negative"});
  ExpectInvalid(set(Mp().Arr(1).Arr(3).Str("a").U(1).U(uint64_t{1} << 32)), {"fields[0].expiry"});
  ExpectInvalid(set(Mp().Arr(1).Arr(4).Str("a").U(1).U(5).U(1)), {"fields[0].ttl", "a boolean"});
  ExpectError(set(Mp().Arr(3).Arr(2).Str("a").U(1).Arr(2).Str("b").U(1).Arr(2).Str("c").U(1)),
              Status::Code::kLimitExceeded, {"fields", "3 elements"});

  ExpectInvalid(DecodeAs<FieldDeleteRequest>(Mp().Map(1).Str("user").Str("u")),
                {"names", "missing"});
  ExpectInvalid(
      DecodeAs<FieldDeleteRequest>(Mp().Map(2).Str("user").Str("u").Str("names").Arr(1).Str("")),
      {"names[0]", "empty"});
  ExpectInvalid(
      DecodeAs<FieldDeleteRequest>(Mp().Map(2).Str("user").Str("u").Str("names").Str("a")),
      {"names", "an array"});
  ExpectError(
      DecodeAs<FieldDeleteRequest>(
          Mp().Map(2).Str("user").Str("u").Str("names").Arr(3).Str("a").Str("b").Str("c"), lim),
      Status::Code::kLimitExceeded, {"names"});
  ExpectInvalid(
      DecodeAs<FieldDeleteRequest>(
          Mp().Map(3).Str("user").Str("u").Str("names").Arr(0).Str("write_id").Bin("short")),
      {"write_id"});

  auto incr = [](std::string_view rest, uint32_t extra) {
    return DecodeAs<FieldIncrementRequest>(
        Mp().Map(2 + extra).Str("user").Str("u").Str("name").Str("n").Append(rest));
  };
  ExpectInvalid(DecodeAs<FieldIncrementRequest>(Mp().Map(1).Str("user").Str("u")),
                {"name", "missing"});
  ExpectInvalid(DecodeAs<FieldIncrementRequest>(Mp().Map(2).Str("user").Str("u").Str("name").Nil()),
                {"name", "missing"});
  ExpectInvalid(incr(Mp().Str("delta").Str("1"), 1), {"delta", "an integer"});
  ExpectInvalid(incr(Mp().Str("delta").F64(1.0), 1), {"delta", "an integer"});
  ExpectInvalid(incr(Mp().Str("delta").U64(uint64_t{1} << 63), 1), {"delta", "64-bit signed"});
  ExpectInvalid(incr(Mp().Str("ttl").I(-1), 1), {"ttl", "negative"});
  ExpectInvalid(incr(Mp().Str("ttl").U(uint64_t{1} << 32), 1), {"ttl"});
  ExpectInvalid(incr(Mp().Str("window").Str("daily"), 1), {"window", "fixed, sliding"});
  // Given, a window names one of the two: the empty string is neither
  // (absent or nil is "fixed").
  ExpectInvalid(incr(Mp().Str("window").Str(""), 1), {"window", "\"\"", "fixed, sliding"});
  ExpectInvalid(incr(Mp().Str("window").Str("Fixed"), 1), {"window", "fixed, sliding"});
  ExpectInvalid(incr(Mp().Str("window").U(1), 1), {"window", "a string"});
  ExpectInvalid(incr(Mp().Str("cap").Bool(true), 1), {"cap", "an integer"});

  auto max = [](std::string_view rest, uint32_t extra) {
    return DecodeAs<FieldMaxRequest>(
        Mp().Map(2 + extra).Str("user").Str("u").Str("name").Str("n").Append(rest));
  };
  ExpectInvalid(max(Mp(), 0), {"value", "missing"});
  ExpectInvalid(max(Mp().Str("value").Str("x"), 1),
                {"value", "an integer, a float or a timestamp"});
  ExpectInvalid(max(Mp().Str("value").Bin("x"), 1),
                {"value", "an integer, a float or a timestamp"});
  ExpectInvalid(max(Mp().Str("value").Str("\xff"), 1), {"value"});
  ExpectInvalid(max(Mp().Str("value").U(1).Str("ttl").U(1), 2), {"ttl", "a boolean"});
  ExpectInvalid(max(Mp().Str("value").U(1).Str("expiry").Str("x"), 2), {"expiry"});
}

TEST(FieldWireTest, FieldResponseRefusalsNameTheField) {
  ExpectInvalid(DecodeAs<FieldWriteResponse>(Mp().Map(1).Str("changed").U(1)),
                {"count", "missing"});
  ExpectInvalid(DecodeAs<FieldIncrementResponse>(Mp().Map(1).Str("capped").Bool(false)),
                {"value", "missing"});
  ExpectInvalid(DecodeAs<FieldIncrementResponse>(Mp().Map(1).Str("value").U(1)),
                {"capped", "missing"});
  ExpectInvalid(
      DecodeAs<FieldIncrementResponse>(Mp().Map(2).Str("value").Str("1").Str("capped").Bool(false)),
      {"value"});
  ExpectInvalid(DecodeAs<FieldMaxResponse>(Mp().Map(1).Str("value").U(1)), {"replaced", "missing"});
  ExpectInvalid(
      DecodeAs<FieldMaxResponse>(Mp().Map(2).Str("value").Nil().Str("replaced").Bool(false)),
      {"value", "missing"});
}

TEST(HostileInputTest, EmptyBodyIsAnEmptyMap) {
  // Fine where nothing is required...
  EXPECT_TRUE(DecodeAs<HelloRequest>("").ok());
  StatsResponse stats{{{"x", uint64_t{1}}}};
  ASSERT_TRUE(Decode("", DecodeLimits{}, &stats).ok());
  EXPECT_TRUE(stats.entries.empty());
  // ...and a missing field, named, everywhere else.
  ExpectInvalid(DecodeAs<GetRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<BatchGetRequest>(""), {"users", "missing"});
  ExpectInvalid(DecodeAs<CountRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<UpsertRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<BatchUpsertRequest>(""), {"items", "missing"});
  ExpectInvalid(DecodeAs<RemoveRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<TrimRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<DeleteRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<HelloResponse>(""), {"protocol", "missing"});
  ExpectInvalid(DecodeAs<GetResult>(""), {"count", "missing"});
  ExpectInvalid(DecodeAs<BatchGetResponse>(""), {"results", "missing"});
  ExpectInvalid(DecodeAs<UpsertResult>(""), {"inserted", "missing"});
  ExpectInvalid(DecodeAs<BatchUpsertResponse>(""), {"results", "missing"});
  ExpectInvalid(DecodeAs<RemoveResponse>(""), {"removed", "missing"});
  ExpectInvalid(DecodeAs<TrimResult>(""), {"trimmed", "missing"});
  ExpectInvalid(DecodeAs<CountResponse>(""), {"count", "missing"});
  ExpectInvalid(DecodeAs<DeleteResponse>(""), {"deleted", "missing"});
  ExpectInvalid(DecodeAs<LinkRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<UnlinkRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<MasterOfRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<LinksRequest>(""), {"user", "missing"});
  ExpectInvalid(DecodeAs<ConnectedRequest>(""), {"a", "missing"});
  ExpectInvalid(DecodeAs<LinkResponse>(""), {"master", "missing"});
  ExpectInvalid(DecodeAs<UnlinkResponse>(""), {"unlinked", "missing"});
  ExpectInvalid(DecodeAs<MasterOfResponse>(""), {"master", "missing"});
  ExpectInvalid(DecodeAs<LinksResponse>(""), {"master", "missing"});
  ExpectInvalid(DecodeAs<ConnectedResponse>(""), {"connected", "missing"});
}

TEST(HostileInputTest, RandomBytesNeverCrash) {
  const auto decoders = AllDecoders();
  DecodeLimits tight;
  tight.max_key_bytes = 4;
  tight.max_batch = 2;
  tight.max_list = 3;
  const auto tight_decoders = AllDecoders(tight);
  std::mt19937 rng(12345);
  // Bytes biased towards MessagePack's type bytes, so containers nest.
  const uint8_t interesting[] = {0x80, 0x81, 0x83, 0x90, 0x92, 0x95, 0xa1, 0xa4, 0xc0, 0xc2,
                                 0xc3, 0xc4, 0xcc, 0xcf, 0xd0, 0xd9, 0xdc, 0xdd, 0xde, 0xdf,
                                 0xff, 0x00, 0x7f, 0xe0, 0xca, 0xcb, 0xd4, 0xc7};
  for (int iter = 0; iter < 20000; ++iter) {
    std::string body(rng() % 48, '\0');
    for (char& c : body) {
      c = static_cast<char>(rng() % 2 ? rng() : interesting[rng() % sizeof(interesting)]);
    }
    for (const auto& [name, decode] : decoders) (void)decode(body);
    for (const auto& [name, decode] : tight_decoders) (void)decode(body);
  }
}

// CPU time this thread has used.
std::chrono::nanoseconds ThreadCpuTime() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

TEST(HostileInputTest, HugeLengthClaimsFailFastWithoutAllocating) {
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"array32 top level", Mp().Raw({0xdd, 0xff, 0xff, 0xff, 0xff}).str()},
      {"map32 top level", Mp().Raw({0xdf, 0xff, 0xff, 0xff, 0xff}).str()},
      {"users array32", Mp().Map(1).Str("users").Raw({0xdd, 0xff, 0xff, 0xff, 0xff}).str()},
      {"items array32", Mp().Map(1).Str("items").Raw({0xdd, 0xff, 0xff, 0xff, 0xff}).str()},
      {"segments array32",
       Mp().Map(2).Str("user").Str("u").Str("segments").Raw({0xdd, 0xff, 0xff, 0xff, 0xff}).str()},
      {"ids array32", Mp().Map(3)
                          .Str("user")
                          .Str("u")
                          .Str("count")
                          .U(1)
                          .Str("ids")
                          .Raw({0xdd, 0xff, 0xff, 0xff, 0xff})
                          .str()},
      {"results array32", Mp().Map(1).Str("results").Raw({0xdd, 0xff, 0xff, 0xff, 0xff}).str()},
      {"str32 user", Mp().Map(1).Str("user").Raw({0xdb, 0xff, 0xff, 0xff, 0xff}).str()},
      {"bin32 user", Mp().Map(1).Str("user").Raw({0xc6, 0xff, 0xff, 0xff, 0xff}).str()},
      {"ext32", Mp().Raw({0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}).str()},
      {"array16 claims", Mp().Map(1).Str("users").Raw({0xdc, 0xff, 0xff}).str()},
      {"records array32", Mp().Map(3)
                              .Str("next")
                              .U(1)
                              .Str("cursor")
                              .U(1)
                              .Str("records")
                              .Raw({0xdd, 0xff, 0xff, 0xff, 0xff})
                              .str()},
      {"links array32",
       Mp().Map(2).Str("master").Bin("m").Str("links").Raw({0xdd, 0xff, 0xff, 0xff, 0xff}).str()},
      {"incoming array32", Mp().Map(2)
                               .Str("cluster")
                               .Bool(true)
                               .Str("incoming")
                               .Raw({0xdd, 0xff, 0xff, 0xff, 0xff})
                               .str()},
  };
  for (const auto& [what, body] : bodies) {
    for (const auto& [name, decode] : AllDecoders()) {
      SCOPED_TRACE(what + " as " + name);
      AllocationWatch watch;
      // CPU time, not wall-clock time: a loop over a claimed 4 billion
      // elements burns seconds of it, while a thread merely descheduled on a
      // busy machine burns none.
      const auto start = ThreadCpuTime();
      Status s = decode(body);
      const auto took = ThreadCpuTime() - start;
      if (name != "DecodeError") {
        EXPECT_FALSE(s.ok());
      }
      EXPECT_LT(took, std::chrono::milliseconds(500));
      EXPECT_LT(watch.largest(), 64u * 1024) << "bytes in one allocation";
    }
  }
}

TEST(HostileInputTest, WrongTypesNameTheField) {
  // A request's fields.
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("limit").Str("x")),
                {"limit", "expected an unsigned integer, got a string"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(1).Str("user").U(5)), {"user", "unsigned integer"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(1).Str("user").Arr(0)), {"user", "an array"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("projection").U(1)),
                {"projection"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("count_only").U(1)),
                {"count_only", "a boolean"});
  ExpectInvalid(
      DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("outside_expiry").Str("yes")),
      {"outside_expiry"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("id_to").F64(1.0)),
                {"id_to", "a float"});
  ExpectInvalid(DecodeAs<BatchGetRequest>(Mp().Map(1).Str("users").Str("u")), {"users", "array"});
  ExpectInvalid(EntryStatus<BatchGetRequest>(Mp().Map(1).Str("users").Arr(2).Str("a").U(5), 1),
                {"users[1]"});
  ExpectInvalid(DecodeAs<CountRequest>(Mp().Map(2).Str("user").Str("u").Str("id_from").Bool(true)),
                {"id_from", "a boolean"});
  ExpectInvalid(DecodeAs<UpsertRequest>(Mp().Map(2).Str("user").Str("u").Str("segments").Map(0)),
                {"segments", "a map"});
  ExpectInvalid(
      DecodeAs<UpsertRequest>(Mp().Map(2).Str("user").Str("u").Str("segments").Arr(1).U(5)),
      {"segments[0]"});
  ExpectInvalid(DecodeAs<UpsertRequest>(
                    Mp().Map(2).Str("user").Str("u").Str("segments").Arr(1).Arr(2).U(1).Str("x")),
                {"segments[0].value"});
  ExpectInvalid(DecodeAs<UpsertRequest>(
                    Mp().Map(2).Str("user").Str("u").Str("segments").Arr(1).Arr(2).Nil().U(1)),
                {"segments[0].id"});
  ExpectInvalid(DecodeAs<UpsertRequest>(
                    Mp().Map(2).Str("user").Str("u").Str("segments").Arr(1).Arr(3).U(1).U(1).U(1)),
                {"segments[0].ttl", "a boolean"});
  ExpectInvalid(
      DecodeAs<UpsertRequest>(
          Mp().Map(2).Str("user").Str("u").Str("segments").Arr(1).Arr(4).U(1).U(1).Nil().Str("a")),
      {"segments[0].attr1"});
  ExpectInvalid(DecodeAs<UpsertRequest>(
                    Mp().Map(3).Str("user").Str("u").Str("mode").U(1).Str("segments").Arr(0)),
                {"mode", "a string"});
  ExpectInvalid(EntryStatus<BatchUpsertRequest>(Mp().Map(1)
                                                    .Str("items")
                                                    .Arr(2)
                                                    .Map(2)
                                                    .Str("user")
                                                    .Str("a")
                                                    .Str("segments")
                                                    .Arr(0)
                                                    .Str("b"),
                                                1),
                {"items[1]", "a map"});
  ExpectInvalid(EntryStatus<BatchUpsertRequest>(Mp().Map(1)
                                                    .Str("items")
                                                    .Arr(1)
                                                    .Map(2)
                                                    .Str("user")
                                                    .Str("a")
                                                    .Str("segments")
                                                    .Arr(1)
                                                    .Arr(3)
                                                    .U(1)
                                                    .U(2)
                                                    .Str("t"),
                                                0),
                {"items[0].segments[0].ttl"});
  ExpectInvalid(
      DecodeAs<RemoveRequest>(Mp().Map(2).Str("user").Str("u").Str("ids").Arr(2).U(1).Str("x")),
      {"ids[1]"});
  ExpectInvalid(DecodeAs<TrimRequest>(Mp().Map(2).Str("user").Str("u").Str("before").Str("now")),
                {"before"});
  ExpectInvalid(DecodeAs<HelloRequest>(Mp().Map(1).Str("client").U(1)), {"client"});
  ExpectInvalid(DecodeAs<HelloRequest>(Mp().Map(1).Str("auth").U(7)), {"auth"});
  // A response's fields.
  ExpectInvalid(DecodeAs<GetResult>(Mp().Map(2).Str("count").Str("x").Str("ids").Arr(0)),
                {"count"});
  ExpectInvalid(DecodeAs<GetResult>(Mp().Map(2).Str("count").U(1).Str("ids").Arr(1).Str("x")),
                {"ids"});
  ExpectInvalid(
      DecodeAs<GetResult>(
          Mp().Map(3).Str("count").U(1).Str("ids").Arr(1).U(1).Str("expires").Arr(1).Str("x")),
      {"expires"});
  ExpectInvalid(
      DecodeAs<GetResult>(
          Mp().Map(3).Str("count").U(1).Str("ids").Arr(1).U(1).Str("attr2").Arr(1).Bool(true)),
      {"attr2"});
  ExpectInvalid(
      DecodeAs<GetResult>(
          Mp().Map(3).Str("count").U(1).Str("ids").Arr(2).U(1).U(2).Str("expires").Arr(1).U(1)),
      {"expires", "length differs"});
  ExpectInvalid(DecodeAs<BatchGetResponse>(Mp().Map(1).Str("results").Arr(1).U(1)),
                {"results[0]", "a map"});
  ExpectInvalid(
      DecodeAs<BatchGetResponse>(Mp().Map(1).Str("results").Arr(1).Map(1).Str("status").Str("x")),
      {"results[0].status"});
  ExpectInvalid(
      DecodeAs<BatchGetResponse>(
          Mp().Map(1).Str("results").Arr(1).Map(2).Str("status").U(1).Str("message").U(1)),
      {"results[0].message"});
  ExpectInvalid(DecodeAs<HelloResponse>(Mp().Map(1).Str("protocol").Str("1")), {"protocol"});
  ExpectInvalid(DecodeAs<DeleteResponse>(Mp().Map(1).Str("deleted").U(1)), {"deleted"});
  ExpectInvalid(DecodeAs<StatsResponse>(Mp().Map(1).Str("server.x").Nil()), {"server.x"});
  ExpectInvalid(DecodeAs<StatsResponse>(Mp().Map(1).U(1).U(1)), {"stats key"});
}

TEST(HostileInputTest, UserIsRequiredNonEmptyAndBounded) {
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(1).Str("users").Str("u")), {"user", "missing"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(1).Str("user").Nil()), {"user"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(1).Str("user").Str("")), {"user", "empty"});
  ExpectInvalid(DecodeAs<DeleteRequest>(Mp().Map(1).Str("user").Bin("")), {"user", "empty"});
  ExpectInvalid(EntryStatus<BatchGetRequest>(Mp().Map(1).Str("users").Arr(2).Str("a").Str(""), 1),
                {"users[1]", "empty"});
  ExpectInvalid(EntryStatus<BatchUpsertRequest>(
                    Mp().Map(1).Str("items").Arr(1).Map(1).Str("segments").Arr(0), 0),
                {"items[0].user", "missing"});
  const std::string at_limit(kDefaultMaxKeyBytes, 'k');
  const std::string over_limit(kDefaultMaxKeyBytes + 1, 'k');
  EXPECT_TRUE(DecodeAs<DeleteRequest>(Mp().Map(1).Str("user").Str(at_limit)).ok());
  ExpectInvalid(DecodeAs<DeleteRequest>(Mp().Map(1).Str("user").Str(over_limit)),
                {"user", "257 bytes", "256"});
  ExpectInvalid(DecodeAs<DeleteRequest>(Mp().Map(1).Str("user").Bin(over_limit)), {"user"});
  ExpectInvalid(EntryStatus<BatchGetRequest>(Mp().Map(1).Str("users").Arr(1).Str(over_limit), 0),
                {"users[0]"});
  DecodeLimits small;
  small.max_key_bytes = 3;
  EXPECT_TRUE(DecodeAs<TrimRequest>(Mp().Map(1).Str("user").Str("abc"), small).ok());
  ExpectInvalid(DecodeAs<TrimRequest>(Mp().Map(1).Str("user").Str("abcd"), small), {"user"});
}

TEST(HostileInputTest, BatchesOverMaxBatchAreLimitExceeded) {
  auto users = [](size_t n) {
    Mp m;
    m.Map(1).Str("users").Arr(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) m.Str("u");
    return m.str();
  };
  EXPECT_TRUE(DecodeAs<BatchGetRequest>(users(kDefaultMaxBatch)).ok());
  ExpectError(DecodeAs<BatchGetRequest>(users(kDefaultMaxBatch + 1)), Status::Code::kLimitExceeded,
              {"users", "1001", "1000"});
  DecodeLimits small;
  small.max_batch = 2;
  EXPECT_TRUE(DecodeAs<BatchGetRequest>(users(2), small).ok());
  ExpectError(DecodeAs<BatchGetRequest>(users(3), small), Status::Code::kLimitExceeded, {"users"});

  auto items = [](size_t n) {
    Mp m;
    m.Map(1).Str("items").Arr(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) m.Map(2).Str("user").Str("u").Str("segments").Arr(0);
    return m.str();
  };
  EXPECT_TRUE(DecodeAs<BatchUpsertRequest>(items(2), small).ok());
  ExpectError(DecodeAs<BatchUpsertRequest>(items(3), small), Status::Code::kLimitExceeded,
              {"items"});
  ExpectError(DecodeAs<BatchUpsertRequest>(items(kDefaultMaxBatch + 1)),
              Status::Code::kLimitExceeded, {"items"});
}

TEST(HostileInputTest, ListsOverMaxListAreLimitExceeded) {
  DecodeLimits small;
  small.max_list = 2;
  auto ids = [](size_t n) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str("ids").Arr(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) m.U(i);
    return m.str();
  };
  EXPECT_TRUE(DecodeAs<RemoveRequest>(ids(2), small).ok());
  ExpectError(DecodeAs<RemoveRequest>(ids(3), small), Status::Code::kLimitExceeded, {"ids"});
  auto segments = [](size_t n) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str("segments").Arr(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) m.Arr(2).U(i).U(0);
    return m.str();
  };
  EXPECT_TRUE(DecodeAs<UpsertRequest>(segments(2), small).ok());
  ExpectError(DecodeAs<UpsertRequest>(segments(3), small), Status::Code::kLimitExceeded,
              {"segments"});
}

// A list just over the largest limit must still parse, so that the field
// check answers LimitExceeded naming the field (an upsert of 10001 segments
// against a server's max_segments of 10000).
TEST(HostileInputTest, ListJustOverTheLargestLimitIsLimitExceeded) {
  DecodeLimits server;
  server.max_list = 10000;
  server.max_batch = 1000;
  Mp m;
  m.Map(2).Str("user").Str("u").Str("segments").Arr(server.max_list + 1);
  for (uint32_t i = 0; i <= server.max_list; ++i) m.Arr(2).U(i).U(0);
  ExpectError(DecodeAs<UpsertRequest>(m, server), Status::Code::kLimitExceeded, {"segments"});
}

TEST(HostileInputTest, SegmentsNeedTwoToFiveElements) {
  auto segment = [](uint32_t n) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str("segments").Arr(1).Arr(n);
    for (uint32_t i = 0; i < n; ++i) {
      if (i == 2) {
        m.Bool(false);
      } else {
        m.U(1);
      }
    }
    return m.str();
  };
  ExpectInvalid(DecodeAs<UpsertRequest>(segment(0)), {"segments[0]", "0 elements"});
  ExpectInvalid(DecodeAs<UpsertRequest>(segment(1)), {"segments[0]", "1 elements"});
  for (uint32_t n = 2; n <= 5; ++n) EXPECT_TRUE(DecodeAs<UpsertRequest>(segment(n)).ok()) << n;
  ExpectInvalid(DecodeAs<UpsertRequest>(segment(6)), {"segments[0]", "6 elements"});
}

TEST(HostileInputTest, NegativeAndOutOfRangeIntegersAreRejected) {
  auto get_with = [](std::string_view key, auto add) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str(key);
    add(m);
    return DecodeAs<GetRequest>(m);
  };
  ExpectInvalid(get_with("limit", [](Mp& m) { m.I(-1); }), {"limit", "negative"});
  ExpectInvalid(get_with("id_from", [](Mp& m) { m.I(INT64_MIN); }), {"id_from", "negative"});
  ExpectInvalid(get_with("limit", [](Mp& m) { m.U(1ull << 32); }), {"limit", "out of range"});
  ExpectInvalid(get_with("expiry_to", [](Mp& m) { m.U(1ull << 32); }), {"expiry_to", "range"});
  EXPECT_TRUE(get_with("limit", [](Mp& m) { m.U(UINT32_MAX); }).ok());
  EXPECT_TRUE(get_with("id_to", [](Mp& m) { m.U(UINT64_MAX); }).ok());

  auto segment = [](auto add) {
    Mp m;
    m.Map(2).Str("user").Str("u").Str("segments").Arr(1);
    add(m);
    return DecodeAs<UpsertRequest>(m);
  };
  ExpectInvalid(segment([](Mp& m) { m.Arr(2).I(-5).U(1); }), {"segments[0].id", "negative"});
  ExpectInvalid(segment([](Mp& m) { m.Arr(2).U(1).I(-1); }), {"segments[0].value", "negative"});
  ExpectInvalid(segment([](Mp& m) { m.Arr(2).U(1).U(1ull << 32); }),
                {"segments[0].value", "range"});
  ExpectInvalid(segment([](Mp& m) { m.Arr(4).U(1).U(1).Bool(true).U(1ull << 32); }),
                {"segments[0].attr1", "range"});
  ExpectInvalid(segment([](Mp& m) { m.Arr(5).U(1).U(1).Bool(true).Nil().I(-1); }),
                {"segments[0].attr2", "negative"});
  ExpectInvalid(DecodeAs<RemoveRequest>(Mp().Map(2).Str("user").Str("u").Str("ids").Arr(1).I(-1)),
                {"ids[0]", "negative"});
  ExpectInvalid(DecodeAs<TrimRequest>(Mp().Map(2).Str("user").Str("u").Str("before").I(-100)),
                {"before", "negative"});
  ExpectInvalid(DecodeAs<CountResponse>(Mp().Map(1).Str("count").I(-1)), {"count", "negative"});
  ExpectInvalid(DecodeAs<StatsResponse>(Mp().Map(1).Str("neg.stat").I(-1)), {"neg.stat"});
}

TEST(HostileInputTest, TrailingBytesAfterTheValueAreRejected) {
  for (const Example& e : examples::All()) {
    std::string body;
    examples::EncodeBody(e.body, &body);
    if (body.empty() || std::holds_alternative<examples::ErrorBody>(e.body) ||
        std::holds_alternative<examples::WrongNodeBody>(e.body) ||
        std::holds_alternative<examples::RawBody>(e.body)) {
      continue;
    }
    SCOPED_TRACE(e.file);
    examples::Body got;
    ExpectInvalid(DecodeBody(body + '\xc0', e.body, &got), {"trailing"});
    ExpectInvalid(DecodeBody(body + body, e.body, &got), {"trailing"});
  }
  for (const NodeExample& e : examples::NodeToNode()) {
    if (IsErrorBody(e.body)) continue;
    SCOPED_TRACE(e.file);
    std::string body;
    examples::EncodeBody(e.body, &body);
    examples::NodeBody got;
    ExpectInvalid(DecodeBody(body + '\xc0', e.body, &got), {"trailing"});
    ExpectInvalid(DecodeBody(body + body, e.body, &got), {"trailing"});
  }
  EXPECT_EQ(DecodeError(Mp().Map(1).Str("message").Str("m").Raw({0x00})).rfind("(unreadable", 0),
            0u);
}

TEST(HostileInputTest, TopLevelMustBeAMap) {
  const std::vector<std::string> bodies = {Mp().Arr(0).str(),      Mp().Arr(1).Str("user").str(),
                                           Mp().Str("user").str(), Mp().U(1).str(),
                                           Mp().Nil().str(),       Mp().Bool(true).str(),
                                           Mp().F64(1).str(),      Mp().Bin("x").str()};
  for (const std::string& body : bodies) {
    for (const auto& [name, decode] : AllDecoders()) {
      if (name == "DecodeError") continue;
      SCOPED_TRACE(name + " " + ::testing::PrintToString(body));
      ExpectInvalid(decode(body), {"body", "a map"});
    }
  }
  ExpectInvalid(DecodeAs<GetRequest>("\xc1"), {"not valid MessagePack"});  // never used byte
}

TEST(HostileInputTest, UnknownKeysAreIgnored) {
  GetRequest get;
  ASSERT_TRUE(Decode(Mp().Map(4)
                         .Str("future")
                         .Arr(3)
                         .U(1)
                         .Map(1)
                         .Str("x")
                         .Nil()
                         .F64(2)
                         .Str("user")
                         .Str("u")
                         .Str("seven")
                         .U(7)
                         .Str("projection")
                         .Str("ids"),
                     DecodeLimits{}, &get)
                  .ok());
  EXPECT_EQ(get.user, "u");
  EXPECT_TRUE(get.options.ids_only);
  // "projection" spelled differently is just another unknown key.
  GetRequest other_case;
  ASSERT_TRUE(Decode(Mp().Map(2).Str("user").Str("u").Str("Projection").Str("bogus"),
                     DecodeLimits{}, &other_case)
                  .ok());
  EXPECT_FALSE(other_case.options.ids_only);

  UpsertResult upsert;
  ASSERT_TRUE(Decode(Mp().Map(6)
                         .Str("inserted")
                         .U(1)
                         .Str("updated")
                         .U(2)
                         .Str("trimmed")
                         .U(3)
                         .Str("count")
                         .U(4)
                         .Str("took_us")
                         .U(17)
                         .Str("status")
                         .U(0),
                     DecodeLimits{}, &upsert)
                  .ok());
  EXPECT_EQ(Text(upsert), Text(UpsertResult{1, 2, 3, 4}));

  GetResult get_result;
  ASSERT_TRUE(Decode(Mp().Map(3).Str("count").U(1).Str("ids").Arr(1).U(9).Str("cursor").Str("x"),
                     DecodeLimits{}, &get_result)
                  .ok());
  EXPECT_EQ(get_result.ids, std::vector<uint64_t>{9});
}

TEST(HostileInputTest, UnknownModeAndProjectionAreRejected) {
  ExpectInvalid(
      DecodeAs<UpsertRequest>(
          Mp().Map(3).Str("user").Str("u").Str("mode").Str("bogus").Str("segments").Arr(0)),
      {"mode", "\"bogus\""});
  ExpectInvalid(DecodeAs<UpsertRequest>(
                    Mp().Map(3).Str("user").Str("u").Str("mode").Str("SET").Str("segments").Arr(0)),
                {"mode"});
  ExpectInvalid(
      DecodeAs<BatchUpsertRequest>(Mp().Map(2).Str("mode").Str("bogus").Str("items").Arr(0)),
      {"mode"});
  ExpectInvalid(EntryStatus<BatchUpsertRequest>(Mp().Map(1)
                                                    .Str("items")
                                                    .Arr(1)
                                                    .Map(3)
                                                    .Str("user")
                                                    .Str("u")
                                                    .Str("mode")
                                                    .Str("bogus")
                                                    .Str("segments")
                                                    .Arr(0),
                                                0),
                {"items[0].mode"});
  ExpectInvalid(
      DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("projection").Str("bogus")),
      {"projection", "\"bogus\""});
  ExpectInvalid(DecodeAs<BatchGetRequest>(
                    Mp().Map(2).Str("users").Arr(1).Str("u").Str("projection").Str("bogus")),
                {"projection"});
  // The known names.
  for (std::string_view mode : {"set", "extend", "add"}) {
    EXPECT_TRUE(DecodeAs<UpsertRequest>(
                    Mp().Map(3).Str("user").Str("u").Str("mode").Str(mode).Str("segments").Arr(0))
                    .ok())
        << mode;
  }
  GetRequest full;
  ASSERT_TRUE(
      Decode(Mp().Map(2).Str("user").Str("u").Str("projection").Str("full"), DecodeLimits{}, &full)
          .ok());
  EXPECT_FALSE(full.options.ids_only);
}

TEST(HostileInputTest, NestingDeeperThanTheLimitFails) {
  Mp m;
  m.Map(2).Str("user").Str("u").Str("x");
  for (int i = 0; i < 64; ++i) m.Arr(1);
  m.Nil();
  EXPECT_FALSE(DecodeAs<GetRequest>(m).ok());
}

TEST(HostileInputTest, NestingUpToEightLevelsIsAccepted) {
  auto nested = [](int levels) {  // levels counts the body's own map
    Mp m;
    m.Map(2).Str("user").Str("u").Str("x");
    for (int i = 1; i < levels; ++i) m.Arr(1);
    m.Nil();
    return m.str();
  };
  EXPECT_TRUE(DecodeAs<GetRequest>(nested(8)).ok());
  ExpectInvalid(DecodeAs<GetRequest>(nested(9)), {"body", "8 levels"});
  // An empty container counts as a level too.
  Mp empty;
  empty.Map(2).Str("user").Str("u").Str("x");
  for (int i = 1; i < 8; ++i) empty.Arr(1);
  empty.Map(0);
  ExpectInvalid(DecodeAs<GetRequest>(empty), {"body", "8 levels"});
}

TEST(HostileInputTest, AMapHoldsAtMost4096Entries) {
  auto map = [](uint32_t n) {
    Mp m;
    m.Map(n).Str("user").Str("u");
    for (uint32_t i = 1; i < n; ++i) m.Str("k" + std::to_string(i)).U(0);
    return m.str();
  };
  EXPECT_TRUE(DecodeAs<DeleteRequest>(map(4096)).ok());
  ExpectInvalid(DecodeAs<DeleteRequest>(map(4097)), {"body", "4097 entries", "4096"});
}

// Messages travel as MessagePack str: a client's bytes in them are escaped.
TEST(HostileInputTest, ClientBytesInMessagesArePrintable) {
  const std::string bad("\xff\xfe\x01mode", 7);
  const Status s = DecodeAs<UpsertRequest>(
      Mp().Map(3).Str("user").Str("u").Str("mode").Str(bad).Str("segments").Arr(0));
  ExpectInvalid(s, {"mode", "\\xff\\xfe\\x01mode"});
  for (const char c : s.message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << s.message();
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("projection").Str(bad)),
                {"projection", "\\xff"});
}

// PROTOCOL.md, "Frames": a body is a map with string keys, each once, at
// every level (a batch item too).
TEST(HostileInputTest, KeysMustBeStringsAndAppearOnce) {
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").U(7).Str("x")),
                {"body", "map key 1", "an unsigned integer", "keys must be strings"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Bin("user").Str("v")),
                {"body", "binary"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("user").Str("v")),
                {"body", "key \"user\" appears twice"});
  // Unknown keys count too: a key twice is a malformed body whatever it names.
  ExpectInvalid(
      DecodeAs<DeleteRequest>(Mp().Map(3).Str("user").Str("u").Str("later").U(1).Str("later").U(2)),
      {"\"later\" appears twice"});
  // A large map takes the sorting path.
  Mp big;
  big.Map(40).Str("user").Str("u");
  for (int i = 0; i < 38; ++i) big.Str("k" + std::to_string(i)).U(1);
  big.Str("k7").U(2);
  ExpectInvalid(DecodeAs<DeleteRequest>(big), {"\"k7\" appears twice"});
  // A bad key printed safely: bytes outside printable ASCII as \xNN.
  ExpectInvalid(DecodeAs<DeleteRequest>(Mp().Map(3)
                                            .Str("user")
                                            .Str("u")
                                            .Str(std::string("\xff\"", 2))
                                            .U(1)
                                            .Str(std::string("\xff\"", 2))
                                            .U(2)),
                {"\\xff\\x22"});
  // Inside a batch, an item with a key twice fails alone.
  const std::string batch = Mp().Map(1)
                                .Str("items")
                                .Arr(2)
                                .Map(2)
                                .Str("user")
                                .Str("a")
                                .Str("segments")
                                .Arr(0)
                                .Map(3)
                                .Str("user")
                                .Str("b")
                                .Str("segments")
                                .Arr(0)
                                .Str("user")
                                .Str("c")
                                .str();
  EXPECT_TRUE(EntryStatus<BatchUpsertRequest>(batch, 0).ok());
  ExpectInvalid(EntryStatus<BatchUpsertRequest>(batch, 1), {"items[1]", "\"user\" appears twice"});
}

// ping and stats take no fields, but their body is a body: empty, or a map.
TEST(HostileInputTest, EmptyRequestsTakeAnEmptyBodyOrAnyMap) {
  EXPECT_TRUE(DecodeAs<EmptyRequest>("").ok());
  EXPECT_TRUE(DecodeAs<EmptyRequest>(Mp().Map(0)).ok());
  EXPECT_TRUE(DecodeAs<EmptyRequest>(Mp().Map(1).Str("later").Arr(1).U(1)).ok());
  ExpectInvalid(DecodeAs<EmptyRequest>("\xc1"), {"not valid MessagePack", "0xc1"});
  ExpectInvalid(DecodeAs<EmptyRequest>(Mp().Arr(0)), {"body", "a map"});
  ExpectInvalid(DecodeAs<EmptyRequest>(Mp().Map(0).str() + "x"), {"trailing bytes"});
  ExpectInvalid(DecodeAs<EmptyRequest>(Mp().Map(1).U(1).U(1)), {"keys must be strings"});
}

TEST(HostileInputTest, ExtensionTypesAreRefused) {
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Map(2).Str("user").Str("u").Str("x").Raw({0xd4, 1, 2})),
                {"extension types"});
  ExpectInvalid(DecodeAs<GetRequest>(Mp().Raw({0xc7, 0x00, 0x01})), {"extension types"});
}

// PROTOCOL.md, batch_get and batch_upsert: a batch fails as a whole only for
// what is wrong with the batch itself; one bad entry fails alone, whatever
// it is (a user ID, an item's field, an item's list however far over its
// limit).
TEST(HostileInputTest, ABadEntryOfABatchFailsAlone) {
  DecodeLimits lim;
  lim.max_list = 4;
  lim.max_batch = 8;
  auto item = [](Mp& m, std::string_view user, uint32_t segments) {
    m.Map(2).Str("user").Str(user).Str("segments").Arr(segments);
    for (uint32_t i = 0; i < segments; ++i) m.Arr(2).U(i).U(0);
  };
  for (uint32_t over : {5u, 9u, 100u, 5000u}) {
    Mp m;
    m.Map(1).Str("items").Arr(3);
    item(m, "a", 1);
    item(m, "b", over);
    item(m, "c", 4);
    BatchUpsertRequest req;
    ASSERT_TRUE(Decode(m.str(), lim, &req).ok()) << over;
    ASSERT_EQ(req.items.size(), 3u);
    ASSERT_EQ(req.rejected.size(), 3u);
    EXPECT_TRUE(req.rejected[0].ok());
    ExpectError(req.rejected[1], Status::Code::kLimitExceeded, {"items[1].segments", "limit is 4"});
    EXPECT_TRUE(req.rejected[2].ok());
    EXPECT_EQ(req.items[0].user, "a");
    EXPECT_TRUE(req.items[1].user.empty());
    EXPECT_EQ(req.items[2].segments.size(), 4u);
  }
  // No rejection: `rejected` stays empty.
  Mp fine;
  fine.Map(1).Str("items").Arr(1);
  item(fine, "a", 2);
  BatchUpsertRequest req;
  ASSERT_TRUE(Decode(fine.str(), lim, &req).ok());
  EXPECT_TRUE(req.rejected.empty());
  // What is wrong with the batch itself fails it whole.
  ExpectError(DecodeAs<BatchUpsertRequest>(Mp().Map(1).Str("items").Str("x"), lim),
              Status::Code::kInvalidArgument, {"items"});
  ExpectError(DecodeAs<BatchUpsertRequest>(Mp().Map(0), lim), Status::Code::kInvalidArgument,
              {"items", "missing"});
  ExpectError(DecodeAs<BatchGetRequest>(
                  Mp().Map(2).Str("users").Arr(1).Str("a").Str("projection").Str("x"), lim),
              Status::Code::kInvalidArgument, {"projection"});
  BatchGetRequest get;
  ASSERT_TRUE(
      Decode(Mp().Map(1).Str("users").Arr(3).Str("a").Nil().Str("c").str(), lim, &get).ok());
  ASSERT_EQ(get.rejected.size(), 3u);
  EXPECT_TRUE(get.rejected[0].ok());
  ExpectInvalid(get.rejected[1], {"users[1]"});
  EXPECT_EQ(get.users[2], "c");
}

// ---- frame headers ----

TEST(HeaderTest, EncodeDecodeRoundTripsEveryField) {
  const FrameHeader cases[] = {
      {kVersion, 0x00, 0x00, 0x00, 0, 0},
      {kVersion, 0xff, 0xff, 0xff, UINT32_MAX, UINT32_MAX},
      {kVersion, static_cast<uint8_t>(Op::kBatchUpsert), Status::kMaxCode, 0x80, 0x01020304,
       0x0a0b0c0d},
  };
  for (const FrameHeader& in : cases) {
    uint8_t bytes[kHeaderSize];
    std::memset(bytes, 0xee, sizeof(bytes));
    EncodeHeader(in, bytes);
    FrameHeader out;
    ASSERT_EQ(DecodeHeader(bytes, UINT32_MAX, &out), HeaderCheck::kOk);
    EXPECT_EQ(out.version, in.version);
    EXPECT_EQ(out.op, in.op);
    EXPECT_EQ(out.status, in.status);
    EXPECT_EQ(out.flags, in.flags);
    EXPECT_EQ(out.request_id, in.request_id);
    EXPECT_EQ(out.body_length, in.body_length);
    EXPECT_EQ(bytes[6], 0);  // reserved
    EXPECT_EQ(bytes[7], 0);
  }
}

TEST(HeaderTest, LayoutIsBigEndianAtTheDocumentedOffsets) {
  FrameHeader h;
  h.op = 0x10;
  h.status = 2;
  h.flags = 0;
  h.request_id = 0x01020304;
  h.body_length = 0x0a0b0c0d;
  uint8_t bytes[kHeaderSize];
  EncodeHeader(h, bytes);
  const uint8_t want[kHeaderSize] = {0x53, 0x47, 0x01, 0x10, 0x02, 0x00, 0x00, 0x00,
                                     0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d};
  EXPECT_EQ(std::memcmp(bytes, want, kHeaderSize), 0);
}

FrameHeader Sentinel() {
  FrameHeader h;
  h.version = 0x77;
  h.op = 0x77;
  h.status = 0x77;
  h.flags = 0x77;
  h.request_id = 0x77777777;
  h.body_length = 0x77777777;
  return h;
}

TEST(HeaderTest, BadMagicIsRejectedAndFillsNothing) {
  FrameHeader good;
  good.op = 1;
  good.request_id = 9;
  uint8_t bytes[kHeaderSize];
  const std::pair<uint8_t, uint8_t> magics[] = {
      {0x47, 0x53}, {0x53, 0x00}, {0x00, 0x47}, {0x00, 0x00}, {0x73, 0x67}};
  for (auto [b0, b1] : magics) {
    EncodeHeader(good, bytes);
    bytes[0] = b0;
    bytes[1] = b1;
    FrameHeader h = Sentinel();
    EXPECT_EQ(DecodeHeader(bytes, UINT32_MAX, &h), HeaderCheck::kBadMagic);
    EXPECT_EQ(h.request_id, 0x77777777u);
    EXPECT_EQ(h.op, 0x77);
  }
}

TEST(HeaderTest, BodyOverTheLimitIsTooLarge) {
  FrameHeader in;
  in.op = static_cast<uint8_t>(Op::kGet);
  in.request_id = 42;
  uint8_t bytes[kHeaderSize];
  in.body_length = kDefaultMaxFrameBytes;
  EncodeHeader(in, bytes);
  FrameHeader h;
  EXPECT_EQ(DecodeHeader(bytes, kDefaultMaxFrameBytes, &h), HeaderCheck::kOk);
  in.body_length = kDefaultMaxFrameBytes + 1;
  EncodeHeader(in, bytes);
  EXPECT_EQ(DecodeHeader(bytes, kDefaultMaxFrameBytes, &h), HeaderCheck::kTooLarge);
  EXPECT_EQ(h.request_id, 42u);  // the magic was right: filled
  EXPECT_EQ(h.body_length, kDefaultMaxFrameBytes + 1);
  in.body_length = UINT32_MAX;
  EncodeHeader(in, bytes);
  EXPECT_EQ(DecodeHeader(bytes, kMaxResponseBytes, &h), HeaderCheck::kTooLarge);
  in.body_length = 1;
  EncodeHeader(in, bytes);
  EXPECT_EQ(DecodeHeader(bytes, 0, &h), HeaderCheck::kTooLarge);
}

TEST(HeaderTest, OtherVersionIsBadVersionWithFieldsFilled) {
  FrameHeader in;
  in.version = 2;
  in.op = static_cast<uint8_t>(Op::kUpsert);
  in.status = 0;
  in.flags = 0x01;
  in.request_id = 0xcafef00d;
  in.body_length = 100;
  uint8_t bytes[kHeaderSize];
  EncodeHeader(in, bytes);
  FrameHeader h = Sentinel();
  ASSERT_EQ(DecodeHeader(bytes, kDefaultMaxFrameBytes, &h), HeaderCheck::kBadVersion);
  EXPECT_EQ(h.version, 2);
  EXPECT_EQ(h.op, in.op);
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(h.flags, 0x01);
  EXPECT_EQ(h.request_id, 0xcafef00du);  // so the answer can echo it
  EXPECT_EQ(h.body_length, 100u);        // so the body can be skipped
  for (uint8_t v : {uint8_t{0}, uint8_t{0xff}}) {
    bytes[2] = v;
    EXPECT_EQ(DecodeHeader(bytes, kDefaultMaxFrameBytes, &h), HeaderCheck::kBadVersion);
  }
}

TEST(HeaderTest, OpNamesCoverTheTable) {
  const std::pair<Op, std::string_view> ops[] = {
      {Op::kHello, "hello"},
      {Op::kPing, "ping"},
      {Op::kStats, "stats"},
      {Op::kClusterMap, "cluster_map"},
      {Op::kGet, "get"},
      {Op::kBatchGet, "batch_get"},
      {Op::kCount, "count"},
      {Op::kMasterOf, "master_of"},
      {Op::kLinks, "links"},
      {Op::kConnected, "connected"},
      {Op::kScan, "scan"},
      {Op::kUpsert, "upsert"},
      {Op::kBatchUpsert, "batch_upsert"},
      {Op::kRemove, "remove"},
      {Op::kTrim, "trim"},
      {Op::kDelete, "delete"},
      {Op::kExpire, "expire"},
      {Op::kLink, "link"},
      {Op::kUnlink, "unlink"},
      {Op::kCopyPartition, "copy_partition"},
      {Op::kLinkStep, "link_step"},
      {Op::kReadRecords, "read_records"},
      {Op::kFieldSet, "field_set"},
      {Op::kFieldDelete, "field_del"},
      {Op::kFieldIncrement, "field_incr"},
      {Op::kFieldMax, "field_max"},
  };
  int known = 0;
  for (int op = 0; op <= 0xff; ++op) known += IsKnownOp(static_cast<uint8_t>(op)) ? 1 : 0;
  EXPECT_EQ(known, static_cast<int>(std::size(ops)));
  for (const auto& [op, name] : ops) {
    EXPECT_TRUE(IsKnownOp(static_cast<uint8_t>(op)));
    EXPECT_EQ(OpName(static_cast<uint8_t>(op)), name);
  }
  for (uint8_t op : {0x00, 0x05, 0x17, 0x2c, 0x33, 0xff}) {
    EXPECT_FALSE(IsKnownOp(op));
    EXPECT_EQ(OpName(op), "unknown");
  }
}

TEST(FrameTest, AppendFrameRefusesABodyOverTheLimitAndAppendsNothing) {
  std::string out = "prefix";
  EXPECT_FALSE(AppendFrame(&out, 0x10, 1, 0, 4, [](std::string* o) { o->append(5, 'x'); }));
  EXPECT_EQ(out, "prefix");
  EXPECT_TRUE(AppendFrame(&out, 0x10, 1, 0, 5, [](std::string* o) { o->append(5, 'x'); }));
  ASSERT_EQ(out.size(), 6 + kHeaderSize + 5);
  FrameHeader h;
  ASSERT_EQ(DecodeHeader(reinterpret_cast<const uint8_t*>(out.data()) + 6, 5, &h),
            HeaderCheck::kOk);
  EXPECT_EQ(h.body_length, 5u);
}

TEST(FrameTest, AppendErrorFrameCarriesTheCodeAndMessage) {
  std::string out;
  AppendErrorFrame(&out, static_cast<uint8_t>(Op::kTrim), 77, Status::Busy("slow down"));
  ASSERT_GE(out.size(), kHeaderSize);
  FrameHeader h;
  ASSERT_EQ(DecodeHeader(reinterpret_cast<const uint8_t*>(out.data()), kMaxResponseBytes, &h),
            HeaderCheck::kOk);
  EXPECT_EQ(h.op, static_cast<uint8_t>(Op::kTrim));
  EXPECT_EQ(h.request_id, 77u);
  EXPECT_EQ(h.status, static_cast<uint8_t>(Status::Code::kBusy));
  EXPECT_EQ(h.body_length, out.size() - kHeaderSize);
  EXPECT_EQ(DecodeError(std::string_view(out).substr(kHeaderSize)), "slow down");
}

// ---- status codes of batch elements ----

std::string ErrorElement(uint64_t code, std::optional<std::string> message) {
  Mp m;
  m.Map(1).Str("results").Arr(1).Map(message ? 2 : 1).Str("status").U(code);
  if (message) m.Str("message").Str(*message);
  return m.str();
}

TEST(BatchStatusTest, EveryWireCodeBecomesThatStatus) {
  for (uint8_t c = 1; c <= Status::kMaxCode; ++c) {
    BatchGetResponse get;
    ASSERT_TRUE(Decode(ErrorElement(c, "m" + std::to_string(c)), DecodeLimits{}, &get).ok());
    ASSERT_EQ(get.size(), 1u);
    ASSERT_FALSE(get[0].ok());
    EXPECT_EQ(static_cast<uint8_t>(get[0].status().code()), c);
    EXPECT_EQ(get[0].status().message(), "m" + std::to_string(c));
    EXPECT_EQ(get[0].status().ToString(), Status::FromCode(c, "m" + std::to_string(c)).ToString());

    BatchUpsertResponse upsert;
    ASSERT_TRUE(Decode(ErrorElement(c, "x"), DecodeLimits{}, &upsert).ok());
    ASSERT_EQ(upsert.size(), 1u);
    EXPECT_EQ(static_cast<uint8_t>(upsert[0].status().code()), c);
  }
}

TEST(BatchStatusTest, UnknownCodesBecomeInternalSayingSo) {
  for (uint64_t c : {uint64_t{Status::kMaxCode} + 1, uint64_t{200}, uint64_t{255}}) {
    BatchGetResponse m;
    ASSERT_TRUE(Decode(ErrorElement(c, "what"), DecodeLimits{}, &m).ok());
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].status().code(), Status::Code::kInternal);
    EXPECT_NE(m[0].status().message().find("unknown status code " + std::to_string(c)),
              std::string_view::npos)
        << m[0].status().ToString();
    EXPECT_NE(m[0].status().message().find("what"), std::string_view::npos);
  }
  // Not a byte at all: the element is unreadable.
  ExpectInvalid(DecodeAs<BatchGetResponse>(ErrorElement(256, "m")), {"results[0].status", "range"});
}

TEST(BatchStatusTest, ElementsNeedAStatusAndOkOnesTheirFields) {
  BatchGetResponse m;
  ASSERT_TRUE(Decode(ErrorElement(1, std::nullopt), DecodeLimits{}, &m).ok());  // no message
  ASSERT_EQ(m.size(), 1u);
  EXPECT_TRUE(m[0].status().IsNotFound());
  EXPECT_TRUE(m[0].status().message().empty());
  ExpectInvalid(DecodeAs<BatchGetResponse>(Mp().Map(1).Str("results").Arr(1).Map(0)),
                {"results[0].status", "missing"});
  ExpectInvalid(DecodeAs<BatchGetResponse>(ErrorElement(0, "fine")), {"results[0].count"});
  ExpectInvalid(DecodeAs<BatchUpsertResponse>(ErrorElement(0, "fine")), {"results[0].inserted"});
}

}  // namespace
}  // namespace segstore::proto
