// Writes the example frames proto/examples/*.hex from the tables in
// tests/support/example_frames.h (the client's operations) and
// tests/proto/node_example_frames.h (node to node), each annotated for people
// writing a client (or a node): the
// header field by field, the body as JSON, then the body's bytes value by
// value with their MessagePack encodings.
//
//   cd build && make proto_examples_gen && ./tests/proto/proto_examples_gen ../proto/examples
//
// The bodies come from the wire.h encoders; the annotations come from reading
// those bytes back with the small MessagePack reader below (independent of the
// library the encoders use), so a comment never says what the bytes do not.
// tests/proto/wire_test.cc checks the files against the table and the codec.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "proto/node_example_frames.h"
#include "support/example_frames.h"

namespace segstore::proto::examples {
namespace {

[[noreturn]] void Die(const std::string& why) {
  std::cerr << "proto_examples_gen: " << why << "\n";
  std::exit(1);
}

// ---- a MessagePack reader for the annotations ----

struct Node {
  enum Kind { kNil, kBool, kUint, kInt, kFloat, kStr, kBin, kArray, kMap, kTimestamp } kind = kNil;
  size_t begin = 0;     // offset of the first byte
  size_t head_end = 0;  // end of the type byte and length/value bytes before any payload
  size_t end = 0;       // one past the last byte, children included
  std::string format;   // "fixstr(7)", "uint32", "fixarray(3)", ...
  bool b = false;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;               // str and bin payloads
  std::vector<Node> children;  // array elements; map keys and values alternating
  bool container() const { return kind == kArray || kind == kMap; }
  size_t count() const { return kind == kMap ? children.size() / 2 : children.size(); }
};

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}

  Node Read() {
    Node n;
    n.begin = pos_;
    const uint8_t t = Byte();
    auto sized = [&](Node::Kind kind, std::string_view name, uint64_t len) {
      n.kind = kind;
      n.format = std::string(name) + "(" + std::to_string(len) + ")";
      n.head_end = pos_;
      if (kind == Node::kStr || kind == Node::kBin) {
        n.s = std::string(Take(len));
      } else {
        const uint64_t items = kind == Node::kMap ? 2 * len : len;
        for (uint64_t k = 0; k < items; ++k) n.children.push_back(Read());
      }
    };
    if (t <= 0x7f) {
      n.kind = Node::kUint;
      n.u = t;
      n.format = "positive fixint";
    } else if (t >= 0xe0) {
      n.kind = Node::kInt;
      n.i = static_cast<int8_t>(t);
      n.format = "negative fixint";
    } else if (t >= 0x80 && t <= 0x8f) {
      sized(Node::kMap, "fixmap", t & 0x0f);
    } else if (t >= 0x90 && t <= 0x9f) {
      sized(Node::kArray, "fixarray", t & 0x0f);
    } else if (t >= 0xa0 && t <= 0xbf) {
      sized(Node::kStr, "fixstr", t & 0x1f);
    } else {
      switch (t) {
        case 0xc0:
          n.kind = Node::kNil;
          n.format = "nil";
          break;
        case 0xc2:
        case 0xc3:
          n.kind = Node::kBool;
          n.b = t == 0xc3;
          n.format = n.b ? "true" : "false";
          break;
        case 0xc4:
          sized(Node::kBin, "bin8", Be(1));
          break;
        case 0xc5:
          sized(Node::kBin, "bin16", Be(2));
          break;
        case 0xc6:
          sized(Node::kBin, "bin32", Be(4));
          break;
        case 0xca: {
          const uint32_t bits = static_cast<uint32_t>(Be(4));
          float x;
          std::memcpy(&x, &bits, 4);
          n.kind = Node::kFloat;
          n.f = x;
          n.format = "float32";
          break;
        }
        case 0xcb: {
          const uint64_t bits = Be(8);
          std::memcpy(&n.f, &bits, 8);
          n.kind = Node::kFloat;
          n.format = "float64";
          break;
        }
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf: {
          const int width = 1 << (t - 0xcc);
          n.kind = Node::kUint;
          n.u = Be(width);
          n.format = "uint" + std::to_string(8 * width);
          break;
        }
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3: {
          const int width = 1 << (t - 0xd0);
          const uint64_t raw = Be(width);
          const int shift = 64 - 8 * width;
          n.kind = Node::kInt;
          n.i = static_cast<int64_t>(raw << shift) >> shift;
          n.format = "int" + std::to_string(8 * width);
          break;
        }
        case 0xd6:    // fixext 4: type -1 is the 32-bit timestamp (seconds)
        case 0xd7: {  // fixext 8: the 64-bit one (30 bits nanoseconds, 34 seconds)
          if (Byte() != 0xff) Die("an extension that is not a timestamp");
          const uint64_t raw = Be(t == 0xd6 ? 4 : 8);
          n.kind = Node::kTimestamp;
          n.u = t == 0xd6 ? raw : raw & ((uint64_t{1} << 34) - 1);
          n.format =
              t == 0xd6 ? "fixext4 type -1 (timestamp 32)" : "fixext8 type -1 (timestamp 64)";
          break;
        }
        case 0xd9:
          sized(Node::kStr, "str8", Be(1));
          break;
        case 0xda:
          sized(Node::kStr, "str16", Be(2));
          break;
        case 0xdb:
          sized(Node::kStr, "str32", Be(4));
          break;
        case 0xdc:
          sized(Node::kArray, "array16", Be(2));
          break;
        case 0xdd:
          sized(Node::kArray, "array32", Be(4));
          break;
        case 0xde:
          sized(Node::kMap, "map16", Be(2));
          break;
        case 0xdf:
          sized(Node::kMap, "map32", Be(4));
          break;
        default:
          Die("unexpected MessagePack type byte " + std::to_string(t));
      }
    }
    if (n.head_end == 0) n.head_end = pos_;
    n.end = pos_;
    return n;
  }

