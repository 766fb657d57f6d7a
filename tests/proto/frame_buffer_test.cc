#include "proto/frame_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "proto/protocol.h"

namespace segstore::proto {
namespace {

std::string Frame(uint8_t op, uint32_t id, const std::string& body, uint8_t version = kVersion) {
  std::string out(kHeaderSize, '\0');
  FrameHeader h;
  h.version = version;
  h.op = op;
  h.request_id = id;
  h.body_length = static_cast<uint32_t>(body.size());
  EncodeHeader(h, reinterpret_cast<uint8_t*>(out.data()));
  return out + body;
}

// Copies `bytes` into the buffer through Space()/Commit(), at most `chunk`
// bytes a read, as a socket would deliver them.
void Feed(FrameBuffer* in, std::string_view bytes, size_t chunk) {
  while (!bytes.empty()) {
    const auto space = in->Space();
    ASSERT_GT(space.size, 0u);
    const size_t n = std::min({bytes.size(), space.size, chunk});
    std::memcpy(space.data, bytes.data(), n);
    in->Commit(n);
    bytes.remove_prefix(n);
  }
}

TEST(FrameBufferTest, FramesComeOutWholeHoweverTheBytesAreCut) {
  std::mt19937 rng(17);
  std::vector<std::string> bodies;
  std::string stream;
  for (uint32_t i = 0; i < 300; ++i) {
    // Mostly small bodies, some empty, some larger than a read.
    const size_t size = i % 50 == 7 ? 200'000 : i % 3 == 0 ? 0 : rng() % 300;
    std::string body(size, '\0');
    for (auto& c : body) c = static_cast<char>(rng());
    bodies.push_back(body);
    stream += Frame(0x10, i + 1, body);
  }
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{16}, size_t{4096}, size_t{1} << 20}) {
    SCOPED_TRACE(chunk);
    FrameBuffer in(4096, 64 * 1024, kDefaultMaxFrameBytes);
    std::vector<std::string> got;
    std::string_view rest = stream;
    uint64_t taken_before = 0;
    while (!rest.empty() || !in.empty()) {
      const size_t n = std::min<size_t>(rest.size(), chunk + rng() % (chunk + 1));
      Feed(&in, rest.substr(0, n), chunk);
      rest.remove_prefix(n);
      FrameHeader h;
      std::string_view body;
      for (;;) {
        const bool ready = in.Ready();
        const auto next = in.Take(kDefaultMaxFrameBytes, &h, &body);
        ASSERT_EQ(ready, next == FrameBuffer::Next::kFrame);
        if (next == FrameBuffer::Next::kNeedMore) break;
        ASSERT_EQ(next, FrameBuffer::Next::kFrame);
        EXPECT_EQ(h.request_id, got.size() + 1);
        EXPECT_EQ(in.taken() - taken_before, kHeaderSize + body.size());
        taken_before = in.taken();
        got.emplace_back(body);
      }
      if (rest.empty() && !in.empty()) FAIL() << "bytes left over: " << in.unread().size();
    }
    EXPECT_EQ(got, bodies);
  }
}

TEST(FrameBufferTest, OneReadHasRoomForTheRestOfALargeFrame) {
  FrameBuffer in(4096, 64 * 1024, kDefaultMaxFrameBytes);
  const std::string frame = Frame(0x21, 9, std::string(1 << 20, 'x'));
  Feed(&in, std::string_view(frame).substr(0, 100), 100);
  const auto space = in.Space();
  EXPECT_GE(space.size, frame.size() - 100);
  std::memcpy(space.data, frame.data() + 100, frame.size() - 100);
  in.Commit(frame.size() - 100);
  FrameHeader h;
  std::string_view body;
  ASSERT_EQ(in.Take(kDefaultMaxFrameBytes, &h, &body), FrameBuffer::Next::kFrame);
  EXPECT_EQ(body.size(), size_t{1} << 20);
  EXPECT_TRUE(in.empty());
  // The megabyte goes back once the buffer is empty: the next read is offered
  // the read size again, no longer the frame's.
  in.Shrink();
  EXPECT_EQ(in.Space().size, 4096u);
}

TEST(FrameBufferTest, ABrokenHeaderIsReportedAndNothingTaken) {
  {
    FrameBuffer in(4096, 64 * 1024, kDefaultMaxFrameBytes);
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    Feed(&in, junk, 4096);
    FrameHeader h;
    std::string_view body;
    EXPECT_TRUE(in.Ready());
    EXPECT_EQ(in.Take(kDefaultMaxFrameBytes, &h, &body), FrameBuffer::Next::kBadMagic);
    EXPECT_EQ(in.unread(), junk);
    EXPECT_EQ(in.taken(), 0u);
  }
  {
    FrameBuffer in(4096, 64 * 1024, kDefaultMaxFrameBytes);
    std::string frame = Frame(0x20, 5, std::string(2000, 'y'));
    Feed(&in, frame.substr(0, kHeaderSize), 4096);
    FrameHeader h;
    std::string_view body;
    EXPECT_EQ(in.Take(1999, &h, &body), FrameBuffer::Next::kTooLarge);
    EXPECT_EQ(h.request_id, 5u);
    EXPECT_EQ(h.body_length, 2000u);
    EXPECT_EQ(in.Take(2000, &h, &body), FrameBuffer::Next::kNeedMore);
    in.Clear();
    EXPECT_TRUE(in.empty());
    EXPECT_FALSE(in.Ready());
  }
}

// A header may promise up to 4 GiB: the buffer never grows past the body
// limit it was made with, whatever the header says.
TEST(FrameBufferTest, AHeaderPromisingMoreThanTheLimitDoesNotGrowTheBuffer) {
  FrameBuffer in(4096, 64 * 1024, 1 << 20);
  std::string header(kHeaderSize, '\0');
  FrameHeader h;
  h.op = 0x21;
  h.body_length = UINT32_MAX;
  EncodeHeader(h, reinterpret_cast<uint8_t*>(header.data()));
  Feed(&in, header, 4096);
  EXPECT_LE(in.Space().size, (1u << 20) + 4096);
  std::string_view body;
  EXPECT_EQ(in.Take(1 << 20, &h, &body), FrameBuffer::Next::kTooLarge);
}

TEST(FrameBufferTest, AFrameOfAnotherVersionIsHandedOutForTheCallerToRefuse) {
  FrameBuffer in(4096, 64 * 1024, kDefaultMaxFrameBytes);
  Feed(&in, Frame(0x02, 3, "ab", 7) + Frame(0x02, 4, ""), 4096);
  FrameHeader h;
  std::string_view body;
  ASSERT_EQ(in.Take(kDefaultMaxFrameBytes, &h, &body), FrameBuffer::Next::kFrame);
  EXPECT_EQ(h.version, 7);
  EXPECT_EQ(body, "ab");
  ASSERT_EQ(in.Take(kDefaultMaxFrameBytes, &h, &body), FrameBuffer::Next::kFrame);
  EXPECT_EQ(h.version, kVersion);
  EXPECT_EQ(h.request_id, 4u);
  EXPECT_EQ(in.Take(kDefaultMaxFrameBytes, &h, &body), FrameBuffer::Next::kNeedMore);
}

}  // namespace
}  // namespace segstore::proto
