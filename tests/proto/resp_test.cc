// RespReader and RespWriter (src/proto/resp.h): commands come out whole and
// alike however the bytes are cut; binary-safe bulk strings; empty commands
// skipped; inline commands quoted as Redis's own parser quotes them; every
// "Protocol error" of the reader with Redis's wording, sticky until Clear();
// the InputBuffer side (Space, taken, Ready, Shrink); and the exact bytes of
// every reply type in RESP2 and RESP3.
#include "proto/resp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace segstore::proto {
namespace {

using Args = std::vector<std::string>;
using Next = RespReader::Next;

constexpr size_t kReadSize = 4096;
constexpr size_t kKeepBytes = 64 * 1024;
constexpr uint32_t kMaxCommand = 16 << 20;

std::string Multibulk(const Args& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

// Copies `bytes` into the reader through Space()/Commit(), at most `chunk`
// bytes a read, as a socket would deliver them.
void Feed(RespReader* in, std::string_view bytes, size_t chunk) {
  while (!bytes.empty()) {
    const auto space = in->Space();
    ASSERT_GT(space.size, 0u);
    const size_t n = std::min({bytes.size(), space.size, chunk});
    std::memcpy(space.data, bytes.data(), n);
    in->Commit(n);
    bytes.remove_prefix(n);
  }
}

// What a Take() gave: its result, and the arguments or the error.
struct Taken {
  Next next;
  Args args;
  std::string error;
};

Taken TakeOne(RespReader* in) {
  std::vector<std::string_view> views;
  std::string error;
  Taken t{in->Take(&views, &error), {}, {}};
  for (std::string_view v : views) t.args.emplace_back(v);
  if (t.next == Next::kBroken) t.error = error;
  if (t.next != Next::kCommand) {
    EXPECT_TRUE(views.empty());
  }
  return t;
}

// Feeds `bytes` whole in one read and takes the first result.
Taken TakeFrom(std::string_view bytes, uint32_t max_command = kMaxCommand) {
  RespReader in(kReadSize, kKeepBytes, max_command);
  Feed(&in, bytes, bytes.size() + 1);
  return TakeOne(&in);
}

Args Command(std::string_view bytes) {
  const Taken t = TakeFrom(bytes);
  EXPECT_EQ(t.next, Next::kCommand) << t.error;
  return t.args;
}

std::string BrokenBy(std::string_view bytes, uint32_t max_command = kMaxCommand) {
  const Taken t = TakeFrom(bytes, max_command);
  EXPECT_EQ(t.next, Next::kBroken);
  return t.error;
}

// One command of a stream: its arguments and the stream's offset at its end.
struct Expected {
  Args args;
  uint64_t end;
};

// Feeds `stream` `chunk` bytes a read (with the cut points moved by `rng`
// when given), taking every command after each read; checks each against
// `want` with taken() at its end, and Ready() against what Take() returns.
void ReadStream(std::string_view stream, size_t chunk, const std::vector<Expected>& want,
                std::mt19937* rng = nullptr) {
  RespReader in(kReadSize, kKeepBytes, kMaxCommand);
  size_t got = 0;
  std::string_view rest = stream;
  while (!rest.empty()) {
    const size_t n = std::min(rest.size(), rng ? 1 + (*rng)() % (2 * chunk) : chunk);
    Feed(&in, rest.substr(0, n), n);
    rest.remove_prefix(n);
    for (;;) {
      const bool ready = in.Ready();
      const uint64_t taken_before = in.taken();
      const Taken t = TakeOne(&in);
      if (t.next == Next::kNeedMore) {
        ASSERT_FALSE(in.Ready());
        break;
      }
      ASSERT_EQ(t.next, Next::kCommand) << t.error;
      ASSERT_TRUE(ready);
      ASSERT_LT(got, want.size());
      EXPECT_EQ(t.args, want[got].args) << "command " << got;
      EXPECT_EQ(in.taken(), want[got].end) << "command " << got;
      EXPECT_GT(in.taken(), taken_before);
      ++got;
    }
  }
  EXPECT_EQ(got, want.size());
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(in.taken(), stream.size());
}

// ---- RespReader: commands ----

TEST(RespReaderTest, CommandsComeOutWholeAtEveryChunkSize) {
  // Every kind of command, and empty ones between them.
  std::string stream;
  std::vector<Expected> want;
  const auto add = [&](std::string bytes, Args args) {
    stream += bytes;
    if (!args.empty()) {
      want.push_back({std::move(args), stream.size()});
    } else {
      ASSERT_FALSE(want.empty());  // a trailing empty command counts for the next
    }
  };
  add(Multibulk({"PING"}), {"PING"});
  add(Multibulk({"SEG.GET", "user-1", "IDS", "10", "20"}),
      {"SEG.GET", "user-1", "IDS", "10", "20"});
  add("*0\r\n", {});
  add("PING hello\r\n", {"PING", "hello"});
  add(Multibulk({"ECHO", std::string("a\r\nb\0c$*", 8)}), {"ECHO", std::string("a\r\nb\0c$*", 8)});
  add("*-1\r\n\r\n", {});
  add("ECHO \"q \\\"x\\\" \\x41\"\n", {"ECHO", "q \"x\" A"});
  add(Multibulk({"SET", "", "v"}), {"SET", "", "v"});
  add("  SEG.DEL  'u 1'\t\r\n", {"SEG.DEL", "u 1"});
  for (size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    SCOPED_TRACE(chunk);
    ReadStream(stream, chunk, want);
    if (HasFatalFailure()) return;
  }
}

TEST(RespReaderTest, CommandsComeOutWholeHoweverTheBytesAreCut) {
  std::mt19937 rng(23);
  std::string stream;
  std::vector<Expected> want;
  for (int i = 0; i < 300; ++i) {
    Args args;
    const size_t n = 1 + rng() % 6;
    for (size_t j = 0; j < n; ++j) {
      // Mostly small binary arguments, some empty, a few larger than a read.
      const size_t size = i % 40 == 9 && j == 1 ? 100'000 + rng() % 1000
                          : rng() % 3 == 0      ? 0
                                                : rng() % 50;
      std::string a(size, '\0');
      for (char& c : a) c = static_cast<char>(rng());
      args.push_back(std::move(a));
    }
    if (i % 7 == 3) {
      // An inline command of plain words.
      args.assign({"ECHO", "w" + std::to_string(i), "x"});
      stream += args[0] + " " + args[1] + "  " + args[2] + (i % 2 ? "\r\n" : "\n");
    } else {
      stream += Multibulk(args);
    }
    if (i % 11 == 5) stream += i % 2 ? "*0\r\n" : "\r\n";
    want.push_back({args, 0});
  }
  // The ends: replay the stream in one read.
  {
    RespReader in(kReadSize, kKeepBytes, kMaxCommand);
    Feed(&in, stream, stream.size());
    for (Expected& e : want) {
      const Taken t = TakeOne(&in);
      ASSERT_EQ(t.next, Next::kCommand);
      ASSERT_EQ(t.args, e.args);
      e.end = in.taken();
    }
  }
  for (size_t chunk :
       {size_t{1}, size_t{2}, size_t{7}, size_t{16}, size_t{4096}, size_t{1} << 20}) {
    SCOPED_TRACE(chunk);
    ReadStream(stream, chunk, want, &rng);
  }
}

TEST(RespReaderTest, PipelinedCommandsComeOutOneByOneInOrder) {
  RespReader in(kReadSize, kKeepBytes, kMaxCommand);
  const std::string a = Multibulk({"PING"});
  const std::string b = "ECHO hi\r\n";
  const std::string c = Multibulk({"SEG.COUNT", "u"});
  Feed(&in, a + b + c + "*1\r\n$4\r\nPI", kReadSize);
  EXPECT_TRUE(in.Ready());
  EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
  EXPECT_EQ(in.taken(), a.size());
  EXPECT_EQ(TakeOne(&in).args, Args({"ECHO", "hi"}));
  EXPECT_EQ(in.taken(), a.size() + b.size());
  EXPECT_EQ(TakeOne(&in).args, Args({"SEG.COUNT", "u"}));
  EXPECT_EQ(in.taken(), a.size() + b.size() + c.size());
  EXPECT_FALSE(in.Ready());
  EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
  EXPECT_FALSE(in.empty());
  Feed(&in, "NG\r\n", kReadSize);
  EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
  EXPECT_TRUE(in.empty());
}

TEST(RespReaderTest, BulkStringsAreBinarySafe) {
  std::string all(256, '\0');
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<char>(i);
  const Args args = {"ECHO", "\r\n", std::string(1, '\0'), "*1\r\n$4\r\nPING\r\n", "\"'\\", all};
  EXPECT_EQ(Command(Multibulk(args)), args);
}

TEST(RespReaderTest, EmptyCommandsAreSkipped) {
  const std::string empties = "*0\r\n*-1\r\n*-7\r\n\r\n\n   \t \r\n";
  {
    RespReader in(kReadSize, kKeepBytes, kMaxCommand);
    Feed(&in, empties + Multibulk({"PING"}) + empties, kReadSize);
    EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
    EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
    EXPECT_TRUE(in.empty());
    EXPECT_EQ(in.taken(), 2 * empties.size() + Multibulk({"PING"}).size());
  }
  {
    // Nothing but empty commands: all taken, none handed out.
    RespReader in(kReadSize, kKeepBytes, kMaxCommand);
    Feed(&in, empties, kReadSize);
    EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
    EXPECT_TRUE(in.empty());
    EXPECT_FALSE(in.Ready());
    EXPECT_EQ(in.taken(), empties.size());
  }
}

// ---- RespReader: inline commands ----

TEST(RespReaderTest, InlineWordsAreSplitOnWhitespace) {
  EXPECT_EQ(Command("PING\r\n"), Args({"PING"}));
  EXPECT_EQ(Command("PING\n"), Args({"PING"}));
  EXPECT_EQ(Command("  SEG.GET\tuser-1   IDS 1 2 \r\n"),
            Args({"SEG.GET", "user-1", "IDS", "1", "2"}));
  // A lone CR inside a line separates words; the line ends only at LF.
  EXPECT_EQ(Command("a\rb\n"), Args({"a", "b"}));
  // Not a multibulk: '$' or other bytes first make an inline command.
  EXPECT_EQ(Command("$4\r\n"), Args({"$4"}));
}

TEST(RespReaderTest, InlineDoubleQuotesTakeEscapes) {
  EXPECT_EQ(Command("SET k \"hello world\"\r\n"), Args({"SET", "k", "hello world"}));
  EXPECT_EQ(Command("E \"\\n\\r\\t\\b\\a\\\\\\\"\"\r\n"), Args({"E", "\n\r\t\b\a\\\""}));
  EXPECT_EQ(Command("E \"\\x41\\x6a\\x6A\\x00\\xff\"\r\n"),
            Args({"E", std::string("Ajj\0\xff", 5)}));
  // Not two hex digits: the x stands for itself.
  EXPECT_EQ(Command("E \"\\xg1\\x4\"\r\n"), Args({"E", "xg1x4"}));
  // Any other escaped byte stands for itself.
  EXPECT_EQ(Command("E \"\\q\\'\"\r\n"), Args({"E", "q'"}));
  // Quoted: the empty string, whitespace and single quotes.
  EXPECT_EQ(Command("E \"\" \"'\t'\"\r\n"), Args({"E", "", "'\t'"}));
  // As Redis's sdssplitargs: a quoted part may follow bare bytes in a word.
  EXPECT_EQ(Command("E a\"b c\" d\r\n"), Args({"E", "ab c", "d"}));
}

TEST(RespReaderTest, InlineSingleQuotesTakeOnlyAnEscapedQuote) {
  EXPECT_EQ(Command("E 'a b'\r\n"), Args({"E", "a b"}));
  EXPECT_EQ(Command("E 'it\\'s'\r\n"), Args({"E", "it's"}));
  EXPECT_EQ(Command("E '\\n\\x41\"'\r\n"), Args({"E", "\\n\\x41\""}));
  EXPECT_EQ(Command("E '' x'y z'\r\n"), Args({"E", "", "xy z"}));
}

TEST(RespReaderTest, UnbalancedQuotesBreakTheStream) {
  const std::string kUnbalanced = "Protocol error: unbalanced quotes in request";
  for (const char* line : {"SET k \"abc\r\n", "SET k 'abc\r\n", "SET k \"a\"b\r\n", "E 'a'b\n",
                           "E \"abc\\\"\r\n", "E \"\\\n", "E a\"b\n", "\"\n"}) {
    SCOPED_TRACE(line);
    RespReader in(kReadSize, kKeepBytes, kMaxCommand);
    const std::string before = Multibulk({"PING"});
    Feed(&in, before + line, kReadSize);
    EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
    Taken t = TakeOne(&in);
    EXPECT_EQ(t.next, Next::kBroken);
    EXPECT_EQ(t.error, kUnbalanced);
    // Nothing taken, and it stays broken.
    EXPECT_EQ(in.taken(), before.size());
    EXPECT_TRUE(in.Ready());
    EXPECT_FALSE(in.empty());
    t = TakeOne(&in);
    EXPECT_EQ(t.next, Next::kBroken);
    EXPECT_EQ(t.error, kUnbalanced);
  }
}

// ---- RespReader: protocol errors ----

struct BrokenCase {
  std::string bytes;
  std::string error;
};

std::vector<BrokenCase> BrokenCases() {
  const std::string p = "Protocol error: ";
  return {
      {"*abc\r\n", p + "invalid multibulk length"},
      {"*\r\n", p + "invalid multibulk length"},
      {"*1\rx", p + "invalid multibulk length"},
      {"*+1\r\n", p + "invalid multibulk length"},
      {"*1 \r\n", p + "invalid multibulk length"},
      {"*1048577\r\n", p + "invalid multibulk length"},
      {"*99999999999999999999\r\n", p + "invalid multibulk length"},
      {"*" + std::string(40, '1'), p + "too big mbulk count string"},
      {"*1\r\nx", p + "expected '$', got 'x'"},
      {"*2\r\n$1\r\na\r\n:1\r\n", p + "expected '$', got ':'"},
      {"*1\r\n$abc\r\n", p + "invalid bulk length"},
      {"*1\r\n$\r\n", p + "invalid bulk length"},
      {"*1\r\n$-1\r\n", p + "invalid bulk length"},
      {"*1\r\n$3\rxabc\r\n", p + "invalid bulk length"},
      {"*1\r\n$" + std::string(40, '9'), p + "too big bulk count string"},
      {"*1\r\n$3\r\nabcXY", p + "bulk string not followed by CRLF"},
      {"*1\r\n$3\r\nabc\r\r", p + "bulk string not followed by CRLF"},
      {"*1\r\n$3\r\nabcd\r\n", p + "bulk string not followed by CRLF"},
      {std::string(kRespMaxInline, 'a'), p + "too big inline request"},
  };
}

TEST(RespReaderTest, EveryProtocolErrorHasRedisWording) {
  for (const BrokenCase& c : BrokenCases()) {
    SCOPED_TRACE(c.bytes.substr(0, 40));
    EXPECT_EQ(BrokenBy(c.bytes), c.error);
  }
}

TEST(RespReaderTest, ABrokenStreamIsFoundAtEveryChunkSizeAndStaysBrokenUntilClear) {
  for (const BrokenCase& c : BrokenCases()) {
    SCOPED_TRACE(c.bytes.substr(0, 40));
    const std::string before = "PING\r\n";
    const std::string stream = before + c.bytes;
    for (size_t chunk : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, stream.size()}) {
      SCOPED_TRACE(chunk);
      RespReader in(kReadSize, kKeepBytes, kMaxCommand);
      Taken t{Next::kNeedMore, {}, {}};
      int commands = 0;
      for (size_t at = 0; at < stream.size() && t.next != Next::kBroken; at += chunk) {
        Feed(&in, std::string_view(stream).substr(at, chunk), chunk);
        for (t = TakeOne(&in); t.next == Next::kCommand; t = TakeOne(&in)) ++commands;
      }
      ASSERT_EQ(t.next, Next::kBroken);
      EXPECT_EQ(t.error, c.error);
      EXPECT_EQ(commands, 1);
      EXPECT_EQ(in.taken(), before.size());
      // More bytes, even a whole command, change nothing.
      Feed(&in, Multibulk({"PING"}), kReadSize);
      EXPECT_TRUE(in.Ready());
      t = TakeOne(&in);
      EXPECT_EQ(t.next, Next::kBroken);
      EXPECT_EQ(t.error, c.error);
      EXPECT_EQ(in.taken(), before.size());
      // Clear() drops it all; the reader starts afresh.
      in.Clear();
      EXPECT_TRUE(in.empty());
      EXPECT_FALSE(in.Ready());
      EXPECT_EQ(in.taken(), before.size());
      Feed(&in, Multibulk({"PING"}), kReadSize);
      EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
    }
  }
}

TEST(RespReaderTest, CountLinesUpToTheirLimitsAreRead) {
  // The largest multibulk count is accepted (the arguments are then awaited).
  EXPECT_EQ(TakeFrom("*1048576\r\n").next, Next::kNeedMore);
  // 32 bytes of a count line without CR are still waited for; 33 are too many.
  EXPECT_EQ(TakeFrom("*" + std::string(32, '1')).next, Next::kNeedMore);
  EXPECT_EQ(BrokenBy("*" + std::string(33, '1')), "Protocol error: too big mbulk count string");
  EXPECT_EQ(TakeFrom("*1\r\n$" + std::string(32, '1')).next, Next::kNeedMore);
  EXPECT_EQ(BrokenBy("*1\r\n$" + std::string(33, '1')),
            "Protocol error: too big bulk count string");
}

TEST(RespReaderTest, AnInlineLineUpToTheLimitIsRead) {
  const std::string line = "E " + std::string(kRespMaxInline - 3, 'a') + "\n";
  ASSERT_EQ(line.size(), kRespMaxInline);
  EXPECT_EQ(Command(line), Args({"E", std::string(kRespMaxInline - 3, 'a')}));
  EXPECT_EQ(TakeFrom(std::string(kRespMaxInline - 1, 'a')).next, Next::kNeedMore);
  EXPECT_EQ(BrokenBy(line.substr(0, kRespMaxInline - 1) + "a\n"),
            "Protocol error: too big inline request");
}

// ---- RespReader: the command size limit ----

TEST(RespReaderTest, ACommandOverTheLimitIsRefused) {
  const std::string command = Multibulk({"SET", "k", std::string(50, 'v')});
  const auto limit = static_cast<uint32_t>(command.size());
  const std::string over = "Protocol error: command of more than " + std::to_string(limit - 1) +
                           " bytes (the server's max_frame_bytes)";
  EXPECT_EQ(TakeFrom(command, limit).args, Args({"SET", "k", std::string(50, 'v')}));
  EXPECT_EQ(BrokenBy(command, limit - 1), over);
  // Many small arguments add up.
  Args many(40, "x");
  const std::string small = Multibulk(many);
  EXPECT_EQ(TakeFrom(small, static_cast<uint32_t>(small.size())).args, many);
  EXPECT_EQ(BrokenBy(small, static_cast<uint32_t>(small.size() - 1)),
            "Protocol error: command of more than " + std::to_string(small.size() - 1) +
                " bytes (the server's max_frame_bytes)");
  // An inline line is held to the limit too.
  EXPECT_EQ(BrokenBy("PING " + std::string(100, 'a') + "\r\n", 100),
            "Protocol error: too big inline request");
  EXPECT_EQ(Command("PING " + std::string(100, 'a') + "\r\n"),
            Args({"PING", std::string(100, 'a')}));
}

TEST(RespReaderTest, AnOverLimitBulkIsRefusedBeforeItsBytesArrive) {
  RespReader in(kReadSize, kKeepBytes, 1 << 20);
  // A bulk's header promising more than the limit, even INT64_MAX bytes.
  for (const std::string length : {"1048577", "9223372036854775807"}) {
    SCOPED_TRACE(length);
    in.Clear();
    Feed(&in, "*2\r\n$3\r\nSET\r\n$" + length + "\r\n", kReadSize);
    const Taken t = TakeOne(&in);
    EXPECT_EQ(t.next, Next::kBroken);
    EXPECT_EQ(t.error,
              "Protocol error: command of more than 1048576 bytes (the server's max_frame_bytes)");
    // The buffer did not grow for it.
    EXPECT_LE(in.Space().size, kReadSize);
  }
}

TEST(RespReaderTest, SetMaxCommandBytesHoldsForTheNextCommands) {
  RespReader in(kReadSize, kKeepBytes, 64);
  const std::string big = Multibulk({"ECHO", std::string(100, 'x')});
  Feed(&in, Multibulk({"PING"}), kReadSize);
  EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
  in.set_max_command_bytes(1000);
  Feed(&in, big, kReadSize);
  EXPECT_EQ(TakeOne(&in).args, Args({"ECHO", std::string(100, 'x')}));
  in.set_max_command_bytes(64);
  Feed(&in, big, kReadSize);
  const Taken t = TakeOne(&in);
  EXPECT_EQ(t.next, Next::kBroken);
  EXPECT_EQ(t.error,
            "Protocol error: command of more than 64 bytes (the server's max_frame_bytes)");
}

// ---- RespReader: the buffer ----

TEST(RespReaderTest, SpaceOffersRoomForTheRestOfALargeBulk) {
  RespReader in(kReadSize, kKeepBytes, kMaxCommand);
  const std::string value(1 << 20, 'v');
  const std::string command = Multibulk({"ECHO", value});
  Feed(&in, std::string_view(command).substr(0, 100), 100);
  EXPECT_FALSE(in.Ready());
  EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
  const auto space = in.Space();
  EXPECT_GE(space.size, command.size() - 100);
  std::memcpy(space.data, command.data() + 100, command.size() - 100);
  in.Commit(command.size() - 100);
  EXPECT_TRUE(in.Ready());
  EXPECT_EQ(TakeOne(&in).args, Args({"ECHO", value}));
  EXPECT_TRUE(in.empty());
  // The megabyte goes back once the buffer is empty: the next read is offered
  // the read size again.
  in.Shrink();
  EXPECT_EQ(in.Space().size, kReadSize);
}

TEST(RespReaderTest, ShrinkKeepsUnreadBytesAndSmallBuffers) {
  RespReader in(kReadSize, kKeepBytes, kMaxCommand);
  Feed(&in, "*1\r\n$4\r\nPI", kReadSize);
  in.Shrink();  // not empty: nothing moves
  Feed(&in, "NG\r\n", kReadSize);
  EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
  // A buffer within keep_bytes is kept: Space() offers the same memory.
  const char* before = in.Space().data;
  in.Shrink();
  EXPECT_EQ(in.Space().data, before);
}

TEST(RespReaderTest, TakenReadyEmptyAndClear) {
  RespReader in(kReadSize, kKeepBytes, kMaxCommand);
  EXPECT_TRUE(in.empty());
  EXPECT_FALSE(in.Ready());
  EXPECT_EQ(in.taken(), 0u);
  EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
  Feed(&in, "*2\r\n$4\r\nECHO\r\n$3\r\nab", kReadSize);
  EXPECT_FALSE(in.empty());
  EXPECT_FALSE(in.Ready());
  EXPECT_FALSE(in.Ready());  // asking again changes nothing
  EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
  EXPECT_EQ(in.taken(), 0u);
  Feed(&in, "c\r\nPING\r\n", kReadSize);
  EXPECT_TRUE(in.Ready());
  EXPECT_TRUE(in.Ready());
  EXPECT_EQ(in.taken(), 0u);  // Ready() takes nothing
  EXPECT_EQ(TakeOne(&in).args, Args({"ECHO", "abc"}));
  EXPECT_EQ(in.taken(), 23u);
  // Clear() drops the unread command; taken() counts only what was taken.
  in.Clear();
  EXPECT_TRUE(in.empty());
  EXPECT_FALSE(in.Ready());
  EXPECT_EQ(in.taken(), 23u);
  EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
  // A partial command cleared leaves no state behind.
  Feed(&in, "*3\r\n$3\r\nSET\r\n$1\r\nk", kReadSize);
  EXPECT_EQ(TakeOne(&in).next, Next::kNeedMore);
  in.Clear();
  Feed(&in, Multibulk({"PING"}), kReadSize);
  EXPECT_EQ(TakeOne(&in).args, Args({"PING"}));
  EXPECT_EQ(in.taken(), 23u + 14u);
}

// ---- RespWriter ----

std::string Write2(void (*f)(RespWriter*)) {
  std::string out;
  RespWriter w(&out, false);
  f(&w);
  return out;
}

std::string Write3(void (*f)(RespWriter*)) {
  std::string out;
  RespWriter w(&out, true);
  f(&w);
  return out;
}

// Both versions' bytes of one reply.
void ExpectBytes(void (*f)(RespWriter*), std::string_view resp2, std::string_view resp3) {
  EXPECT_EQ(Write2(f), resp2);
  EXPECT_EQ(Write3(f), resp3);
}

TEST(RespWriterTest, SimpleStringsAndErrorsKeepToOneLine) {
  ExpectBytes([](RespWriter* w) { w->Simple("OK"); }, "+OK\r\n", "+OK\r\n");
  ExpectBytes([](RespWriter* w) { w->Simple(""); }, "+\r\n", "+\r\n");
  ExpectBytes([](RespWriter* w) { w->Simple("a\r\nb\nc\r"); }, "+a  b c \r\n", "+a  b c \r\n");
  ExpectBytes([](RespWriter* w) { w->Error("ERR", "bad thing"); }, "-ERR bad thing\r\n",
              "-ERR bad thing\r\n");
  ExpectBytes([](RespWriter* w) { w->Error("NOAUTH", ""); }, "-NOAUTH\r\n", "-NOAUTH\r\n");
  ExpectBytes([](RespWriter* w) { w->Error("ERR", "line\r\nbreak\n"); }, "-ERR line  break \r\n",
              "-ERR line  break \r\n");
  ExpectBytes([](RespWriter* w) { w->Error("E\rX", "m"); }, "-E X m\r\n", "-E X m\r\n");
  // What came before is left alone.
  std::string out = "\r\n";
  RespWriter w(&out, false);
  w.Simple("x\n");
  EXPECT_EQ(out, "\r\n+x \r\n");
  EXPECT_FALSE(w.resp3());
  EXPECT_TRUE(RespWriter(&out, true).resp3());
}

TEST(RespWriterTest, Integers) {
  ExpectBytes([](RespWriter* w) { w->Integer(0); }, ":0\r\n", ":0\r\n");
  ExpectBytes([](RespWriter* w) { w->Integer(-42); }, ":-42\r\n", ":-42\r\n");
  ExpectBytes([](RespWriter* w) { w->Integer(INT64_MAX); }, ":9223372036854775807\r\n",
              ":9223372036854775807\r\n");
  ExpectBytes([](RespWriter* w) { w->Integer(INT64_MIN); }, ":-9223372036854775808\r\n",
              ":-9223372036854775808\r\n");
}

TEST(RespWriterTest, BulkStrings) {
  ExpectBytes([](RespWriter* w) { w->Bulk("hello"); }, "$5\r\nhello\r\n", "$5\r\nhello\r\n");
  ExpectBytes([](RespWriter* w) { w->Bulk(""); }, "$0\r\n\r\n", "$0\r\n\r\n");
  ExpectBytes([](RespWriter* w) { w->Bulk(std::string_view("a\r\n\0", 4)); },
              std::string_view("$4\r\na\r\n\0\r\n", 10), std::string_view("$4\r\na\r\n\0\r\n", 10));
  ExpectBytes([](RespWriter* w) { w->BulkNumber(0); }, "$1\r\n0\r\n", "$1\r\n0\r\n");
  ExpectBytes([](RespWriter* w) { w->BulkNumber(UINT64_MAX); }, "$20\r\n18446744073709551615\r\n",
              "$20\r\n18446744073709551615\r\n");
  const std::string big(100'000, 'b');
  std::string out;
  RespWriter(&out, true).Bulk(big);
  EXPECT_EQ(out, "$100000\r\n" + big + "\r\n");
}

// The column writers (a reply's IDs and expiries) write what the one-value
// writers write, at every length of number and across their buffer's chunks.
TEST(RespWriterTest, ColumnsMatchOneAtATime) {
  std::vector<uint64_t> ids;
  std::vector<uint32_t> times;
  for (uint64_t p = 1; p != 0 && p <= UINT64_MAX / 10; p *= 10) {
    for (uint64_t v : {p - 1, p, p + 1, p * 9 + (p - 1), p * 5 + 7}) ids.push_back(v);
  }
  ids.push_back(UINT64_MAX);
  ids.push_back(UINT64_MAX - 1);
  for (uint64_t v : ids) {
    if (v <= UINT32_MAX) times.push_back(static_cast<uint32_t>(v));
  }
  times.push_back(UINT32_MAX);
  for (uint32_t i = 0; i < 3000; ++i) ids.push_back(i * 2654435761u);  // past one 8 KiB chunk
  for (uint32_t i = 0; i < 3000; ++i) times.push_back(1'790'000'000u + i * 977u);

  std::string column, single;
  RespWriter(&column, false).BulkNumbers(ids);
  RespWriter(&column, false).Integers(times);
  RespWriter one(&single, false);
  for (uint64_t v : ids) one.BulkNumber(v);
  for (uint32_t v : times) one.Integer(v);
  EXPECT_EQ(column, single);
  EXPECT_NE(column.find("$20\r\n18446744073709551615\r\n"), std::string::npos);
  EXPECT_NE(column.find(":4294967295\r\n"), std::string::npos);
  EXPECT_NE(column.find("$1\r\n0\r\n"), std::string::npos);

  // With an element after each (HGETALL's empty values).
  std::string pairs, one_by_one;
  RespWriter(&pairs, true).BulkNumbers(ids, "$0\r\n\r\n");
  RespWriter both(&one_by_one, true);
  for (uint64_t v : ids) {
    both.BulkNumber(v);
    both.Bulk("");
  }
  EXPECT_EQ(pairs, one_by_one);
}

TEST(RespWriterTest, Nulls) {
  ExpectBytes([](RespWriter* w) { w->Null(); }, "$-1\r\n", "_\r\n");
  ExpectBytes([](RespWriter* w) { w->NullArray(); }, "*-1\r\n", "_\r\n");
}

TEST(RespWriterTest, Aggregates) {
  ExpectBytes([](RespWriter* w) { w->Array(0); }, "*0\r\n", "*0\r\n");
  ExpectBytes([](RespWriter* w) { w->Array(3); }, "*3\r\n", "*3\r\n");
  ExpectBytes([](RespWriter* w) { w->Map(0); }, "*0\r\n", "%0\r\n");
  ExpectBytes([](RespWriter* w) { w->Map(2); }, "*4\r\n", "%2\r\n");
  ExpectBytes([](RespWriter* w) { w->Set(0); }, "*0\r\n", "~0\r\n");
  ExpectBytes([](RespWriter* w) { w->Set(5); }, "*5\r\n", "~5\r\n");
  ExpectBytes([](RespWriter* w) { w->Array(SIZE_MAX); }, "*18446744073709551615\r\n",
              "*18446744073709551615\r\n");
  // A whole reply: a map of a string and an array.
  ExpectBytes(
      [](RespWriter* w) {
        w->Map(1);
        w->Bulk("ids");
        w->Array(2);
        w->BulkNumber(7);
        w->Null();
      },
      "*2\r\n$3\r\nids\r\n*2\r\n$1\r\n7\r\n$-1\r\n", "%1\r\n$3\r\nids\r\n*2\r\n$1\r\n7\r\n_\r\n");
}

TEST(RespWriterTest, Booleans) {
  ExpectBytes([](RespWriter* w) { w->Boolean(true); }, ":1\r\n", "#t\r\n");
  ExpectBytes([](RespWriter* w) { w->Boolean(false); }, ":0\r\n", "#f\r\n");
}

TEST(RespWriterTest, Doubles) {
  ExpectBytes([](RespWriter* w) { w->Double(1.5); }, "$3\r\n1.5\r\n", ",1.5\r\n");
  ExpectBytes([](RespWriter* w) { w->Double(-0.25); }, "$5\r\n-0.25\r\n", ",-0.25\r\n");
  ExpectBytes([](RespWriter* w) { w->Double(3); }, "$1\r\n3\r\n", ",3\r\n");
  ExpectBytes([](RespWriter* w) { w->Double(1e300); }, "$6\r\n1e+300\r\n", ",1e+300\r\n");
  ExpectBytes([](RespWriter* w) { w->Double(std::numeric_limits<double>::infinity()); },
              "$3\r\ninf\r\n", ",inf\r\n");
  ExpectBytes([](RespWriter* w) { w->Double(-std::numeric_limits<double>::infinity()); },
              "$4\r\n-inf\r\n", ",-inf\r\n");
  ExpectBytes([](RespWriter* w) { w->Double(std::numeric_limits<double>::quiet_NaN()); },
              "$3\r\nnan\r\n", ",nan\r\n");
  // The shortest text that reads back the same double, however long.
  ExpectBytes([](RespWriter* w) { w->Double(-2.2250738585072014e-308); },
              "$24\r\n-2.2250738585072014e-308\r\n", ",-2.2250738585072014e-308\r\n");
}

TEST(RespWriterTest, VerbatimText) {
  ExpectBytes([](RespWriter* w) { w->Verbatim("a\r\nb"); }, "$4\r\na\r\nb\r\n",
              "=8\r\ntxt:a\r\nb\r\n");
  ExpectBytes([](RespWriter* w) { w->Verbatim(""); }, "$0\r\n\r\n", "=4\r\ntxt:\r\n");
}

// What the writer writes, the reader reads back: bulk strings of any bytes.
TEST(RespWriterTest, BulkArraysReadBackAsCommands) {
  std::mt19937 rng(5);
  Args args;
  for (int i = 0; i < 20; ++i) {
    std::string a(rng() % 40, '\0');
    for (char& c : a) c = static_cast<char>(rng());
    args.push_back(a);
  }
  args[0] = "ECHO";
  std::string out;
  RespWriter w(&out, true);
  w.Array(args.size());
  for (const std::string& a : args) w.Bulk(a);
  EXPECT_EQ(out, Multibulk(args));
  EXPECT_EQ(Command(out), args);
}

}  // namespace
}  // namespace segstore::proto
