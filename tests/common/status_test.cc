#include "segstore/status.h"

#include <gtest/gtest.h>

#include "segstore/result.h"

namespace segstore {
namespace {

TEST(StatusTest, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(s.message().empty());
}

TEST(StatusTest, FactoriesCarryCodeAndMessage) {
  Status s = Status::DeviceFull("no free write block");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kDeviceFull);
  EXPECT_EQ(s.ToString(), "DeviceFull: no free write block");
}

TEST(StatusTest, CopiesAreDeep) {
  Status a = Status::Corruption("bad");
  Status b = a;
  a = Status::OK();
  EXPECT_EQ(b.ToString(), "Corruption: bad");
}

TEST(StatusTest, WithContextPrefixes) {
  Status s = Status::IOError("EIO").WithContext("read of block 7");
  EXPECT_EQ(s.ToString(), "IOError: read of block 7: EIO");
  EXPECT_TRUE(Status::OK().WithContext("x").ok());
}

TEST(StatusTest, CodesAreStableOnTheWire) {
  EXPECT_EQ(static_cast<int>(Status::Code::kNotFound), 1);
  EXPECT_EQ(static_cast<int>(Status::Code::kInternal), 10);
  EXPECT_EQ(static_cast<int>(Status::Code::kTimeout), 12);
  EXPECT_EQ(static_cast<int>(Status::Code::kWrongNode), 14);
  EXPECT_EQ(static_cast<int>(Status::Code::kLogUnavailable), 15);
  EXPECT_EQ(static_cast<int>(Status::Code::kInDoubt), 16);
  EXPECT_EQ(static_cast<int>(Status::Code::kReadOnly), 17);
  EXPECT_EQ(static_cast<int>(Status::Code::kReadOnly), Status::kMaxCode);
}

TEST(StatusTest, FromCodeRoundTripsAndRejectsUnknownCodes) {
  for (uint8_t c = 1; c <= Status::kMaxCode; ++c) {
    Status s = Status::FromCode(c, "m");
    EXPECT_EQ(static_cast<uint8_t>(s.code()), c);
    EXPECT_EQ(s.message(), "m");
    EXPECT_NE(Status::CodeName(s.code()), "Unknown");
  }
  EXPECT_TRUE(Status::FromCode(0, "ignored").ok());
  Status bad = Status::FromCode(200, "m");
  EXPECT_EQ(bad.code(), Status::Code::kInternal);
  EXPECT_NE(bad.message().find("200"), std::string_view::npos);
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  Result<int> e = Status::NotFound("nope");
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsNotFound());
}

}  // namespace
}  // namespace segstore