  bool done() const { return pos_ == b_.size(); }

 private:
  uint8_t Byte() {
    if (pos_ >= b_.size()) Die("truncated body");
    return static_cast<uint8_t>(b_[pos_++]);
  }
  uint64_t Be(int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v = (v << 8) | Byte();
    return v;
  }
  std::string_view Take(uint64_t n) {
    if (n > b_.size() - pos_) Die("truncated body");
    std::string_view v = b_.substr(pos_, n);
    pos_ += n;
    return v;
  }

  std::string_view b_;
  size_t pos_ = 0;
};

// ---- JSON-like rendering ----

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Hex(std::string_view bytes, size_t from, size_t to) {
  std::string out;
  char buf[4];
  for (size_t k = from; k < to; ++k) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<uint8_t>(bytes[k]));
    if (!out.empty()) out += ' ';
    out += buf;
  }
  return out;
}

std::string Compact(const Node& n) {
  switch (n.kind) {
    case Node::kNil:
      return "null";
    case Node::kBool:
      return n.b ? "true" : "false";
    case Node::kUint:
      return std::to_string(n.u);
    case Node::kInt:
      return std::to_string(n.i);
    case Node::kFloat: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", n.f);
      return buf;
    }
    case Node::kStr:
      return Quote(n.s);
    case Node::kBin:
      return "bin(" + Hex(n.s, 0, n.s.size()) + ")";
    case Node::kTimestamp:
      return "timestamp(" + std::to_string(n.u) + ")";
    case Node::kArray: {
      std::string out = "[";
      for (size_t k = 0; k < n.children.size(); ++k) {
        if (k > 0) out += ", ";
        out += Compact(n.children[k]);
      }
      return out + "]";
    }
    case Node::kMap: {
      std::string out = "{";
      for (size_t k = 0; k < n.children.size(); k += 2) {
        if (k > 0) out += ", ";
        out += Compact(n.children[k]) + ": " + Compact(n.children[k + 1]);
      }
      return out + "}";
    }
  }
  return "?";
}

constexpr size_t kWidth = 80;  // of a comment line's text, "# " excluded

// `n` as JSON lines, each prefixed with `indent`; the first line starts with `lead`.
void Pretty(const Node& n, const std::string& indent, const std::string& lead,
            const std::string& trail, std::vector<std::string>* out) {
  const std::string flat = Compact(n);
  if (!n.container() || n.children.empty() || indent.size() + lead.size() + flat.size() <= kWidth) {
    out->push_back(indent + lead + flat + trail);
    return;
  }
  const bool map = n.kind == Node::kMap;
  out->push_back(indent + lead + (map ? "{" : "["));
  const size_t step = map ? 2 : 1;
  for (size_t k = 0; k < n.children.size(); k += step) {
    const bool last = k + step >= n.children.size();
    const std::string key = map ? Compact(n.children[k]) + ": " : "";
    Pretty(n.children[k + step - 1], indent + "  ", key, last ? "" : ",", out);
  }
  out->push_back(indent + (map ? "}" : "]") + trail);
}

// ---- the annotated byte listing ----

