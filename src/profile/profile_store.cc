#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "profile/field_names.h"
#include "profile/fields.h"
#include "profile/profile_session.h"
#include "profile/sweeper.h"
#include "segstore/profile.h"

namespace segstore::profile {
namespace {

class ProfileStoreImpl final : public ProfileStore {
 public:
  ProfileStoreImpl(storage::Store* store, const ProfileOptions& options)
      : store_(store), options_(options), names_(options.max_field_names), sweeper_(store) {}

  // Reads the field name table (before any session exists).
  Status LoadNames() {
    Result<std::unique_ptr<storage::Worker>> w = store_->NewWorker();
    if (!w.ok()) return w.status();
    return names_.Load(**w);
  }

  ~ProfileStoreImpl() override {
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  void StartSweeper() {
    if (options_.sweeper) thread_ = std::thread([this] { SweepLoop(); });
  }

  Result<std::unique_ptr<ProfileSession>> NewSession() override {
    Result<std::unique_ptr<storage::Worker>> w = store_->NewWorker();
    if (!w.ok()) return w.status();
    return std::unique_ptr<ProfileSession>(
        std::make_unique<ProfileSessionImpl>(store_, options_, &names_, std::move(w).value()));
  }

  SweeperStats sweeper_stats() const override { return sweeper_.stats(); }

  storage::Store& store() override { return *store_; }
  const FieldNames& names() const { return names_; }
  void PortableBody(std::string_view key, std::string_view body, std::string* out) const override {
    std::vector<uint32_t> dropped;
    if (Status s = profile::PortableBody(body, names_, out, &dropped); !s.ok()) {
      spdlog::error("profile of user '{}' sent to another node as it is: {}", key, s.ToString());
      out->assign(body);
      return;
    }
    if (!dropped.empty()) {
      spdlog::error(
          "profile of user '{}' sent to another node without {} fields whose name records were "
          "lost (numbers {} ...)",
          key, dropped.size(), dropped.front());
    }
  }
  Status SweepNow() override {
    Result<std::unique_ptr<storage::Worker>> w = store_->NewWorker();
    if (!w.ok()) return w.status();
    ProfileSessionImpl session(store_, options_, &names_, std::move(w).value());
    std::lock_guard lock(sweep_mu_);
    sweeper_.RunPass(&session, SIZE_MAX);
    return Status::OK();
  }

 private:
  void SweepLoop() {
    storage::WorkerOptions wo;
    wo.durability = storage::Durability::kBuffered;
    wo.flush_interval = options_.sweep_flush_interval;
    Result<std::unique_ptr<storage::Worker>> w = store_->NewWorker(wo);
    if (!w.ok()) {
      spdlog::error("expiry sweeper is off: {}", w.status().ToString());
      return;
    }
    ProfileSessionImpl session(store_, options_, &names_, std::move(w).value());
    using Clock = std::chrono::steady_clock;
    const double rate = options_.sweep_records_per_second;
    const double tick = std::chrono::duration<double>(options_.sweep_interval).count();
    double tokens = 0;
    auto next = Clock::now() + options_.sweep_interval;
    while (!stopping_.load()) {
      // Keeps the session's worker polled between passes.
      session.Wait(std::chrono::milliseconds(10));
      if (Clock::now() < next) continue;
      // After a stall, start afresh rather than running a pass for every
      // missed tick back to back: the rate cap holds over any window.
      next = std::max(next + options_.sweep_interval, Clock::now());
      tokens = std::min(tokens + rate * tick, std::max(1.0, rate * tick));
      auto budget = static_cast<size_t>(tokens);
      if (budget == 0) continue;
      std::lock_guard lock(sweep_mu_);
      tokens -= static_cast<double>(sweeper_.RunPass(&session, budget));
      if (tokens < 0) tokens = 0;
    }
  }

  storage::Store* store_;
  const ProfileOptions options_;
  FieldNames names_;
  Sweeper sweeper_;
  std::mutex sweep_mu_;  // one pass at a time (thread or SweepNow)
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace

const FieldNames& FieldNamesOf(const ProfileStore& store) {
  return static_cast<const ProfileStoreImpl&>(store).names();
}

Result<std::unique_ptr<ProfileStore>> ProfileStore::Open(storage::Store* store,
                                                         const ProfileOptions& options) {
  if (store == nullptr) return Status::InvalidArgument("no storage engine");
  if (options.max_segments == 0) return Status::InvalidArgument("max_segments must be positive");
  if (!(options.sweep_share > 0 && options.sweep_share <= 1)) {
    return Status::InvalidArgument(
        fmt::format("sweep_share {} must be in (0, 1]", options.sweep_share));
  }
  if (options.sweeper && options.sweep_records_per_second == 0) {
    return Status::InvalidArgument("sweep_records_per_second must be positive");
  }
  if (options.max_fields == 0) return Status::InvalidArgument("max_fields must be positive");
  auto impl = std::make_unique<ProfileStoreImpl>(store, options);
  if (Status s = impl->LoadNames(); !s.ok()) {
    return s.WithContext("reading the field name table");
  }
  impl->StartSweeper();
  return std::unique_ptr<ProfileStore>(std::move(impl));
}

}  // namespace segstore::profile
