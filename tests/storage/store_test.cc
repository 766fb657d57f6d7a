#include <gtest/gtest.h>

#include "storage/test_util.h"

namespace segstore::storage {
namespace {

using testing::Body;
using testing::Key;
using testing::OpenOrDie;
using testing::SmallOptions;
using testing::TempDir;
using testing::WorkerOrDie;

class StoreTest : public ::testing::Test {
 protected:
  TempDir dir_;
  ManualClock clock_{1'700'000'000};
  StoreOptions opts_ = SmallOptions(dir_.File("data"), &clock_);
};

TEST_F(StoreTest, PutGetOverwriteDelete) {
  auto store = OpenOrDie(opts_);
  auto w = WorkerOrDie(store.get());
  EXPECT_TRUE(w->GetSync("alice").status().IsNotFound());

  auto put = w->PutSync("alice", "one");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->generation, 1u);
  auto got = w->GetSync("alice");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->body(), "one");
  EXPECT_EQ(got->key(), "alice");
  EXPECT_EQ(got->generation(), 1u);
  EXPECT_EQ(got->last_update(), clock_.Now());

  ASSERT_TRUE(w->PutSync("alice", "two").ok());
  got = w->GetSync("alice");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->body(), "two");
  EXPECT_EQ(got->generation(), 2u);

  auto del = w->DeleteSync("alice");
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->applied, Mutation::Kind::kDelete);
  EXPECT_TRUE(w->GetSync("alice").status().IsNotFound());
  // Deleting what is not there writes nothing.
  del = w->DeleteSync("alice");
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->applied, Mutation::Kind::kKeep);
}

TEST_F(StoreTest, RestartAfterCleanClose) {
  {
    auto store = OpenOrDie(opts_);
    auto w = WorkerOrDie(store.get());
    for (int i = 0; i < 500; ++i) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 1)).ok());
    for (int i = 0; i < 500; i += 2) ASSERT_TRUE(w->PutSync(Key(i), Body(i, 2)).ok());
    for (int i = 0; i < 500; i += 5) ASSERT_TRUE(w->DeleteSync(Key(i)).ok());
  }
  auto store = OpenOrDie(opts_);
  EXPECT_EQ(store->recovery().live_records, 400u);
  auto w = WorkerOrDie(store.get());
  for (int i = 0; i < 500; ++i) {
    auto got = w->GetSync(Key(i));
    if (i % 5 == 0) {
      EXPECT_TRUE(got.status().IsNotFound()) << i;
    } else {
      ASSERT_TRUE(got.ok()) << i << " " << got.status().ToString();
      EXPECT_EQ(got->body(), Body(i, i % 2 == 0 ? 2 : 1));
    }
  }
}

}  // namespace
}  // namespace segstore::storage