class Listing {
 public:
  explicit Listing(std::string_view body) : body_(body) {}

  void Comment(const std::string& text) { lines_.push_back(text.empty() ? "#" : "# " + text); }

  // Data lines for body[from, to), 16 bytes a line.
  void Bytes(size_t from, size_t to) {
    for (size_t k = from; k < to; k += 16) lines_.push_back(Hex(body_, k, std::min(to, k + 16)));
  }

  // A short array of scalars goes on one comment; maps are always expanded.
  static bool Flat(const Node& n) {
    if (!n.container()) return true;
    if (n.kind == Node::kMap || n.end - n.begin > 48) return false;
    for (const Node& c : n.children) {
      if (c.container()) return false;
    }
    return true;
  }

  // "fixarray(3) of positive fixint, uint32, true"; an expanded container's
  // elements say their own.
  static std::string Encoding(const Node& n) {
    if (!Flat(n) || n.children.empty()) return n.format;
    std::string out = n.format + " of ";
    for (size_t k = 0; k < n.children.size(); ++k) {
      if (k > 0) out += n.kind == Node::kMap && k % 2 == 1 ? ": " : ", ";
      out += n.children[k].format;
    }
    return out;
  }

  // What to say about a value in its comment's first line.
  static std::string Summary(const Node& n) {
    if (!n.container()) return Compact(n);
    const std::string flat = Compact(n);
    if (flat.size() <= 56) return flat;
    return n.kind == Node::kMap ? "a map of " + std::to_string(n.count()) + " entries"
                                : "an array of " + std::to_string(n.count()) + " elements";
  }

  // One value: its comment, then its bytes (a nested container: its header,
  // then its elements, indented).
  void Value(const Node& n, const std::string& indent, const std::string& label, const Node* key) {
    Comment(indent + label + Summary(n));
    if (key != nullptr) {
      Comment(indent + "    key " + key->format + ", value " + Encoding(n));
      Bytes(key->begin, key->end);
    } else {
      Comment(indent + "    " + Encoding(n));
    }
    if (Flat(n)) {
      Bytes(n.begin, n.end);
      return;
    }
    Bytes(n.begin, n.head_end);
    Children(n, indent + "  ");
  }

  void Children(const Node& n, const std::string& indent) {
    if (n.kind == Node::kMap) {
      for (size_t k = 0; k < n.children.size(); k += 2) {
        const Node& key = n.children[k];
        Value(n.children[k + 1], indent, Compact(key) + ": ", &key);
      }
    } else {
      for (size_t k = 0; k < n.children.size(); ++k) {
        Value(n.children[k], indent, "[" + std::to_string(k) + "] ", nullptr);
      }
    }
  }

  void Root(const Node& n) {
    if (!n.container()) {
      Value(n, "", "", nullptr);
      return;
    }
    Comment("The top-level " + std::string(n.kind == Node::kMap ? "map" : "array") + ": " +
            n.format);
    Bytes(n.begin, n.head_end);
    Children(n, "  ");
  }

  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::string_view body_;
  std::vector<std::string> lines_;
};

// Which table an example comes from, and whether its body is deliberately raw bytes.
std::string_view TableOf(const Example&) { return "tests/support/example_frames.h"; }
std::string_view TableOf(const NodeExample&) { return "tests/proto/node_example_frames.h"; }
bool IsRaw(const Example& e) { return std::holds_alternative<RawBody>(e.body); }
bool IsRaw(const NodeExample&) { return false; }

template <typename AnyExample>
std::string Render(const AnyExample& e) {
  const std::string frame = EncodeFrame(e);
  FrameHeader h;
  if (frame.size() < kHeaderSize || DecodeHeader(reinterpret_cast<const uint8_t*>(frame.data()),
                                                 kMaxResponseBytes, &h) != HeaderCheck::kOk) {
    Die(e.file + ": the encoder made a bad header");
  }
  const std::string_view body = std::string_view(frame).substr(kHeaderSize);
  const bool request = e.file.find(".request.") != std::string::npos;
  const std::string op_name(OpName(h.op));

  std::vector<std::string> out;
  auto c = [&](const std::string& text) { out.push_back(text.empty() ? "#" : "# " + text); };
  char buf[160];

  c("segstore wire protocol example: " + e.file);
  c(e.title);
  c("");
  c("Generated by tests/proto/gen_examples.cc from " + std::string(TableOf(e)) + "; do not");
  c("edit by hand (see proto/examples/README.md). Lines starting with '#' are comments;");
  c("the other lines are the frame's bytes in hex, whitespace-separated.");
  std::snprintf(buf, sizeof(buf),
                "The frame is %zu bytes: the 16-byte header, then %zu bytes of body.", frame.size(),
                body.size());
  c(buf);
  if (!e.notes.empty()) {
    c("");
    for (const std::string& n : e.notes) c(n);
  }

  c("");
  c("---- header: 16 bytes, integers big-endian ----");
  const std::string_view f(frame);
  auto field = [&](size_t from, size_t to, const std::string& what) {
    std::snprintf(buf, sizeof(buf), "  %-12s %s", Hex(f, from, to).c_str(), what.c_str());
    c(buf);
  };
  field(0, 2, "magic \"SG\"");
  field(2, 3, "version " + std::to_string(h.version));
  if (h.op == 0) {
    std::snprintf(buf, sizeof(buf), "op 0x00: none (an error of the connection, not of a request)");
  } else {
    std::snprintf(buf, sizeof(buf), "op 0x%02x = %s", h.op, op_name.c_str());
  }
  field(3, 4, buf);
  const std::string status_name(Status::CodeName(static_cast<Status::Code>(h.status)));
  field(4, 5,
        "status " + std::to_string(h.status) + " (" + status_name + ")" +
            (request ? ": always 0 in a request" : ""));
  field(5, 6,
        h.flags == kFlagStale ? std::string("flags 0x01: stale (the answer may be behind the log)")
                              : std::string("flags 0"));
  field(6, 8, "reserved, 0");
  field(8, 12,
        "request_id " + std::to_string(h.request_id) +
            (request     ? ": chosen by the client, echoed in the response"
             : h.op == 0 ? ": none (no request's header was trusted)"
                         : ": the request's, echoed"));
  field(12, 16, "body_length " + std::to_string(h.body_length) + ": the body bytes that follow");
  out.push_back(Hex(f, 0, kHeaderSize));

  c("");
  if (body.empty()) {
    c("---- body: none (body_length 0) ----");
    return [&] {
      std::string s;
      for (const std::string& l : out) s += l + "\n";
      return s;
    }();
  }

  if (IsRaw(e)) {
    c("---- body: " + std::to_string(body.size()) +
      " bytes, deliberately not a valid body (a server refuses it) ----");
    out.push_back(Hex(f, kHeaderSize, f.size()));
    std::string s;
    for (const std::string& l : out) s += l + "\n";
    return s;
  }

  Reader reader(body);
  const Node root = reader.Read();
  if (!reader.done()) Die(e.file + ": trailing bytes after the body's value");

  c("---- body: " + std::to_string(body.size()) + " bytes of MessagePack ----");
  c("");
  c("As JSON:");
  std::vector<std::string> json;
  Pretty(root, "  ", "", "", &json);
  for (const std::string& l : json) c(l);
  c("");
  c("Value by value: a comment, the encodings used (fixstr(n): n bytes of UTF-8;");
  c("fixarray(n)/fixmap(n): n elements/entries follow), then the bytes. Type bytes:");
  c("00-7f positive fixint (the value), 8x fixmap, 9x fixarray, a0-bf fixstr, c0 nil,");
  c("c2 false, c3 true, cb float64, cc/cd/ce/cf uint8/16/32/64 then 1/2/4/8 bytes");
  c("big-endian, d9 str8 then a 1-byte length. Any valid encoding of the same value");
  c("is accepted (e.g. 5 as cf 00..05, keys in any order); these are the shortest.");
  Listing listing(body);
  listing.Root(root);
  out.insert(out.end(), listing.lines().begin(), listing.lines().end());

  std::string s;
  for (const std::string& l : out) s += l + "\n";
  return s;
}

}  // namespace
}  // namespace segstore::proto::examples

int main(int argc, char** argv) {
  using segstore::proto::examples::All;
  using segstore::proto::examples::NodeToNode;
  using segstore::proto::examples::Render;
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " OUTPUT_DIR   (writes every example's .hex file)\n";
    return 2;
  }
  const std::string dir = argv[1];
  auto write = [&dir](const std::string& file, const std::string& text) {
    const std::string path = dir + "/" + file;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) {
      std::cerr << "proto_examples_gen: cannot write " << path << "\n";
      return false;
    }
    std::cout << path << "\n";
    return true;
  };
  for (const auto& e : All()) {
    if (!write(e.file, Render(e))) return 1;
  }
  for (const auto& e : NodeToNode()) {
    if (!write(e.file, Render(e))) return 1;
  }
  return 0;
}
